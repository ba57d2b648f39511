//! A character-level GPT after Karpathy's nanoGPT (`model.py`): token and learned position
//! embeddings, a stack of pre-LayerNorm decoder blocks (causal self-attention, then a GELU MLP of
//! four times the width, each added to the residual stream), a final LayerNorm and a language-model
//! head tied to the token embedding (logits = x · wteᵀ). No linear layer or LayerNorm has a bias;
//! LayerNorm ε is 1e-5. Weights are initialised as nanoGPT does: every linear and embedding weight
//! from N(0, 0.02), the two residual projections of each block (`c_proj`) from
//! N(0, 0.02/√(2·layers)), LayerNorm weights 1. Variable names are nanoGPT's `state_dict` keys
//! (`transformer.h.0.attn.c_attn.weight`, …), linear weights in PyTorch's [out, in] layout.
//!
//! Dropout (training only) follows nanoGPT: after the embedding sum, on the attention weights, and
//! on each residual branch (after the attention's and the MLP's output projection).
//!
//! Attention is computed one of two ways ([`AttentionKernel`], the `flash-attention` trick):
//! written out op by op, softmax(QKᵀ/√d, causal mask)·V with a lower-triangular mask made once at
//! construction, or as one `scaled_dot_product_attention` call with `is_causal`, which dispatches
//! to a fused (flash or memory-efficient) kernel where one applies. Both compute the same function.
//!
//! With `jit_fusion` ([`GptOptions`], the `jit-fusion` trick) the pointwise chains run as
//! TorchScript functions, which the fuser can turn into single kernels: the MLP's exact GELU
//! written out with `erf` ([`GELU_TORCHSCRIPT`]) and, in training with dropout, each residual
//! branch's dropout-add ([`residual_dropout_torchscript`]). The math is that of the eager ops.
//!
//! With `fp8` ([`GptOptions`], the `fp8-matmul` trick) the four projections of every block
//! (`c_attn`, the attention's `c_proj`, `c_fc`, the MLP's `c_proj`) are fp8 linears
//! ([`super::fp8`]) with outputs in autocast's type, else bf16. The token embedding and the head
//! tied to it stay exact: the head's vocabulary (65 characters) is not a multiple of 16, which
//! `_scaled_mm` needs, and it is a sliver of the FLOPs. (modded-nanogpt, the other way round, runs
//! only its large head in fp8, with fixed scales tuned for it.)
//!
//! For activation checkpointing the model is cut into one segment per block: segment 0 also
//! embeds the tokens, and the last segment also applies the final LayerNorm and the head. With
//! dropout on, the model says it draws random numbers ([`Workload::draws_random_numbers`]), and
//! checkpointing replays each segment's masks from the generator state saved before it first ran.
//!
//! A sample is one token (one next-token prediction). Its forward FLOPs use nanoGPT's estimate
//! (`estimate_mfu`, after PaLM, Chowdhery et al. 2022, appendix B): training costs
//! 6·N + 12·layers·width·context FLOPs per token, N the parameters without the position
//! embeddings (the matrix multiplies by the weights, forward and backward, plus attention's
//! QKᵀ and ·V over the full context); the forward pass is one third of that,
//! 2·N + 4·layers·width·context.

use tch::nn::{self, Init};
use tch::{Device, Kind, Tensor};

use super::fp8::{self, Fp8Gemm};
use super::Workload;
use crate::error::Error;
use crate::ffi::{sdp_enabled, JitFunction, SdpEnabled};
pub use crate::vocabulary::AttentionBackend;

/// The MLP's exact GELU in TorchScript, for the `jit-fusion` trick: the same math as the eager
/// `gelu("none")`, 0.5·x·(1 + erf(x/√2)), written as a pointwise chain the fuser can compile into
/// one kernel.
pub const GELU_TORCHSCRIPT: &str = "
def gelu(x: Tensor) -> Tensor:
    return x * 0.5 * (1.0 + torch.erf(x * 0.7071067811865476))
";

/// The name of the function in [`GELU_TORCHSCRIPT`].
pub const GELU_FUNCTION: &str = "gelu";

/// The name of the function in [`residual_dropout_torchscript`].
pub const RESIDUAL_DROPOUT_FUNCTION: &str = "residual_dropout";

/// A residual branch's training-mode dropout-add in TorchScript, for the `jit-fusion` trick:
/// `residual + dropout(x, p)`, as the eager `residual + x.dropout(p, true)`. A called function
/// takes tensors only, so the probability `p` is written into the source text.
pub fn residual_dropout_torchscript(p: f64) -> String {
    format!(
        "
def {RESIDUAL_DROPOUT_FUNCTION}(residual: Tensor, x: Tensor) -> Tensor:
    return residual + torch.dropout(x, {p:?}, True)
"
    )
}

/// LayerNorm ε, PyTorch's default.
const LAYER_NORM_EPS: f64 = 1e-5;
/// Standard deviation of the initial linear and embedding weights.
const INIT_STD: f64 = 0.02;

