//! Which tricks apply to the user's own network: what follows from what it is built of
//! ([`ModelFeatures`]), from its being the user's code (which trickbench does not rewrite), from
//! its prepared batches (no data loader) and, on libtorch, from its TorchScript export. The
//! device's and the build's needs are the trick table's, as for the reference workloads.

use crate::engine::Engine;
use crate::results::model::UserModel;
use crate::tricks::Trick;

/// Classes of CIFAR-10, which the model's time to accuracy trains on.
const CIFAR_CLASSES: i64 = crate::data::cifar::CLASSES.len() as i64;

/// Whether most of `model`'s FLOPs are convolutions (cuDNN's work): it has convolutions and no
/// attention. Both engines judge its arithmetic by this ([`crate::measure::flops::StepArithmetic`]).
pub fn mostly_convolutions(model: &UserModel) -> bool {
    model.features.convolutions > 0 && !model.features.sdpa
}

/// Why `trick` cannot be measured on `model` on `engine`, if it cannot.
pub fn not_applicable(model: &UserModel, trick: Trick, engine: Engine) -> Option<String> {
    let features = &model.features;
    let libtorch = engine == Engine::Libtorch;
    let why = match trick {
        Trick::ChannelsLast | Trick::CudnnBenchmark if features.convolutions == 0 => {
            "the model has no 2-d convolutions".to_owned()
        }
        Trick::NoBiasBeforeBn if features.bias_before_batch_norm == 0 => match &features
            .bias_before_batch_norm_note
        {
            Some(note) => format!("no convolution with a bias feeding only a BatchNorm was found: {note}"),
            None => "the model has no convolution with a bias feeding only a BatchNorm".to_owned(),
        },
        Trick::NoBiasBeforeBn if libtorch && !model.no_bias_export => {
            "the model without those biases could not be exported to TorchScript".to_owned()
        }
        Trick::SdpaFlash | Trick::SdpaCudnn | Trick::SdpaMemEfficient | Trick::SdpaMath if !features.sdpa => {
            "the model does not call scaled_dot_product_attention".to_owned()
        }
        Trick::FlashAttention => {
            "it replaces trickbench's GPT's written-out attention; the model's attention is its own code"
                .to_owned()
        }
        Trick::JitFusion => {
            "it scripts the reference models' pointwise chains; trickbench does not rewrite the model's code"
                .to_owned()
        }
        Trick::Checkpointing => "trickbench cannot cut the model's own forward into segments".to_owned(),
        Trick::Fp8Matmul if features.linears == 0 => "the model has no nn.Linear layers".to_owned(),
        Trick::Fp8Matmul if features.fp8_linears == Some(0) => {
            "no nn.Linear layer has both features multiples of 16, which torch._scaled_mm needs".to_owned()
        }
        Trick::Fp8Matmul if libtorch => {
            "the TorchScript export's linears cannot be swapped for trickbench's fp8 linear; the PyTorch \
             engine measures it"
                .to_owned()
        }
        Trick::LoaderWorkers
        | Trick::PinMemory
        | Trick::ZeroCopy
        | Trick::GpuAugment
        | Trick::PackedDataset => {
            "the model trains on prepared batches held in memory: there is no data loader".to_owned()
        }
        Trick::Ddp => "trickbench's data-parallel cells build the reference models only".to_owned(),
        Trick::LabelSmoothing => {
            "the model trains with its own loss (the exported loss module), which trickbench does not change"
                .to_owned()
        }
        Trick::BnMomentum => "the model's BatchNorm momentum is set by its own code".to_owned(),
        Trick::InputNorm | Trick::FlipTta if model.dataset.is_some() => {
            "the model trains on its file's dataset(), whose inputs trickbench neither standardises nor \
             mirrors"
                .to_owned()
        }
        Trick::BatchNorm => {
            "its reference removes the reference models' BatchNorms; trickbench does not rewrite the model's code"
                .to_owned()
        }
        _ => return None,
    };
    Some(format!("{}: {why}", model.name))
}

