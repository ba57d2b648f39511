//! What the 2021 guide "Faster Deep Learning Training with PyTorch" and NVIDIA's PyTorch
//! Performance Tuning Guide claim for each trick, so a report can set the claim next to the
//! measured effect. The match is exhaustive: a new trick does not compile until it has a claim.

use crate::tricks::Trick;

/// The claim made for `trick`, in one sentence, naming its source.
pub(crate) fn claim(trick: Trick) -> &'static str {
    match trick {
        Trick::Amp => {
            "Guide #4 and NVIDIA's tuning guide: autocast to fp16 with a gradient scaler runs matrix \
             multiplies and convolutions on tensor cores, giving up to about 3× overall speed-up on \
             arithmetically intense models on Volta and newer GPUs, and smaller activations."
        }
        Trick::AmpBf16 => {
            "Modern addition to guide #4: bf16 has fp32's exponent range, so autocast needs no loss \
             scaling, and on Ampere and newer it runs on tensor cores as fast as fp16."
        }
        Trick::CudnnBenchmark => {
            "Guide #6 and NVIDIA's tuning guide: with torch.backends.cudnn.benchmark = True cuDNN \
             times several convolution algorithms and keeps the fastest, which speeds up CNNs whose \
             input shapes do not change."
        }
        Trick::AvoidSync => {
            "Guide #7 and NVIDIA's tuning guide: host reads such as .item(), .cpu() or printing a \
             tensor every step force a CPU-GPU synchronisation that stalls the pipeline; keep metrics \
             on the device and read them rarely."
        }
        Trick::NoBiasBeforeBn => {
            "Guide #15 and NVIDIA's tuning guide: a convolution bias directly before BatchNorm is \
             cancelled by the normalisation, so dropping it saves parameters and work for free."
        }
        Trick::ZeroGradNone => {
            "Guide #11 and NVIDIA's tuning guide: setting gradients to None instead of zero-filling \
             them skips one memset per parameter and lets backward write instead of accumulate."
        }
        Trick::NoGradEval => {
            "Guide #16: evaluating under torch.no_grad() records no autograd graph, so evaluation is \
             faster and needs less memory."
        }
        Trick::ChannelsLast => {
            "Modern addition (NVIDIA's tuning guide, PyTorch channels_last tutorial): the NHWC memory \
             format lets tensor-core convolution kernels run without layout transposes, which speeds \
             up CNN training, most of all together with mixed precision."
        }
        // Data-pipeline tricks
        Trick::LoaderWorkers => {
            "Guide #2 and NVIDIA's tuning guide: DataLoader(num_workers > 0) loads and augments \
             batches in worker processes while the GPU trains, so the training loop no longer waits \
             for data."
        }
        Trick::PinMemory => {
            "Guide #2 and NVIDIA's tuning guide: pin_memory=True stages batches in page-locked host \
             memory, which makes host-to-GPU copies faster and lets them run asynchronously with \
             non_blocking=True."
        }
        Trick::ZeroCopy => {
            "Guide #12: build tensors with torch.from_numpy or torch.as_tensor, which share the host \
             memory, instead of torch.tensor, which copies it."
        }
        Trick::GpuAugment => {
            "Reader tip: augmenting whole batches on the GPU instead of image by image in CPU \
             workers removes the CPU bottleneck of small-image training."
        }
        Trick::PackedDataset => {
            "Reader tip: decoding thousands of small JPEG/PNG files every epoch costs more CPU time \
             than the training step; pack the decoded dataset once into one binary file."
        }
        Trick::FusedOptimizer => {
            "Guide #5 and NVIDIA's tuning guide: fused optimizers apply the update to all parameters \
             in a few multi-tensor kernel launches instead of several launches per parameter, which \
             removes launch overhead and memory round trips and speeds up the optimizer step."
        }
        Trick::Tf32 => {
            "Modern addition (NVIDIA's tuning guide, PyTorch's TF32 notes): on Ampere and newer GPUs \
             TF32 runs fp32 matrix multiplies and convolutions on tensor cores with a 10-bit mantissa, \
             up to about 8× faster than full fp32 math, with no code change beyond a flag. PyTorch \
             already allows it in cuDNN convolutions by default; the flag adds the matmuls."
        }
        Trick::JitFusion => {
            "Bonus #18 and NVIDIA's tuning guide: scripting a chain of pointwise operations with \
             TorchScript lets its fuser run them as one kernel, cutting kernel launches and memory \
             reads and writes for memory-bound code."
        }
        Trick::DebugOff => {
            "Guide #13: anomaly detection (torch.autograd.set_detect_anomaly) and the autograd \
             profiler record extra information for every operation and slow training down; switch \
             them off once debugging is done."
        }
        Trick::CudaGraphs => {
            "Modern addition (PyTorch's CUDA Graphs blog post and NVIDIA's tuning guide): capturing \
             the whole training step once and replaying it replaces thousands of kernel launches \
             with one, which pays most when the GPU waits on the CPU (small batches, small models); \
             NVIDIA reported up to 1.7× for Mask R-CNN and 1.12× for BERT at scale."
        }
        // Convergence and memory tricks
        Trick::OneCycle => {
            "Guide #1 (Smith & Topin, Super-Convergence): the 1cycle policy (warm up to a large \
             learning rate, anneal far below the start, momentum cycled inversely) reaches a given \
             accuracy in a fraction of the iterations a step schedule needs, e.g. ResNet-56 on \
             CIFAR-10 in about 10k instead of 80k iterations."
        }
        Trick::MaxBatch => {
            "Guide #3: use the largest batch that fits in GPU memory, with the learning rate scaled \
             up accordingly (Goyal et al.: linearly, after a warm-up), to use the hardware fully and \
             train faster per epoch; generalisation may suffer at very large batches."
        }
        Trick::Adamw => {
            "Guide #5 (Loshchilov & Hutter): AdamW decouples weight decay from the adaptive update, \
             which regularises as intended and generalises better than Adam with L2, reaching \
             better accuracy in the same time."
        }
        Trick::Lars => {
            "Guide #5 (You, Gitman & Ginsburg): LARS's layer-wise trust ratio keeps large-batch \
             training stable where plain SGD with a linearly scaled learning rate diverges or loses \
             accuracy (ResNet-50 at batch 8k–32k)."
        }
        Trick::Lamb => {
            "Guide #5 (You et al.): LAMB applies layer-wise trust ratios to Adam's updates, which \
             made BERT pre-training at batch 32k–64k possible (76 minutes) without losing accuracy."
        }
        Trick::Checkpointing => {
            "Guide #8: gradient (activation) checkpointing stores only some activations and \
             recomputes the rest in backward, trading about one extra forward pass (~20–30% time) for \
             much less activation memory, hence larger batches or models."
        }
        Trick::GradAccumulation => {
            "Guide #9: accumulating gradients over several micro-batches gives the effective batch \
             of a larger one in the memory of a smaller one, at the cost of some throughput."
        }
        Trick::GradClipping => {
            "Guide #14: clipping gradients to a maximum global norm stabilises training and permits \
             higher learning rates, which can shorten training (long used for RNNs and \
             transformers)."
        }
        Trick::InputNorm => {
            "Guide #17: standardising the inputs (zero mean, unit variance per channel) conditions \
             the optimisation better, so training converges faster."
        }
        Trick::BatchNorm => {
            "Guide #17 (Ioffe & Szegedy): BatchNorm allows much higher learning rates and less care \
             with initialisation; it reached Inception's accuracy in 14 times fewer steps."
        }
        Trick::FlashAttention => {
            "Modern addition (Dao et al. 2022, FlashAttention): computing attention in tiles inside \
             one kernel, without writing the T×T attention matrix to GPU memory, gives 2–4× faster \
             attention and memory linear instead of quadratic in the sequence length; PyTorch 2 \
             exposes it as scaled_dot_product_attention."
        }
        Trick::Ddp => {
            "Guide #10: DistributedDataParallel (one process per GPU, gradients all-reduced in \
             buckets while backward runs) scales better than DataParallel, whose single process \
             copies the model to every GPU each step and gathers outputs and gradients on the first; \
             PyTorch recommends it even on one machine."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_trick_has_a_one_sentence_claim() {
        for t in Trick::ALL {
            let c = claim(t);
            assert!(c.ends_with('.') && c.len() > 40, "{t}: {c}");
        }
    }
}