/// Shape of a GPT.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GptConfig {
    /// Number of distinct tokens (characters).
    pub vocab_size: i64,
    /// Longest sequence the model reads (nanoGPT's `block_size`).
    pub context: i64,
    /// Number of decoder blocks.
    pub layers: i64,
    /// Attention heads per block; they divide the width.
    pub heads: i64,
    /// Width of the residual stream (nanoGPT's `n_embd`).
    pub width: i64,
    /// Dropout probability in training.
    pub dropout: f64,
}

impl GptConfig {
    /// nanoGPT's shakespeare-char: 6 layers, 6 heads, width 384, context 256, dropout 0.2.
    pub fn shakespeare(vocab_size: i64) -> Self {
        Self { vocab_size, context: 256, layers: 6, heads: 6, width: 384, dropout: 0.2 }
    }

    /// The CPU-sized variant for the quick profile: 2 layers, 4 heads, width 128, context 64,
    /// dropout 0.0.
    pub fn mini(vocab_size: i64) -> Self {
        Self { vocab_size, context: 64, layers: 2, heads: 4, width: 128, dropout: 0.0 }
    }

    /// Checks that every size is positive, the heads divide the width and the dropout is a
    /// probability below 1.
    fn validate(&self) -> Result<(), Error> {
        let sizes = [self.vocab_size, self.context, self.layers, self.heads, self.width];
        if sizes.iter().any(|&s| s <= 0) {
            return Err(Error::Invalid(format!("GPT sizes must be positive: {self:?}")));
        }
        if self.width % self.heads != 0 {
            return Err(Error::Invalid(format!(
                "GPT width {} is not divisible into {} heads",
                self.width, self.heads
            )));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::Invalid(format!("GPT dropout {} is not in [0, 1)", self.dropout)));
        }
        Ok(())
    }
}

/// How attention is computed (the `flash-attention` trick).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKernel {
    /// softmax(QKᵀ/√d + causal mask)·V written out op by op.
    Explicit,
    /// One fused `scaled_dot_product_attention` call with `is_causal`.
    ScaledDotProduct,
}

impl AttentionBackend {
    /// The backend `torch._fused_sdp_choice` names by its `at::SDPBackend` number.
    pub fn from_sdp_choice(code: i64) -> Result<Self, Error> {
        match code {
            0 => Ok(AttentionBackend::Math),
            1 => Ok(AttentionBackend::FlashAttention),
            2 => Ok(AttentionBackend::EfficientAttention),
            3 => Ok(AttentionBackend::CudnnAttention),
            4 => Ok(AttentionBackend::Overrideable),
            -1 => {
                Err(Error::Torch("scaled_dot_product_attention: no backend can run these inputs".to_owned()))
            }
            other => Err(Error::Torch(format!("scaled_dot_product_attention chose unknown backend {other}"))),
        }
    }
}

/// The `scaled_dot_product_attention` switches that force `forced` (every other backend
/// disabled), or allow every backend for PyTorch to choose among when `forced` is `None`. Only the
/// four fused-call backends have switches; `Explicit` and `Overrideable` cannot be forced.
pub fn sdp_switches(forced: Option<AttentionBackend>) -> Result<SdpEnabled, Error> {
    let only = SdpEnabled { flash: false, memory_efficient: false, math: false, cudnn: false };
    match forced {
        None => Ok(SdpEnabled::ALL),
        Some(AttentionBackend::FlashAttention) => Ok(SdpEnabled { flash: true, ..only }),
        Some(AttentionBackend::EfficientAttention) => Ok(SdpEnabled { memory_efficient: true, ..only }),
        Some(AttentionBackend::Math) => Ok(SdpEnabled { math: true, ..only }),
        Some(AttentionBackend::CudnnAttention) => Ok(SdpEnabled { cudnn: true, ..only }),
        Some(other) => Err(Error::Invalid(format!("attention backend {} cannot be forced", other.id()))),
    }
}

/// The backend `scaled_dot_product_attention` dispatches a training step of a GPT shaped `config`
/// to (`torch._fused_sdp_choice`): queries, keys and values of `batch_size` windows in `kind` on
/// `device` that need gradients, the config's dropout, a causal mask.
pub fn sdpa_backend(
    config: &GptConfig,
    batch_size: usize,
    kind: Kind,
    device: Device,
) -> Result<AttentionBackend, Error> {
    let shape = [batch_size as i64, config.heads, config.context, config.width / config.heads];
    let qkv = || Tensor::f_zeros(shape, (kind, device)).map(|t| t.set_requires_grad(true));
    let (q, k, v) = (qkv()?, qkv()?, qkv()?);
    let choice =
        Tensor::f_internal_fused_sdp_choice(&q, &k, &v, None::<Tensor>, config.dropout, true, None, false)
            .map_err(Error::from)
            .and_then(AttentionBackend::from_sdp_choice);
    choice.map_err(|e| {
        Error::Torch(format!(
            "{NO_ATTENTION_KERNEL} with the scaled_dot_product_attention backends allowed ({}) on \
             {device:?}: {e}",
            sdp_enabled().names()
        ))
    })
}

/// How the error of [`sdpa_backend`] begins when the dispatcher finds no kernel for the inputs
/// among the backends allowed.
pub const NO_ATTENTION_KERNEL: &str = "no attention kernel for these inputs";

