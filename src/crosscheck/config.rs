//! A cross-check's flags as a checked configuration: the tricks and their workloads, the profile,
//! the device, the Python and the data.

use std::path::PathBuf;

use crate::bench::inputs::comparison_data;
use crate::bench::profile::{ProfileName, ProfileRequest};
use crate::crosscheck::PLAIN_TRICKS;
use crate::device::DeviceSpec;
use crate::error::Error;
use crate::measure::host_allocator::HostAllocator;
use crate::results::schema::profile_text;
use crate::tricks::Trick;
use crate::workloads::{Family, WorkloadId};

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct CrosscheckRequest {
    /// The tricks to check (empty: every trick the plain script writes).
    pub tricks: Vec<Trick>,
    /// The profile whose batch sizes, warm-up and window length both sources follow.
    pub profile: ProfileRequest,
    /// The device.
    pub device: DeviceSpec,
    /// Seed of the engine's weights and batches; the plain script's process of round r uses
    /// seed + r.
    pub seed: u64,
    /// Samples per step of every workload (`None`: the profile's).
    pub batch_size: Option<usize>,
    /// Rounds.
    pub rounds: usize,
    /// Pairs of windows per process.
    pub pairs: usize,
    /// Training steps per window (`None`: the profile's).
    pub steps_per_window: Option<usize>,
    /// The host allocator of every process.
    pub host_allocator: HostAllocator,
    /// The Python with torch (`None`: [`crate::engine::default_python`]).
    pub python: Option<PathBuf>,
    /// The trickbench binary, which runs the engine's cell processes.
    pub trickbench: PathBuf,
    /// CIFAR-10's folder.
    pub data: PathBuf,
    /// The GPT's text file.
    pub text: PathBuf,
    /// Output folder (`None`: `reports/runs/<time>-<profile>-crosscheck`).
    pub out: Option<PathBuf>,
    /// The command line, recorded in the results.
    pub command: Vec<String>,
}

/// A checked cross-check.
#[derive(Debug, Clone)]
pub struct CrosscheckConfig {
    /// What was asked.
    pub request: CrosscheckRequest,
    /// Each trick to check with its workload, ResNet-8's first.
    pub checks: Vec<(WorkloadId, Trick)>,
    /// The profile.
    pub profile: ProfileName,
    /// The resolved device.
    pub device: DeviceSpec,
    /// The Python with torch.
    pub python: PathBuf,
    /// CIFAR-10's folder, prepared.
    pub data_dir: PathBuf,
    /// The output folder.
    pub out: PathBuf,
}

impl CrosscheckConfig {
    /// Checks `request`, telling `note` what it chose for the user.
    pub fn new(request: CrosscheckRequest, note: &dyn Fn(&str)) -> Result<Self, Error> {
        let device = request.device.resolve().map_err(|e| e.context("--device"))?;
        if device.rehearsed().is_some() {
            return Err(Error::Invalid(format!(
                "--device {device}: a cross-check times real kernels on one device, and a rehearsal \
                 stands in for the GPU's; pass cpu or cuda"
            )));
        }
        let steps = request.steps_per_window.unwrap_or(1);
        for (flag, value) in
            [("--rounds", request.rounds), ("--pairs", request.pairs), ("--steps-per-window", steps)]
        {
            if value == 0 {
                return Err(Error::Invalid(format!("{flag} 0: must be at least 1")));
            }
        }
        if request.batch_size == Some(0) {
            return Err(Error::Invalid("--batch-size 0: must be at least 1".into()));
        }
        let (profile, reason) = request.profile.pick(device, tch::Cuda::is_available());
        if let Some(reason) = reason {
            note(&format!("note: {}", profile_text(profile.id(), Some(&reason))));
        }
        let checks = checks(&request.tricks)?;
        let families: Vec<Family> = checks.iter().map(|(w, _)| w.family()).collect();
        let instead = "check ResNet-8's tricks alone (--tricks)";
        let data_dir = comparison_data(&request.data, &request.text, &families, profile, instead, note)?;
        let out = request.out.clone().unwrap_or_else(|| {
            let started = chrono::Utc::now().format("%Y%m%d-%H%M%S");
            PathBuf::from("reports/runs").join(format!("{started}-{profile}-crosscheck"))
        });
        let python = request.python.clone().unwrap_or_else(crate::engine::default_python);
        Ok(CrosscheckConfig { request, checks, profile, device, python, data_dir, out })
    }

    /// Training steps per window, on both sources.
    pub fn steps_per_window(&self) -> usize {
        self.request
            .steps_per_window
            .unwrap_or_else(|| self.profile.settings(Family::CifarResnet).steps_per_window)
    }

    /// The batch size of `workload`'s checks.
    pub fn batch_size(&self, workload: WorkloadId) -> usize {
        self.request.batch_size.unwrap_or_else(|| self.profile.settings(workload.family()).batch_size)
    }
}

/// Each of `tricks` (all the plain script writes when empty) with the workload the plain script
/// writes it on, in the order of [`PLAIN_TRICKS`]; an error naming a trick it does not write.
fn checks(tricks: &[Trick]) -> Result<Vec<(WorkloadId, Trick)>, Error> {
    let written = || PLAIN_TRICKS.iter().flat_map(|(w, tricks)| tricks.iter().map(move |t| (*w, *t)));
    if let Some(missing) = tricks.iter().find(|t| !written().any(|(_, w)| w == **t)) {
        let listed: Vec<String> =
            PLAIN_TRICKS.iter().map(|(w, ts)| format!("{} on {}", trick_list(ts), w.id())).collect();
        return Err(Error::Invalid(format!(
            "--tricks {}: the plain script does not write it; it writes {}",
            missing.id(),
            listed.join(", and ")
        )));
    }
    Ok(written().filter(|(_, t)| tricks.is_empty() || tricks.contains(t)).collect())
}

/// The tricks' ids, comma-separated.
fn trick_list(tricks: &[Trick]) -> String {
    tricks.iter().map(|t| t.id()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_trick_the_plain_script_writes_is_checked_by_default_on_its_workload() {
        let all = checks(&[]).unwrap();
        assert_eq!(all.len(), 7);
        assert_eq!(all[0], (WorkloadId::Resnet8, Trick::ChannelsLast));
        assert!(all.contains(&(WorkloadId::GptMini, Trick::FlashAttention)));
        let asked = checks(&[Trick::JitFusion, Trick::ChannelsLast]).unwrap();
        assert_eq!(
            asked,
            vec![(WorkloadId::Resnet8, Trick::ChannelsLast), (WorkloadId::GptMini, Trick::JitFusion)]
        );
    }

    #[test]
    fn a_trick_the_plain_script_does_not_write_is_refused_naming_it_and_what_it_writes() {
        let message = checks(&[Trick::Amp]).unwrap_err().to_string();
        assert!(message.contains("--tricks amp"), "{message}");
        assert!(message.contains("channels-last"), "{message}");
        assert!(message.contains("on gpt-mini"), "{message}");
    }
}
