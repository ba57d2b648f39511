//! FP8 linear layers (the `fp8-matmul` trick): modded-nanogpt's FP8 matmul (e4m3 operands,
//! e5m2 gradients, `_scaled_mm` in both passes) with per-tensor dynamic scales, as NVIDIA
//! Transformer Engine's current scaling computes them, where modded-nanogpt fixes its head's
//! scales by hand. Each matmul operand gets its own scale, the format's largest finite value over
//! the operand's largest magnitude (448/amax for e4m3, 57344/amax for e5m2; amax floored at 1e-12,
//! so an all-zero tensor gets a finite scale), is multiplied by it, clamped to the format's range
//! and cast. Forward multiplies x and w in e4m3 into an output in autocast's type (bf16 without
//! autocast, modded-nanogpt's setting; fp16 under `amp`, whose loss-scaled gradients the e5m2
//! scaling rescales like any other); backward quantises the output
//! gradient to e5m2 (more range, less precision) and multiplies it by the saved fp8 operands for
//! both input gradients, each in its input's dtype.
//!
//! tch cannot define autograd functions, so the scaling and the function live in `csrc/shim.cpp`
//! (one definition of each step, for both kernels), which the FFI exposes over the shim's codes
//! and [`linear`], [`scale`] and [`quantise`] over this module's types. The kernel multiplying the
//! quantised operands is
//! `torch._scaled_mm` (fp8 tensor cores on compute capability 8.9 and newer) or an emulation that
//! dequantises both operands and multiplies in fp32: the reference the tests check the scaling
//! against on a CPU. Training cells only ever use `_scaled_mm`, where the trick applies.

use std::os::raw::c_int;

use tch::{Kind, Tensor};

use crate::error::Error;
use crate::ffi;

/// An fp8 format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Format {
    /// float8_e4m3fn: 4 exponent and 3 mantissa bits, largest finite 448 (forward operands).
    E4m3,
    /// float8_e5m2: 5 exponent and 2 mantissa bits, largest finite 57344 (gradients).
    E5m2,
}

impl Fp8Format {
    /// The format's code in the shim's C ABI.
    fn code(self) -> c_int {
        match self {
            Fp8Format::E4m3 => 0,
            Fp8Format::E5m2 => 1,
        }
    }

    /// The tensor kind of the format.
    pub fn kind(self) -> Kind {
        match self {
            Fp8Format::E4m3 => Kind::Float8e4m3fn,
            Fp8Format::E5m2 => Kind::Float8e5m2,
        }
    }
}

/// The kernel that multiplies the fp8 linear's quantised operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Gemm {
    /// `torch._scaled_mm`: fp8 tensor cores on NVIDIA GPUs of compute capability 8.9 and newer.
    ScaledMm,
    /// Both operands dequantised and multiplied in fp32: the reference for the tests.
    Emulated,
}

impl Fp8Gemm {
    /// The kernel's code in the shim's C ABI.
    fn code(self) -> c_int {
        match self {
            Fp8Gemm::ScaledMm => 0,
            Fp8Gemm::Emulated => 1,
        }
    }
}

/// The per-tensor scale that maps `t`'s largest magnitude onto `format`'s largest finite value:
/// a 0-d fp32 tensor on `t`'s device.
pub fn scale(t: &Tensor, format: Fp8Format) -> Result<Tensor, Error> {
    Ok(ffi::fp8_scale(t, format.code())?)
}

/// `t` multiplied by `scale`, clamped to `format`'s range and cast to it.
pub fn quantise(t: &Tensor, scale: &Tensor, format: Fp8Format) -> Result<Tensor, Error> {
    Ok(ffi::fp8_quantise(t, scale, format.code())?)
}

/// `x · wᵀ` (x [..., K], w [N, K]) through the fp8 linear's autograd function, multiplying with
/// `gemm`; the output is in autocast's type when autocast is on for `x`'s device, else bf16, and
/// backward gives each input a gradient in its own dtype.
pub fn linear(x: &Tensor, w: &Tensor, gemm: Fp8Gemm) -> Result<Tensor, Error> {
    Ok(ffi::fp8_linear(x, w, gemm.code())?)
}

#[cfg(test)]
mod tests {
    use tch::{Device, Tensor};

    use super::*;
    use crate::ffi::AutocastGuard;
    use crate::test_support::seeded;

    impl Fp8Format {
        /// Mantissa bits: round-to-nearest is off by at most 2^-(bits+1) of a normal value.
        fn mantissa_bits(self) -> i32 {
            match self {
                Fp8Format::E4m3 => 3,
                Fp8Format::E5m2 => 2,
            }
        }

        /// The largest finite value (torch.finfo(dtype).max).
        fn largest(self) -> f64 {
            match self {
                Fp8Format::E4m3 => 448.0,
                Fp8Format::E5m2 => 57344.0,
            }
        }

        /// The smallest normal value (torch.finfo(dtype).tiny): 2^-6 for e4m3, 2^-14 for e5m2.
        fn smallest_normal(self) -> f64 {
            match self {
                Fp8Format::E4m3 => 2f64.powi(-6),
                Fp8Format::E5m2 => 2f64.powi(-14),
            }
        }
    }

