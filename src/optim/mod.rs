//! Optimizers (SGD, Adam(W), LARS, LAMB, Muon), gradient clipping and learning-rate schedules.
pub mod adam;
pub mod clip;
pub mod lamb;
pub mod lars;
pub mod layer_wise;
pub mod muon;
pub mod schedule;
pub mod sgd;
mod update;

use tch::Tensor;

use crate::error::Error;

/// What the training loop needs from an optimizer. Hyper-parameters that schedules change (the
/// learning rate, and the momentum that 1cycle cycles) are set before each update, so a captured
/// CUDA graph can read them from device tensors.
pub trait Optimizer: std::fmt::Debug {
    /// Sets the learning rate of the next [`Self::update`].
    fn set_lr(&mut self, lr: f64);

    /// Sets the momentum of the next update: SGD's and LARS's momentum, Adam's and LAMB's β₁.
    fn set_momentum(&mut self, momentum: f64);

    /// One update at the current hyper-parameters over the parameters that have a gradient. With
    /// `found_inf` (a 1-element float tensor on the device, 1 when fp16 gradients overflowed) the
    /// update leaves parameters and state untouched when it holds 1, deciding on the device.
    fn update(&mut self, found_inf: Option<&Tensor>) -> Result<(), Error>;

    /// Clears gradients before the next backward: set to None, or zero-filled in place.
    fn zero_grad(&mut self, set_to_none: bool);

    /// The parameters being optimised.
    fn params(&self) -> &[Tensor];

    /// Moves every hyper-parameter the update reads (learning rate, momentum, step count) into
    /// device tensors and allocates all state up front, so that every update launches the same
    /// kernels on the same tensors, as a CUDA graph capture needs. The math does not change.
    fn make_capturable(&mut self);

    /// Whether the update is a fused kernel that takes fp16 loss scaling's overflow flag itself
    /// (`torch.optim`'s `_step_supports_amp_scaling`): `GradScaler` then passes the flag on the
    /// device instead of reading it on the host to decide whether to step. The default is no.
    fn skips_overflow_on_device(&self) -> bool {
        false
    }

    /// [`Self::set_lr`] then [`Self::update`] without an overflow flag.
    fn step(&mut self, lr: f64) -> Result<(), Error> {
        self.set_lr(lr);
        self.update(None)
    }
}
