//! A parity comparison's configuration: what the command line asks for, and the checked
//! comparison it resolves to (device, profile, workloads, data, output folder).

use std::path::PathBuf;

use crate::bench::config::WorkloadChoice;
use crate::bench::inputs::comparison_data;
use crate::bench::profile::{ProfileName, ProfileRequest};
use crate::device::DeviceSpec;
use crate::error::Error;
use crate::parity::side::{CompileMode, TimingPlan};
use crate::parity::stack::{StackRequest, StackSource};
use crate::results::schema::profile_text;
use crate::workloads::{Family, WorkloadId};

/// A comparison as asked for, before anything is checked.
#[derive(Debug, Clone)]
pub struct ParityRequest {
    /// The workload choices, in order (repeats are dropped).
    pub workloads: Vec<WorkloadChoice>,
    /// The profile asked for (`auto` picks by the device).
    pub profile: ProfileRequest,
    /// The device asked for.
    pub device: DeviceSpec,
    /// Seed of weights, data order and augmentation.
    pub seed: u64,
    /// Samples per step (`None`: the profile's).
    pub batch_size: Option<usize>,
    /// Training steps whose losses are compared.
    pub steps: usize,
    /// Timing rounds (0: losses only).
    pub rounds: usize,
    /// How each timing process times its steps.
    pub timing: TimingPlan,
    /// The `torch.compile` modes of the compiled PyTorch sides, in order (repeats are dropped;
    /// empty: eager PyTorch only).
    pub compile: Vec<CompileMode>,
    /// trickbench's stacked side: the tricks named, or the results files to choose them from
    /// (`None`: no stacked side).
    pub stack: Option<StackRequest>,
    /// The Python interpreter with PyTorch (`None`: the checkout's `.venv/bin/python` when
    /// present, else `python3`).
    pub python: Option<PathBuf>,
    /// The trickbench binary, which runs trickbench's side.
    pub trickbench: PathBuf,
    /// The CIFAR-10 directory.
    pub data: PathBuf,
    /// The GPTs' text file.
    pub text: PathBuf,
    /// Output directory (`None`: `reports/runs/<time>-<profile>-parity`).
    pub out: Option<PathBuf>,
    /// The command line, as recorded in the report.
    pub command: Vec<String>,
}

/// A checked comparison: the request with its device, profile, workloads, interpreter, data and
/// output folder resolved.
#[derive(Debug, Clone)]
pub struct ParityConfig {
    /// What was asked for.
    pub request: ParityRequest,
    /// The workloads, in order, without repeats.
    pub workloads: Vec<WorkloadId>,
    /// The profile whose baseline cells are exported.
    pub profile: ProfileName,
    /// The device both sides run on, resolved.
    pub device: DeviceSpec,
    /// The Python interpreter with PyTorch.
    pub python: PathBuf,
    /// The CIFAR-10 directory, checked.
    pub data_dir: PathBuf,
    /// Output directory.
    pub out: PathBuf,
    /// Where trickbench's stacked side takes its tricks from, checked (`None`: no stacked side).
    pub stack: Option<StackSource>,
}

impl ParityConfig {
    /// Checks `request` and resolves what it leaves open, telling the user through `note` how
    /// the profile and the data were chosen; a flag or value that cannot work is refused, named.
    pub fn new(request: ParityRequest, note: &dyn Fn(&str)) -> Result<Self, Error> {
        let device = request.device.resolve().map_err(|e| e.context("--device"))?;
        if let Some(gpu) = device.rehearsed() {
            return Err(Error::Invalid(format!(
                "--device {device}: parity compares trickbench's numbers with PyTorch's on one real device; a                  rehearsal of {} stands in for the GPU's kernels, so it has none to compare (run --device {device}                  rehearses a run's cases)",
                gpu.id()
            )));
        }
        let (profile, reason) = request.profile.pick(device, tch::Cuda::is_available());
        if let Some(reason) = reason {
            note(&format!("note: {}", profile_text(profile.id(), Some(&reason))));
        }
        check_counts(&request)?;
        let stack = request.stack.as_ref().map(|asked| StackSource::new(asked, device)).transpose()?;
        let mut request = request;
        let mut modes = Vec::new();
        for mode in request.compile.drain(..) {
            if !modes.contains(&mode) {
                modes.push(mode);
            }
        }
        request.compile = modes;
        let workloads = resolve_workloads(&request.workloads, profile);
        let families: Vec<Family> = workloads.iter().map(|w| w.family()).collect();
        let instead = "pass --workload resnet";
        let data_dir = comparison_data(&request.data, &request.text, &families, profile, instead, note)?;
        let started = chrono::Utc::now();
        let out = request.out.clone().unwrap_or_else(|| {
            PathBuf::from("reports/runs")
                .join(format!("{}-{profile}-parity", started.format("%Y%m%d-%H%M%S")))
        });
        let python = request.python.clone().unwrap_or_else(crate::engine::default_python);
        Ok(ParityConfig { request, workloads, profile, device, python, data_dir, out, stack })
    }
}