/// Why `model` cannot train to a target, if it cannot: on its file's `dataset()` it can; without
/// one its time to accuracy trains on CIFAR-10's 32×32 RGB images in 10 classes (standardised,
/// in float32), so its inputs must be images of that shape and its output one score per class.
pub fn target_refusal(model: &UserModel) -> Option<String> {
    if model.dataset.is_some() {
        return None;
    }
    let (inputs, output) = (&model.inputs, &model.output);
    let images = inputs.dtype.starts_with("float") && inputs.shape.get(1..) == Some(&[3, 32, 32][..]);
    let classes = output.shape.len() == 2 && output.shape[1] >= CIFAR_CLASSES;
    match (images, classes) {
        (false, _) => Some(format!("{}'s inputs are {} {:?}", model.name, inputs.dtype, inputs.shape)),
        (true, false) => Some(format!(
            "{}'s output is {:?}, not [batch, classes] with at least {CIFAR_CLASSES} classes",
            model.name, output.shape
        )),
        (true, true) => None,
    }
}

/// Why no cell of `model` can run on `engine`, if none can: on libtorch, a network without a
/// TorchScript export.
pub fn engine_refusal(model: &UserModel, engine: Engine) -> Option<String> {
    (engine == Engine::Libtorch).then(|| model.not_exported()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::model::fixtures::cnn;
    use crate::results::model::{Export, ModelDataset, TensorInfo};

    /// The reasons of the PyTorch engine's table of user sides (`USER_TRICKS` in
    /// `scripts/engine/pytorch_engine.py`), by trick id: each entry's last reason, its last string
    /// literal or a named constant's written after it.
    fn engine_reasons() -> Vec<(String, String)> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/engine/pytorch_engine.py");
        let script = std::fs::read_to_string(path).unwrap();
        let literals =
            |text: &str| -> Vec<String> { text.split('"').skip(1).step_by(2).map(str::to_owned).collect() };
        let constant = |name: &str| {
            let line = script.lines().find(|l| l.starts_with(&format!("{name} = ("))).unwrap();
            literals(line).pop().unwrap()
        };
        let block = script.split("USER_TRICKS = {\n").nth(1).unwrap().split("\n}\n").next().unwrap();
        let mut entries: Vec<(String, String)> = Vec::new();
        for line in block.lines() {
            if let Some(rest) = line.strip_prefix("    \"") {
                let (trick, value) = rest.split_once("\": ").unwrap();
                entries.push((trick.to_owned(), value.to_owned()));
            } else if let Some(last) = entries.last_mut() {
                last.1.push_str(line);
            }
        }
        entries
            .into_iter()
            .map(|(trick, value)| {
                let after_last_literal = value.rsplit('"').next().unwrap_or_default();
                let named = after_last_literal
                    .split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                    .rfind(|word| word.len() > 1 && word.starts_with(|c: char| c.is_ascii_uppercase()));
                let reason = named.map(constant).unwrap_or_else(|| literals(&value).pop().unwrap());
                (trick, reason)
            })
            .collect()
    }

    #[test]
    fn the_pytorch_engine_gives_the_same_reasons_for_what_does_not_fit_a_users_model() {
        let mut bare = cnn();
        bare.features = crate::results::model::ModelFeatures {
            convolutions: 0,
            bias_before_batch_norm: 0,
            bias_before_batch_norm_note: None,
            sdpa: false,
            linears: 1,
            fp8_linears: Some(0),
            dropout: false,
        };
        let reasons = engine_reasons();
        assert!(reasons.len() >= 10, "{reasons:?}");
        for (id, reason) in reasons {
            let trick =
                Trick::ALL.into_iter().find(|t| t.id() == id).unwrap_or_else(|| panic!("no trick {id}"));
            // The engine alone decides whether a batch splits evenly into micro-batches.
            if trick == Trick::GradAccumulation {
                continue;
            }
            let ours =
                not_applicable(&bare, trick, Engine::Pytorch).unwrap_or_else(|| panic!("{id} applies"));
            assert_eq!(ours, format!("cnn.py: {reason}"), "{id}");
        }
    }

    #[test]
    fn a_model_trains_to_a_target_on_its_dataset_or_as_a_classifier_of_32_pixel_images() {
        let mut model = cnn();
        assert_eq!(target_refusal(&model), None);
        model.output.shape = vec![32, 2];
        assert!(target_refusal(&model).unwrap().contains("at least 10 classes"));
        model.inputs.shape = vec![32, 3, 224, 224];
        assert_eq!(target_refusal(&model).unwrap(), "cnn.py's inputs are float32 [32, 3, 224, 224]");
        let tensor = |shape: Vec<i64>, dtype: &str| TensorInfo { shape, dtype: dtype.to_owned() };
        model.dataset = Some(ModelDataset {
            train_samples: 100,
            test_samples: 20,
            inputs: tensor(vec![100, 3, 224, 224], "float32"),
            targets: tensor(vec![100], "int64"),
        });
        assert_eq!(target_refusal(&model), None, "its own dataset() fits it");
        let why = not_applicable(&model, Trick::FlipTta, Engine::Libtorch).unwrap();
        assert!(why.contains("dataset()"), "{why}");
        let why = not_applicable(&cnn(), Trick::LabelSmoothing, Engine::Libtorch).unwrap();
        assert!(why.contains("its own loss"), "{why}");
        assert_eq!(not_applicable(&cnn(), Trick::OneCycle, Engine::Libtorch), None);
    }

    #[test]
    fn what_the_model_is_built_of_decides_its_tricks() {
        let model = cnn();
        for engine in [Engine::Libtorch, Engine::Pytorch] {
            for trick in
                [Trick::ChannelsLast, Trick::NoBiasBeforeBn, Trick::Amp, Trick::DebugOff, Trick::ZeroGradNone]
            {
                assert_eq!(not_applicable(&model, trick, engine), None, "{trick} on {engine}");
            }
            let why = not_applicable(&model, Trick::SdpaMath, engine).unwrap();
            assert_eq!(why, "cnn.py: the model does not call scaled_dot_product_attention");
            let why = not_applicable(&model, Trick::LoaderWorkers, engine).unwrap();
            assert!(why.contains("no data loader"), "{why}");
            assert!(not_applicable(&model, Trick::Checkpointing, engine).is_some());
        }
        assert!(not_applicable(&model, Trick::Fp8Matmul, Engine::Libtorch)
            .unwrap()
            .contains("PyTorch engine"));
        assert_eq!(not_applicable(&model, Trick::Fp8Matmul, Engine::Pytorch), None);
    }

    #[test]
    fn fp8_matmul_needs_a_linear_whose_features_torchs_scaled_mm_takes() {
        let with = |linears, fp8_linears| {
            let mut model = cnn();
            (model.features.linears, model.features.fp8_linears) = (linears, fp8_linears);
            not_applicable(&model, Trick::Fp8Matmul, Engine::Pytorch)
        };
        assert_eq!(with(0, Some(0)).unwrap(), "cnn.py: the model has no nn.Linear layers");
        let none = with(3, Some(0)).unwrap();
        assert_eq!(
            none,
            "cnn.py: no nn.Linear layer has both features multiples of 16, which torch._scaled_mm needs"
        );
        assert_eq!(with(3, Some(2)), None);
        assert_eq!(with(3, None), None, "a description without the count leaves it to the engine");
    }

    #[test]
    fn a_model_without_convolutions_or_an_export_says_why() {
        let mut model = cnn();
        model.features.convolutions = 0;
        model.features.bias_before_batch_norm = 0;
        model.features.bias_before_batch_norm_note = Some("torch.fx cannot trace the module: x".into());
        assert!(not_applicable(&model, Trick::ChannelsLast, Engine::Pytorch)
            .unwrap()
            .contains("no 2-d convolutions"));
        let why = not_applicable(&model, Trick::NoBiasBeforeBn, Engine::Pytorch).unwrap();
        assert!(why.contains("torch.fx cannot trace"), "{why}");
        assert_eq!(engine_refusal(&model, Engine::Libtorch), None);
        model.export =
            Export { method: None, loss_float64: None, reason: Some("torch.jit.trace: boom".into()) };
        let why = engine_refusal(&model, Engine::Libtorch).unwrap();
        assert!(why.contains("could not be exported to TorchScript") && why.contains("boom"), "{why}");
        assert_eq!(engine_refusal(&model, Engine::Pytorch), None);
    }
}
