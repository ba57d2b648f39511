//! trickbench: measures PyTorch training speed-up tricks, on and off, on reference models.
pub mod analysis;
pub mod bench;
pub mod crosscheck;
pub mod data;
pub mod device;
pub mod diagnosis;
pub mod distributed;
pub mod engine;
pub mod environment;
pub mod error;
pub mod factorial;
pub mod ffi;
pub mod hardware;
pub mod measure;
pub mod optim;
pub mod parity;
pub mod report;
pub mod results;
pub mod standin;
pub mod stats;
pub mod summary;
pub mod terminal;
pub mod train;
pub mod tricks;
pub mod vocabulary;
pub mod workloads;

/// Helpers shared by the unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    /// Runs `draw` right after seeding libtorch's global generator, with no other test's draws in
    /// between (unit tests run in parallel threads and share that generator).
    pub(crate) fn seeded<T>(seed: i64, draw: impl FnOnce() -> T) -> T {
        static GENERATOR: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _only_us = GENERATOR.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tch::manual_seed(seed);
        draw()
    }

    /// Runs `f` with exactly the `scaled_dot_product_attention` backends `enabled` allowed, then
    /// restores the switches as they were, with no other test's switches in between (the switches
    /// are process-wide).
    pub(crate) fn with_sdp_switches<T>(enabled: crate::ffi::SdpEnabled, f: impl FnOnce() -> T) -> T {
        static SWITCHES: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _only_us = SWITCHES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = crate::ffi::sdp_enabled();
        crate::ffi::set_sdp_enabled(enabled).unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        crate::ffi::set_sdp_enabled(before).unwrap();
        result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    /// Asserts that two sequences of batches are equal, batch by batch, inputs and targets.
    pub(crate) fn assert_same_batches(a: &[crate::data::loader::Batch], b: &[crate::data::loader::Batch]) {
        assert_eq!(a.len(), b.len());
        for (k, (a, b)) in a.iter().zip(b).enumerate() {
            assert!(a.inputs.equal(&b.inputs), "batch {k}: different inputs");
            assert!(a.targets.equal(&b.targets), "batch {k}: different targets");
        }
    }
}