/// Refuses a count of zero where at least one is needed, naming its flag.
fn check_counts(request: &ParityRequest) -> Result<(), Error> {
    let counts = [
        ("--steps", request.steps),
        ("--windows", request.timing.windows),
        ("--steps-per-window", request.timing.steps_per_window),
        ("--batch-size", request.batch_size.unwrap_or(1)),
    ];
    match counts.iter().find(|(_, value)| *value == 0) {
        Some((flag, _)) => Err(Error::Invalid(format!("{flag} must be at least 1"))),
        None => Ok(()),
    }
}

/// The workloads of `choices`, in order and without repeats.
fn resolve_workloads(choices: &[WorkloadChoice], profile: ProfileName) -> Vec<WorkloadId> {
    let mut workloads = Vec::new();
    for workload in choices.iter().flat_map(|choice| choice.workloads(profile)) {
        if !workloads.contains(&workload) {
            workloads.push(workload);
        }
    }
    workloads
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ParityRequest {
        ParityRequest {
            workloads: vec![WorkloadChoice::Family(Family::CharGpt)],
            profile: ProfileRequest::Named(ProfileName::Smoke),
            device: DeviceSpec::Cpu,
            seed: 0,
            batch_size: None,
            steps: 2,
            rounds: 0,
            timing: TimingPlan { warmup_steps: 1, windows: 1, steps_per_window: 1 },
            compile: Vec::new(),
            stack: None,
            python: Some(PathBuf::from("python3")),
            trickbench: PathBuf::from("trickbench"),
            data: PathBuf::from("no-such-data"),
            text: PathBuf::from("no-such-text.txt"),
            out: Some(PathBuf::from("out")),
            command: Vec::new(),
        }
    }

    #[test]
    fn zero_counts_and_a_missing_text_are_refused_by_their_flags() {
        let quiet = |_: &str| {};
        for (flag, change) in [
            ("--steps", (|r: &mut ParityRequest| r.steps = 0) as fn(&mut ParityRequest)),
            ("--windows", |r| r.timing.windows = 0),
            ("--steps-per-window", |r| r.timing.steps_per_window = 0),
            ("--batch-size", |r| r.batch_size = Some(0)),
        ] {
            let mut asked = request();
            change(&mut asked);
            let error = ParityConfig::new(asked, &quiet).unwrap_err().to_string();
            assert_eq!(error, format!("{flag} must be at least 1"));
        }
        let error = ParityConfig::new(request(), &quiet).unwrap_err().to_string();
        assert!(error.starts_with("--text no-such-text.txt: no such file"), "{error}");
    }

    #[test]
    fn repeated_workloads_are_compared_once_in_the_order_asked() {
        let choices = [
            WorkloadChoice::Family(Family::CharGpt),
            WorkloadChoice::All,
            WorkloadChoice::Family(Family::CharGpt),
        ];
        let workloads = resolve_workloads(&choices, ProfileName::Smoke);
        let gpt = WorkloadChoice::Family(Family::CharGpt).workloads(ProfileName::Smoke);
        assert_eq!(workloads[0], gpt[0]);
        assert_eq!(workloads.len(), WorkloadChoice::All.workloads(ProfileName::Smoke).len());
    }
}