/// Options that change how the model computes, not what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GptOptions {
    /// How attention is computed.
    pub attention: AttentionKernel,
    /// Whether the pointwise chains (GELU, residual dropout-add) run as TorchScript functions.
    pub jit_fusion: bool,
    /// The kernel the attention and MLP projections multiply with as fp8 linears (outputs in
    /// autocast's type, else bf16); `None`: plain matmuls in the activations' dtype. The tied
    /// head stays a plain matmul.
    pub fp8: Option<Fp8Gemm>,
}

/// The TorchScript functions of the `jit-fusion` trick.
#[derive(Debug)]
struct Fusion {
    gelu: JitFunction,
    /// The training-mode residual dropout-add; absent when the dropout is 0, where the branch is a
    /// plain add.
    residual_dropout: Option<JitFunction>,
}

/// Calls a compiled TorchScript function. Forward has no error path (like tch's plain ops, which
/// panic): a failing call of a function that compiled is a libtorch bug, reported with its message.
fn call(f: &JitFunction, inputs: &[&Tensor]) -> Tensor {
    f.call(inputs).unwrap_or_else(|e| panic!("{e}"))
}

/// One decoder block's weights.
#[derive(Debug)]
struct Block {
    ln_1: Tensor,
    /// Query, key and value projections stacked: [3·width, width].
    c_attn: Tensor,
    attn_proj: Tensor,
    ln_2: Tensor,
    c_fc: Tensor,
    mlp_proj: Tensor,
}

/// A GPT language model.
#[derive(Debug)]
pub struct Gpt {
    vs: nn::VarStore,
    config: GptConfig,
    options: GptOptions,
    wte: Tensor,
    wpe: Tensor,
    blocks: Vec<Block>,
    ln_f: Tensor,
    /// [context, context] bool, true where a query may attend to a key (key ≤ query); used by
    /// the explicit attention path, not a variable.
    causal_mask: Tensor,
    fusion: Option<Fusion>,
}

impl Gpt {
    /// Builds the model on `device` with freshly initialised weights (seed tch's RNG first for
    /// reproducible weights), compiling the TorchScript functions when `jit_fusion` is on.
    pub fn new(config: GptConfig, options: GptOptions, device: Device) -> Result<Self, Error> {
        config.validate()?;
        let vs = nn::VarStore::new(device);
        let transformer = vs.root() / "transformer";
        let normal = |stdev: f64| Init::Randn { mean: 0.0, stdev };
        let proj_std = INIT_STD / ((2 * config.layers) as f64).sqrt();
        let (v, c, w) = (config.vocab_size, config.context, config.width);
        let wte = (&transformer / "wte").f_var("weight", &[v, w], normal(INIT_STD))?;
        let wpe = (&transformer / "wpe").f_var("weight", &[c, w], normal(INIT_STD))?;
        let mut blocks = Vec::new();
        for i in 0..config.layers {
            let p = &transformer / "h" / i;
            let (attn, mlp) = (&p / "attn", &p / "mlp");
            blocks.push(Block {
                ln_1: (&p / "ln_1").f_var("weight", &[w], Init::Const(1.0))?,
                c_attn: (&attn / "c_attn").f_var("weight", &[3 * w, w], normal(INIT_STD))?,
                attn_proj: (&attn / "c_proj").f_var("weight", &[w, w], normal(proj_std))?,
                ln_2: (&p / "ln_2").f_var("weight", &[w], Init::Const(1.0))?,
                c_fc: (&mlp / "c_fc").f_var("weight", &[4 * w, w], normal(INIT_STD))?,
                mlp_proj: (&mlp / "c_proj").f_var("weight", &[w, 4 * w], normal(proj_std))?,
            });
        }
        let ln_f = (&transformer / "ln_f").f_var("weight", &[w], Init::Const(1.0))?;
        let causal_mask = Tensor::f_ones([c, c], (Kind::Bool, device))?.f_tril(0)?;
        let fusion = if options.jit_fusion {
            let residual_dropout = if config.dropout > 0.0 {
                let source = residual_dropout_torchscript(config.dropout);
                Some(JitFunction::compile(&source, RESIDUAL_DROPOUT_FUNCTION)?)
            } else {
                None
            };
            Some(Fusion { gelu: JitFunction::compile(GELU_TORCHSCRIPT, GELU_FUNCTION)?, residual_dropout })
        } else {
            None
        };
        Ok(Self { vs, config, options, wte, wpe, blocks, ln_f, causal_mask, fusion })
    }

    /// The model's shape.
    pub fn config(&self) -> &GptConfig {
        &self.config
    }

    /// Parameters not counting the position embeddings (nanoGPT's `get_num_params()`; the token
    /// embedding counts once, as the head shares it).
    pub fn parameters_without_positions(&self) -> i64 {
        let all: usize = self.vs.trainable_variables().iter().map(Tensor::numel).sum();
        (all - self.wpe.numel()) as i64
    }

    /// Dropout with the configured probability in training, the identity otherwise.
    fn dropout(&self, xs: Tensor, train: bool) -> Tensor {
        if train && self.config.dropout > 0.0 {
            xs.dropout(self.config.dropout, true)
        } else {
            xs
        }
    }

