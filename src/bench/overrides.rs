//! Changes to a profile, from a profile file (`run --profile-file`) and from `run`'s flags: the
//! flags override the file, the file overrides the profile. Every value is checked, and a refused
//! one is named as it was given: the flag and its value, or the file, key and value.
//!
//! A profile file is TOML. Its top level holds the run-wide measurement protocol
//! (`warmup_steps`, `windows_per_process`, `max_windows_per_process`, `steps_per_window`,
//! `rounds`, `target_ci_half_width`, `cell_timeout_s`, `cpu_memory_budget_mib`,
//! `time_to_accuracy_seeds`) and workload settings for every family (`batch_size`,
//! `train_samples`, `test_samples` and a `[time_to_accuracy]` table); the `[resnet]` and `[gpt]`
//! tables (with `[resnet.time_to_accuracy]`, `[gpt.time_to_accuracy]`) hold one family's, which
//! override the top level's. The keys are the names results.json records.

use std::fmt::Display;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::bench::profile::{Profile, ProfileName};
use crate::error::Error;
use crate::results::schema::FamilySettings;
use crate::workloads::Family;

/// Where a set of overrides came from: what a refusal names.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum OverrideSource {
    /// `run`'s flags (`--rounds`, `--target`, …).
    #[default]
    Flags,
    /// A profile file.
    File(PathBuf),
}

/// Values that replace a profile's (`None`: the profile's), as a profile file lays them out.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileOverrides {
    /// Where these values came from.
    #[serde(skip)]
    pub source: OverrideSource,
    /// Untimed steps at the start of each cell process.
    pub warmup_steps: Option<usize>,
    /// Timed windows per cell process: the minimum, when `max_windows_per_process` is larger
    /// (it is raised to this when below).
    pub windows_per_process: Option<usize>,
    /// The most timed windows per process while its median's interval is wider than
    /// `target_ci_half_width`.
    pub max_windows_per_process: Option<usize>,
    /// Training steps (or evaluation batches) per timed window.
    pub steps_per_window: Option<usize>,
    /// Processes per throughput cell.
    pub rounds: Option<usize>,
    /// The precision asked of a median throughput: half its interval's width as a fraction of it.
    pub target_ci_half_width: Option<f64>,
    /// Wall-clock limit per cell process, seconds.
    pub cell_timeout_s: Option<f64>,
    /// Peak memory a cell may use on a CPU, MiB.
    pub cpu_memory_budget_mib: Option<u64>,
    /// Seeds per time-to-accuracy configuration.
    pub time_to_accuracy_seeds: Option<usize>,
    /// Samples per step of the throughput cells, every family.
    pub batch_size: Option<usize>,
    /// Training images used, every ResNet and the user's model's time to accuracy (the GPT trains
    /// on its whole training split).
    pub train_samples: Option<usize>,
    /// Held-out samples evaluated, every family: test images, or validation windows.
    pub test_samples: Option<usize>,
    /// Time-to-accuracy settings of every family.
    #[serde(default)]
    pub time_to_accuracy: TtaOverrides,
    /// The ResNets' own settings, over the top level's.
    #[serde(default)]
    pub resnet: FamilyOverrides,
    /// The GPTs' own settings, over the top level's.
    #[serde(default)]
    pub gpt: FamilyOverrides,
    /// The user's model's own settings (`run --model`), over the top level's.
    #[serde(default)]
    pub model: FamilyOverrides,
}

/// Values that replace one family's workload settings (`None`: as before).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilyOverrides {
    /// Samples per step of the throughput cells.
    pub batch_size: Option<usize>,
    /// Training images used (the ResNets, and the user's model's time to accuracy).
    pub train_samples: Option<usize>,
    /// Held-out samples evaluated.
    pub test_samples: Option<usize>,
    /// Time-to-accuracy settings.
    #[serde(default)]
    pub time_to_accuracy: TtaOverrides,
}

