//! The results file, the only contract between measuring and reporting: its schema and the
//! records it holds of each process (energy, the machine's state, where a step's time went) and of
//! the system, storage, upgrades of older versions, and the merge of a sharded sweep. It imports
//! only the ground floor: the vocabulary its values are named in, the engine and device names, the
//! statistics and the error type.
pub mod diagnosis;
pub mod energy;
pub mod factorial;
pub mod machine;
pub mod merge;
pub mod migrate;
pub mod model;
pub mod phases;
pub mod rehearsal;
pub mod schema;
pub mod store;
pub mod system;
pub mod traced;
