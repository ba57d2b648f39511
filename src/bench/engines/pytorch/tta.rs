//! Training to a target on the PyTorch engine: what a case of a time-to-accuracy cell carries
//! beyond its side ([`TtaCase`]: the recipe in `torch.optim` terms, the schedule, the held-out
//! batches, the target and the budget), and the run of it ([`train_to_target`]), whose points
//! are reported as the engine evaluates and checked against the recipe's schedule.

use serde::{Deserialize, Serialize};
use serde_json::json;
use tch::Tensor;

use super::EngineProcess;
use crate::bench::cell::data::{CellData, InputOptions};
use crate::bench::cell::tta::{eval_every_steps, log_point, record_point, untrained};
use crate::bench::profile::Profile;
use crate::error::Error;
use crate::optim::schedule::Anneal;
use crate::results::schema::{CurvePoint, TimeToAccuracy};
use crate::train::average::EmaConfig;
use crate::train::pytorch_terms::{MuonSpec, OptimizerSpec};
use crate::train::recipe::{Recipe, Schedule};
use crate::workloads::QualityMetric;

/// The held-out batches' file inside the case's folder.
const HELD_OUT_FILE: &str = "held-out.safetensors";
/// How far a learning rate or momentum the engine reports may lie from the recipe's, relative.
const SCHEDULE_TOLERANCE: f64 = 1e-9;

/// What the engine script reads from the case's `time_to_accuracy` field (its module
/// documentation describes each field).
#[derive(Debug, Serialize)]
pub(super) struct TtaCase {
    /// The optimizer of every parameter Muon does not take.
    optimizer: OptimizerSpec,
    /// `torch.optim.Muon` over the parameters named, where the recipe has it.
    muon: Option<MuonParameters>,
    /// The learning-rate (and momentum) schedule, as a `torch.optim.lr_scheduler`.
    schedule: ScheduleSpec,
    /// `label_smoothing` of the training loss's `cross_entropy`.
    label_smoothing: f64,
    /// The weight average evaluated in place of the weights, where the recipe keeps one.
    ema: Option<EmaSpec>,
    /// Evaluation logits averaged with those of the mirrored images.
    flip_tta: bool,
    /// Optimizer steps the schedule is planned over.
    total_steps: usize,
    /// Optimizer steps between evaluations.
    eval_every_steps: usize,
    /// Training seconds allowed, evaluation excluded.
    budget_s: f64,
    /// The metric's target.
    target: f64,
    /// The held-out metric.
    metric: QualityMetric,
    /// Epochs one optimizer step trains, as the libtorch loader counts them.
    epochs_per_step: f64,
    /// The held-out batches' file in the case's folder (`inputs.K`, `targets.K`).
    held_out_file: &'static str,
    /// Held-out batches in it.
    held_out_batches: usize,
}

/// Muon and the side's parameters it trains.
#[derive(Debug, Serialize)]
struct MuonParameters {
    /// Its hyper-parameters.
    #[serde(flatten)]
    spec: MuonSpec,
    /// The hidden weights it trains, by their `state_dict` names.
    parameters: Vec<String>,
}

/// The weight average, as `torch.optim.swa_utils.AveragedModel` takes it.
#[derive(Debug, Serialize)]
struct EmaSpec {
    /// Optimizer steps between updates.
    every_steps: usize,
    /// The decay per optimizer step; an update decays by its `every_steps`-th power, warmed up
    /// by the update count.
    decay_per_step: f64,
}

/// A learning-rate schedule in `torch.optim.lr_scheduler`'s terms.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub(super) enum ScheduleSpec {
    /// `MultiStepLR(milestones, gamma)`, after `LinearLR(start_factor, total_iters=warmup_steps)`
    /// through `SequentialLR` where `warmup_steps` > 0; milestones count from step 0.
    MultiStep { lr: f64, milestones: Vec<usize>, gamma: f64, warmup_steps: usize, warmup_start_factor: f64 },
    /// `OneCycleLR` with momentum cycled.
    OneCycle {
        max_lr: f64,
        total_steps: usize,
        pct_start: f64,
        div_factor: f64,
        final_div_factor: f64,
        anneal_strategy: &'static str,
        base_momentum: f64,
        max_momentum: f64,
    },
    /// nanoGPT's `get_lr` (linear warm-up, half a cosine to `min_lr`) through `LambdaLR`.
    WarmupCosine { peak_lr: f64, min_lr: f64, warmup_steps: usize, decay_steps: usize },
}

