//! Safe wrappers over `csrc/distributed.cpp`: a c10d process group (TCPStore rendezvous, gloo on
//! CPU, NCCL on CUDA) and the bucketed gradient all-reduce of data-parallel training.

use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_void};
use std::rc::Rc;

use tch::Tensor;
use torch_sys::C_tensor;

use crate::device::DeviceSpec;
use crate::distributed::env::DistEnv;
use crate::error::Error;

mod raw {
    use super::*;

    extern "C" {
        pub fn tb_dist_compiled() -> c_int;
        pub fn tb_dist_nccl_compiled() -> c_int;
        pub fn tb_process_group_new(
            host: *const c_char,
            port: c_int,
            rank: c_int,
            world_size: c_int,
            device_index: c_int,
            timeout_ms: c_int,
            out: *mut *mut c_void,
        ) -> c_int;
        pub fn tb_process_group_free(pg: *mut c_void);
        pub fn tb_process_group_broadcast(
            pg: *mut c_void,
            tensors: *mut *mut C_tensor,
            n: c_int,
            root: c_int,
        ) -> c_int;
        pub fn tb_process_group_all_reduce_sum(
            pg: *mut c_void,
            tensors: *mut *mut C_tensor,
            n: c_int,
        ) -> c_int;
        pub fn tb_grad_sync_new(
            pg: *mut c_void,
            params: *mut *mut C_tensor,
            n: c_int,
            bucket_bytes: i64,
            out: *mut *mut c_void,
        ) -> c_int;
        pub fn tb_grad_sync_buckets(sync: *mut c_void) -> c_int;
        pub fn tb_grad_sync_set_enabled(sync: *mut c_void, enabled: c_int);
        pub fn tb_grad_sync_finish(sync: *mut c_void) -> c_int;
        pub fn tb_grad_sync_free(sync: *mut c_void);
    }
}

/// Turns a status code of the distributed shim into a `Result` with the C++ message.
fn check(status: c_int) -> Result<(), Error> {
    crate::ffi::shim_status(status).map_err(Error::Distributed)
}

/// Why this binary cannot train data-parallel, if it cannot: it was built without gloo's headers.
pub fn unavailable_reason() -> Option<String> {
    // SAFETY: no argument: it returns a constant compiled into the shim.
    (unsafe { raw::tb_dist_compiled() } == 0).then(|| {
        "this binary was built without gloo's headers, so without data-parallel training (run \
         scripts/setup-libtorch, which fetches Debian's libgloo-dev headers, then rebuild)"
            .to_owned()
    })
}

/// Whether this binary can all-reduce on CUDA devices (it was built with NCCL's headers).
pub fn nccl_compiled() -> bool {
    // SAFETY: no argument: it returns a constant compiled into the shim.
    unsafe { raw::tb_dist_nccl_compiled() != 0 }
}

/// The bucket size of the gradient all-reduce unless told otherwise (PyTorch DDP's default).
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// A group of processes that run collectives together: gloo on CPU, NCCL on CUDA.
#[derive(Debug)]
pub struct ProcessGroup {
    ptr: *mut c_void,
    world_size: usize,
}

/// Raw tensor pointers for the shim (which only reads or writes the tensors in place).
fn pointers(tensors: &mut [Tensor]) -> Vec<*mut C_tensor> {
    tensors.iter_mut().map(Tensor::as_mut_ptr).collect()
}

impl ProcessGroup {
    /// Meets the other ranks of `env` (rank 0 hosts the TCPStore) and creates the backend for
    /// `device`: gloo on the CPU (a rehearsed GPU's too), NCCL on a CUDA device. Fails, without hanging, when the world
    /// is not complete within the environment's timeout.
    pub fn join(env: &DistEnv, device: DeviceSpec) -> Result<Self, Error> {
        let host = CString::new(env.master_addr.as_str())
            .map_err(|_| Error::Invalid(format!("MASTER_ADDR='{}' holds a NUL byte", env.master_addr)))?;
        // gloo on a rehearsed GPU too: only a real one has NCCL.
        let device_index = device.cuda_index().map_or(-1, |i| i as c_int);
        let timeout_ms = env.timeout.as_millis().clamp(1, c_int::MAX as u128) as c_int;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `host` outlives the call; on success the shim hands over a heap object.
        check(unsafe {
            raw::tb_process_group_new(
                host.as_ptr(),
                c_int::from(env.master_port),
                env.rank as c_int,
                env.world_size as c_int,
                device_index,
                timeout_ms,
                &mut ptr,
            )
        })?;
        Ok(Self { ptr, world_size: env.world_size })
    }

