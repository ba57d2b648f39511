//! Time to accuracy: a cell process trains from scratch towards its target, evaluating on the
//! held-out set as it goes, and records the curve and when the target was first reached.

use std::time::Instant;

use super::data::{BatchSource, InputOptions};
use super::measure::CellContext;
use crate::error::Error;
use crate::measure::timer::SyncedTimer;
use crate::results::schema::{CurvePoint, TimeToAccuracy};
use crate::train::recipe::Schedule;
use crate::train::Trainer;
use crate::vocabulary::TtaSettings;
use crate::workloads::{QualityMetric, Workload};

/// Trains from scratch with the recipe's schedule, evaluating on the held-out set every
/// `eval_every_steps` of the profile's time-to-target batch (as many samples between evaluations
/// at any batch size), until the target, the time budget or the planned steps run out.
pub(super) fn train_to_target<W: Workload>(
    process: &CellContext,
    inputs: &InputOptions,
    trainer: &mut Trainer<W>,
) -> Result<TimeToAccuracy, Error> {
    let settings = process.profile.tta;
    let schedule = &process.recipe.schedule;
    let metric = process.job.key.workload.family().quality_metric();
    let mut loader = process.data.training(inputs)?;
    let total_steps = schedule.total_steps();
    let eval_every_steps = eval_every_steps(&settings, inputs.batch_size);
    let wall = Instant::now();
    let mut result = untrained(metric, &settings);
    let mut train_s = 0.0;
    let mut step = 0;
    // The curve starts with the untrained network (time 0), then one point per segment.
    let untrained = held_out_metric(process, inputs, trainer, metric)?;
    record_point(
        &mut result,
        CurvePoint { step, epoch: 0.0, train_s, wall_s: 0.0, metric: untrained, train_loss: None },
    );
    // DDP ranks go on while any of them would (their clocks may disagree about the budget).
    while trainer
        .any_rank(result.time_to_target_s.is_none() && step < total_steps && train_s < settings.budget_s)?
    {
        let timer = SyncedTimer::start(process.device);
        let segment_end = (step + eval_every_steps).min(total_steps);
        train_segment(trainer, loader.as_mut(), schedule, &mut step, segment_end)?;
        trainer.metrics_mut().flush();
        train_s += timer.stop();
        // The wall clock is read after the evaluation: wall time includes evaluating.
        let point = CurvePoint {
            step,
            epoch: loader.epochs(),
            train_s,
            metric: held_out_metric(process, inputs, trainer, metric)?,
            wall_s: wall.elapsed().as_secs_f64(),
            train_loss: trainer.metrics_mut().last_mean_loss(),
        };
        log_point(metric, &point);
        record_point(&mut result, point);
    }
    Ok(result)
}

/// Trains on `loader`'s batches from `step` up to `segment_end` at the schedule's learning rate
/// and momentum, counting each optimizer step in `step`.
fn train_segment<W: Workload>(
    trainer: &mut Trainer<W>,
    loader: &mut dyn BatchSource,
    schedule: &Schedule,
    step: &mut usize,
    segment_end: usize,
) -> Result<(), Error> {
    while *step < segment_end {
        if let Some(momentum) = schedule.momentum(*step) {
            trainer.set_momentum(momentum);
        }
        trainer.train_step(&loader.next_batch()?, schedule.lr(*step))?;
        *step += 1;
    }
    Ok(())
}

/// `trainer`'s `metric` on every held-out sample once (in evaluation mode, without gradients).
fn held_out_metric<W: Workload>(
    process: &CellContext,
    inputs: &InputOptions,
    trainer: &Trainer<W>,
    metric: QualityMetric,
) -> Result<f64, Error> {
    let evaluation = trainer.evaluate(process.data.held_out(inputs, process.profile)?, true)?;
    Ok(match metric {
        QualityMetric::TestAccuracy => evaluation.accuracy,
        QualityMetric::ValidationLoss => evaluation.mean_loss,
    })
}

/// Optimizer steps between evaluations at `batch_size`: `settings`' interval at its batch, as
/// many samples apart at any batch (at least one step).
pub(in crate::bench) fn eval_every_steps(settings: &TtaSettings, batch_size: usize) -> usize {
    (settings.eval_every_steps * settings.batch_size / batch_size.max(1)).max(1)
}

/// A time to accuracy before any evaluation: `metric` towards `settings`' target within its
/// budget, nothing reached, no curve.
pub(in crate::bench) fn untrained(metric: QualityMetric, settings: &TtaSettings) -> TimeToAccuracy {
    TimeToAccuracy {
        metric,
        target: settings.target,
        budget_s: settings.budget_s,
        time_to_target_s: None,
        wall_time_to_target_s: None,
        epochs_to_target: None,
        best_metric: metric.worst(),
        curve: Vec::new(),
        compile_s: None,
    }
}

/// Reports an evaluation of the curve on stderr, as the cell trains.
pub(in crate::bench) fn log_point(metric: QualityMetric, point: &CurvePoint) {
    eprintln!(
        "step {:>6}  epoch {:>5.2}  train {:>7.1} s  loss {:.3}  {} {}",
        point.step,
        point.epoch,
        point.train_s,
        point.train_loss.unwrap_or(f64::NAN),
        metric.words(),
        metric.value_text(point.metric)
    );
}

/// Adds an evaluation to the curve and marks the first time the target is reached.
pub(in crate::bench) fn record_point(result: &mut TimeToAccuracy, point: CurvePoint) {
    result.curve.push(point);
    result.best_metric = result.metric.better(result.best_metric, point.metric);
    if result.metric.reaches(point.metric, result.target) && result.time_to_target_s.is_none() {
        result.time_to_target_s = Some(point.train_s);
        result.wall_time_to_target_s = Some(point.wall_s);
        result.epochs_to_target = Some(point.epoch);
    }
}
