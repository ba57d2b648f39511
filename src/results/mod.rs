//! The results file: its schema, the system record, storage, and the merge of a sharded sweep.
pub mod analysis;
pub mod merge;
pub mod quality;
pub mod schema;
pub mod store;
pub mod system;
