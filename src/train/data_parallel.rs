//! DataParallel for a trainer (the `ddp` trick's "off" side, `torch.nn.DataParallel`): one process
//! drives several devices. Every step the model on the first device (the master, which the
//! optimizer updates) is copied into a replica per further device, the batch is split into one
//! chunk per device, each replica runs forward and backward on its chunk with its loss weighted
//! by the chunk's share of the batch (so the sum is the whole batch's mean loss), and the
//! replicas' gradients are added onto the master's.

use tch::{Device, Tensor};

use crate::error::Error;
use crate::ffi;
use crate::train::micro_batch::{MicroBatchPass, Totals};
use crate::train::LossScale;
use crate::workloads::Workload;

/// The replicas of a master model, one per further device.
#[derive(Debug)]
pub struct Replicas<W: Workload> {
    replicas: Vec<W>,
}

impl<W: Workload> Replicas<W> {
    /// Replicas built like the master (the same variables, same names and order), each on its own
    /// device; converted to channels_last where the master's 4-d parameters are.
    pub fn new(master: &W, replicas: Vec<W>) -> Result<Self, Error> {
        let master_vars = master.var_store().variables();
        for replica in &replicas {
            for (name, mut var) in replica.var_store().variables() {
                let original = master_vars.get(&name).ok_or_else(|| {
                    Error::Invalid(format!("data-parallel: a replica has variable '{name}', the master none"))
                })?;
                if ffi::is_channels_last(original) {
                    ffi::param_to_channels_last(&mut var)?;
                }
            }
            if replica.var_store().variables().len() != master_vars.len() {
                return Err(Error::Invalid(
                    "data-parallel: a replica's variables differ from the master's".to_owned(),
                ));
            }
        }
        Ok(Self { replicas })
    }

    /// Devices driven: the master's and one per replica.
    pub fn width(&self) -> usize {
        self.replicas.len() + 1
    }

    /// The model on device `i`: the master for 0, else replica `i - 1`.
    fn get<'a>(&'a self, master: &'a W, i: usize) -> &'a W {
        if i == 0 {
            master
        } else {
            &self.replicas[i - 1]
        }
    }

    /// Copies the master's parameters and buffers into every replica.
    pub fn broadcast_from(&self, master: &W) -> Result<(), Error> {
        let source = master.var_store().variables();
        tch::no_grad(|| {
            for replica in &self.replicas {
                for (name, mut var) in replica.var_store().variables() {
                    let from = source.get(&name).ok_or_else(|| {
                        Error::Invalid(format!("data-parallel: the master has no variable '{name}'"))
                    })?;
                    var.f_copy_(from)?;
                }
            }
            Ok(())
        })
    }

    /// `pass` over one micro-batch split into a chunk per device, the master taking the first: each
    /// chunk is moved to its model's device and backpropagated there at `loss_scale` times its
    /// share of the micro-batch. Returns the micro-batch's mean loss (the chunks' losses weighted
    /// by their shares) and its number of correct predictions, on the inputs' device. The
    /// gradients stay on each model until [`Self::reduce_grads_into`].
    pub fn forward_backward(
        &self,
        master: &W,
        pass: &MicroBatchPass,
        inputs: &Tensor,
        targets: &Tensor,
        loss_scale: &LossScale,
    ) -> Result<(Tensor, Tensor), Error> {
        let samples = inputs.size()[0] as f64;
        let home = inputs.device();
        let width = self.width() as i64;
        let mut totals = Totals::default();
        for (i, (x, y)) in inputs.chunk(width, 0).into_iter().zip(targets.chunk(width, 0)).enumerate() {
            let model = self.get(master, i);
            let device = device_of(model);
            let share = x.size()[0] as f64 / samples;
            let scale = loss_scale.on(device).times(share);
            let (loss, correct) = pass.run(model, &x.to_device(device), &y.to_device(device), &scale)?;
            totals.add(loss.to_device(home) * share, correct.to_device(home));
        }
        Ok(totals.sums())
    }

    /// Adds every replica's gradients onto the master's (on the master's device) and clears the
    /// replicas' gradients.
    pub fn reduce_grads_into(&self, master: &W) -> Result<(), Error> {
        let targets = master.var_store().trainable_variables();
        tch::no_grad(|| {
            for replica in &self.replicas {
                for (target, mut source) in targets.iter().zip(replica.var_store().trainable_variables()) {
                    let grad = source.grad();
                    if !grad.defined() {
                        continue;
                    }
                    let mut total = target.grad();
                    if !total.defined() {
                        return Err(Error::Invalid(
                            "data-parallel: a parameter has a gradient on a replica but none on the master"
                                .to_owned(),
                        ));
                    }
                    let _sum = total.f_add_(&grad.to_device(total.device()))?;
                    ffi::set_grad_none(&mut source);
                }
            }
            Ok(())
        })
    }
}

/// The device a workload's variables live on.
fn device_of<W: Workload>(workload: &W) -> Device {
    workload.var_store().device()
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind, Tensor};

    use crate::data::loader::Batch;
    use crate::device::DeviceSpec;
    use crate::optim::sgd::SgdConfig;
    use crate::test_support::seeded;
    use crate::train::recipe::BN_MOMENTUM;
    use crate::train::Trainer;
    use crate::tricks::TrickSet;
    use crate::workloads::resnet::{CifarResnet, ResnetOptions};
    use crate::workloads::Workload;

    fn net() -> CifarResnet {
        CifarResnet::new(
            ResnetOptions {
                blocks_per_stage: 1,
                conv_bias: true,
                batch_norm: false,
                bn_momentum: BN_MOMENTUM,
            },
            Device::Cpu,
        )
    }

    fn trainer(model: CifarResnet) -> Trainer<CifarResnet> {
        let sgd = SgdConfig { momentum: 0.9, weight_decay: 5e-4 };
        Trainer::new(model, &TrickSet::baseline(), DeviceSpec::Cpu, sgd).unwrap()
    }

    // Replicas on the CPU stand in for further GPUs: the split, the loss weighting and the
    // gradient reduction are the same arithmetic.
    #[test]
    fn replicas_train_as_one_model_on_the_whole_batch() {
        let (plain, parallel, batches) = seeded(11, || {
            let plain = trainer(net());
            let mut master = net();
            master.var_store_mut().copy(plain.workload().var_store()).unwrap();
            let parallel = trainer(master).with_replicas(vec![net(), net()]).unwrap();
            let batches: Vec<Batch> = (0..2)
                .map(|_| Batch {
                    inputs: Tensor::randn([10, 3, 32, 32], (Kind::Float, Device::Cpu)),
                    targets: Tensor::randint(10, [10], (Kind::Int64, Device::Cpu)),
                })
                .collect();
            (plain, parallel, batches)
        });
        let (mut plain, mut parallel) = (plain, parallel);
        assert_eq!(parallel.data_parallel_width(), 3);
        for batch in &batches {
            plain.train_step(batch, 0.05).unwrap();
            parallel.train_step(batch, 0.05).unwrap();
        }
        let a = plain.workload().var_store().variables();
        let b = parallel.workload().var_store().variables();
        for (name, p) in &a {
            assert!(p.allclose(&b[name], 1e-4, 1e-5, false), "{name}: {}", (p - &b[name]).abs().max());
        }
    }

    #[test]
    fn a_trainer_is_spread_over_devices_once() {
        let (spread, more) = seeded(12, || (trainer(net()).with_replicas(vec![net()]).unwrap(), net()));
        let refused = spread.with_replicas(vec![more]).unwrap_err().to_string();
        assert!(refused.contains("data-parallel: the trainer already runs data-parallel"), "{refused}");
    }
}