/// Values that replace time-to-accuracy settings (`None`: as before).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtaOverrides {
    /// Samples per step of time-to-target training.
    pub batch_size: Option<usize>,
    /// The target: test accuracy, a fraction in (0, 1], for a ResNet; validation loss, nats per
    /// token, above 0, for a GPT.
    pub target: Option<f64>,
    /// Epochs the schedule is planned over (replaces planned steps).
    pub planned_epochs: Option<usize>,
    /// Optimizer steps the schedule is planned over (replaces planned epochs).
    pub planned_steps: Option<usize>,
    /// Training time allowed, seconds.
    pub budget_s: Option<f64>,
    /// Optimizer steps between evaluations.
    pub eval_every_steps: Option<usize>,
    /// Learning rate at the time-to-target batch.
    pub base_lr: Option<f64>,
    /// The large batch of `lars` and `lamb`.
    pub large_batch_size: Option<usize>,
}

impl ProfileOverrides {
    /// Reads a profile file. Unknown keys and values of the wrong type are refused with the file,
    /// line and key named; ranges are checked when the values are applied.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let mut overrides: Self =
            toml::from_str(&text).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))?;
        overrides.source = OverrideSource::File(path.to_path_buf());
        Ok(overrides)
    }

    /// Whether these values set the target of `family` (at the top level, or in its table).
    fn sets_target(&self, family: Family) -> bool {
        self.time_to_accuracy.target.is_some() || self.of_family(family).time_to_accuracy.target.is_some()
    }

    /// The top level's workload settings, which apply to every family.
    fn every_family(&self) -> FamilyOverrides {
        FamilyOverrides {
            batch_size: self.batch_size,
            train_samples: self.train_samples,
            test_samples: self.test_samples,
            time_to_accuracy: self.time_to_accuracy,
        }
    }

    /// The table of `family`'s own settings.
    fn of_family(&self, family: Family) -> &FamilyOverrides {
        match family {
            Family::CifarResnet => &self.resnet,
            Family::CharGpt => &self.gpt,
            Family::UserModel => &self.model,
        }
    }
}

/// Whether `families` train to targets of different kinds: a test accuracy (the ResNets, the
/// user's model) and a validation loss (the GPTs), which cannot share one value.
fn targets_differ(families: &[Family]) -> bool {
    families.iter().any(|f| f.quality_metric() != families[0].quality_metric())
}

/// A run's profile for each family it trains, with the profile file's and the flags' values.
#[derive(Debug, Clone, PartialEq)]
pub struct RunProfiles {
    profiles: Vec<(Family, Profile)>,
    /// The families whose target a profile file or `--target` set.
    targeted: Vec<Family>,
}

impl RunProfiles {
    /// Profile `name` for each of `families` (the run's, at least one), with `layers` applied in
    /// order (the file's, then the flags'). A target set for every family is refused when the
    /// run trains families whose targets differ in kind: a test accuracy and a validation loss
    /// do not share a value.
    pub fn new(name: ProfileName, families: &[Family], layers: &[&ProfileOverrides]) -> Result<Self, Error> {
        if families.is_empty() {
            return Err(Error::Invalid("a run needs at least one workload".to_owned()));
        }
        for layer in layers {
            if let Some(target) = layer.time_to_accuracy.target.filter(|_| targets_differ(families)) {
                return Err(Namer::new(&layer.source, "time_to_accuracy.").refuse(
                    "target",
                    target,
                    "the run trains ResNets (or your model), whose target is a test accuracy, and GPTs, \
                     whose target is a validation loss; run one kind (--workload resnet or gpt), or set \
                     each target in a profile file's [resnet.time_to_accuracy], [gpt.time_to_accuracy] \
                     and [model.time_to_accuracy]",
                ));
            }
        }
        let mut profiles = Vec::new();
        for &family in families {
            let mut profile = name.settings(family);
            for layer in layers {
                profile = profile.overridden(family, layer)?;
            }
            profiles.push((family, profile));
        }
        let targeted = families
            .iter()
            .copied()
            .filter(|&family| layers.iter().any(|layer| layer.sets_target(family)))
            .collect();
        Ok(Self { profiles, targeted })
    }

    /// Whether a profile file or `--target` set the target of `family`: the user's model trains
    /// to a target only when one is set for it.
    pub fn target_set(&self, family: Family) -> bool {
        self.targeted.contains(&family)
    }

