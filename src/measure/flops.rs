//! Model FLOPs utilisation: analytic FLOPs per sample ÷ measured time ÷ the device's peak.

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
}

/// Dense (no sparsity) peak throughput of a GPU, FLOP/s, from NVIDIA's datasheets.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Peak {
    /// Substring of the NVML device name that identifies the GPU.
    name: &'static str,
    fp32: f64,
    tf32: Option<f64>,
    half: f64,
}

/// Known peaks. Datasheets quote tensor-core figures "with sparsity"; these are the dense halves.
const PEAKS: [Peak; 8] = [
    Peak { name: "H200", fp32: 67e12, tf32: Some(494.5e12), half: 989.5e12 },
    Peak { name: "H100 PCIe", fp32: 51e12, tf32: Some(378e12), half: 756e12 },
    Peak { name: "H100", fp32: 67e12, tf32: Some(494.5e12), half: 989.5e12 },
    Peak { name: "A100", fp32: 19.5e12, tf32: Some(156e12), half: 312e12 },
    Peak { name: "L4", fp32: 30.3e12, tf32: Some(60e12), half: 121e12 },
    Peak { name: "A10", fp32: 31.2e12, tf32: Some(62.5e12), half: 125e12 },
    Peak { name: "V100", fp32: 15.7e12, tf32: None, half: 125e12 },
    Peak { name: "T4", fp32: 8.1e12, tf32: None, half: 65e12 },
];

/// The peak FLOP/s of the GPU called `gpu_name` at `precision`, or why it is unknown.
pub fn peak_flops_per_s(gpu_name: &str, precision: Precision) -> Result<f64, String> {
    let peak = PEAKS
        .iter()
        .find(|p| gpu_name.contains(p.name))
        .ok_or_else(|| format!("no peak FLOP/s on record for '{gpu_name}'"))?;
    match precision {
        Precision::Fp32 => Ok(peak.fp32),
        Precision::Half => Ok(peak.half),
        Precision::Tf32 => peak.tf32.ok_or_else(|| format!("'{gpu_name}' has no TF32 tensor cores")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_gpus_have_dense_peaks_and_unknown_ones_say_so() {
        assert_eq!(peak_flops_per_s("NVIDIA H200", Precision::Half), Ok(989.5e12));
        assert_eq!(peak_flops_per_s("NVIDIA H100 PCIe", Precision::Fp32), Ok(51e12));
        assert_eq!(peak_flops_per_s("NVIDIA H100 80GB HBM3", Precision::Tf32), Ok(494.5e12));
        assert!(peak_flops_per_s("Tesla V100-SXM2-16GB", Precision::Tf32).unwrap_err().contains("no TF32"));
        assert!(peak_flops_per_s("Intel Xeon", Precision::Fp32).unwrap_err().contains("no peak"));
    }
}