impl ScheduleSpec {
    /// `schedule` in `torch.optim.lr_scheduler`'s terms.
    pub(super) fn of(schedule: &Schedule) -> Self {
        match *schedule {
            Schedule::Step { schedule: steps, warmup_from_lr, warmup_steps } => {
                let base = steps.base_lr;
                // The steps where the rate drops tenfold, found where the recipe's schedule does.
                let milestones =
                    (1..steps.total_steps.max(1)).filter(|&s| steps.lr(s) < steps.lr(s - 1)).collect();
                let warmup_start_factor = if base > 0.0 { warmup_from_lr / base } else { 1.0 };
                ScheduleSpec::MultiStep {
                    lr: base,
                    milestones,
                    gamma: 0.1,
                    warmup_steps,
                    warmup_start_factor,
                }
            }
            Schedule::OneCycle(c) => ScheduleSpec::OneCycle {
                max_lr: c.max_lr,
                total_steps: c.total_steps,
                pct_start: c.pct_start,
                div_factor: c.div_factor,
                final_div_factor: c.final_div_factor,
                anneal_strategy: match c.anneal {
                    Anneal::Cos => "cos",
                    Anneal::Linear => "linear",
                },
                base_momentum: c.base_momentum,
                max_momentum: c.max_momentum,
            },
            Schedule::WarmupCosine(w) => ScheduleSpec::WarmupCosine {
                peak_lr: w.peak_lr,
                min_lr: w.min_lr,
                warmup_steps: w.warmup_steps,
                decay_steps: w.decay_steps,
            },
        }
    }
}

/// The `time_to_accuracy` field of the case of a cell training with `recipe` for `total_steps`
/// on `data` drawn as `inputs` draws it, the Muon group being `muon_parameters` where the recipe
/// has Muon; writes the held-out batches into `dir`.
pub(super) fn write(
    recipe: &Recipe,
    total_steps: usize,
    muon_parameters: Vec<String>,
    data: &CellData,
    inputs: &InputOptions,
    profile: &Profile,
    dir: &std::path::Path,
) -> Result<TtaCase, Error> {
    let settings = profile.tta;
    let (optimizer, muon) = OptimizerSpec::of_recipe(recipe.optimizer);
    let held_out_batches = write_held_out(data, inputs, profile, &dir.join(HELD_OUT_FILE))?;
    Ok(TtaCase {
        optimizer,
        muon: muon.map(|spec| MuonParameters { spec, parameters: muon_parameters }),
        schedule: ScheduleSpec::of(&recipe.schedule),
        label_smoothing: recipe.label_smoothing,
        ema: recipe
            .weight_average
            .map(|EmaConfig { every_steps, decay_per_step }| EmaSpec { every_steps, decay_per_step }),
        flip_tta: recipe.flip_tta,
        total_steps,
        eval_every_steps: eval_every_steps(&settings, inputs.batch_size),
        budget_s: settings.budget_s,
        target: settings.target,
        metric: inputs.job.key.workload.family().quality_metric(),
        epochs_per_step: epochs_per_step(data, inputs)?,
        held_out_file: HELD_OUT_FILE,
        held_out_batches,
    })
}

/// The epochs one training step takes, as the libtorch loader of the cell counts them.
fn epochs_per_step(data: &CellData, inputs: &InputOptions) -> Result<f64, Error> {
    let mut loader = data.training(inputs)?;
    loader.next_batch()?;
    Ok(loader.epochs())
}

/// Writes every held-out batch the libtorch cell evaluates on (its inputs as that cell's model
/// sees them: standardised or not as the recipe says) to `path` as `inputs.K` and `targets.K`;
/// returns how many.
fn write_held_out(
    data: &CellData,
    inputs: &InputOptions,
    profile: &Profile,
    path: &std::path::Path,
) -> Result<usize, Error> {
    let mut tensors = Vec::new();
    for (k, batch) in data.held_out(inputs, profile)?.enumerate() {
        let batch = batch?;
        let cpu = |t: &Tensor| t.to_device(tch::Device::Cpu).contiguous();
        tensors.push((format!("inputs.{k}"), cpu(&batch.inputs)));
        tensors.push((format!("targets.{k}"), cpu(&batch.targets)));
    }
    let batches = tensors.len() / 2;
    Tensor::write_safetensors(&tensors, path)
        .map_err(|e| Error::Torch(format!("writing {}: {e}", path.display())))?;
    Ok(batches)
}

/// One evaluation, as the engine reports it while it trains.
#[derive(Debug, Deserialize)]
struct PointReply {
    /// The point of the curve.
    #[serde(flatten)]
    point: CurvePoint,
    /// The learning rate of the segment's last step (Muon's group excluded).
    lr: Option<f64>,
    /// Its momentum (SGD's, or Adam's β₁), where the schedule cycles it.
    momentum: Option<f64>,
}

/// The end of training, as the engine replies.
#[derive(Debug, Deserialize)]
struct DoneReply {
    /// Seconds of the training time spent in steps that compiled a graph (torch-compile only).
    compile_s: Option<f64>,
}