    /// The profile of `family`, which the run must train.
    pub fn of(&self, family: Family) -> Result<&Profile, Error> {
        self.profiles
            .iter()
            .find(|(f, _)| *f == family)
            .map(|(_, p)| p)
            .ok_or_else(|| Error::Invalid(format!("this run trains no {} workload", family.name())))
    }

    /// The run-wide settings: the measurement protocol, the same in every family's profile.
    pub fn run_wide(&self) -> &Profile {
        &self.profiles[0].1
    }

    /// Each family's settings, as the results record them.
    pub fn family_settings(&self) -> Vec<FamilySettings> {
        self.profiles.iter().map(|(family, p)| p.family_settings(*family)).collect()
    }
}

impl Profile {
    /// This profile of `family` with `overrides` applied: the run-wide protocol, the top level's
    /// workload settings, then the family's own. Refuses a count of 0 (but warm-up steps), a time
    /// or rate that is not a positive number, a target outside the family's range, and planned
    /// epochs and steps given together.
    pub fn overridden(mut self, family: Family, overrides: &ProfileOverrides) -> Result<Self, Error> {
        self.apply_protocol(overrides)?;
        let source = &overrides.source;
        self.apply_family(family, &overrides.every_family(), Namer::new(source, ""))?;
        let own = overrides.of_family(family);
        let at = Namer::new(source, &format!("{}.", family.name()));
        if let (Family::CharGpt, Some(n)) = (family, own.train_samples) {
            return Err(at.refuse("train_samples", n, "the GPT trains on its whole training split"));
        }
        self.apply_family(family, own, at)?;
        Ok(self)
    }

    /// Applies the run-wide measurement protocol of `o`.
    fn apply_protocol(&mut self, o: &ProfileOverrides) -> Result<(), Error> {
        let at = Namer::new(&o.source, "");
        set(&mut self.warmup_steps, at.count("warmup_steps", o.warmup_steps, 0)?);
        set(&mut self.steps_per_window, at.count("steps_per_window", o.steps_per_window, 1)?);
        set(&mut self.rounds, at.count("rounds", o.rounds, 1)?);
        set(
            &mut self.time_to_accuracy_seeds,
            at.count("time_to_accuracy_seeds", o.time_to_accuracy_seeds, 1)?,
        );
        set(&mut self.cpu_memory_budget_mib, at.count("cpu_memory_budget_mib", o.cpu_memory_budget_mib, 1)?);
        set(&mut self.cell_timeout_s, at.seconds("cell_timeout_s", o.cell_timeout_s)?);
        if let Some(half_width) = o.target_ci_half_width {
            if !(half_width > 0.0 && half_width < 1.0) {
                let reason = "must be a fraction between 0 and 1 (0.03 asks for ±3%)";
                return Err(at.refuse("target_ci_half_width", half_width, reason));
            }
            self.target_ci_half_width = half_width;
        }
        if let Some(windows) = at.count("windows_per_process", o.windows_per_process, 1)? {
            self.windows_per_process = windows;
            self.max_windows_per_process = self.max_windows_per_process.max(windows);
        }
        if let Some(max) = at.count("max_windows_per_process", o.max_windows_per_process, 1)? {
            if max < self.windows_per_process {
                let reason = format!("must be at least windows_per_process ({})", self.windows_per_process);
                return Err(at.refuse("max_windows_per_process", max, &reason));
            }
            self.max_windows_per_process = max;
        }
        Ok(())
    }

