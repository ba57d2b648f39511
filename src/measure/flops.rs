//! Model FLOPs utilisation: analytic FLOPs per sample ÷ measured time ÷ the device's peak.

pub use crate::vocabulary::Precision;

use crate::ffi::Tf32;

/// What decides the arithmetic most of a training step's FLOPs run in, as either engine sets it
/// up: one rule ([`StepArithmetic::precision`]) for both, so their MFUs divide by the same peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepArithmetic {
    /// Whether the model's linear layers multiply in fp8 (`fp8-matmul`).
    pub fp8_linears: bool,
    /// Whether the step runs under fp16 or bf16 autocast (`amp`, `amp-bf16`).
    pub autocast: bool,
    /// Where TF32 is allowed: in cuBLAS's matmuls and in cuDNN's convolutions.
    pub tf32: Tf32,
    /// Whether the step runs on a CUDA device.
    pub on_cuda: bool,
    /// Whether most of the model's FLOPs are convolutions (cuDNN's work, else cuBLAS's).
    pub mostly_convolutions: bool,
}

impl StepArithmetic {
    /// The arithmetic most of the step's FLOPs run in: fp8 for a model of linear layers under
    /// `fp8-matmul`; half precision under autocast; on a GPU TF32 where the library doing most of
    /// the work allows it; else fp32.
    pub fn precision(self) -> Precision {
        let tf32 = if self.mostly_convolutions { self.tf32.cudnn } else { self.tf32.matmul };
        if self.fp8_linears && !self.mostly_convolutions {
            Precision::Fp8
        } else if self.autocast {
            Precision::Half
        } else if tf32 && self.on_cuda {
            Precision::Tf32
        } else {
            Precision::Fp32
        }
    }
}

/// One GPU model's dense (no sparsity) peaks, FLOP/s, from NVIDIA's datasheets, and how NVML names
/// it. Datasheets quote tensor-core figures "with sparsity"; these are the dense halves.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Peak {
    /// Words the NVML device name contains, all of them (split at spaces and hyphens).
    words: &'static [&'static str],
    /// Words the name must not contain (an NVL or PCIe part is not the SXM part).
    not: &'static [&'static str],
    fp32: f64,
    tf32: Option<f64>,
    half: f64,
    fp8: Option<f64>,
}

/// Known peaks, the more specific rows of a family first.
const PEAKS: [Peak; 12] = [
    // H200 NVL (NVML "NVIDIA H200 NVL"), H200 datasheet: 60 TF fp32, 835/1,671/3,341 TF sparse
    // TF32/BF16/FP8.
    Peak {
        words: &["H200", "NVL"],
        not: &[],
        fp32: 60e12,
        tf32: Some(417.5e12),
        half: 835.5e12,
        fp8: Some(1670.5e12),
    },
    // H200 SXM (NVML "NVIDIA H200"), H200 datasheet: 67 TF fp32, 989/1,979/3,958 TF sparse.
    Peak {
        words: &["H200"],
        not: &["NVL"],
        fp32: 67e12,
        tf32: Some(494.5e12),
        half: 989.5e12,
        fp8: Some(1979e12),
    },
    // H100 NVL (NVML "NVIDIA H100 NVL"), H100 datasheet: 60 TF fp32, 835/1,671/3,341 TF sparse.
    Peak {
        words: &["H100", "NVL"],
        not: &[],
        fp32: 60e12,
        tf32: Some(417.5e12),
        half: 835.5e12,
        fp8: Some(1670.5e12),
    },
    // H100 PCIe (NVML "NVIDIA H100 PCIe"), H100 datasheet: 51 TF fp32, 756/1,513/3,026 TF sparse.
    Peak {
        words: &["H100", "PCIe"],
        not: &[],
        fp32: 51e12,
        tf32: Some(378e12),
        half: 756.5e12,
        fp8: Some(1513e12),
    },
    // H100 SXM (NVML "NVIDIA H100 80GB HBM3"), H100 datasheet: 67 TF fp32, 989/1,979/3,958 TF
    // sparse.
    Peak {
        words: &["H100"],
        not: &["NVL", "PCIe"],
        fp32: 67e12,
        tf32: Some(494.5e12),
        half: 989.5e12,
        fp8: Some(1979e12),
    },
    // A100 SXM and PCIe (40 and 80 GB), A100 datasheet: 19.5 TF fp32, 156/312 TF dense TF32/BF16;
    // no fp8.
    Peak { words: &["A100"], not: &[], fp32: 19.5e12, tf32: Some(156e12), half: 312e12, fp8: None },
    // L40S, L40S datasheet: 91.6 TF fp32, 366/733/1,466 TF sparse (BF16 dense 362.05).
    Peak {
        words: &["L40S"],
        not: &[],
        fp32: 91.6e12,
        tf32: Some(183e12),
        half: 362.05e12,
        fp8: Some(733e12),
    },
    // L4, L4 datasheet: 30.3 TF fp32, 120/242/485 TF sparse.
    Peak { words: &["L4"], not: &[], fp32: 30.3e12, tf32: Some(60e12), half: 121e12, fp8: Some(242.5e12) },
    // A10, A10 datasheet: 31.2 TF fp32, 62.5/125 TF dense TF32/BF16.
    Peak { words: &["A10"], not: &[], fp32: 31.2e12, tf32: Some(62.5e12), half: 125e12, fp8: None },
    // V100 PCIe, V100 datasheet: 14 TF fp32, 112 TF fp16 tensor.
    Peak { words: &["V100", "PCIE"], not: &[], fp32: 14e12, tf32: None, half: 112e12, fp8: None },
    // V100 SXM2 (NVML "Tesla V100-SXM2-16GB"), V100 datasheet: 15.7 TF fp32, 125 TF fp16 tensor.
    Peak { words: &["V100"], not: &["PCIE"], fp32: 15.7e12, tf32: None, half: 125e12, fp8: None },
    // T4, T4 datasheet: 8.1 TF fp32, 65 TF fp16 tensor.
    Peak { words: &["T4"], not: &[], fp32: 8.1e12, tf32: None, half: 65e12, fp8: None },
];