    const FORMATS: [Fp8Format; 2] = [Fp8Format::E4m3, Fp8Format::E5m2];

    /// `t` quantised with its own scale and dequantised again, in fp32, and the scale.
    fn round_trip(t: &Tensor, format: Fp8Format) -> (Tensor, f64) {
        let scale = scale(t, format).unwrap();
        let q = quantise(t, &scale, format).unwrap();
        assert_eq!(q.kind(), format.kind());
        (q.to_kind(Kind::Float) / &scale, scale.double_value(&[]))
    }

    fn as_f64s(t: &Tensor) -> Vec<f64> {
        Vec::<f64>::try_from(t.to_kind(Kind::Double).reshape([-1])).unwrap()
    }

    /// Whether every element of `actual` is within `bound` (elementwise) of `expected`.
    fn within(actual: &Tensor, expected: &Tensor, bound: &Tensor) -> bool {
        let excess = (actual.to_kind(Kind::Float) - expected).abs() - bound;
        excess.max().double_value(&[]) <= 0.0
    }

    #[test]
    fn the_scale_maps_the_largest_magnitude_onto_the_format_s_largest_value() {
        // Golden numbers from `.venv/bin/python` (torch 2.11):
        //   x = torch.tensor([0.1, -0.3, 1.7, -3.5, 0.0]); s = mx / x.abs().max().clamp(min=1e-12)
        //   (x * s).clamp(-mx, mx).to(dtype).float()
        // e4m3fn (mx 448): s 128, [13, -40, 224, -448, 0]; e5m2 (mx 57344): s 16384,
        // [1536, -5120, 28672, -57344, 0].
        let x = Tensor::from_slice(&[0.1f32, -0.3, 1.7, -3.5, 0.0]);
        let golden = [
            (Fp8Format::E4m3, 128.0, [13.0, -40.0, 224.0, -448.0, 0.0]),
            (Fp8Format::E5m2, 16384.0, [1536.0, -5120.0, 28672.0, -57344.0, 0.0]),
        ];
        for (format, expected_scale, quantised) in golden {
            let s = scale(&x, format).unwrap();
            assert_eq!((s.kind(), s.dim()), (Kind::Float, 0));
            assert_eq!(s.double_value(&[]), expected_scale, "{format:?}");
            assert_eq!(as_f64s(&quantise(&x, &s, format).unwrap()), quantised, "{format:?}");
        }
        // 448 times the fp32 reciprocal of 3500.
        let larger = scale(&(&x * 1000.0), Fp8Format::E4m3).unwrap().double_value(&[]);
        assert!((larger / (448.0 / 3500.0) - 1.0).abs() < 1e-6, "{larger}");
    }

    #[test]
    fn quantising_and_back_is_within_half_a_step_of_the_format_at_any_magnitude() {
        let data = seeded(0, || {
            let spread = (Tensor::rand([4096], (Kind::Float, Device::Cpu)) * 20.0 - 10.0).exp()
                * (Tensor::rand([4096], (Kind::Float, Device::Cpu)) - 0.5).sign();
            let normal = |magnitude: f64| Tensor::randn([4096], (Kind::Float, Device::Cpu)) * magnitude;
            vec![normal(1e-8), normal(1.0), normal(1e8), spread]
        });
        for format in FORMATS {
            let half_step = 2f64.powi(-(format.mantissa_bits() + 1));
            for x in &data {
                let (back, scale) = round_trip(x, format);
                let amax = x.abs().max().double_value(&[]);
                assert!((scale * amax / format.largest() - 1.0).abs() < 1e-6, "{format:?}");
                // Normal values round to within half a mantissa step; values the scale maps below
                // the smallest normal are subnormals, half a subnormal step apart.
                let floor = format.smallest_normal() / scale;
                let bound = x.abs().clamp_min(floor) * (half_step * (1.0 + 1e-6));
                assert!(within(&back, x, &bound), "{format:?} at amax {amax:e}");
            }
        }
    }

    /// x [2, 16, 32] and w [48, 32], plain fp32 leaves that need gradients.
    fn operands() -> (Tensor, Tensor) {
        seeded(1, || {
            let x = Tensor::randn([2, 16, 32], (Kind::Float, Device::Cpu)).set_requires_grad(true);
            let w = (Tensor::randn([48, 32], (Kind::Float, Device::Cpu)) * 0.02).set_requires_grad(true);
            (x, w)
        })
    }

    /// The output and both input gradients of `(linear(x, w) · r).sum()` for a fixed random
    /// `r`, and `r`.
    fn forward_backward(x: &Tensor, w: &Tensor, gemm: Fp8Gemm) -> (Tensor, Tensor, Tensor, Tensor) {
        let r = seeded(2, || Tensor::randn([2, 16, 48], (Kind::Float, Device::Cpu)));
        let (x, w) = (x.detach().set_requires_grad(true), w.detach().set_requires_grad(true));
        let y = linear(&x, &w, gemm).unwrap();
        (y.to_kind(Kind::Float) * &r).sum(Kind::Float).backward();
        (y, x.grad(), w.grad(), r)
    }