    /// Applies workload settings `o` of `family`, named by `at`.
    fn apply_family(&mut self, family: Family, o: &FamilyOverrides, at: Namer) -> Result<(), Error> {
        set(&mut self.batch_size, at.count("batch_size", o.batch_size, 1)?);
        // The GPT trains on its whole training split.
        if let Some(n) = at.count("train_samples", o.train_samples, 1)?.filter(|_| family != Family::CharGpt)
        {
            self.train_samples = Some(n);
        }
        if let Some(n) = at.count("test_samples", o.test_samples, 1)? {
            self.test_samples = Some(n);
        }
        let t = &o.time_to_accuracy;
        let at = at.within("time_to_accuracy.");
        set(&mut self.tta.batch_size, at.count("batch_size", t.batch_size, 1)?);
        set(&mut self.tta.eval_every_steps, at.count("eval_every_steps", t.eval_every_steps, 1)?);
        set(&mut self.tta.large_batch_size, at.count("large_batch_size", t.large_batch_size, 1)?);
        set(&mut self.tta.budget_s, at.seconds("budget_s", t.budget_s)?);
        if let Some(lr) = t.base_lr {
            if !(lr.is_finite() && lr > 0.0) {
                return Err(at.refuse("base_lr", lr, "must be a positive number"));
            }
            self.tta.base_lr = lr;
        }
        if let Some(target) = t.target {
            if let Some(reason) = target_problem(family, target) {
                return Err(at.refuse("target", target, reason));
            }
            self.tta.target = target;
        }
        match (
            at.count("planned_epochs", t.planned_epochs, 1)?,
            at.count("planned_steps", t.planned_steps, 1)?,
        ) {
            (Some(epochs), Some(steps)) => {
                let reason = format!("planned_steps = {steps} is set too; plan epochs or steps, not both");
                return Err(at.refuse("planned_epochs", epochs, &reason));
            }
            (Some(epochs), None) => {
                self.tta.planned_epochs = epochs;
                self.tta.planned_steps = None;
            }
            (None, Some(steps)) => self.tta.planned_steps = Some(steps),
            (None, None) => {}
        }
        Ok(())
    }
}

/// Why `target` cannot be a time-to-accuracy target of `family` (`None`: it can).
fn target_problem(family: Family, target: f64) -> Option<&'static str> {
    match family {
        Family::CifarResnet if !(target > 0.0 && target <= 1.0) => {
            Some("a ResNet's target is a test accuracy, a fraction in (0, 1] (0.6 for 60%)")
        }
        Family::UserModel if !(target > 0.0 && target <= 1.0) => Some(
            "your model's target is a test accuracy on CIFAR-10's images, a fraction in (0, 1] (0.6 for 60%)",
        ),
        Family::CharGpt if !(target.is_finite() && target > 0.0) => {
            Some("a GPT's target is a validation loss in nats per token, a positive number")
        }
        _ => None,
    }
}

/// Replaces `slot` with `value` when there is one.
fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *slot = value;
    }
}

/// Names a value for a refusal, as it was given: the flag and its value, or the file and the
/// value's key (dotted, from the top of the file) and value.
#[derive(Debug, Clone)]
struct Namer<'a> {
    source: &'a OverrideSource,
    table: String,
}

impl<'a> Namer<'a> {
    fn new(source: &'a OverrideSource, table: &str) -> Self {
        Self { source, table: table.to_owned() }
    }

    /// The namer of the sub-table `table` (ending in a dot) of this one.
    fn within(&self, table: &str) -> Self {
        Self { source: self.source, table: format!("{}{table}", self.table) }
    }

    /// `--flag value`, or `file: table.key = value`.
    fn name(&self, key: &str, value: impl Display) -> String {
        match self.source {
            OverrideSource::Flags => format!("{} {value}", flag_of(key)),
            OverrideSource::File(path) => format!("{}: {}{key} = {value}", path.display(), self.table),
        }
    }

    /// The refusal of `key`'s `value`, for `reason`.
    fn refuse(&self, key: &str, value: impl Display, reason: &str) -> Error {
        Error::Invalid(format!("{}: {reason}", self.name(key, value)))
    }

    /// `value`, refused below `min`.
    fn count<T: Copy + PartialOrd + Display + From<u8>>(
        &self,
        key: &str,
        value: Option<T>,
        min: u8,
    ) -> Result<Option<T>, Error> {
        match value {
            Some(v) if v < T::from(min) => Err(self.refuse(key, v, &format!("must be at least {min}"))),
            other => Ok(other),
        }
    }

    /// `value`, refused unless a positive, finite number of seconds.
    fn seconds(&self, key: &str, value: Option<f64>) -> Result<Option<f64>, Error> {
        match value {
            Some(s) if !(s.is_finite() && s > 0.0) => {
                Err(self.refuse(key, s, "must be a positive number of seconds"))
            }
            other => Ok(other),
        }
    }
}