/// Whether the NVML name `gpu_name` is the model `peak` describes: it holds each of the row's
/// words and none of its excluded words, compared whole and ignoring case.
fn names(peak: &Peak, gpu_name: &str) -> bool {
    let words: Vec<String> = gpu_name.split([' ', '-', '_']).map(str::to_ascii_uppercase).collect();
    let has = |w: &&str| words.iter().any(|x| x == &w.to_ascii_uppercase());
    peak.words.iter().all(has) && !peak.not.iter().any(has)
}

/// The dense peak FLOP/s of the GPU called `gpu_name` (as NVML names it) at `precision`, or why it
/// is unknown.
pub fn peak_flops_per_s(gpu_name: &str, precision: Precision) -> Result<f64, String> {
    let peak = PEAKS
        .iter()
        .find(|p| names(p, gpu_name))
        .ok_or_else(|| format!("no peak FLOP/s on record for '{gpu_name}'"))?;
    match precision {
        Precision::Fp32 => Ok(peak.fp32),
        Precision::Half => Ok(peak.half),
        Precision::Tf32 => peak.tf32.ok_or_else(|| format!("'{gpu_name}' has no TF32 tensor cores")),
        Precision::Fp8 => peak.fp8.ok_or_else(|| format!("'{gpu_name}' has no fp8 tensor cores")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_model_gets_its_own_row_and_an_nvl_part_never_the_sxm_one() {
        let half = |name| peak_flops_per_s(name, Precision::Half);
        assert_eq!(half("NVIDIA H200"), Ok(989.5e12), "H200 SXM");
        assert_eq!(half("NVIDIA H200 NVL"), Ok(835.5e12));
        assert_eq!(half("NVIDIA H100 80GB HBM3"), Ok(989.5e12), "H100 SXM");
        assert_eq!(half("NVIDIA H100 NVL"), Ok(835.5e12));
        assert_eq!(half("NVIDIA H100 PCIe"), Ok(756.5e12));
        assert_eq!(half("NVIDIA A100-SXM4-80GB"), Ok(312e12));
        assert_eq!(half("NVIDIA A10"), Ok(125e12), "A10 is not A100");
        assert_eq!(half("NVIDIA L4"), Ok(121e12), "L4 is not L40S");
        assert_eq!(half("NVIDIA L40S"), Ok(362.05e12));
        assert_eq!(peak_flops_per_s("Tesla V100-PCIE-32GB", Precision::Fp32), Ok(14e12));
        assert_eq!(peak_flops_per_s("Tesla V100-SXM2-16GB", Precision::Fp32), Ok(15.7e12));
    }

    #[test]
    fn every_dtype_has_its_peak_or_says_why_not() {
        let h200 = |p| peak_flops_per_s("NVIDIA H200", p);
        assert_eq!(
            [h200(Precision::Fp32), h200(Precision::Tf32), h200(Precision::Half), h200(Precision::Fp8)],
            [Ok(67e12), Ok(494.5e12), Ok(989.5e12), Ok(1979e12)]
        );
        assert!(peak_flops_per_s("Tesla V100-SXM2-16GB", Precision::Tf32).unwrap_err().contains("no TF32"));
        assert!(peak_flops_per_s("NVIDIA A100 80GB PCIe", Precision::Fp8).unwrap_err().contains("no fp8"));
        assert!(peak_flops_per_s("Intel Xeon", Precision::Fp32).unwrap_err().contains("no peak"));
    }
}
