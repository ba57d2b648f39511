//! Worker threads that assemble host batches ahead of the training thread (`loader-workers`),
//! for any loader whose batch `k` is a pure function of `k`.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use crate::error::Error;

/// Batches each loader worker may hold ready ahead of the training thread.
const PREFETCH_PER_WORKER: usize = 2;

/// Worker threads assembling host batches of type `B` ahead of the training thread. Worker `w`
/// makes batches `w`, `w + N`, `w + 2N`, … into its own bounded queue, and the training thread
/// takes batch `k` from worker `k mod N`: the sequence is the training thread's own, whatever the
/// timing.
#[derive(Debug)]
pub(crate) struct WorkerPool<B> {
    ready: Vec<Receiver<Result<B, Error>>>,
    spare: Vec<SyncSender<B>>,
    handles: Vec<JoinHandle<()>>,
    next: u64,
}

impl<B: Default + Send + 'static> WorkerPool<B> {
    /// Starts `workers` threads. `worker(w)` is called here, once per worker, and returns the
    /// function worker `w` fills a buffer with batch `k` by; it owns that worker's state.
    pub(crate) fn start<F>(workers: usize, mut worker: impl FnMut(usize) -> F) -> Self
    where
        F: FnMut(u64, &mut B) -> Result<(), Error> + Send + 'static,
    {
        let mut pool = WorkerPool { ready: Vec::new(), spare: Vec::new(), handles: Vec::new(), next: 0 };
        for w in 0..workers {
            let (ready_tx, ready_rx) = mpsc::sync_channel(PREFETCH_PER_WORKER);
            // Used buffers come back to their worker, so it does not allocate one per batch.
            let (spare_tx, spare_rx) = mpsc::sync_channel::<B>(PREFETCH_PER_WORKER + 1);
            let mut fill = worker(w);
            pool.handles.push(std::thread::spawn(move || {
                for k in (w as u64..).step_by(workers) {
                    let mut host = spare_rx.try_recv().unwrap_or_default();
                    let made = fill(k, &mut host).map(|()| host);
                    let failed = made.is_err();
                    // A closed queue means the loader was dropped: stop.
                    if ready_tx.send(made).is_err() || failed {
                        return;
                    }
                }
            }));
            pool.ready.push(ready_rx);
            pool.spare.push(spare_tx);
        }
        pool
    }

    /// The next host batch in sequence, and the worker it came from.
    pub(crate) fn next(&mut self) -> Result<(B, usize), Error> {
        let w = (self.next % self.ready.len() as u64) as usize;
        self.next += 1;
        let made = self.ready[w].recv().map_err(|_| {
            Error::Torch(format!("loader worker {w} stopped without producing batch {}", self.next - 1))
        })?;
        Ok((made?, w))
    }

    /// Hands a used buffer back to worker `w` (dropped when its spare queue is full).
    pub(crate) fn recycle(&self, host: B, w: usize) {
        let _ = self.spare[w].try_send(host);
    }
}

impl<B> Drop for WorkerPool<B> {
    fn drop(&mut self) {
        // Closing the queues makes every worker's next send fail, so each one returns.
        self.ready.clear();
        self.spare.clear();
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}
