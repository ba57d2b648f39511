//! The results file: its schema, the system record, storage, upgrades of older versions, and the
//! merge of a sharded sweep.
pub mod analysis;
pub mod merge;
pub mod migrate;
pub mod model;
pub mod quality;
pub mod schema;
pub mod store;
pub mod system;