/// The flag of `run` that sets profile key `key`.
fn flag_of(key: &str) -> String {
    match key {
        "windows_per_process" | "max_windows_per_process" => "--windows".to_owned(),
        "planned_epochs" => "--epochs".to_owned(),
        "planned_steps" => "--steps".to_owned(),
        "time_to_accuracy_seeds" => "--seeds".to_owned(),
        other => format!("--{}", other.replace('_', "-")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(o: ProfileOverrides) -> ProfileOverrides {
        ProfileOverrides { source: OverrideSource::Flags, ..o }
    }

    fn file(text: &str) -> Result<ProfileOverrides, Error> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("my.toml");
        std::fs::write(&path, text).unwrap();
        let mut o = ProfileOverrides::from_file(&path)?;
        o.source = OverrideSource::File("my.toml".into());
        Ok(o)
    }

    #[test]
    fn measurement_flags_override_the_profile_and_refuse_zero_counts() {
        let quick = ProfileName::Quick.settings(Family::CifarResnet);
        let o = flags(ProfileOverrides {
            rounds: Some(2),
            windows_per_process: Some(4),
            max_windows_per_process: Some(4),
            steps_per_window: Some(7),
            warmup_steps: Some(0),
            ..Default::default()
        });
        let p = quick.clone().overridden(Family::CifarResnet, &o).unwrap();
        assert_eq!((p.rounds, p.windows_per_process, p.max_windows_per_process), (2, 4, 4));
        assert_eq!((p.steps_per_window, p.warmup_steps), (7, 0));
        assert_eq!(
            quick.clone().overridden(Family::CifarResnet, &ProfileOverrides::default()).unwrap(),
            quick
        );
        for (flag, o) in [
            ("--rounds", ProfileOverrides { rounds: Some(0), ..Default::default() }),
            ("--windows", ProfileOverrides { windows_per_process: Some(0), ..Default::default() }),
            ("--steps-per-window", ProfileOverrides { steps_per_window: Some(0), ..Default::default() }),
            ("--seeds", ProfileOverrides { time_to_accuracy_seeds: Some(0), ..Default::default() }),
        ] {
            let message = quick.clone().overridden(Family::CifarResnet, &o).unwrap_err().to_string();
            assert_eq!(message, format!("{flag} 0: must be at least 1"));
        }
    }

    #[test]
    fn time_to_accuracy_flags_are_checked_against_the_family() {
        let tta = |t: TtaOverrides| flags(ProfileOverrides { time_to_accuracy: t, ..Default::default() });
        let resnet = ProfileName::Quick.settings(Family::CifarResnet);
        let gpt = ProfileName::Quick.settings(Family::CharGpt);
        let o = tta(TtaOverrides {
            target: Some(0.7),
            planned_epochs: Some(5),
            budget_s: Some(30.0),
            ..Default::default()
        });
        let p = resnet.clone().overridden(Family::CifarResnet, &o).unwrap();
        assert_eq!(
            (p.tta.target, p.tta.planned_epochs, p.tta.planned_steps, p.tta.budget_s),
            (0.7, 5, None, 30.0)
        );
        // The GPT plans by steps; epochs replace them.
        let p = gpt.clone().overridden(Family::CharGpt, &o).unwrap();
        assert_eq!((p.tta.planned_epochs, p.tta.planned_steps), (5, None));
        let steps = tta(TtaOverrides { planned_steps: Some(300), ..Default::default() });
        assert_eq!(
            resnet.clone().overridden(Family::CifarResnet, &steps).unwrap().tta.planned_steps,
            Some(300)
        );
        let refused = |family: Family, t: TtaOverrides| {
            let p = if family == Family::CifarResnet { resnet.clone() } else { gpt.clone() };
            p.overridden(family, &tta(t)).unwrap_err().to_string()
        };
        for target in [0.0, -0.5, 1.5, f64::NAN] {
            let message =
                refused(Family::CifarResnet, TtaOverrides { target: Some(target), ..Default::default() });
            assert!(
                message.starts_with(&format!("--target {target}: ")) && message.contains("(0, 1]"),
                "{message}"
            );
        }
        assert!(gpt
            .clone()
            .overridden(Family::CharGpt, &tta(TtaOverrides { target: Some(1.5), ..Default::default() }))
            .is_ok());
        for target in [0.0, -1.0, f64::INFINITY] {
            let message =
                refused(Family::CharGpt, TtaOverrides { target: Some(target), ..Default::default() });
            assert!(message.contains("--target") && message.contains("validation loss"), "{message}");
        }
        for budget in [0.0, -3.0, f64::NAN] {
            let message =
                refused(Family::CifarResnet, TtaOverrides { budget_s: Some(budget), ..Default::default() });
            assert_eq!(message, format!("--budget-s {budget}: must be a positive number of seconds"));
        }
        let message =
            refused(Family::CharGpt, TtaOverrides { planned_epochs: Some(0), ..Default::default() });
        assert_eq!(message, "--epochs 0: must be at least 1");
    }

    /// `--target value`.
    fn target_flag(value: f64) -> ProfileOverrides {
        flags(ProfileOverrides {
            time_to_accuracy: TtaOverrides { target: Some(value), ..Default::default() },
            ..Default::default()
        })
    }

    #[test]
    fn a_target_for_both_families_is_refused_and_each_family_takes_its_own() {
        let both = target_flag(0.7);
        let families = [Family::CifarResnet, Family::CharGpt];
        let message = RunProfiles::new(ProfileName::Quick, &families, &[&both]).unwrap_err().to_string();
        assert!(message.starts_with("--target 0.7: the run trains ResNets"), "{message}");
        let one = RunProfiles::new(ProfileName::Quick, &families[..1], &[&both]).unwrap();
        assert_eq!(one.of(Family::CifarResnet).unwrap().tta.target, 0.7);
        assert!(one.of(Family::CharGpt).is_err());

        let own =
            file("[resnet.time_to_accuracy]\ntarget = 0.5\n[gpt.time_to_accuracy]\ntarget = 2.2\n").unwrap();
        let run = RunProfiles::new(ProfileName::Smoke, &families, &[&own]).unwrap();
        let targets: Vec<f64> = run.family_settings().iter().map(|s| s.time_to_accuracy.target).collect();
        assert_eq!(targets, [0.5, 2.2]);
    }

    #[test]
    fn the_users_model_trains_to_a_target_only_where_one_is_set_for_it() {
        let target = target_flag(0.4);
        let accuracies = [Family::CifarResnet, Family::UserModel];
        let run = RunProfiles::new(ProfileName::Quick, &accuracies, &[&target]).unwrap();
        assert!(run.target_set(Family::UserModel) && run.target_set(Family::CifarResnet));
        assert_eq!(run.of(Family::UserModel).unwrap().tta.target, 0.4);
        let untargeted = RunProfiles::new(ProfileName::Quick, &accuracies, &[]).unwrap();
        assert!(!untargeted.target_set(Family::UserModel));
        let own = file("[model.time_to_accuracy]\ntarget = 0.3\n").unwrap();
        let run = RunProfiles::new(ProfileName::Quick, &accuracies, &[&own]).unwrap();
        assert!(run.target_set(Family::UserModel) && !run.target_set(Family::CifarResnet));
        let with_gpt = [Family::CharGpt, Family::UserModel];
        let message = RunProfiles::new(ProfileName::Quick, &with_gpt, &[&target]).unwrap_err().to_string();
        assert!(message.contains("GPTs, whose target is a validation loss"), "{message}");
        let percent = target_flag(60.0);
        let message = RunProfiles::new(ProfileName::Quick, &[Family::UserModel], &[&percent]).unwrap_err();
        assert!(message.to_string().contains("your model's target is a test accuracy"), "{message}");
    }

    #[test]
    fn a_profile_file_sets_any_field_and_the_flags_override_it() {
        let o = file(
            "rounds = 4\nwindows_per_process = 12\ncell_timeout_s = 90\ntime_to_accuracy_seeds = 2\n\
             test_samples = 200\n[time_to_accuracy]\nbudget_s = 45.5\n\
             [resnet]\nbatch_size = 64\ntrain_samples = 5000\n[resnet.time_to_accuracy]\nplanned_steps = 400\n\
             base_lr = 0.2\n[gpt.time_to_accuracy]\nbudget_s = 20\n",
        )
        .unwrap();
        let flag = flags(ProfileOverrides { rounds: Some(1), ..Default::default() });
        let run = RunProfiles::new(ProfileName::Quick, &[Family::CifarResnet, Family::CharGpt], &[&o, &flag])
            .unwrap();
        let resnet = run.of(Family::CifarResnet).unwrap();
        assert_eq!((resnet.rounds, resnet.windows_per_process, resnet.max_windows_per_process), (1, 12, 60));
        assert_eq!((resnet.cell_timeout_s, resnet.time_to_accuracy_seeds), (90.0, 2));
        assert_eq!(
            (resnet.batch_size, resnet.train_samples, resnet.test_samples),
            (64, Some(5000), Some(200))
        );
        assert_eq!(
            (resnet.tta.planned_steps, resnet.tta.base_lr, resnet.tta.budget_s),
            (Some(400), 0.2, 45.5)
        );
        let gpt = run.of(Family::CharGpt).unwrap();
        assert_eq!((gpt.batch_size, gpt.train_samples, gpt.test_samples), (32, None, Some(200)));
        assert_eq!((gpt.rounds, gpt.tta.budget_s, gpt.tta.planned_steps), (1, 20.0, Some(1_500)));
    }

    #[test]
    fn a_profile_file_s_unknown_keys_and_bad_values_are_refused_naming_file_key_and_value() {
        for (text, expected) in [
            ("roundz = 2\n", &["my.toml", "roundz"][..]),
            ("[resnet]\nrounds = 2\n", &["my.toml", "rounds"]),
            ("[vgg]\nbatch_size = 2\n", &["my.toml", "vgg"]),
            ("rounds = \"two\"\n", &["my.toml", "rounds", "two"]),
            ("rounds = -1\n", &["my.toml", "rounds", "-1"]),
            ("rounds = 2\nrounds = 3\n", &["my.toml", "rounds"]),
        ] {
            let message = file(text).unwrap_err().to_string();
            for e in expected {
                assert!(message.contains(e), "{text:?}: '{e}' not in: {message}");
            }
        }
        let quick = ProfileName::Quick.settings(Family::CifarResnet);
        for (text, expected) in [
            ("rounds = 0\n", "my.toml: rounds = 0: must be at least 1"),
            (
                "[resnet.time_to_accuracy]\ntarget = 60\n",
                "my.toml: resnet.time_to_accuracy.target = 60: a ResNet's",
            ),
            (
                "[time_to_accuracy]\nbudget_s = 0\n",
                "my.toml: time_to_accuracy.budget_s = 0: must be a positive",
            ),
            (
                "[resnet.time_to_accuracy]\nplanned_epochs = 2\nplanned_steps = 9\n",
                "planned_steps = 9 is set too",
            ),
            (
                "windows_per_process = 6\nmax_windows_per_process = 4\n",
                "max_windows_per_process = 4: must be at least",
            ),
            ("target_ci_half_width = 3\n", "my.toml: target_ci_half_width = 3: must be a fraction"),
        ] {
            let message =
                quick.clone().overridden(Family::CifarResnet, &file(text).unwrap()).unwrap_err().to_string();
            assert!(message.contains(expected), "{text:?}: '{expected}' not in: {message}");
        }
        let gpt = ProfileName::Quick.settings(Family::CharGpt);
        let message =
            gpt.overridden(Family::CharGpt, &file("[gpt]\ntrain_samples = 9\n").unwrap()).unwrap_err();
        assert!(message.to_string().contains("my.toml: gpt.train_samples = 9: the GPT trains"), "{message}");
        let missing = ProfileOverrides::from_file(Path::new("no-such.toml")).unwrap_err().to_string();
        assert!(missing.contains("no-such.toml"), "{missing}");
    }
}
