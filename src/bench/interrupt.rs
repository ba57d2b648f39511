//! Stopping a run cleanly on SIGINT or SIGTERM: the runner checks between cell processes, the
//! process executor while it waits for one, and neither records the interrupted cell, so that
//! `--resume` runs it again.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::Error;

/// Exit status of a process that ends because of a first SIGINT (128 + 2), as shells report it.
const SIGINT_STATUS: i32 = 128 + libc::SIGINT;
/// Exit status of a process that ends because of a first SIGTERM (128 + 15).
const SIGTERM_STATUS: i32 = 128 + libc::SIGTERM;

/// Whether (and by which signal) the run was asked to stop. Clones share the same state.
#[derive(Debug, Clone, Default)]
pub struct Interrupt {
    /// The signal number, 0 while none has arrived.
    signal: Arc<AtomicUsize>,
    /// Set by the first signal, so that a second one ends the process at once.
    once: Arc<AtomicBool>,
}

impl Interrupt {
    /// An interrupt that nothing has triggered yet and that no signal reaches until
    /// [`Interrupt::catch_signals`] is called.
    pub fn new() -> Self {
        Self::default()
    }

    /// From now on SIGINT and SIGTERM trigger this interrupt instead of ending the process; a
    /// second such signal ends it at once (status 130 or 143), for a user who does not want to
    /// wait for the current cell process to be stopped.
    pub fn catch_signals(&self) -> Result<(), Error> {
        let failed =
            |e: std::io::Error| Error::Invalid(format!("cannot install the SIGINT/SIGTERM handler: {e}"));
        for (signal, status) in [(libc::SIGINT, SIGINT_STATUS), (libc::SIGTERM, SIGTERM_STATUS)] {
            // Registered before the flag below, so the first signal only sets the flag.
            signal_hook::flag::register_conditional_shutdown(signal, status, Arc::clone(&self.once))
                .map_err(failed)?;
            signal_hook::flag::register(signal, Arc::clone(&self.once)).map_err(failed)?;
            signal_hook::flag::register_usize(signal, Arc::clone(&self.signal), signal as usize)
                .map_err(failed)?;
        }
        Ok(())
    }

    /// Triggers the interrupt as if `signal` had arrived.
    pub fn trigger(&self, signal: i32) {
        self.once.store(true, Ordering::SeqCst);
        self.signal.store(signal as usize, Ordering::SeqCst);
    }

    /// The signal that triggered the interrupt, if one has.
    pub fn signal(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(signal as i32),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupt_remembers_its_signal_and_clones_share_it() {
        let interrupt = Interrupt::new();
        let clone = interrupt.clone();
        assert_eq!(clone.signal(), None);
        interrupt.trigger(libc::SIGTERM);
        assert_eq!(clone.signal(), Some(libc::SIGTERM));
    }
}
