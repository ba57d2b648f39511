//! Host tensors to the training device, from pageable memory (the baseline) or staged through
//! pinned memory (`pin-memory`).

use tch::{Device, Tensor};

use crate::error::Error;
use crate::ffi;

/// `t` on `device`: on the CPU `t` itself (no copy); otherwise a blocking copy from pageable
/// memory (the baseline), or when `pinned` a staging copy into pinned memory and a non-blocking
/// copy from there. Pinned buffers come from libtorch's caching host allocator, which reuses them
/// once the copies that read them have finished.
pub(crate) fn to_device(t: &Tensor, device: Device, pinned: bool) -> Result<Tensor, Error> {
    if device == Device::Cpu {
        return Ok(t.shallow_clone());
    }
    if pinned {
        let mut staged = ffi::empty_pinned_like(t)?;
        staged.f_copy_(t)?;
        return Ok(staged.f_to_device_(device, t.kind(), true, false)?);
    }
    Ok(t.f_to_device(device)?)
}