    /// Token plus position embeddings of `inputs` [B, T], then dropout: [B, T, width].
    fn embed(&self, inputs: &Tensor, train: bool) -> Tensor {
        let t = inputs.size().last().copied().unwrap_or(0);
        assert!(
            t <= self.config.context,
            "GPT input of {t} tokens is longer than the context of {}",
            self.config.context
        );
        let positions = Tensor::arange(t, (Kind::Int64, inputs.device()));
        let tokens = Tensor::embedding(&self.wte, inputs, -1, false, false);
        self.dropout(tokens + Tensor::embedding(&self.wpe, &positions, -1, false, false), train)
    }

    /// LayerNorm over the last dimension with `weight` and no bias.
    fn layer_norm(&self, xs: &Tensor, weight: &Tensor) -> Tensor {
        xs.layer_norm([self.config.width], Some(weight), None::<&Tensor>, LAYER_NORM_EPS, true)
    }

    /// `residual + dropout(branch)`, the end of each residual branch.
    fn residual_add(&self, residual: &Tensor, branch: &Tensor, train: bool) -> Tensor {
        if !train || self.config.dropout == 0.0 {
            return residual + branch;
        }
        match self.fusion.as_ref().and_then(|f| f.residual_dropout.as_ref()) {
            Some(f) => call(f, &[residual, branch]),
            None => residual + branch.dropout(self.config.dropout, true),
        }
    }

    /// Causal self-attention of `xs` [B, T, width] (already normalised), before its output
    /// projection: [B, T, width].
    fn attention(&self, block: &Block, xs: &Tensor, train: bool) -> Tensor {
        let (b, t, w) = (xs.size()[0], xs.size()[1], self.config.width);
        let heads = self.config.heads;
        let head_dim = w / heads;
        let qkv = self.project(xs, &block.c_attn).split(w, 2);
        let [q, k, v] = [&qkv[0], &qkv[1], &qkv[2]].map(|m| m.view([b, t, heads, head_dim]).transpose(1, 2));
        let p = if train { self.config.dropout } else { 0.0 };
        let ys = match self.options.attention {
            AttentionKernel::Explicit => {
                let scores = q.matmul(&k.transpose(-2, -1)) * (1.0 / (head_dim as f64).sqrt());
                let allowed = self.causal_mask.slice(0, 0, t, 1).slice(1, 0, t, 1);
                let scores = scores.masked_fill(&allowed.logical_not(), f64::NEG_INFINITY);
                let weights = scores.softmax(-1, Kind::Float).to_kind(q.kind());
                self.dropout(weights, train).matmul(&v)
            }
            AttentionKernel::ScaledDotProduct => {
                Tensor::scaled_dot_product_attention(&q, &k, &v, None::<Tensor>, p, true, None, false)
            }
        };
        ys.transpose(1, 2).contiguous().view([b, t, w])
    }

    /// `xs · weightᵀ` for one of a block's projections: an fp8 linear under `fp8-matmul`, else a
    /// plain matmul.
    fn project(&self, xs: &Tensor, weight: &Tensor) -> Tensor {
        match self.options.fp8 {
            Some(gemm) => fp8::linear(xs, weight, gemm).unwrap_or_else(|e| panic!("{e}")),
            None => xs.linear(weight, None::<Tensor>),
        }
    }

    /// One decoder block: `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`, each branch with residual
    /// dropout.
    fn block(&self, block: &Block, xs: &Tensor, train: bool) -> Tensor {
        let attended = self.attention(block, &self.layer_norm(xs, &block.ln_1), train);
        let xs = self.residual_add(xs, &self.project(&attended, &block.attn_proj), train);
        let hidden = self.project(&self.layer_norm(&xs, &block.ln_2), &block.c_fc);
        let hidden = match &self.fusion {
            Some(f) => call(&f.gelu, &[&hidden]),
            None => hidden.gelu("none"),
        };
        self.residual_add(&xs, &self.project(&hidden, &block.mlp_proj), train)
    }

    /// The final LayerNorm and the tied head: logits [B, T, vocab].
    fn head(&self, xs: &Tensor) -> Tensor {
        self.layer_norm(xs, &self.ln_f).linear(&self.wte, None::<Tensor>)
    }
}

impl Workload for Gpt {
    fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    fn var_store_mut(&mut self) -> &mut nn::VarStore {
        &mut self.vs
    }

    /// Dropout draws masks in training when its rate is above 0.
    fn draws_random_numbers(&self, train: bool) -> bool {
        train && self.config.dropout > 0.0
    }

    /// Logits [B, T, vocab] of token ids `inputs` [B, T] (int64, T at most the context; longer
    /// inputs panic).
    fn forward(&self, inputs: &Tensor, train: bool) -> Tensor {
        let xs = self.blocks.iter().fold(self.embed(inputs, train), |xs, b| self.block(b, &xs, train));
        self.head(&xs)
    }

    /// One segment per block.
    fn segments(&self) -> usize {
        self.blocks.len()
    }

