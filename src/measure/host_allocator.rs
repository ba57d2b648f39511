//! The host allocator of every process that measures: by default glibc's malloc told, through the
//! environment it reads at start-up, to keep the memory a step frees for the next step
//! ([`HostAllocator::Tuned`]); or malloc as a plain Python script gets it ([`HostAllocator::System`],
//! `run --host-allocator system`).
//!
//! By default malloc serves a request over its mmap threshold with fresh pages and returns freed
//! memory above its trim threshold to the kernel, so on a CPU each training step page-faults its
//! activations in again. What that costs depends on what else the process allocates and frees,
//! so it couples the two models of a paired process: on the 2-core VM a baseline beside
//! `zero-grad-none` ran 1.18× as fast as a baseline alone, and `zero-grad-none` measured 0.83×
//! paired. Keeping freed memory (as PyTorch's CUDA caching allocator does on a GPU, and as the
//! jemalloc or TCMalloc that PyTorch's CPU tuning guide recommends do) removes both the churn and
//! the coupling: the same pair measured 0.98×. See `docs/methodology.md`.

use std::process::Command;

pub use crate::vocabulary::HostAllocator;

/// glibc's tunables, as environment variables read when a process starts: requests up to 32 MiB
/// (the largest threshold glibc allows on 64-bit) come from the heap, and the heap is trimmed only
/// when 16 GiB lie free at its top.
pub const KEEP_FREED_MEMORY: [(&str, &str); 2] =
    [("MALLOC_MMAP_THRESHOLD_", "33554432"), ("MALLOC_TRIM_THRESHOLD_", "17179869184")];

impl HostAllocator {
    /// Sets up `command`'s environment for this allocator: [`KEEP_FREED_MEMORY`] under `tuned`
    /// (except a variable the user's own environment sets, which the child inherits as it is);
    /// nothing under `system`.
    pub fn apply(self, command: &mut Command) -> &mut Command {
        if self == HostAllocator::Tuned {
            for (name, value) in KEEP_FREED_MEMORY {
                if std::env::var_os(name).is_none() {
                    command.env(name, value);
                }
            }
        }
        command
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_reads_the_tunables_it_is_given() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo \"$MALLOC_MMAP_THRESHOLD_ $MALLOC_TRIM_THRESHOLD_\""]);
        let out = HostAllocator::Tuned.apply(&mut command).output().unwrap();
        let expected =
            match (std::env::var("MALLOC_MMAP_THRESHOLD_"), std::env::var("MALLOC_TRIM_THRESHOLD_")) {
                (Ok(mmap), Ok(trim)) => format!("{mmap} {trim}\n"),
                (Ok(mmap), Err(_)) => format!("{mmap} 17179869184\n"),
                (Err(_), Ok(trim)) => format!("33554432 {trim}\n"),
                (Err(_), Err(_)) => "33554432 17179869184\n".to_owned(),
            };
        assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
    }

    #[test]
    fn the_system_allocator_leaves_the_environment_as_it_is() {
        let mut command = Command::new("sh");
        HostAllocator::System.apply(&mut command);
        assert_eq!(command.get_envs().count(), 0);
        assert_eq!(serde_json::to_string(&HostAllocator::System).unwrap(), "\"system\"");
        assert_eq!(HostAllocator::default(), HostAllocator::Tuned);
    }
}
