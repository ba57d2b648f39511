//! Mixed precision: autocast regions and dynamic loss scaling (PyTorch's `GradScaler`).

use tch::{Device, Kind, Tensor};

use crate::error::Error;
use crate::ffi;

/// An autocast region: the kind the eligible ops run in, and whether it is CUDA's autocast (else
/// the CPU's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Autocast {
    /// `Kind::Half` or `Kind::BFloat16`.
    pub kind: Kind,
    /// CUDA's autocast rather than the CPU's.
    pub on_cuda: bool,
}

impl Autocast {
    /// Enters the region on this thread, until the guard is dropped.
    pub fn enter(self) -> Result<ffi::AutocastGuard, Error> {
        Ok(ffi::AutocastGuard::enter(self.on_cuda, self.kind)?)
    }
}

/// Dynamic loss scaling with PyTorch's defaults: start at 2¹⁶, halve on an overflow (and skip that
/// step), double after 2000 overflow-free steps.
#[derive(Debug)]
pub struct GradScaler {
    scale: Tensor,
    growth_tracker: Tensor,
    found_inf: Tensor,
}

/// Initial loss scale.
const INIT_SCALE: f64 = 65536.0;
/// Factor applied after `GROWTH_INTERVAL` steps without overflow.
const GROWTH_FACTOR: f64 = 2.0;
/// Factor applied on overflow.
const BACKOFF_FACTOR: f64 = 0.5;
/// Overflow-free steps before the scale grows.
const GROWTH_INTERVAL: i64 = 2000;

impl GradScaler {
    /// A scaler whose state lives on `device`.
    pub fn new(device: Device) -> Self {
        Self {
            scale: Tensor::full([1], INIT_SCALE, (Kind::Float, device)),
            growth_tracker: Tensor::zeros([1], (Kind::Int, device)),
            found_inf: Tensor::zeros([1], (Kind::Float, device)),
        }
    }

    /// The loss multiplied by the current scale (backward this instead of the loss).
    pub fn scale(&self, loss: &Tensor) -> Tensor {
        loss * &self.scale.to_kind(loss.kind())
    }

    /// The current scale as a 1-element float tensor on the device (no host read).
    pub fn factor(&self) -> Tensor {
        self.scale.shallow_clone()
    }

    /// The current scale (a host read).
    pub fn current_scale(&self) -> f64 {
        self.scale.double_value(&[0])
    }

    /// Unscales the gradients of `params` in place and reports whether any was inf or NaN (a host
    /// read, as in PyTorch, which must decide whether to step).
    pub fn unscale(&mut self, params: &[Tensor]) -> Result<bool, Error> {
        let found_inf = self.unscale_on_device(params)?;
        Ok(found_inf.double_value(&[0]) != 0.0)
    }

    /// Unscales the gradients of `params` in place and returns the device flag that is 1 when any
    /// was inf or NaN, without reading it (the optimizer then skips on the device).
    pub fn unscale_on_device(&mut self, params: &[Tensor]) -> Result<&Tensor, Error> {
        let _ = self.found_inf.zero_();
        let inv_scale = self.scale.reciprocal();
        let mut grads: Vec<Tensor> = params.iter().map(Tensor::grad).filter(Tensor::defined).collect();
        ffi::amp_unscale(&mut grads, &mut self.found_inf, &inv_scale)?;
        Ok(&self.found_inf)
    }

    /// Updates the scale after a step: back off on overflow, grow after a quiet interval.
    pub fn update(&mut self) {
        let _ = self.scale.internal_amp_update_scale_(
            &self.growth_tracker,
            &self.found_inf,
            GROWTH_FACTOR,
            BACKOFF_FACTOR,
            GROWTH_INTERVAL,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_is_detected_and_backs_the_scale_off() {
        let p = Tensor::from_slice(&[1.0f32, 2.0]).set_requires_grad(true);
        let mut scaler = GradScaler::new(Device::Cpu);
        scaler.scale(&(&p * 3.0).sum(Kind::Float)).backward();
        assert!(!scaler.unscale(std::slice::from_ref(&p)).unwrap());
        assert_eq!(Vec::<f32>::try_from(&p.grad()).unwrap(), [3.0, 3.0], "unscaled gradient");
        scaler.update();
        assert_eq!(scaler.current_scale(), INIT_SCALE);

        let mut grad = p.grad();
        let _ = grad.fill_(f64::INFINITY);
        assert!(scaler.unscale(std::slice::from_ref(&p)).unwrap(), "inf must be found");
        scaler.update();
        assert_eq!(scaler.current_scale(), INIT_SCALE * BACKOFF_FACTOR);
    }

    #[test]
    fn the_autocast_cache_setting_comes_back_when_its_guard_is_dropped() {
        assert!(ffi::autocast_cache_enabled(), "PyTorch's default");
        {
            let _off = ffi::AutocastCacheOff::new();
            assert!(!ffi::autocast_cache_enabled());
            {
                let _nested = ffi::AutocastCacheOff::new();
            }
            assert!(!ffi::autocast_cache_enabled(), "an inner guard restores the outer guard's setting");
        }
        assert!(ffi::autocast_cache_enabled());
    }

    #[test]
    fn autocast_guard_switches_cpu_autocast_on_and_restores_it() {
        let a = Tensor::randn([4, 4], (Kind::Float, Device::Cpu));
        {
            let _guard = ffi::AutocastGuard::enter(false, Kind::BFloat16).unwrap();
            assert!(ffi::autocast_enabled(false));
            assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
        }
        assert!(!ffi::autocast_enabled(false));
        assert_eq!(a.matmul(&a).kind(), Kind::Float);
    }
}