    /// Block `k`, preceded by the embeddings for `k = 0` and followed by the final LayerNorm and
    /// the head for the last block.
    fn forward_segment(&self, k: usize, xs: &Tensor, train: bool) -> Tensor {
        let last = self.segments() - 1;
        assert!(k <= last, "segment {k} of a GPT with {} segments", last + 1);
        let xs = match k {
            0 => self.block(&self.blocks[0], &self.embed(xs, train), train),
            _ => self.block(&self.blocks[k], xs, train),
        };
        if k == last {
            self.head(&xs)
        } else {
            xs
        }
    }

    /// Mean cross-entropy over every position of `outputs` [B, T, vocab] against `targets` [B, T].
    fn loss(&self, outputs: &Tensor, targets: &Tensor) -> Tensor {
        outputs.reshape([-1, self.config.vocab_size]).cross_entropy_for_logits(&targets.reshape([-1]))
    }

    /// Number of positions whose most likely next token is the target.
    fn correct(&self, outputs: &Tensor, targets: &Tensor) -> Tensor {
        outputs.argmax(-1, false).reshape([-1]).eq_tensor(&targets.reshape([-1])).sum(Kind::Int64)
    }

    /// Forward FLOPs per token, 2·N + 4·layers·width·context (one third of nanoGPT's and PaLM's
    /// training estimate 6·N + 12·layers·width·context, N = [`Gpt::parameters_without_positions`]).
    fn forward_flops_per_sample(&self) -> f64 {
        let c = &self.config;
        2.0 * self.parameters_without_positions() as f64 + 4.0 * (c.layers * c.width * c.context) as f64
    }

    /// `explicit` for attention written out; otherwise the backend PyTorch's dispatcher picks
    /// (`torch._fused_sdp_choice`) for queries, keys and values shaped and typed as a training
    /// step's (under `fp8` without autocast, bf16: the fp8 linear's output), with the training
    /// dropout and a causal mask.
    fn attention_backend(&self, kind: Kind, batch_size: usize) -> Result<Option<AttentionBackend>, Error> {
        if self.options.attention == AttentionKernel::Explicit {
            return Ok(Some(AttentionBackend::Explicit));
        }
        let kind = if self.options.fp8.is_some() && kind == Kind::Float { Kind::BFloat16 } else { kind };
        sdpa_backend(&self.config, batch_size, kind, self.vs.device()).map(Some)
    }

    /// Each block's attention and MLP matrices; the token embedding (which the head shares), the
    /// position embedding and the LayerNorm gains are left out.
    fn hidden_weights(&self) -> Vec<Tensor> {
        let matrices = self.blocks.iter().flat_map(|b| [&b.c_attn, &b.attn_proj, &b.c_fc, &b.mlp_proj]);
        matrices.map(Tensor::shallow_clone).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::adam::{Adam, AdamConfig};
    use crate::optim::Optimizer;
    use crate::test_support::{seeded, with_sdp_switches};
    use crate::train::checkpoint::checkpointed_forward_backward;
    use crate::train::LossScale;

    /// A small config for the comparison tests.
    fn small(layers: i64, dropout: f64) -> GptConfig {
        GptConfig { vocab_size: 11, context: 16, layers, heads: 4, width: 32, dropout }
    }

    fn options(attention: AttentionKernel, jit_fusion: bool) -> GptOptions {
        GptOptions { attention, jit_fusion, fp8: None }
    }

    /// A model built right after seeding (equal seeds give equal weights) and random token ids
    /// [batch, t] drawn after it.
    fn build(config: GptConfig, options: GptOptions, batch: i64, t: i64) -> (Gpt, Tensor) {
        seeded(0, || {
            let model = Gpt::new(config, options, Device::Cpu).unwrap();
            let inputs = Tensor::randint(config.vocab_size, [batch, t], (Kind::Int64, Device::Cpu));
            (model, inputs)
        })
    }

    /// Runs `f` with every SDPA backend allowed, no other test's forced switches in between: a
    /// test that runs SDPA with the default switches must not race one that forces a backend.
    /// `f` may seed (the switches' lock is always taken before the generator's).
    fn every_backend<T>(f: impl FnOnce() -> T) -> T {
        with_sdp_switches(SdpEnabled::ALL, f)
    }

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
        (a - b).abs().max().double_value(&[])
    }

    /// On a CPU, PyTorch 2.11 runs SDPA as its flash kernel unless dropout is on, which that
    /// kernel does not support there (sdp_utils_cpp.cpp, `check_for_dropout`): then math.
    #[test]
    fn the_attention_backend_is_what_sdpa_dispatches_to() {
        let backend = |attention, dropout| {
            let model = Gpt::new(small(1, dropout), options(attention, false), Device::Cpu).unwrap();
            with_sdp_switches(SdpEnabled::ALL, || model.attention_backend(Kind::Float, 2).unwrap())
        };
        assert_eq!(backend(AttentionKernel::Explicit, 0.0), Some(AttentionBackend::Explicit));
        assert_eq!(backend(AttentionKernel::ScaledDotProduct, 0.0), Some(AttentionBackend::FlashAttention));
        assert_eq!(backend(AttentionKernel::ScaledDotProduct, 0.2), Some(AttentionBackend::Math));
        assert!(AttentionBackend::from_sdp_choice(-1).unwrap_err().to_string().contains("no backend"));
        assert_eq!(serde_json::to_string(&AttentionBackend::CudnnAttention).unwrap(), "\"cudnn-attention\"");
    }

