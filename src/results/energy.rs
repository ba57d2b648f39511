//! The energy record of a cell process: what its GPU drew over the span of its timed work, and
//! how that was measured (`measure::energy` measures it).

use serde::{Deserialize, Serialize};

/// How a GPU's energy was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnergyMethod {
    /// NVML's cumulative energy counter (`nvmlDeviceGetTotalEnergyConsumption`, millijoules) read
    /// at the two ends of the span, each time with the device synchronised and no clock running.
    Counter,
    /// Board power read every 20 ms and integrated over the span, where the GPU has no energy
    /// counter.
    #[default]
    SampledPower,
}

/// Energy drawn by a process's GPU over its energy span: from right before its first timed
/// window to right after the last step the span covers. The span is the timed windows, the gaps
/// between them and, where they last less than `MIN_ENERGY_SPAN_S` (one second), untimed steps after the
/// last window that lengthen it to that.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Energy {
    /// Energy over the span, joules.
    pub joules: f64,
    /// Mean board power over the span, watts.
    pub mean_power_w: f64,
    /// Readings behind the figure: the counter's two (the span's ends), or the power samples.
    pub readings: usize,
    /// Length of the span, seconds (at least `MIN_ENERGY_SPAN_S` (one second); in files that predate
    /// `samples`, the timed windows' total (counter) or the timed region (sampled power)).
    pub interval_s: f64,
    /// How the energy was measured.
    pub method: EnergyMethod,
    /// The most the energy counter's steps can put `joules` off by, joules: its reading at each
    /// end of the span lags the work by up to one of its update periods, so the difference errs by
    /// up to one period's energy at the span's mean power. `None` for sampled power and in files
    /// that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantisation_j: Option<f64>,
    /// Samples this process's GPU processed over the span, timed or not (a DDP rank's own);
    /// `None` in files that predate it, where the process's `timed_samples` apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<usize>,
}