/// Trains side `side` to the case's target, its curve logged as it goes and each point's
/// learning rate and momentum held to `recipe`'s schedule; returns the time to accuracy.
pub(super) fn train_to_target(
    engine: &mut EngineProcess,
    side: &str,
    recipe: &Recipe,
    profile: &Profile,
    metric: QualityMetric,
) -> Result<TimeToAccuracy, Error> {
    let mut result = untrained(metric, &profile.tta);
    let mut failure = None;
    let done = engine.request_streaming(json!({"op": "train_to_target", "side": side}), |line| {
        let reply: PointReply = serde_json::from_value(line.clone())
            .map_err(|e| Error::Process(format!("the PyTorch engine reported {line}: {e}")))?;
        if reply.point.step > 0 {
            log_point(metric, &reply.point);
            if let Err(why) = follows_schedule(&recipe.schedule, &reply) {
                failure.get_or_insert(why);
            }
        }
        record_point(&mut result, reply.point);
        Ok(())
    })?;
    if let Some(why) = failure {
        return Err(Error::Process(format!("the PyTorch engine's schedule is not the recipe's: {why}")));
    }
    let done: DoneReply = serde_json::from_value(done.clone())
        .map_err(|e| Error::Process(format!("the PyTorch engine replied {done}: {e}")))?;
    result.compile_s = done.compile_s;
    Ok(result)
}

/// Whether the learning rate (and momentum) the engine used in the last step of a segment are
/// the recipe's for that step; the difference where not.
fn follows_schedule(schedule: &Schedule, reply: &PointReply) -> Result<(), String> {
    let step = reply.point.step - 1;
    let near = |got: f64, want: f64| (got - want).abs() <= SCHEDULE_TOLERANCE * want.abs().max(1e-12);
    let lr = reply.lr.unwrap_or(f64::NAN);
    if !near(lr, schedule.lr(step)) {
        return Err(format!("step {step}: learning rate {lr}, the recipe's {}", schedule.lr(step)));
    }
    match (schedule.momentum(step), reply.momentum) {
        (Some(want), Some(got)) if !near(got, want) => {
            Err(format!("step {step}: momentum {got}, the recipe's {want}"))
        }
        (Some(want), None) => Err(format!("step {step}: no momentum reported, the recipe's {want}")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::schedule::{OneCycle, StepSchedule, WarmupCosine};

    #[test]
    fn the_step_schedule_drops_at_the_steps_the_recipe_does_after_its_warm_up() {
        let schedule = Schedule::Step {
            schedule: StepSchedule { base_lr: 0.4, total_steps: 1001 },
            warmup_from_lr: 0.05,
            warmup_steps: 51,
        };
        let ScheduleSpec::MultiStep { lr, milestones, gamma, warmup_steps, warmup_start_factor } =
            ScheduleSpec::of(&schedule)
        else {
            panic!("a multi-step schedule expected")
        };
        assert_eq!((lr, gamma, warmup_steps), (0.4, 0.1, 51));
        assert_eq!(milestones, [501, 751], "the first steps at 50% and 75% of 1001");
        assert!((warmup_start_factor - 0.125).abs() < 1e-15);
    }

    #[test]
    fn one_cycle_and_the_cosine_schedule_carry_their_parameters() {
        let cycle = OneCycle::new(0.2, 900);
        let spec = ScheduleSpec::of(&Schedule::OneCycle(cycle));
        assert!(
            matches!(spec, ScheduleSpec::OneCycle { max_lr, total_steps: 900, anneal_strategy: "cos", .. } if max_lr == 0.2)
        );
        let cosine = WarmupCosine { peak_lr: 1e-3, min_lr: 1e-4, warmup_steps: 100, decay_steps: 5000 };
        let spec = ScheduleSpec::of(&Schedule::WarmupCosine(cosine));
        assert_eq!(
            spec,
            ScheduleSpec::WarmupCosine { peak_lr: 1e-3, min_lr: 1e-4, warmup_steps: 100, decay_steps: 5000 }
        );
    }

    fn reply(step: usize, lr: f64, momentum: Option<f64>) -> PointReply {
        let point = CurvePoint { step, epoch: 0.0, train_s: 0.0, wall_s: 0.0, metric: 0.5, train_loss: None };
        PointReply { point, lr: Some(lr), momentum }
    }

    #[test]
    fn a_point_off_the_recipes_schedule_is_refused_with_the_step_and_both_values() {
        let cycle = Schedule::OneCycle(OneCycle::new(0.2, 900));
        let (lr, momentum) = (cycle.lr(99), cycle.momentum(99));
        assert_eq!(follows_schedule(&cycle, &reply(100, lr, momentum)), Ok(()));
        let why = follows_schedule(&cycle, &reply(100, lr * 1.01, momentum)).unwrap_err();
        assert!(why.starts_with("step 99: learning rate"), "{why}");
        let why = follows_schedule(&cycle, &reply(100, lr, None)).unwrap_err();
        assert!(why.contains("no momentum reported"), "{why}");
        let step = Schedule::Step {
            schedule: StepSchedule { base_lr: 0.05, total_steps: 100 },
            warmup_from_lr: 0.05,
            warmup_steps: 0,
        };
        assert_eq!(follows_schedule(&step, &reply(60, 0.005, None)), Ok(()));
        assert!(follows_schedule(&step, &reply(60, 0.05, None)).is_err());
    }
}