    /// The backends a CPU build of PyTorch 2.11 can run, forced one at a time, compute what the
    /// written-out attention does, and the dispatcher names the forced one.
    #[test]
    fn each_cpu_backend_forced_computes_the_written_out_attention() {
        let config = small(2, 0.0);
        let (explicit, inputs) = build(config, options(AttentionKernel::Explicit, false), 2, 16);
        let (fused, _) = build(config, options(AttentionKernel::ScaledDotProduct, false), 2, 16);
        let expected = explicit.forward(&inputs, true);
        for forced in [AttentionBackend::FlashAttention, AttentionBackend::Math] {
            let switches = sdp_switches(Some(forced)).unwrap();
            let (ran, logits) = with_sdp_switches(switches, || {
                assert_eq!(sdp_enabled(), switches);
                (fused.attention_backend(Kind::Float, 2).unwrap(), fused.forward(&inputs, true))
            });
            assert_eq!(ran, Some(forced));
            assert!(
                max_abs_diff(&expected, &logits) < 1e-5,
                "{forced:?}: {}",
                max_abs_diff(&expected, &logits)
            );
        }
        assert_eq!(sdp_switches(None).unwrap(), SdpEnabled::ALL);
        assert!(sdp_switches(Some(AttentionBackend::Explicit)).is_err());
    }

    /// The CPU flash kernel has no dropout: forced, the dispatcher finds no kernel, and says which
    /// backends were allowed.
    #[test]
    fn a_forced_backend_that_cannot_run_says_so() {
        let switches = sdp_switches(Some(AttentionBackend::FlashAttention)).unwrap();
        let err = with_sdp_switches(switches, || sdpa_backend(&small(1, 0.2), 2, Kind::Float, Device::Cpu))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no attention kernel") && err.contains("allowed (flash)"), "{err}");
    }

