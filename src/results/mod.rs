//! The results file: its schema, the system record, and storage.
pub mod analysis;
pub mod quality;
pub mod schema;
pub mod store;
pub mod system;
