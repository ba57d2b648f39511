//! The user's own network on the libtorch engine: its TorchScript export loaded with libtorch's
//! JIT, its parameters registered in a var store so that trickbench's optimizers, AMP, CUDA graphs
//! and memory formats act on them as on a reference model's, and its loss exported beside it.

use std::cell::Cell;
use std::path::Path;

use tch::{nn, CModule, Kind, Tensor};

use super::Workload;
use crate::error::Error;
use crate::results::model::UserModel;

/// The TorchScript export inside a prepared folder.
pub const EXPORT_FILE: &str = "model.pt";
/// The export without the biases that feed only a BatchNorm (`no-bias-before-bn`).
pub const NO_BIAS_EXPORT_FILE: &str = "model-no-bias.pt";
/// The loss as a TorchScript module: forward(outputs, targets) is the scalar loss.
pub const LOSS_FILE: &str = "loss.pt";

/// A TorchScript network and its TorchScript loss.
#[derive(Debug)]
pub struct ScriptedModel {
    vs: nn::VarStore,
    module: std::cell::RefCell<CModule>,
    /// Whether the module is in training mode now.
    training: Cell<bool>,
    loss: CModule,
    forward_flops_per_sample: f64,
    mostly_convolutions: bool,
}

impl ScriptedModel {
    /// Loads the export `module` and the loss `loss` onto `device` in `kind` (float32, or float64
    /// for checks of arithmetic), as `model` describes them.
    ///
    /// The JIT's graph optimisations (profiling runs, specialisation, fusion) are turned off for
    /// the process first: the export then runs its operators one after another as eager PyTorch
    /// does, so that libtorch measures the model as it measures the reference models, not
    /// TorchScript's compiler (whose first calls also run many times slower while it profiles).
    pub fn load(
        module: &Path,
        loss: &Path,
        model: &UserModel,
        device: tch::Device,
        kind: Kind,
    ) -> Result<Self, Error> {
        tch::jit::set_graph_executor_optimize(false);
        let load = |path: &Path| {
            CModule::load_on_device(path, device)
                .map_err(|e| Error::Torch(format!("loading {}: {e}", path.display())))
        };
        let mut scripted = load(module)?;
        scripted.to(device, kind, false);
        let mut loss = load(loss)?;
        loss.to(device, kind, false);
        let vs = nn::VarStore::new(device);
        let parameters =
            scripted.named_parameters().map_err(|e| Error::Torch(format!("{}: {e}", module.display())))?;
        for (name, tensor) in parameters {
            let trainable = tensor.requires_grad();
            // The var store holds a shallow copy: the module trains the same tensors.
            let _registered = vs.root().add(&name.replace('.', "_"), tensor, trainable);
        }
        scripted.set_train();
        Ok(Self {
            vs,
            module: std::cell::RefCell::new(scripted),
            training: Cell::new(true),
            loss,
            forward_flops_per_sample: model.flops_per_sample.unwrap_or(0.0),
            mostly_convolutions: crate::workloads::user::mostly_convolutions(model),
        })
    }

    /// Puts the module in training or evaluation mode, where it is not already.
    fn set_mode(&self, train: bool) {
        if self.training.get() != train {
            let mut module = self.module.borrow_mut();
            if train {
                module.set_train();
            } else {
                module.set_eval();
            }
            self.training.set(train);
        }
    }
}

impl Workload for ScriptedModel {
    fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    fn var_store_mut(&mut self) -> &mut nn::VarStore {
        &mut self.vs
    }

    fn forward(&self, inputs: &Tensor, train: bool) -> Tensor {
        self.set_mode(train);
        self.module
            .borrow()
            .forward_ts(&[inputs])
            .unwrap_or_else(|e| panic!("the model's forward failed: {e}"))
    }

    fn segments(&self) -> usize {
        1
    }

    fn forward_segment(&self, _k: usize, xs: &Tensor, train: bool) -> Tensor {
        self.forward(xs, train)
    }

    fn loss(&self, outputs: &Tensor, targets: &Tensor) -> Tensor {
        self.loss.forward_ts(&[outputs, targets]).unwrap_or_else(|e| panic!("the model's loss failed: {e}"))
    }

    fn training_loss(&self, outputs: &Tensor, targets: &Tensor, _label_smoothing: f64) -> Tensor {
        self.loss(outputs, targets)
    }

    fn correct(&self, outputs: &Tensor, targets: &Tensor) -> Tensor {
        let classified = outputs.is_floating_point()
            && !targets.is_floating_point()
            && outputs.dim() == targets.dim() + 1
            && outputs.size()[..targets.dim()] == targets.size()[..];
        if classified {
            outputs.argmax(-1, false).eq_tensor(targets).sum(Kind::Int64)
        } else {
            Tensor::zeros([], (Kind::Int64, outputs.device()))
        }
    }

    fn forward_flops_per_sample(&self) -> f64 {
        self.forward_flops_per_sample
    }

    fn mostly_convolutions(&self) -> bool {
        self.mostly_convolutions
    }

    fn hidden_weights(&self) -> Vec<Tensor> {
        self.vs.trainable_variables().into_iter().filter(|t| t.dim() >= 2).collect()
    }
}