    /// The number of processes.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// Overwrites each tensor with rank `root`'s, on every rank (same order and shapes everywhere).
    pub fn broadcast(&self, tensors: &mut [Tensor], root: usize) -> Result<(), Error> {
        let mut ptrs = pointers(tensors);
        // SAFETY: the group is live and every pointer is a live tensor borrowed for the call.
        check(unsafe {
            raw::tb_process_group_broadcast(self.ptr, ptrs.as_mut_ptr(), ptrs.len() as c_int, root as c_int)
        })
    }

    /// Replaces each tensor by its sum over all ranks.
    pub fn all_reduce_sum(&self, tensors: &mut [Tensor]) -> Result<(), Error> {
        let mut ptrs = pointers(tensors);
        // SAFETY: the group is live and every pointer is a live tensor borrowed for the call.
        check(unsafe {
            raw::tb_process_group_all_reduce_sum(self.ptr, ptrs.as_mut_ptr(), ptrs.len() as c_int)
        })
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from tb_process_group_new and is freed exactly once.
        unsafe { raw::tb_process_group_free(self.ptr) }
    }
}

/// The gradient all-reduce of data-parallel training over a model's parameters. Autograd hooks
/// copy each gradient, divided by the world size, into a bucket as soon as backward has
/// accumulated it, and all-reduce each full bucket asynchronously while backward goes on;
/// [`Self::finish`] waits for the buckets and writes the averaged gradients back.
#[derive(Debug)]
pub struct GradSync {
    ptr: *mut c_void,
    group: Rc<ProcessGroup>,
}

impl GradSync {
    /// Hooks `params` (leaf tensors requiring grad, on this rank's device; the same list in the
    /// same order on every rank) into `group`, in buckets of at most `bucket_bytes`.
    pub fn new(group: Rc<ProcessGroup>, params: &mut [Tensor], bucket_bytes: usize) -> Result<Self, Error> {
        let mut ptrs = pointers(params);
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the group is live (kept alive by the Rc stored below); the parameters are live
        // tensors whose handles the shim copies.
        check(unsafe {
            raw::tb_grad_sync_new(
                group.ptr,
                ptrs.as_mut_ptr(),
                ptrs.len() as c_int,
                bucket_bytes as i64,
                &mut ptr,
            )
        })?;
        Ok(Self { ptr, group })
    }

    /// The number of buckets.
    pub fn buckets(&self) -> usize {
        // SAFETY: `ptr` is a live synchroniser.
        unsafe { raw::tb_grad_sync_buckets(self.ptr) as usize }
    }

    /// Turns the all-reduce on or off for the following backward passes; off, gradients
    /// accumulate locally (DDP's `no_sync`, for all but the last micro-batch).
    pub fn set_enabled(&mut self, enabled: bool) {
        // SAFETY: `ptr` is a live synchroniser.
        unsafe { raw::tb_grad_sync_set_enabled(self.ptr, c_int::from(enabled)) }
    }

    /// Waits (at most the group's timeout) for every bucket of the last backward pass and writes
    /// the gradients averaged over all ranks back into the parameters.
    pub fn finish(&mut self) -> Result<(), Error> {
        // SAFETY: `ptr` is a live synchroniser.
        check(unsafe { raw::tb_grad_sync_finish(self.ptr) })
    }

    /// The process group the gradients are averaged over.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }
}

impl Drop for GradSync {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from tb_grad_sync_new and is freed exactly once, before the group.
        unsafe { raw::tb_grad_sync_free(self.ptr) }
    }
}