    #[test]
    fn the_emulated_forward_is_the_fp32_matmul_within_fp8_precision() {
        let (x, w) = operands();
        let (y, _, _, _) = forward_backward(&x, &w, Fp8Gemm::Emulated);
        assert_eq!((y.size(), y.kind()), (vec![2, 16, 48], Kind::BFloat16));
        let exact = x.detach().matmul(&w.detach().tr());
        // Each e4m3 operand is off by at most 2⁻⁴ of itself (the few subnormals by less than the
        // slack), their product by 2·2⁻⁴ + 2⁻⁸, and the bf16 output rounds by 2⁻⁹ more.
        let bound = x.abs().matmul(&w.abs().tr()) * 0.135 + 1e-5;
        assert!(within(&y, &exact, &bound));
        let relative =
            (y.to_kind(Kind::Float) - &exact).norm().double_value(&[]) / exact.norm().double_value(&[]);
        assert!(relative > 0.0 && relative < 0.05, "relative error {relative}");
    }

    #[test]
    fn the_emulated_gradients_are_the_matmul_s_within_fp8_precision() {
        let (x, w) = operands();
        let (_, grad_x, grad_w, r) = forward_backward(&x, &w, Fp8Gemm::Emulated);
        assert_eq!((grad_x.size(), grad_x.kind()), (vec![2, 16, 32], Kind::Float));
        assert_eq!((grad_w.size(), grad_w.kind()), (vec![48, 32], Kind::Float));
        let (x, w) = (x.detach(), w.detach());
        // The bf16 output gradient in e5m2 (2⁻³), times an e4m3 operand (2⁻⁴).
        let bound_x = r.abs().matmul(&w.abs()) * 0.2 + 1e-6;
        assert!(within(&grad_x, &r.matmul(&w), &bound_x));
        let rows = |t: &Tensor| t.reshape([-1, t.size()[2]]);
        let bound_w = rows(&r).abs().tr().matmul(&rows(&x).abs()) * 0.2 + 1e-6;
        assert!(within(&grad_w, &rows(&r).tr().matmul(&rows(&x)), &bound_w));
    }

    #[test]
    fn scaled_mm_multiplies_the_operands_the_emulation_does() {
        // libtorch 2.11 has a CPU _scaled_mm, which checks the operand layouts and the inverse
        // scales of the real path against the emulation.
        let (x, w) = operands();
        let (y, grad_x, grad_w, _) = forward_backward(&x, &w, Fp8Gemm::ScaledMm);
        let (y_ref, grad_x_ref, grad_w_ref, _) = forward_backward(&x, &w, Fp8Gemm::Emulated);
        let y_ref = y_ref.to_kind(Kind::Float);
        assert!(within(&y, &y_ref, &(y_ref.abs() * 2f64.powi(-8) + 1e-6)), "outputs one bf16 step apart");
        for (a, b) in [(grad_x, grad_x_ref), (grad_w, grad_w_ref)] {
            assert_eq!(a.kind(), b.kind());
            assert!(within(&a, &b, &(b.abs() * 1e-5 + 1e-7)));
        }
    }

    #[test]
    fn the_output_is_in_autocast_s_type_and_bf16_without_autocast() {
        let (x, w) = operands();
        for (autocast, kind) in
            [(None, Kind::BFloat16), (Some(Kind::Half), Kind::Half), (Some(Kind::BFloat16), Kind::BFloat16)]
        {
            let _region = autocast.map(|dtype| AutocastGuard::enter(false, dtype).unwrap());
            let y = linear(&x, &w, Fp8Gemm::Emulated).unwrap();
            assert_eq!(y.kind(), kind, "under {autocast:?}");
            y.to_kind(Kind::Float).sum(Kind::Float).backward();
            assert_eq!((x.grad().kind(), w.grad().kind()), (Kind::Float, Kind::Float));
        }
    }

    #[test]
    fn an_all_zero_input_gives_zeros_without_dividing_by_zero() {
        let zeros = Tensor::zeros([16, 32], (Kind::Float, Device::Cpu));
        for format in FORMATS {
            let (back, scale) = round_trip(&zeros, format);
            assert!(scale.is_finite() && scale > 0.0, "{format:?}: {scale}");
            assert_eq!(back.abs().max().double_value(&[]), 0.0);
        }
        let (_, w) = operands();
        for gemm in [Fp8Gemm::Emulated, Fp8Gemm::ScaledMm] {
            let x = zeros.reshape([2, 16, 16]).repeat([1, 1, 2]).set_requires_grad(true);
            let y = linear(&x, &w, gemm).unwrap();
            // A zero output gradient too: every scale in backward meets the floor.
            (y.to_kind(Kind::Float) * 0.0).sum(Kind::Float).backward();
            for t in [y.to_kind(Kind::Float), x.grad(), w.grad()] {
                assert_eq!(t.abs().max().double_value(&[]), 0.0, "{gemm:?}");
            }
        }
    }
}