    #[test]
    fn hidden_weights_are_the_attention_and_mlp_matrices_only() {
        let (model, _) = build(small(2, 0.0), options(AttentionKernel::Explicit, false), 1, 4);
        let (hidden, rest) = crate::workloads::split_hidden_weights(&model);
        let hidden_names = crate::workloads::variable_names(&model, &hidden);
        let expected: Vec<String> = (0..2)
            .flat_map(|i| {
                ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]
                    .map(|layer| format!("transformer.h.{i}.{layer}.weight"))
            })
            .collect();
        let mut expected = expected;
        expected.sort();
        assert_eq!(hidden_names, expected);
        let mut rest_expected: Vec<String> =
            ["transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight"]
                .into_iter()
                .map(str::to_owned)
                .chain(
                    (0..2).flat_map(|i| ["ln_1", "ln_2"].map(|ln| format!("transformer.h.{i}.{ln}.weight"))),
                )
                .collect();
        rest_expected.sort();
        assert_eq!(crate::workloads::variable_names(&model, &rest), rest_expected);
    }

    #[test]
    fn shakespeare_has_nanogpts_parameter_count() {
        let model = seeded(0, || {
            Gpt::new(GptConfig::shakespeare(65), options(AttentionKernel::Explicit, false), Device::Cpu)
        })
        .unwrap();
        // nanoGPT prints "number of parameters: 10.65M" for shakespeare-char.
        assert_eq!(model.parameters_without_positions(), 10_646_784);
        let vars = model.var_store().variables();
        assert_eq!(vars["transformer.wpe.weight"].size(), [256, 384]);
        assert_eq!(vars.len(), 2 + 6 * 6 + 1, "wte, wpe, six weights per block, ln_f");
        assert!(!vars.contains_key("lm_head.weight"), "the head is tied to wte");
        let flops = model.forward_flops_per_sample();
        assert_eq!(flops, 2.0 * 10_646_784.0 + 4.0 * 6.0 * 384.0 * 256.0);
        // The quick profile's GPT: 2 × (12·128² + 2·128) + 128 + 65·128.
        let mini = seeded(0, || {
            Gpt::new(GptConfig::mini(65), options(AttentionKernel::Explicit, false), Device::Cpu)
        });
        assert_eq!(mini.unwrap().parameters_without_positions(), 402_176);
    }

    #[test]
    fn initialisation_follows_nanogpt() {
        let (model, _) = build(small(4, 0.0), options(AttentionKernel::Explicit, false), 1, 1);
        let vars = model.var_store().variables();
        let std = |name: &str| vars[name].std(true).double_value(&[]);
        assert!((std("transformer.h.1.mlp.c_fc.weight") - 0.02).abs() < 0.002);
        let proj = 0.02 / 8f64.sqrt();
        assert!((std("transformer.h.3.mlp.c_proj.weight") - proj).abs() < 0.0005);
        assert!((std("transformer.h.0.attn.c_proj.weight") - proj).abs() < 0.001);
        assert!(vars["transformer.ln_f.weight"].eq(1.0).all().int64_value(&[]) == 1);
        assert_eq!(vars["transformer.h.2.attn.c_attn.weight"].size(), [96, 32]);
    }

    #[test]
    fn both_attention_paths_agree() {
        every_backend(|| {
            let config = small(2, 0.0);
            let (explicit, inputs) = build(config, options(AttentionKernel::Explicit, false), 3, 16);
            let (fused, _) = build(config, options(AttentionKernel::ScaledDotProduct, false), 3, 16);
            for train in [false, true] {
                let (a, b) = (explicit.forward(&inputs, train), fused.forward(&inputs, train));
                assert_eq!(a.size(), [3, 16, 11]);
                assert!(max_abs_diff(&a, &b) < 1e-5, "train {train}: {}", max_abs_diff(&a, &b));
            }
            // A shorter sequence uses a corner of the mask.
            let short = inputs.slice(1, 0, 5, 1);
            assert!(max_abs_diff(&explicit.forward(&short, false), &fused.forward(&short, false)) < 1e-5);
        })
    }

    #[test]
    fn no_position_sees_the_future() {
        every_backend(|| {
            for attention in [AttentionKernel::Explicit, AttentionKernel::ScaledDotProduct] {
                let (model, inputs) = build(small(2, 0.0), options(attention, false), 2, 16);
                let logits = model.forward(&inputs, false);
                for t in [1, 7, 15] {
                    let changed = inputs.copy();
                    changed.slice(1, t, 16, 1).copy_(&((inputs.slice(1, t, 16, 1) + 1).remainder(11)));
                    assert!(!changed.equal(&inputs));
                    let other = model.forward(&changed, false);
                    let past = |l: &Tensor| l.slice(1, 0, t, 1);
                    assert!(max_abs_diff(&past(&logits), &past(&other)) < 1e-6, "{attention:?} t {t}");
                    assert!(max_abs_diff(&logits.slice(1, t, 16, 1), &other.slice(1, t, 16, 1)) > 1e-4);
                }
            }
        })
    }

    #[test]
    fn running_the_segments_in_order_is_the_forward_pass() {
        for layers in [1, 3] {
            let (model, inputs) = build(small(layers, 0.0), options(AttentionKernel::Explicit, false), 2, 9);
            assert_eq!(model.segments(), layers as usize);
            for train in [false, true] {
                let segmented = (0..model.segments())
                    .fold(inputs.shallow_clone(), |xs, k| model.forward_segment(k, &xs, train));
                assert!(segmented.equal(&model.forward(&inputs, train)), "{layers} layers, train {train}");
            }
        }
    }

    #[test]
    fn checkpointed_gradients_equal_plain_ones() {
        every_backend(|| {
            // With dropout off, and with dropout on: checkpointing replays the saved generator state,
            // so the recomputed segments draw the masks of the first forward pass.
            // The emulated fp8 linears recompute their scales and operands from the same inputs.
            let fp8 = GptOptions {
                fp8: Some(Fp8Gemm::Emulated),
                ..options(AttentionKernel::ScaledDotProduct, false)
            };
            for (dropout, options) in [
                (0.0, options(AttentionKernel::ScaledDotProduct, false)),
                (0.2, options(AttentionKernel::Explicit, false)),
                (0.2, fp8),
            ] {
                checkpointed_gradients_equal_plain_ones_with(small(3, dropout), options);
            }
        })
    }

    fn checkpointed_gradients_equal_plain_ones_with(config: GptConfig, options: GptOptions) {
        let gradients = |checkpointed: bool| {
            let (model, inputs) = build(config, options, 2, 16);
            assert_eq!(model.draws_random_numbers(true), config.dropout > 0.0);
            let targets = inputs.roll([-1], [1]);
            let loss = seeded(3, || {
                if checkpointed {
                    checkpointed_forward_backward(&model, &inputs, &targets, 0.0, &LossScale::NONE).unwrap().0
                } else {
                    let loss = model.loss(&model.forward(&inputs, true), &targets);
                    loss.backward();
                    loss
                }
            });
            let mut grads: Vec<_> =
                model.var_store().variables().into_iter().map(|(k, v)| (k, v.grad())).collect();
            grads.sort_by(|a, b| a.0.cmp(&b.0));
            (loss.double_value(&[]), grads)
        };
        let (plain_loss, plain) = gradients(false);
        let (checkpointed_loss, checkpointed) = gradients(true);
        assert!((plain_loss - checkpointed_loss).abs() < 1e-6, "dropout {}", config.dropout);
        assert_eq!(plain.len(), 2 + 3 * 6 + 1);
        for ((name, a), (_, b)) in plain.iter().zip(&checkpointed) {
            assert!(a.defined() && b.defined(), "{name} has no gradient");
            let scale = a.abs().max().double_value(&[]);
            assert!(scale > 0.0, "{name}");
            assert!(max_abs_diff(a, b) <= 1e-5 * scale, "{name}: {} of {scale}", max_abs_diff(a, b));
        }
    }

    #[test]
    fn fp8_projections_compute_the_plain_model_within_fp8_precision() {
        every_backend(|| {
            let plain = options(AttentionKernel::ScaledDotProduct, false);
            let fp8 = GptOptions { fp8: Some(Fp8Gemm::Emulated), ..plain };
            let (exact, inputs) = build(small(2, 0.0), plain, 2, 16);
            let (quantised, _) = build(small(2, 0.0), fp8, 2, 16);
            let targets = inputs.roll([-1], [1]);
            let (a, b) = (exact.forward(&inputs, true), quantised.forward(&inputs, true));
            assert_eq!(b.kind(), Kind::Float, "the residual stream and the head stay fp32");
            let relative = (&a - &b).norm().double_value(&[]) / a.norm().double_value(&[]);
            assert!(relative > 0.0 && relative < 0.02, "logits off by {relative} of their norm");
            let (la, lb) = (exact.loss(&a, &targets), quantised.loss(&b, &targets));
            (la.shallow_clone() + &lb).backward();
            assert!((la.double_value(&[]) - lb.double_value(&[])).abs() < 0.01);
            let vars = quantised.var_store().variables();
            let grad = &vars["transformer.h.1.mlp.c_fc.weight"].grad();
            assert_eq!(grad.kind(), Kind::Float);
            let exact_grad = exact.var_store().variables()["transformer.h.1.mlp.c_fc.weight"].grad();
            let relative =
                (grad - &exact_grad).norm().double_value(&[]) / exact_grad.norm().double_value(&[]);
            assert!(relative < 0.2, "c_fc's gradient off by {relative} of its norm");
        })
    }

    #[test]
    fn jit_fusion_computes_the_eager_math() {
        every_backend(|| {
            for attention in [AttentionKernel::Explicit, AttentionKernel::ScaledDotProduct] {
                let (eager, inputs) = build(small(2, 0.0), options(attention, false), 2, 10);
                let (fused, _) = build(small(2, 0.0), options(attention, true), 2, 10);
                for train in [false, true] {
                    let (a, b) = (eager.forward(&inputs, train), fused.forward(&inputs, train));
                    assert!(
                        max_abs_diff(&a, &b) < 1e-5,
                        "{attention:?} train {train}: {}",
                        max_abs_diff(&a, &b)
                    );
                }
            }
        })
    }

    #[test]
    fn jit_residual_dropout_draws_the_eager_masks() {
        every_backend(|| {
            let (eager, inputs) =
                build(small(2, 0.3), options(AttentionKernel::ScaledDotProduct, false), 2, 10);
            let (fused, _) = build(small(2, 0.3), options(AttentionKernel::ScaledDotProduct, true), 2, 10);
            let a = seeded(1, || eager.forward(&inputs, true));
            let b = seeded(1, || fused.forward(&inputs, true));
            assert!(max_abs_diff(&a, &b) < 1e-5, "{}", max_abs_diff(&a, &b));
            let c = seeded(2, || fused.forward(&inputs, true));
            assert!(max_abs_diff(&a, &c) > 1e-3, "other masks, other logits");
            assert!(
                fused.forward(&inputs, false).equal(&fused.forward(&inputs, false)),
                "no dropout in eval"
            );
        })
    }

    #[test]
    fn overfits_a_short_text() {
        every_backend(|| {
            let text = "The quick brown fox jumps over the lazy dog while the small cat sleeps by the \
                    warm fire. A bird sings on the old oak tree, and the river runs slowly to the \
                    sea. Every morning the baker bakes fresh bread, and the children walk to school \
                    along the narrow lane, laughing and telling stories about dragons and kings.";
            let mut vocab: Vec<char> = text.chars().collect();
            vocab.sort_unstable();
            vocab.dedup();
            let ids: Vec<i64> = text.chars().map(|c| vocab.binary_search(&c).unwrap() as i64).collect();
            let n = ids.len() as f64;
            let entropy: f64 = vocab
                .iter()
                .map(|&c| text.chars().filter(|&x| x == c).count() as f64 / n)
                .map(|p| -p * p.ln())
                .sum();
            let config = GptConfig {
                vocab_size: vocab.len() as i64,
                context: 32,
                layers: 2,
                heads: 4,
                width: 64,
                dropout: 0.0,
            };
            let (steps, batch) = (200, 16);
            let (model, starts) = seeded(0, || {
                let model =
                    Gpt::new(config, options(AttentionKernel::ScaledDotProduct, false), Device::Cpu).unwrap();
                let starts = Tensor::randint(
                    ids.len() as i64 - config.context,
                    [steps, batch, 1],
                    (Kind::Int64, Device::Cpu),
                );
                (model, starts)
            });
            let data = Tensor::from_slice(&ids);
            let offsets = Tensor::arange(config.context + 1, (Kind::Int64, Device::Cpu));
            let mut optimizer = Adam::adamw(model.var_store().trainable_variables(), AdamConfig::default());
            let mut loss = f64::INFINITY;
            for step in 0..steps {
                let windows =
                    data.index_select(0, &(starts.get(step) + &offsets).reshape([-1])).view([batch, -1]);
                let inputs = windows.slice(1, 0, config.context, 1);
                let targets = windows.slice(1, 1, config.context + 1, 1);
                optimizer.zero_grad(true);
                let l = model.loss(&model.forward(&inputs, true), &targets);
                l.backward();
                optimizer.step(3e-3).unwrap();
                loss = l.double_value(&[]);
            }
            assert!(loss < 0.5 * entropy, "final loss {loss}, unigram entropy {entropy}");
        })
    }
}
