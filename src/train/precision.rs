//! The arithmetic a trainer's steps run in: the autocast region (`amp`, `amp-bf16`), fp16 loss
//! scaling (`amp`), the fp8 projections (`fp8-matmul`, which the model runs), and the process's
//! TF32 settings as they were when the trainer was made.

use tch::{Kind, Tensor};

use crate::device::DeviceSpec;
use crate::error::Error;
use crate::ffi;
use crate::measure::flops::{Precision, StepArithmetic};
use crate::train::amp::{Autocast, GradScaler};
use crate::tricks::{Trick, TrickSet};

/// A trainer's precision: autocast's kind (none: fp32), the loss scaler of fp16 autocast, and the
/// TF32 settings of [`crate::train::apply_process_tricks`].
#[derive(Debug)]
pub struct StepPrecision {
    autocast_kind: Option<Kind>,
    scaler: Option<GradScaler>,
    tf32: ffi::Tf32,
    /// Whether the device has CUDA's semantics (a CUDA device, or a rehearsed one): cuDNN's and
    /// cuBLAS's arithmetic.
    on_cuda: bool,
    /// Whether autocast is CUDA's (else the CPU's, which stands in for it on a rehearsed GPU).
    autocast_on_cuda: bool,
    /// Whether the model's linear layers multiply in fp8 (`fp8-matmul`).
    fp8_linears: bool,
}

impl StepPrecision {
    /// The precision `tricks` ask for on `device`: fp16 autocast with dynamic loss scaling under
    /// `amp`, bf16 autocast under `amp-bf16`, else fp32; the process's TF32 settings as they are
    /// now. On a rehearsed GPU the CPU's autocast and a scaler on the CPU's tensors stand in for
    /// CUDA's.
    pub fn for_tricks(tricks: &TrickSet, device: DeviceSpec) -> Self {
        let autocast_kind = if tricks.has(Trick::Amp) {
            Some(Kind::Half)
        } else if tricks.has(Trick::AmpBf16) {
            Some(Kind::BFloat16)
        } else {
            None
        };
        if autocast_kind.is_some() && device.rehearsed().is_some() {
            crate::standin::record(crate::vocabulary::StandIn::AutocastDevice);
        }
        Self {
            autocast_kind,
            scaler: tricks.has(Trick::Amp).then(|| GradScaler::new(device.tch())),
            tf32: ffi::tf32(),
            on_cuda: device.is_cuda(),
            autocast_on_cuda: device.cuda_index().is_some(),
            fp8_linears: tricks.has(Trick::Fp8Matmul),
        }
    }

    /// The autocast region forward passes run in (`None`: no autocast).
    pub fn autocast(&self) -> Option<Autocast> {
        self.autocast_kind.map(|kind| Autocast { kind, on_cuda: self.autocast_on_cuda })
    }

    /// Enters the autocast region when there is one, until the guard is dropped.
    pub fn enter_autocast(&self) -> Result<Option<ffi::AutocastGuard>, Error> {
        self.autocast().map(Autocast::enter).transpose()
    }

    /// The kind the model's matmuls run in: autocast's, else fp32.
    pub fn compute_kind(&self) -> Kind {
        self.autocast_kind.unwrap_or(Kind::Float)
    }

    /// fp16 loss scaling's current scale, a device tensor (`None` without loss scaling).
    pub fn loss_scale(&self) -> Option<Tensor> {
        self.scaler.as_ref().map(GradScaler::factor)
    }

    /// The loss scaler, under fp16 autocast.
    pub fn scaler_mut(&mut self) -> Option<&mut GradScaler> {
        self.scaler.as_mut()
    }

    /// The arithmetic most of a model's FLOPs run in (`mostly_convolutions`: cuDNN does most of
    /// its work, else cuBLAS), by the rule both engines share ([`StepArithmetic::precision`]).
    pub fn of_flops(&self, mostly_convolutions: bool) -> Precision {
        StepArithmetic {
            fp8_linears: self.fp8_linears,
            autocast: self.autocast_kind.is_some(),
            tf32: self.tf32,
            on_cuda: self.on_cuda,
            mostly_convolutions,
        }
        .precision()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp8_linears_count_as_fp8_for_a_model_of_linear_layers_only() {
        let fp8 = |with: &[Trick]| {
            let tricks: TrickSet = with.iter().copied().chain([Trick::Fp8Matmul]).collect();
            StepPrecision::for_tricks(&tricks, DeviceSpec::Cpu)
        };
        assert_eq!(fp8(&[]).of_flops(false), Precision::Fp8);
        assert_eq!(fp8(&[Trick::AmpBf16]).of_flops(false), Precision::Fp8);
        assert_eq!(fp8(&[Trick::AmpBf16]).of_flops(true), Precision::Half);
        let plain = StepPrecision::for_tricks(&TrickSet::baseline(), DeviceSpec::Cpu);
        assert_eq!(plain.of_flops(false), Precision::Fp32);
    }
}
