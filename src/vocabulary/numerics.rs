//! The arithmetic a cell runs in, by name: the precision of its matmuls and convolutions, and the
//! kernel its attention ran as.

use serde::{Deserialize, Serialize};

/// The arithmetic a cell's matmuls and convolutions run in, which decides the relevant peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    /// IEEE fp32 on the CUDA cores.
    Fp32,
    /// TensorFloat-32 on tensor cores.
    Tf32,
    /// fp16 or bf16 on tensor cores.
    Half,
    /// fp8 (E4M3 or E5M2) on tensor cores.
    Fp8,
}

/// The kernel a GPT's attention runs as: written out, or the backend that
/// `scaled_dot_product_attention` dispatched to (numbered as `at::SDPBackend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttentionBackend {
    /// softmax(QKᵀ/√d + causal mask)·V written out op by op (`flash-attention` off).
    Explicit,
    /// SDPA's math (reference) implementation, the same ops behind one call.
    Math,
    /// FlashAttention.
    FlashAttention,
    /// Memory-efficient attention (xFormers' kernel).
    EfficientAttention,
    /// cuDNN's fused attention.
    CudnnAttention,
    /// A backend registered out of tree (PrivateUse1 devices).
    Overrideable,
}

impl AttentionBackend {
    /// The name in results and reports.
    pub fn id(self) -> &'static str {
        match self {
            AttentionBackend::Explicit => "explicit",
            AttentionBackend::Math => "math",
            AttentionBackend::FlashAttention => "flash-attention",
            AttentionBackend::EfficientAttention => "efficient-attention",
            AttentionBackend::CudnnAttention => "cudnn-attention",
            AttentionBackend::Overrideable => "overrideable",
        }
    }
}
