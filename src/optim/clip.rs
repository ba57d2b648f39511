//! Gradient clipping by global norm, `torch.nn.utils.clip_grad_norm_`: scales all gradients
//! together so that the 2-norm of their concatenation is at most `max_norm`. Two versions: one
//! that decides on the device (no host synchronisation, as PyTorch's), and the straightforward one
//! that many training scripts write, which reads the norm back to the host.

use tch::{Device, Kind, Tensor};

use crate::error::Error;

/// Added to the total norm before dividing by it, as PyTorch does.
const NORM_EPS: f64 = 1e-6;

/// The defined gradients of `params`.
fn gradients(params: &[Tensor]) -> Vec<Tensor> {
    params.iter().map(Tensor::grad).filter(Tensor::defined).collect()
}

/// The 2-norm of all of `grads` together, `‖(‖g₁‖, …, ‖gₙ‖)‖₂`, as a 0-d tensor on their device
/// (a 0-d float zero on `params`' device, or the CPU, when there is no gradient).
fn total_norm(grads: &[Tensor], params: &[Tensor]) -> Result<Tensor, Error> {
    if grads.is_empty() {
        let device = params.first().map_or(Device::Cpu, Tensor::device);
        return Ok(Tensor::zeros([], (Kind::Float, device)));
    }
    let norms = grads.iter().map(Tensor::f_norm).collect::<Result<Vec<_>, _>>()?;
    Ok(Tensor::f_stack(&norms, 0)?.f_norm()?)
}

/// Fails unless `max_norm` is a positive finite number.
fn check_max_norm(max_norm: f64) -> Result<(), Error> {
    if max_norm > 0.0 && max_norm.is_finite() {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "gradient clipping: max_norm must be positive and finite, not {max_norm}"
        )))
    }
}

/// Clips the gradients of `params` in place to a global 2-norm of at most `max_norm`, without a
/// host synchronisation: `coef = min(max_norm / (total + 1e-6), 1)` is computed on the device and
/// every gradient is multiplied by it, clipped or not (PyTorch's semantics; the per-tensor norms
/// and products run one tensor at a time rather than as `foreach` kernels, same math). Returns the
/// total norm before clipping, a 0-d tensor left on the device.
pub fn clip_grad_norm(params: &[Tensor], max_norm: f64) -> Result<Tensor, Error> {
    check_max_norm(max_norm)?;
    tch::no_grad(|| {
        let mut grads = gradients(params);
        let total = total_norm(&grads, params)?;
        if grads.is_empty() {
            return Ok(total);
        }
        let coef = ((&total + NORM_EPS).f_reciprocal()? * max_norm).f_clamp_max(1.0)?;
        for grad in &mut grads {
            let _ = grad.f_mul_(&coef)?;
        }
        Ok(total)
    })
}

/// The straightforward version: reads the total norm back to the host (a synchronisation with the
/// device) and scales the gradients by `max_norm / (total + 1e-6)` only when the norm exceeds
/// `max_norm`. Returns the total norm before clipping.
pub fn clip_grad_norm_with_host_read(params: &[Tensor], max_norm: f64) -> Result<f64, Error> {
    check_max_norm(max_norm)?;
    tch::no_grad(|| {
        let mut grads = gradients(params);
        let total = total_norm(&grads, params)?.f_double_value(&[])?;
        if total > max_norm {
            let coef = max_norm / (total + NORM_EPS);
            for grad in &mut grads {
                let _ = grad.f_mul_scalar_(coef)?;
            }
        }
        Ok(total)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two parameters with gradients `[3, 4]` and `[[12]]` (global norm 13).
    fn params_with_gradients() -> Vec<Tensor> {
        let p = Tensor::from_slice(&[1.0f32, -2.0]).set_requires_grad(true);
        let q = Tensor::from_slice(&[0.5f32]).view([1, 1]).set_requires_grad(true);
        let loss = (&p * Tensor::from_slice(&[3.0f32, 4.0])).sum(Kind::Float) + (&q * 12.0).sum(Kind::Float);
        loss.backward();
        vec![p, q]
    }

    fn grads_of(params: &[Tensor]) -> Vec<f32> {
        params.iter().flat_map(|p| Vec::<f32>::try_from(&p.grad().flatten(0, -1)).unwrap()).collect()
    }

    /// Golden values from PyTorch 2.11:
    /// ```python
    /// for max_norm in [5.0, 20.0]:
    ///     p = torch.tensor([1.0, -2.0], requires_grad=True)
    ///     q = torch.tensor([[0.5]], requires_grad=True)
    ///     ((p * torch.tensor([3.0, 4.0])).sum() + (q * 12.0).sum()).backward()
    ///     total = torch.nn.utils.clip_grad_norm_([p, q], max_norm, foreach=True)
    ///     print(total.item(), p.grad.tolist(), q.grad.tolist())
    /// # 13.0 [1.153846025466919, 1.538461446762085] [[4.615384101867676]]
    /// # 13.0 [3.0, 4.0] [[12.0]]
    /// ```
    #[test]
    fn sync_free_clipping_matches_torch_and_the_host_read_version() {
        let clipped = [1.153_846_f32, 1.538_461_4, 4.615_384];
        let unclipped = [3.0f32, 4.0, 12.0];
        for (max_norm, expected) in [(5.0, clipped), (20.0, unclipped)] {
            let on_device = params_with_gradients();
            let total = clip_grad_norm(&on_device, max_norm).unwrap();
            assert!((total.double_value(&[]) - 13.0).abs() < 1e-6);
            let on_host = params_with_gradients();
            assert!((clip_grad_norm_with_host_read(&on_host, max_norm).unwrap() - 13.0).abs() < 1e-6);
            let (device_grads, host_grads) = (grads_of(&on_device), grads_of(&on_host));
            for ((d, h), e) in device_grads.iter().zip(&host_grads).zip(expected) {
                assert!((d - e).abs() < 1e-6 * e.abs().max(1.0), "max_norm={max_norm}: {device_grads:?}");
                assert!((d - h).abs() < 1e-6 * e.abs().max(1.0), "max_norm={max_norm}: {host_grads:?}");
            }
        }
    }

    #[test]
    fn no_gradient_gives_a_zero_norm_and_a_bad_max_norm_an_error() {
        let p = Tensor::from_slice(&[1.0f32]).set_requires_grad(true);
        let params = [p];
        assert_eq!(clip_grad_norm(&params, 1.0).unwrap().double_value(&[]), 0.0);
        assert_eq!(clip_grad_norm_with_host_read(&params, 1.0).unwrap(), 0.0);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(clip_grad_norm(&params, bad), Err(Error::Invalid(_))), "{bad}");
            assert!(matches!(clip_grad_norm_with_host_read(&params, bad), Err(Error::Invalid(_))), "{bad}");
        }
    }
}
