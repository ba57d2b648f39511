//! Data-parallel training over PyTorch's own distributed engine, c10d: the torchrun environment
//! contract ([`env`]), process groups and the bucketed gradient all-reduce ([`group`]), the
//! launcher that starts one process per device on a machine ([`launch`]), and a check that DDP
//! trains as one process on the whole batch does ([`check`]).

pub mod check;
pub mod env;
pub mod group;
pub mod launch;
