//! Which tricks apply to the user's own network: what follows from what it is built of
//! ([`ModelFeatures`]), from its being the user's code (which trickbench does not rewrite), from
//! its prepared batches (no data loader) and, on libtorch, from its TorchScript export. The
//! device's and the build's needs are the trick table's, as for the reference workloads.

use crate::engine::Engine;
use crate::results::model::UserModel;
use crate::tricks::Trick;

/// Classes of CIFAR-10, which the model's time to accuracy trains on.
const CIFAR_CLASSES: i64 = crate::data::cifar::CLASSES.len() as i64;

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
        Trick::BatchNorm => {
            "its reference removes the reference models' BatchNorms; trickbench does not rewrite the model's code"
                .to_owned()
        }
        _ => return None,
    };
    Some(format!("{}: {why}", model.name))
}

/// Why `model` cannot train to a target on CIFAR-10, if it cannot: its time to accuracy trains on
/// 32×32 RGB images in 10 classes (standardised, in float32), so its inputs must be images of
/// that shape and its output one score per class.
pub fn cifar_refusal(model: &UserModel) -> Option<String> {
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
    use crate::results::model::Export;

    #[test]
    fn only_a_classifier_of_32_pixel_images_trains_to_a_target_on_cifar() {
        let mut model = cnn();
        assert_eq!(cifar_refusal(&model), None);
        model.output.shape = vec![32, 2];
        assert!(cifar_refusal(&model).unwrap().contains("at least 10 classes"));
        model.inputs.shape = vec![32, 3, 224, 224];
        assert_eq!(cifar_refusal(&model).unwrap(), "cnn.py's inputs are float32 [32, 3, 224, 224]");
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
