//! Plans: which cells a design measures, and in which order they run.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::analysis::{is_compared, is_process_design, reference_position};
use crate::bench::design::Design;
use crate::bench::profile::Profile;
use crate::engine::Engine;
use crate::factorial::{self, Fraction, MIN_FACTORS};
use crate::hardware::Hardware;
use crate::results::factorial::{FactorialAnalysis, LeftOutTrick};
use crate::results::model::UserModel;
use crate::results::schema::{CellKey, CellKind, Phase};
use crate::tricks::{Applicability, Metric, Trick, TrickSet};
use crate::workloads::{user, Family, WorkloadId};

/// One process of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The index of the cell in the plan.
    pub cell: usize,
    /// The round the process belongs to.
    pub round: usize,
    /// The process's place among its round's measured processes (0 first); `None` for the
    /// round's warm-up process, whose measurement is discarded.
    pub position: Option<usize>,
}

impl Slot {
    /// Whether this is a round's warm-up process.
    pub fn is_warmup(&self) -> bool {
        self.position.is_none()
    }
}

/// A cell in a plan, with the reason it cannot run (if it cannot).
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCell {
    /// The cell.
    pub key: CellKey,
    /// Why the cell is not applicable on this device, if it is not.
    pub not_applicable: Option<String>,
}

/// The cells of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Every cell, in report order.
    pub cells: Vec<PlannedCell>,
}

/// What a plan is built from.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// Workloads to measure.
    pub workloads: Vec<WorkloadId>,
    /// Tricks to measure.
    pub tricks: Vec<Trick>,
    /// The resolved device, and what it, the machine and this binary offer there.
    pub hardware: Hardware,
    /// Samples per step.
    pub batch_size: usize,
    /// Seed of every cell.
    pub seed: u64,
    /// Whether image files to decode were given (`run --images`), which `packed-dataset` needs.
    pub has_images: bool,
    /// Batch size of the time-to-accuracy cells (`None`: no time-to-accuracy cells, and the
    /// tricks judged by time-to-accuracy are not applicable).
    pub time_to_accuracy_batch_size: Option<usize>,
    /// Seeds of each time-to-accuracy configuration: `seed`, `seed + 1`, …
    pub time_to_accuracy_seeds: usize,
    /// The large batch at which `lars` and `lamb` are measured (against SGD at the same batch).
    pub large_batch_size: usize,
    /// The largest batch that fit, when it has been probed (`max-batch` needs it).
    pub max_batch_size: Option<usize>,
    /// Why the GPT workloads cannot run, when their text file is missing (their cells are then
    /// not applicable).
    pub missing_text: Option<String>,
    /// The engines the cells train on, libtorch first: each throughput cell is planned on every
    /// one of them ([`Plan::on_engines`]).
    pub engines: Vec<Engine>,
    /// The user's own network, where the `model` workload is planned: what it is built of and
    /// whether it was exported decide which of its cells can run.
    pub model: Option<UserModel>,
    /// Whether the largest batch that fits the user's model is probed before its cells.
    pub probe_model_batch: bool,
    /// Whether the run's paired cells share multi-arm processes ([`crate::bench::processes`]), as
    /// they do unless `run --unpaired` or `--single-arm` says otherwise. Where they do, a workload
    /// with cells of the process design has its baseline and A/A control measured alone as well
    /// (`baseline-alone`, `aa-control-alone`).
    pub multi_arm: bool,
}

impl PlanRequest {
    /// The request for `workloads` with `tricks` on `hardware`, every workload at `profile`'s
    /// sizes: its batch size, time-to-accuracy batch size and seeds, and large batch; seed 0, no
    /// batch probed yet, no image files to decode and no text file missing, paired cells sharing
    /// multi-arm processes.
    pub fn new(
        workloads: Vec<WorkloadId>,
        tricks: Vec<Trick>,
        hardware: Hardware,
        profile: &Profile,
    ) -> Self {
        PlanRequest {
            workloads,
            tricks,
            hardware,
            batch_size: profile.batch_size,
            seed: 0,
            has_images: false,
            time_to_accuracy_batch_size: Some(profile.tta.batch_size),
            time_to_accuracy_seeds: profile.time_to_accuracy_seeds,
            large_batch_size: profile.tta.large_batch_size,
            max_batch_size: None,
            missing_text: None,
            engines: vec![Engine::Libtorch],
            model: None,
            probe_model_batch: true,
            multi_arm: true,
        }
    }
}

impl Plan {
    /// The ablation design: for each workload, the baselines (training throughput, evaluation
    /// throughput when an evaluation trick is asked for, time-to-accuracy per seed) and each trick
    /// measured as its metric asks, with its own reference cells where its "off" side is not the
    /// plain recipe.
    pub fn ablation(request: &PlanRequest) -> Plan {
        let mut plan = Plan { cells: Vec::new() };
        for &workload in &request.workloads {
            plan.extend(baselines(request, workload));
            for &trick in &request.tricks {
                plan.extend(trick_cells(request, workload, trick));
            }
        }
        plan.on_engines(request).with_alone_cells(request)
    }

    /// The plan with each cell (planned on libtorch by the design) planned as well on every other
    /// engine of `request`, right after it, not applicable where that engine does not apply a
    /// trick of the cell. With libtorch not asked for, a cell leaves the plan where another engine
    /// runs it, and stays on libtorch where none is asked for.
    pub fn on_engines(self, request: &PlanRequest) -> Plan {
        let mut cells = Vec::new();
        for cell in self.cells {
            let planned_on = cell.key.engine;
            let others: Vec<PlannedCell> = request
                .engines
                .iter()
                .filter(|&&engine| engine != planned_on)
                .map(|&engine| on_engine(request, &cell, engine))
                .collect();
            if request.engines.contains(&planned_on) || others.is_empty() {
                cells.push(cell);
            }
            cells.extend(others);
        }
        Plan { cells }
    }

    /// The leave-one-out design: every training trick that applies on an engine on together, and
    /// that set minus each one (what each trick still adds when all the others are on), on each
    /// engine. Evaluation tricks and tricks that cannot apply are measured as in the ablation, so
    /// none is silently dropped.
    pub fn leave_one_out(request: &PlanRequest) -> Plan {
        let mut plan = Plan { cells: Vec::new() };
        for &workload in &request.workloads {
            for &engine in &request.engines {
                let cells = Self::leave_one_out_cells(request, workload, engine);
                plan.extend(cells.into_iter().map(|cell| match engine {
                    Engine::Libtorch => cell,
                    _ => on_engine(request, &cell, engine),
                }));
            }
        }
        plan.with_alone_cells(request)
    }

    /// The leave-one-out design's cells of `workload` (planned on libtorch) with the set of tricks
    /// that apply on `engine`.
    fn leave_one_out_cells(request: &PlanRequest, workload: WorkloadId, engine: Engine) -> Vec<PlannedCell> {
        let mut plan = Plan { cells: Vec::new() };
        plan.extend(baselines(request, workload));
        // A trick that conflicts with one already together (a second attention backend) is
        // measured alone instead.
        let mut together: Vec<Trick> = Vec::new();
        let mut alone: Vec<Trick> = Vec::new();
        for &t in &request.tricks {
            let cell = planned(request, workload, TrickSet::only(t), throughput(Phase::Train));
            let fits = t.metric() == Metric::Throughput
                && on_engine(request, &cell, engine).not_applicable.is_none()
                && together
                    .iter()
                    .chain([&t])
                    .copied()
                    .collect::<TrickSet>()
                    .conflict_reason_on(engine)
                    .is_none();
            if fits {
                together.push(t)
            } else {
                alone.push(t)
            }
        }
        for trick in alone {
            plan.extend(trick_cells(request, workload, trick));
        }
        let mut cells = Vec::new();
        let all: TrickSet = together.iter().copied().collect();
        if all.has(Trick::DebugOff) {
            cells.push(reference_cell(request, workload, Trick::DebugOff, throughput(Phase::Train)));
        }
        if !all.is_baseline() {
            cells.push(planned(request, workload, all.clone(), throughput(Phase::Train)));
        }
        if together.len() > 1 {
            for &trick in &together {
                let without: TrickSet = all.iter().filter(|&t| t != trick).collect();
                let cell = planned(request, workload, without, throughput(Phase::Train));
                // Without `debug-off`, debugging stays on: that is what leaving it out means.
                cells.push(if trick == Trick::DebugOff { with_reference(cell, trick) } else { cell });
            }
        }
        plan.extend(cells);
        plan.cells
    }

    /// The factorial design: for each workload, the baselines, then every configuration of the
    /// fraction of its factors ([`factorial_factors`]) as a training-throughput cell beside the
    /// baseline (the all-off configuration is the A/A control), on each engine; the tricks that
    /// cannot be factors are measured alone as in the ablation, so none is silently dropped.
    pub fn factorial(request: &PlanRequest) -> Plan {
        let mut plan = Plan { cells: Vec::new() };
        for &workload in &request.workloads {
            plan.extend(baselines(request, workload));
            let (factors, left_out) = factorial_factors(request, workload);
            if let Some(fraction) = Fraction::for_factors(factors.len()) {
                plan.extend(fraction.runs().into_iter().filter(|&run| run != 0).map(|run| {
                    let tricks =
                        (0..factors.len()).filter(|i| run & (1 << i) != 0).map(|i| factors[i]).collect();
                    planned(request, workload, tricks, throughput(Phase::Train))
                }));
            }
            let alone = if factors.len() < MIN_FACTORS {
                request.tricks.clone()
            } else {
                left_out.into_iter().map(|l| l.trick).collect()
            };
            for trick in alone {
                plan.extend(trick_cells(request, workload, trick));
            }
        }
        plan.on_engines(request).with_alone_cells(request)
    }

    /// The factorial design's second half: its cells, then on each engine the configuration its
    /// model predicts best from `results`, where that is not one of the fraction's (then it was
    /// measured with them).
    pub fn factorial_best(request: &PlanRequest, results: &[FactorialAnalysis]) -> Plan {
        let mut plan = Plan::factorial(request);
        for analysis in results.iter().filter(|a| request.workloads.contains(&a.workload)) {
            let Some(best) = analysis.best.as_ref().filter(|b| !b.in_design) else { continue };
            let tricks: TrickSet = best.tricks.iter().copied().collect();
            let cell = planned(request, analysis.workload, tricks, throughput(Phase::Train));
            plan.extend([on_engine(request, &cell, analysis.engine)]);
        }
        plan
    }

    /// The stack design's second half: the ablation's cells, then on each engine of `rankings`
    /// its tricks added cumulatively in that engine's ranking order (best measured first), one
    /// cell per step, for a waterfall of throughput and memory. The first step, {ranking\[0\]}, is
    /// already an ablation cell.
    pub fn stack(request: &PlanRequest, rankings: &[(Engine, Vec<Trick>)]) -> Plan {
        let mut plan = Plan::ablation(request);
        for (engine, ranking) in rankings {
            for &workload in &request.workloads {
                let mut cumulative = TrickSet::baseline();
                for &trick in ranking {
                    let with: TrickSet = cumulative.iter().chain([trick]).collect();
                    // A trick that conflicts with those stacked before it (a second attention
                    // backend, or a pair the engine does not combine) is left out of the stack.
                    if with.conflict_reason_on(*engine).is_some() {
                        continue;
                    }
                    let first = cumulative.is_baseline();
                    cumulative = with;
                    if !first {
                        let cell = planned(request, workload, cumulative.clone(), throughput(Phase::Train));
                        plan.extend([on_engine(request, &cell, *engine)]);
                    }
                }
            }
        }
        plan.with_alone_cells(request)
    }

    /// The speedrun design's second half for `workload` on `engine`: the baseline and
    /// `combination` trained to the target, one time-to-accuracy cell per seed each, both at the
    /// time-to-accuracy batch (the baseline alone when the combination is empty).
    pub fn speedrun(
        request: &PlanRequest,
        workload: WorkloadId,
        combination: &[Trick],
        engine: Engine,
    ) -> Plan {
        let mut plan = Plan { cells: Vec::new() };
        let Some(batch) = request.time_to_accuracy_batch_size else {
            return plan;
        };
        let together: TrickSet = combination.iter().copied().collect();
        for tricks in [TrickSet::baseline(), together] {
            if plan.cells.is_empty() || !tricks.is_baseline() {
                let cells = time_to_accuracy_seeds(request, workload, tricks, batch, None);
                plan.extend(cells.iter().map(|cell| on_engine(request, cell, engine)));
            }
        }
        plan
    }

    /// The batch-sweep design's cells for one workload probed on `engine`: the baseline's training
    /// throughput and time-to-accuracy (per seed, learning rate scaled linearly with the batch and
    /// warmed up) at every batch size that fit, on that engine.
    pub fn batch_sweep(
        request: &PlanRequest,
        workload: WorkloadId,
        fitting: &[usize],
        engine: Engine,
    ) -> Plan {
        let mut plan = Plan { cells: Vec::new() };
        for &batch_size in fitting {
            let at =
                PlanRequest { batch_size, time_to_accuracy_batch_size: Some(batch_size), ..request.clone() };
            let mut cells = vec![planned(&at, workload, TrickSet::baseline(), throughput(Phase::Train))];
            if request.time_to_accuracy_batch_size.is_some() {
                cells.extend(time_to_accuracy_seeds(&at, workload, TrickSet::baseline(), batch_size, None));
            }
            plan.extend(cells.iter().map(|cell| on_engine(&at, cell, engine)));
        }
        plan
    }

    /// The memory probe of `tricks` at `batch_size` on `engine`: a few training steps, then peak
    /// memory or out of memory.
    pub fn probe(
        request: &PlanRequest,
        workload: WorkloadId,
        tricks: TrickSet,
        batch_size: usize,
        engine: Engine,
    ) -> PlannedCell {
        let at = PlanRequest { batch_size, ..request.clone() };
        on_engine(&at, &planned(&at, workload, tricks, CellKind::MemoryProbe), engine)
    }

    /// Smith & Topin's super-convergence comparison: time-to-accuracy of the step schedule and of
    /// 1cycle, per seed (the cell process applies the experiment's own settings), on each engine.
    pub fn super_convergence(request: &PlanRequest) -> Plan {
        let mut plan = Plan { cells: Vec::new() };
        let Some(batch) = request.time_to_accuracy_batch_size else {
            return plan;
        };
        for &workload in &request.workloads {
            for tricks in [TrickSet::baseline(), TrickSet::only(Trick::OneCycle)] {
                plan.extend(time_to_accuracy_seeds(request, workload, tricks, batch, None));
            }
        }
        plan.on_engines(request)
    }

    /// The plan with the baseline and the A/A control measured alone (`baseline-alone`,
    /// `aa-control-alone`) on each engine whose applicable A/A control has beside it an applicable
    /// throughput cell of the process design, where `request`'s paired cells share multi-arm
    /// processes; after the last such control of their workload, kind, batch and seed, each on
    /// every such engine in turn. The baseline and the control are measured among many models
    /// there; a cell of the process design, one model a process, is compared with the baseline
    /// measured in processes of that shape, and the control alone against it is that design's
    /// noise floor.
    fn with_alone_cells(self, request: &PlanRequest) -> Plan {
        if !request.multi_arm {
            return self;
        }
        let setting = |k: &CellKey| (k.workload, k.kind, k.batch_size, k.seed);
        let controls: Vec<&CellKey> = self
            .cells
            .iter()
            .filter(|c| c.not_applicable.is_none() && c.key.aa_control && !c.key.alone)
            .map(|c| &c.key)
            .filter(|k| self.has_process_design(k))
            .collect();
        let mut plan = Plan { cells: Vec::new() };
        for cell in &self.cells {
            plan.extend([cell.clone()]);
            let of_setting: Vec<&CellKey> =
                controls.iter().copied().filter(|k| setting(k) == setting(&cell.key)).collect();
            if of_setting.last().is_some_and(|k| **k == cell.key) {
                for aa_control in [false, true] {
                    plan.extend(of_setting.iter().map(|k| PlannedCell {
                        key: CellKey { aa_control, alone: true, ..(*k).clone() },
                        not_applicable: None,
                    }));
                }
            }
        }
        plan
    }

    /// Whether the plan has an applicable throughput cell of the process design
    /// ([`is_process_design`]) of `key`'s engine, workload and kind.
    fn has_process_design(&self, key: &CellKey) -> bool {
        self.cells.iter().any(|c| {
            let k = &c.key;
            c.not_applicable.is_none()
                && !k.kind.runs_once()
                && (k.engine, k.workload, k.kind) == (key.engine, key.workload, key.kind)
                && is_process_design(k)
        })
    }

    /// Adds `cells` not already planned (the same cell can be asked for by two tricks).
    pub fn extend(&mut self, cells: impl IntoIterator<Item = PlannedCell>) {
        for cell in cells {
            if !self.cells.iter().any(|c| c.key == cell.key) {
                self.cells.push(cell);
            }
        }
    }

    /// The order in which cell processes run: `rounds` rounds over the applicable throughput
    /// cells, each workload's in turn, each opened by a warm-up process of that workload's first
    /// throughput cell (the baseline) whose measurement is discarded, then every one of them
    /// once, in a random order drawn from `order_seed`, the round and the workload (so no cell
    /// holds the same place round after round, and a shard holding a workload's cells runs them
    /// in the order the whole plan would); then each cell that runs once (time-to-accuracy,
    /// memory probe), without a warm-up. The warm-up takes the place where a machine is measured
    /// slow after a pause or a change of work (a CPU's frequency and caches, a GPU's clocks
    /// ramping up), which would otherwise fall on whichever cell opens the round.
    pub fn schedule(&self, rounds: usize, order_seed: u64) -> Vec<Slot> {
        let runnable = |runs_once: bool| {
            self.cells
                .iter()
                .enumerate()
                .filter(move |(_, c)| c.not_applicable.is_none() && c.key.kind.runs_once() == runs_once)
                .map(|(i, _)| i)
        };
        let mut units: Vec<(WorkloadId, Vec<usize>)> = Vec::new();
        for i in runnable(false) {
            let workload = self.cells[i].key.workload;
            match units.iter_mut().find(|(w, _)| *w == workload) {
                Some((_, cells)) => cells.push(i),
                None => units.push((workload, vec![i])),
            }
        }
        let mut slots = Vec::new();
        for round in 0..rounds {
            for (workload, cells) in &units {
                let seed = order_seed ^ (round as u64).wrapping_mul(0x9E37_79B9) ^ ((*workload as u64) << 48);
                let mut order = cells.clone();
                order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
                slots.push(Slot { cell: cells[0], round, position: None });
                slots.extend(order.into_iter().enumerate().map(|(p, cell)| Slot {
                    cell,
                    round,
                    position: Some(p),
                }));
            }
        }
        slots.extend(runnable(true).map(|cell| Slot { cell, round: 0, position: Some(0) }));
        slots
    }

    /// The reference cell the processes of cell `index` are paired with under `design`: the cell
    /// it is compared with ([`reference_position`]) among the plan's applicable cells, where both
    /// time throughput of the same kind and batch size and every trick on either side can be
    /// paired ([`crate::tricks::Pairing`]); `None` where the cell keeps processes of its own (a
    /// cell measured alone always does).
    pub fn paired_reference(&self, index: usize, design: Design) -> Option<CellKey> {
        let cell = &self.cells[index];
        let key = &cell.key;
        if cell.not_applicable.is_some() || key.kind.runs_once() || key.alone || !is_compared(key) {
            return None;
        }
        let candidates: Vec<&CellKey> =
            self.cells.iter().filter(|c| c.not_applicable.is_none()).map(|c| &c.key).collect();
        let reference = candidates[reference_position(key, design, candidates.iter().copied())?];
        let pairable = |k: &CellKey| !is_process_design(k) && !k.alone;
        let alike = (reference.kind, reference.batch_size) == (key.kind, key.batch_size);
        (alike && pairable(key) && pairable(reference)).then(|| reference.clone())
    }

    /// Processes a cell needs: `rounds` for throughput cells, one for the others.
    pub fn processes_per_cell(key: &CellKey, rounds: usize) -> usize {
        if key.kind.runs_once() {
            1
        } else {
            rounds
        }
    }
}

/// The factors of the factorial design of `workload` (in catalogue order, as the analysis letters
/// them) and the tricks of `request` left out of it, each with why: a trick that is not judged
/// against the baseline by training throughput or memory among other arms, one not applicable on
/// an engine of `request`, one that cannot share a configuration with the factors before it, and
/// those beyond [`factorial::MAX_FACTORS`] (the analysis gives the same reasons).
pub fn factorial_factors(request: &PlanRequest, workload: WorkloadId) -> (Vec<Trick>, Vec<LeftOutTrick>) {
    let (mut factors, mut left_out) = (Vec::new(), Vec::new());
    for &trick in &request.tricks {
        let cell = planned(request, workload, TrickSet::only(trick), throughput(Phase::Train));
        let not_applicable = || {
            request.engines.iter().find_map(|&engine| {
                let reason = on_engine(request, &cell, engine).not_applicable?;
                Some(format!("not applicable on {engine}: {reason}"))
            })
        };
        let reason = factorial::left_out_reason(trick, not_applicable(), &factors, &request.engines);
        match reason {
            Some(reason) => left_out.push(LeftOutTrick { trick, reason }),
            None => factors.push(trick),
        }
    }
    factors.sort();
    (factors, left_out)
}

/// `cell` planned on `engine`: not applicable where the engine cannot apply one of its tricks (or
/// its reference's), where the libtorch cell cannot run for a reason of the workload or the data,
/// or where a reference cell can run on no engine ([`reference_refusal`]).
fn on_engine(request: &PlanRequest, cell: &PlannedCell, engine: Engine) -> PlannedCell {
    let key = CellKey { engine, ..cell.key.clone() };
    let tricks: TrickSet = key.tricks.iter().chain(key.reference_for).collect();
    PlannedCell { not_applicable: why_not(request, &key, &tricks).or_else(|| reference_refusal(&key)), key }
}

/// Why the cell `key` cannot run with `tricks` on its engine, if it cannot: the GPT's text is
/// missing, a trick does not apply to the workload, device or engine, or its data source is
/// missing.
fn why_not(request: &PlanRequest, key: &CellKey, tricks: &TrickSet) -> Option<String> {
    let missing_text = request.missing_text.as_ref().filter(|_| key.workload.family() == Family::CharGpt);
    missing_text
        .cloned()
        .or_else(|| own_model_refusal(request, key, tricks))
        .or_else(|| tricks.not_applicable_reason_on(key.engine, key.workload, &request.hardware))
        .or_else(|| key.tricks.missing_source_reason(request.has_images))
}

/// Why the cell `key` of the user's model cannot run with `tricks`, if it cannot: its engine
/// cannot train the model, or a trick does not fit what the model is.
fn own_model_refusal(request: &PlanRequest, key: &CellKey, tricks: &TrickSet) -> Option<String> {
    let model = request.model.as_ref().filter(|_| key.workload == WorkloadId::Model)?;
    if key.kind == CellKind::TimeToAccuracy && request.time_to_accuracy_batch_size.is_none() {
        return Some(format!(
            "{}: your model trains to a target only where one is set for it (--target, a test accuracy \
             on CIFAR-10's images from --data or --images)",
            model.name
        ));
    }
    if key.kind == CellKind::TimeToAccuracy && key.engine == Engine::Pytorch && model.dataset.is_some() {
        return Some(format!(
            "{}: the PyTorch engine trains your model to a target on CIFAR-10's images; its own dataset() \
             is trained on libtorch",
            model.name
        ));
    }
    user::engine_refusal(model, key.engine)
        .or_else(|| tricks.iter().find_map(|t| user::not_applicable(model, t, key.engine)))
}

/// The phase a trick's metric is measured in.
fn phase_of(trick: Trick) -> Phase {
    if trick.metric() == Metric::EvalThroughput {
        Phase::Eval
    } else {
        Phase::Train
    }
}

/// A throughput cell kind.
fn throughput(phase: Phase) -> CellKind {
    CellKind::Throughput { phase }
}

/// A cell of `workload` with `tricks`, marked not applicable where it cannot run.
fn planned(request: &PlanRequest, workload: WorkloadId, tricks: TrickSet, kind: CellKind) -> PlannedCell {
    let batch_size = match kind {
        CellKind::TimeToAccuracy => request.time_to_accuracy_batch_size.unwrap_or(request.batch_size),
        CellKind::Throughput { .. } | CellKind::MemoryProbe => request.batch_size,
    };
    let key = CellKey {
        workload,
        tricks,
        batch_size,
        seed: request.seed,
        kind,
        reference_for: None,
        aa_control: false,
        alone: false,
        engine: Engine::Libtorch,
    };
    PlannedCell { not_applicable: why_not(request, &key, &key.tricks), key }
}

/// The reference ("off") cell of `trick`, whose "off" side is not the plain recipe: the baseline
/// with the trick's reference switched on (anomaly detection on, Adam with L2, no BatchNorm, raw
/// inputs).
fn reference_cell(request: &PlanRequest, workload: WorkloadId, trick: Trick, kind: CellKind) -> PlannedCell {
    let cell = planned(request, workload, TrickSet::baseline(), kind);
    with_reference(cell, trick)
}

/// `cell` as the reference cell of `trick`, not applicable where [`reference_refusal`] says.
fn with_reference(mut cell: PlannedCell, trick: Trick) -> PlannedCell {
    cell.key.reference_for = Some(trick);
    if cell.not_applicable.is_none() {
        cell.not_applicable = reference_refusal(&cell.key);
    }
    cell
}

/// Why the reference cell `key` cannot run, on any engine, if it cannot: a CUDA graph cannot be
/// captured with anomaly detection on (it reads every gradient to the host), nor across
/// DataParallel's devices.
fn reference_refusal(key: &CellKey) -> Option<String> {
    let why = match key.reference_for? {
        Trick::DebugOff => {
            "anomaly detection checks every gradient for NaN on the host, which a CUDA graph capture \
             forbids"
        }
        Trick::Ddp => "DataParallel copies weights and gradients between GPUs from the host every step",
        _ => return None,
    };
    key.tricks.has(Trick::CudaGraphs).then(|| format!("{}: {why}", Trick::CudaGraphs))
}

/// The baselines of `workload`: training throughput, its A/A control when a trick is judged by
/// training throughput or memory, evaluation throughput when an evaluation trick is asked for,
/// and time-to-accuracy per seed when a trick is trained to the target there.
fn baselines(request: &PlanRequest, workload: WorkloadId) -> Vec<PlannedCell> {
    let train = planned(request, workload, TrickSet::baseline(), throughput(Phase::Train));
    let mut cells = vec![train.clone()];
    if request.tricks.iter().any(|t| matches!(t.metric(), Metric::Throughput | Metric::Memory)) {
        let mut control = train;
        control.key.aa_control = true;
        cells.push(control);
    }
    if request.tricks.iter().any(|&t| phase_of(t) == Phase::Eval) {
        cells.push(planned(request, workload, TrickSet::baseline(), throughput(Phase::Eval)));
    }
    if let Some(batch) = request.time_to_accuracy_batch_size.filter(|_| trains_to_target(request, workload)) {
        cells.extend(time_to_accuracy_seeds(request, workload, TrickSet::baseline(), batch, None));
    }
    cells
}

/// Whether a trick of `request` that applies to `workload` on one of its engines is trained to
/// the target there, and so compared with the baseline's time to accuracy.
fn trains_to_target(request: &PlanRequest, workload: WorkloadId) -> bool {
    request.tricks.iter().any(|&t| {
        let applies = request.engines.iter().any(|&engine| {
            !matches!(
                t.applicability_on(engine, workload, &request.hardware),
                Applicability::NotApplicable(_)
            )
        });
        (t.metric() == Metric::TimeToAccuracy || also_trained(request, t)) && applies
    })
}

/// Whether `trick`, judged by throughput, is trained to the target beside its throughput cell in
/// `request` ([`Trick::ALSO_TIME_TO_ACCURACY`]): `fp8-matmul` always; `amp`, `amp-bf16`, `tf32`
/// and `torch-compile` where `request` trains a convergence trick to the target too.
fn also_trained(request: &PlanRequest, trick: Trick) -> bool {
    let convergence = request.tricks.iter().any(|t| t.metric() == Metric::TimeToAccuracy);
    trick.also_time_to_accuracy() && (convergence || !Trick::QUALITY_CHECKED.contains(&trick))
}

/// Time-to-accuracy cells of `tricks` at `batch_size`, one per seed (as the reference cell of
/// `reference_for` when given).
fn time_to_accuracy_seeds(
    request: &PlanRequest,
    workload: WorkloadId,
    tricks: TrickSet,
    batch_size: usize,
    reference_for: Option<Trick>,
) -> Vec<PlannedCell> {
    (0..request.time_to_accuracy_seeds.max(1) as u64)
        .map(|i| {
            let at = PlanRequest {
                seed: request.seed + i,
                time_to_accuracy_batch_size: Some(batch_size),
                ..request.clone()
            };
            let cell = planned(&at, workload, tricks.clone(), CellKind::TimeToAccuracy);
            match reference_for {
                Some(trick) => with_reference(cell, trick),
                None => cell,
            }
        })
        .collect()
}

/// The cells that measure `trick` alone, as its metric asks: throughput (training or evaluation)
/// or memory cells (with time-to-accuracy cells per seed too for the tricks also trained to the
/// target), or time-to-accuracy cells per seed; each with the reference cells it is compared with
/// when those are not the plain baselines (a reference of its own, or the cell with another trick
/// in its place). On a CUDA GPU a forced attention backend and its reference run under
/// `amp-bf16` ([`Trick::ablation_set`]).
fn trick_cells(request: &PlanRequest, workload: WorkloadId, trick: Trick) -> Vec<PlannedCell> {
    if let Applicability::NotApplicable(_) = trick.applicability(workload, &request.hardware) {
        // One cell says why; no reference or comparison cell is trained for a trick that cannot run.
        let kind = match trick.metric() {
            Metric::TimeToAccuracy => CellKind::TimeToAccuracy,
            Metric::Throughput | Metric::EvalThroughput | Metric::Memory => throughput(phase_of(trick)),
        };
        let mut cells = vec![planned(request, workload, TrickSet::only(trick), kind)];
        // A trick only another engine runs (torch-compile) is trained to the target there too.
        let elsewhere = request.engines.iter().any(|&engine| {
            trick.applicability_on(engine, workload, &request.hardware) == Applicability::Applies
        });
        if let Some(batch) =
            request.time_to_accuracy_batch_size.filter(|_| elsewhere && also_trained(request, trick))
        {
            cells.extend(time_to_accuracy_seeds(request, workload, TrickSet::only(trick), batch, None));
        }
        return cells;
    }
    let only = trick.ablation_set(&request.hardware);
    let mut cells = Vec::new();
    match trick.metric() {
        Metric::Throughput | Metric::EvalThroughput | Metric::Memory => {
            let kind = throughput(phase_of(trick));
            if trick.reference_label().is_some() {
                cells.push(reference_cell(request, workload, trick, kind));
            }
            if let Some(swapped) = only.swapped_reference() {
                cells.push(planned(request, workload, swapped, kind));
            }
            cells.push(planned(request, workload, only.clone(), kind));
            if let Some(batch) = request.time_to_accuracy_batch_size.filter(|_| also_trained(request, trick))
            {
                cells.extend(time_to_accuracy_seeds(request, workload, only, batch, None));
            }
        }
        Metric::TimeToAccuracy => {
            // The one cell of a trick that cannot be measured here, with the reason.
            let unmeasurable = |why: &str| {
                let mut cell = planned(request, workload, only.clone(), CellKind::TimeToAccuracy);
                cell.not_applicable.get_or_insert_with(|| format!("{trick}: {why}"));
                vec![cell]
            };
            let Some(tta_batch) = request.time_to_accuracy_batch_size else {
                return unmeasurable("judged by time-to-accuracy, which --no-time-to-accuracy switched off");
            };
            let batch = match (trick, request.max_batch_size) {
                (Trick::Lars | Trick::Lamb, _) => request.large_batch_size,
                (Trick::MaxBatch, Some(b)) => b,
                (Trick::MaxBatch, None) => {
                    return unmeasurable("no batch size was probed (the probe found none that fits)")
                }
                _ => tta_batch,
            };
            if trick.reference_label().is_some() {
                cells.extend(time_to_accuracy_seeds(
                    request,
                    workload,
                    TrickSet::baseline(),
                    batch,
                    Some(trick),
                ));
            } else if batch != tta_batch && trick != Trick::MaxBatch {
                // lars and lamb are compared with SGD at the same large batch.
                cells.extend(time_to_accuracy_seeds(request, workload, TrickSet::baseline(), batch, None));
            }
            cells.extend(time_to_accuracy_seeds(request, workload, only.clone(), batch, None));
            if trick == Trick::MaxBatch {
                // Also how fast the largest batch trains, against the recipe's batch.
                let at = PlanRequest { batch_size: batch, ..request.clone() };
                cells.push(planned(&at, workload, only, throughput(Phase::Train)));
            }
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::profile::ProfileName;
    use crate::device::DeviceSpec;

    fn request(tricks: Vec<Trick>) -> PlanRequest {
        let quick = ProfileName::Quick.settings(Family::CifarResnet);
        PlanRequest::new(vec![WorkloadId::Resnet20], tricks, Hardware::probe(DeviceSpec::Cpu), &quick)
    }

    #[test]
    fn ablation_pairs_each_trick_with_a_baseline_in_its_phase() {
        let plan = Plan::ablation(&request(vec![Trick::ChannelsLast, Trick::NoGradEval, Trick::Amp]));
        let ids: Vec<String> = plan.cells.iter().map(|c| c.key.id().to_string()).collect();
        assert_eq!(
            ids,
            [
                "resnet20/baseline/b128/s0/train",
                "resnet20/aa-control/b128/s0/train",
                "resnet20/baseline/b128/s0/eval",
                "resnet20/channels-last/b128/s0/train",
                "resnet20/no-grad-eval/b128/s0/eval",
                "resnet20/amp/b128/s0/train",
            ]
        );
        let amp = &plan.cells[5];
        assert!(amp.not_applicable.as_deref().unwrap().contains("needs a CUDA GPU"));
    }

    #[test]
    fn a_users_model_is_planned_on_both_engines_by_what_it_is_and_without_an_export_on_pytorch_only() {
        let mut model = crate::results::model::fixtures::cnn();
        let quick = ProfileName::Quick.settings(Family::UserModel);
        let tricks = vec![Trick::ChannelsLast, Trick::SdpaMath, Trick::Checkpointing, Trick::OneCycle];
        let mut request =
            PlanRequest::new(vec![WorkloadId::Model], tricks, Hardware::probe(DeviceSpec::Cpu), &quick);
        request.engines = vec![Engine::Libtorch, Engine::Pytorch];
        request.time_to_accuracy_batch_size = None;
        request.model = Some(model.clone());
        let reasons = |request: &PlanRequest| -> Vec<(String, Option<String>)> {
            Plan::ablation(request)
                .cells
                .into_iter()
                .map(|c| (c.key.id().to_string(), c.not_applicable))
                .collect()
        };
        let planned = reasons(&request);
        let reason =
            |id: &str| planned.iter().find(|(i, _)| i == id).unwrap_or_else(|| panic!("{id}")).1.clone();
        for suffix in ["", "@pytorch"] {
            assert_eq!(reason(&format!("model/baseline/b32/s0/train{suffix}")), None);
            assert_eq!(reason(&format!("model/channels-last/b32/s0/train{suffix}")), None);
            let sdpa = reason(&format!("model/sdpa-math/b32/s0/train{suffix}")).unwrap();
            assert!(sdpa.contains("does not call scaled_dot_product_attention"), "{sdpa}");
            assert!(reason(&format!("model/checkpointing/b32/s0/train{suffix}"))
                .unwrap()
                .starts_with("cnn.py: "));
        }
        let tta = reason("model/one-cycle/b32/s0/tta").unwrap();
        assert!(tta.contains("trains to a target only where one is set for it"), "{tta}");
        let targeted = PlanRequest { time_to_accuracy_batch_size: Some(64), ..request.clone() };
        let tricks = vec![Trick::OneCycle, Trick::LabelSmoothing];
        let plan = Plan::ablation(&PlanRequest { tricks, ..targeted });
        let tta: Vec<(String, bool)> = plan
            .cells
            .iter()
            .filter(|c| c.key.kind == CellKind::TimeToAccuracy)
            .map(|c| (c.key.id().to_string(), c.not_applicable.is_none()))
            .collect();
        let expected = [("baseline", true), ("one-cycle", true), ("label-smoothing", false)]
            .into_iter()
            .flat_map(|(set, runs)| ["", "@pytorch"].map(|on| (format!("model/{set}/b64/s0/tta{on}"), runs)))
            .collect::<Vec<_>>();
        assert_eq!(tta, expected, "trained to the target on both engines, label smoothing not on its loss");
        model.export =
            crate::results::model::Export { method: None, loss_float64: None, reason: Some("x".into()) };
        request.model = Some(model);
        let planned = reasons(&request);
        let reason = |id: &str| planned.iter().find(|(i, _)| i == id).unwrap().1.clone();
        assert!(reason("model/baseline/b32/s0/train")
            .unwrap()
            .contains("could not be exported to TorchScript"));
        assert_eq!(reason("model/channels-last/b32/s0/train@pytorch"), None);
        let probe = |engine| Plan::probe(&request, WorkloadId::Model, TrickSet::baseline(), 512, engine);
        assert_eq!(probe(Engine::Pytorch).key.id().to_string(), "model/baseline/b512/s0/probe@pytorch");
        assert_eq!(probe(Engine::Pytorch).not_applicable, None);
        assert!(probe(Engine::Libtorch)
            .not_applicable
            .unwrap()
            .contains("could not be exported to TorchScript"));
    }

    #[test]
    fn the_baseline_trains_to_the_target_only_beside_a_trick_that_does() {
        let has_tta = |tricks| {
            Plan::ablation(&request(tricks))
                .cells
                .iter()
                .any(|c| c.key.id() == "resnet20/baseline/b64/s0/tta")
        };
        assert!(!has_tta(vec![Trick::ChannelsLast, Trick::Checkpointing]), "throughput and memory only");
        assert!(!has_tta(vec![Trick::Fp8Matmul]), "fp8-matmul does not apply to a ResNet");
        assert!(has_tta(vec![Trick::ChannelsLast, Trick::OneCycle]));
    }

    #[test]
    fn leave_one_out_removes_each_applicable_training_trick_from_the_full_set() {
        let plan = Plan::leave_one_out(&request(vec![
            Trick::ChannelsLast,
            Trick::ZeroGradNone,
            Trick::NoGradEval,
            Trick::Amp,
        ]));
        let ids: Vec<String> = plan.cells.iter().map(|c| c.key.id().to_string()).collect();
        assert_eq!(
            ids,
            [
                "resnet20/baseline/b128/s0/train",
                "resnet20/aa-control/b128/s0/train",
                "resnet20/baseline/b128/s0/eval",
                "resnet20/no-grad-eval/b128/s0/eval",
                "resnet20/amp/b128/s0/train",
                "resnet20/zero-grad-none+channels-last/b128/s0/train",
                "resnet20/zero-grad-none/b128/s0/train",
                "resnet20/channels-last/b128/s0/train",
            ]
        );
    }

    #[test]
    fn forced_attention_backends_are_measured_against_pytorchs_choice_under_bf16_on_a_gpu() {
        let quick = ProfileName::Quick.settings(Family::CharGpt);
        let tricks = vec![Trick::SdpaFlash, Trick::SdpaMath];
        let labels = |device: DeviceSpec| {
            let hardware = Hardware { device, ..Hardware::with_gpus(1) };
            let request = PlanRequest::new(vec![WorkloadId::GptMini], tricks.clone(), hardware, &quick);
            let plan = Plan::ablation(&PlanRequest { time_to_accuracy_batch_size: None, ..request });
            plan.cells.iter().map(|c| (c.key.tricks.label(), c.not_applicable.clone())).collect::<Vec<_>>()
        };
        let label = |l: &str| (l.to_owned(), None);
        assert_eq!(
            labels(DeviceSpec::Cuda(0)),
            [
                label("baseline"),
                label("baseline"),
                label("amp-bf16+flash-attention"),
                label("amp-bf16+sdpa-flash"),
                label("amp-bf16+sdpa-math"),
            ]
        );
        let on_cpu = labels(DeviceSpec::Cpu);
        let on_cpu: Vec<&str> = on_cpu.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(on_cpu, ["baseline", "baseline", "flash-attention", "sdpa-flash", "sdpa-math"]);
    }

    #[test]
    fn a_forced_cudnn_attention_the_gpus_cudnn_refuses_is_not_applicable_on_both_engines() {
        let quick = ProfileName::Quick.settings(Family::CharGpt);
        let plan_on = |cudnn_version| {
            let hardware = Hardware { cudnn_version, ..Hardware::with_gpus(1) };
            let request =
                PlanRequest::new(vec![WorkloadId::GptShakespeare], vec![Trick::SdpaCudnn], hardware, &quick);
            let both = vec![Engine::Libtorch, Engine::Pytorch];
            Plan::ablation(&PlanRequest { time_to_accuracy_batch_size: None, engines: both, ..request })
        };
        let forced = |plan: &Plan| -> Vec<(Engine, Option<String>)> {
            let cells = plan.cells.iter().filter(|c| c.key.tricks.has(Trick::SdpaCudnn));
            cells.map(|c| (c.key.engine, c.not_applicable.clone())).collect()
        };
        let refused = forced(&plan_on(Some(91300)));
        assert_eq!(refused.iter().map(|(e, _)| *e).collect::<Vec<_>>(), [Engine::Libtorch, Engine::Pytorch]);
        for (engine, why) in &refused {
            let why = why.as_deref().unwrap_or_else(|| panic!("{engine}: cuDNN 9.13 refuses dropout"));
            assert!(
                why.starts_with("sdpa-cudnn: cuDNN 9.13.0 has no attention kernel with dropout"),
                "{why}"
            );
        }
        let accepted = forced(&plan_on(Some(91900)));
        assert!(accepted.len() == 2 && accepted.iter().all(|(_, why)| why.is_none()), "{accepted:?}");
    }

    #[test]
    fn debug_off_is_measured_against_a_debugging_on_reference() {
        let plan = Plan::ablation(&request(vec![Trick::DebugOff]));
        let ids: Vec<String> = plan.cells.iter().map(|c| c.key.id().to_string()).collect();
        assert_eq!(
            ids,
            [
                "resnet20/baseline/b128/s0/train",
                "resnet20/aa-control/b128/s0/train",
                "resnet20/baseline+debug-apis-on/b128/s0/train",
                "resnet20/debug-off/b128/s0/train",
            ]
        );
        let loo = Plan::leave_one_out(&request(vec![Trick::DebugOff, Trick::ZeroGradNone]));
        let without_debug_off = loo.cells.iter().find(|c| c.key.tricks.label() == "zero-grad-none").unwrap();
        assert!(
            without_debug_off.key.is_reference_for(Trick::DebugOff),
            "leaving debug-off out leaves debugging on"
        );
    }

    #[test]
    fn cuda_graphs_with_debugging_on_is_not_applicable_with_the_reason() {
        let on_gpu = PlanRequest {
            hardware: Hardware::probe(DeviceSpec::Cuda(0)),
            ..request(vec![Trick::DebugOff, Trick::CudaGraphs, Trick::ZeroGradNone])
        };
        let loo = Plan::leave_one_out(&on_gpu);
        let cell = |label: &str, debug: bool| {
            loo.cells
                .iter()
                .find(|c| c.key.tricks.label() == label && c.key.is_reference_for(Trick::DebugOff) == debug)
                .unwrap()
        };
        let with_debugging = cell("zero-grad-none+cuda-graphs", true);
        let reason = with_debugging.not_applicable.as_deref().expect("capture with anomaly mode cannot run");
        assert!(reason.starts_with("cuda-graphs: "), "{reason}");
        if crate::ffi::cuda_graphs_compiled() {
            assert!(reason.contains("anomaly detection"), "{reason}");
            assert_eq!(cell("zero-grad-none+debug-off+cuda-graphs", false).not_applicable, None);
            assert_eq!(cell("debug-off+cuda-graphs", false).not_applicable, None);
        }
        // PyTorch captures CUDA graphs whatever this build's shim can do.
        let engines = vec![Engine::Libtorch, Engine::Pytorch];
        let both = PlanRequest { engines, hardware: Hardware::with_gpus(1), ..on_gpu };
        let on_both = Plan::leave_one_out(&both);
        let in_pytorch = |label: &str, debug: bool| {
            on_both
                .cells
                .iter()
                .find(|c| {
                    c.key.engine == Engine::Pytorch
                        && c.key.tricks.label() == label
                        && c.key.is_reference_for(Trick::DebugOff) == debug
                })
                .unwrap()
        };
        let reference = in_pytorch("zero-grad-none+cuda-graphs", true).not_applicable.as_deref();
        assert!(reference.is_some_and(|r| r.starts_with("cuda-graphs: ")), "{reference:?}");
        assert_eq!(in_pytorch("debug-off+cuda-graphs", false).not_applicable, None);
        assert!(reference.is_some_and(|r| r.contains("anomaly detection")), "{reference:?}");
        let on_cpu = Plan::ablation(&request(vec![Trick::CudaGraphs]));
        let cuda_graphs = on_cpu.cells.iter().find(|c| c.key.tricks.has(Trick::CudaGraphs)).unwrap();
        let reason = cuda_graphs.not_applicable.as_deref().unwrap();
        assert!(reason.contains("needs a CUDA GPU"), "{reason}");
    }

    #[test]
    fn convergence_tricks_get_time_to_accuracy_cells_per_seed_with_their_references() {
        let r = PlanRequest {
            time_to_accuracy_seeds: 2,
            ..request(vec![
                Trick::OneCycle,
                Trick::Adamw,
                Trick::Lars,
                Trick::BatchNorm,
                Trick::Checkpointing,
            ])
        };
        let ids: Vec<String> = Plan::ablation(&r).cells.iter().map(|c| c.key.id().to_string()).collect();
        assert_eq!(
            ids,
            [
                "resnet20/baseline/b128/s0/train",
                "resnet20/aa-control/b128/s0/train",
                "resnet20/baseline/b64/s0/tta",
                "resnet20/baseline/b64/s1/tta",
                "resnet20/one-cycle/b64/s0/tta",
                "resnet20/one-cycle/b64/s1/tta",
                "resnet20/baseline+adam-l2/b64/s0/tta",
                "resnet20/baseline+adam-l2/b64/s1/tta",
                "resnet20/adamw/b64/s0/tta",
                "resnet20/adamw/b64/s1/tta",
                "resnet20/baseline/b512/s0/tta",
                "resnet20/baseline/b512/s1/tta",
                "resnet20/lars/b512/s0/tta",
                "resnet20/lars/b512/s1/tta",
                "resnet20/baseline+no-batch-norm/b64/s0/tta",
                "resnet20/baseline+no-batch-norm/b64/s1/tta",
                "resnet20/batch-norm/b64/s0/tta",
                "resnet20/batch-norm/b64/s1/tta",
                "resnet20/checkpointing/b128/s0/train",
            ]
        );
    }

    #[test]
    fn airbench_s_tricks_get_time_to_accuracy_cells_against_the_baseline_and_stack() {
        let airbench = vec![Trick::LabelSmoothing, Trick::EmaWeights, Trick::FlipTta, Trick::BnMomentum];
        let ids = |plan: Plan| -> Vec<String> { plan.cells.iter().map(|c| c.key.id().to_string()).collect() };
        assert_eq!(
            ids(Plan::ablation(&request(airbench.clone()))),
            [
                "resnet20/baseline/b128/s0/train",
                "resnet20/baseline/b64/s0/tta",
                "resnet20/label-smoothing/b64/s0/tta",
                "resnet20/ema-weights/b64/s0/tta",
                "resnet20/flip-tta/b64/s0/tta",
                "resnet20/bn-momentum/b64/s0/tta",
            ]
        );
        // The stack adds the cumulative sets' training throughput, which the EMA update pays.
        let stacked = ids(Plan::stack(&request(airbench.clone()), &[(Engine::Libtorch, airbench.clone())]));
        let all_four = "resnet20/label-smoothing+ema-weights+flip-tta+bn-momentum/b128/s0/train";
        assert!(stacked.contains(&all_four.to_owned()), "{stacked:?}");
    }

    #[test]
    fn fp8_matmul_is_timed_and_trained_to_the_target_where_it_applies() {
        let hopper = Hardware::with_gpus(1);
        let quick = ProfileName::Quick.settings(Family::CharGpt);
        let gpt = |tricks: Vec<Trick>, hardware: Hardware| {
            let request = PlanRequest {
                time_to_accuracy_seeds: 2,
                ..PlanRequest::new(vec![WorkloadId::GptMini], tricks, hardware, &quick)
            };
            let plan = Plan::ablation(&request);
            plan.cells
                .iter()
                .map(|c| (c.key.id().to_string(), c.not_applicable.is_some()))
                .collect::<Vec<_>>()
        };
        let batch = quick.batch_size;
        let tta_batch = quick.tta.batch_size;
        let fp8: Vec<(String, bool)> = gpt(vec![Trick::Fp8Matmul], hopper.clone())
            .into_iter()
            .skip_while(|(id, _)| !id.contains("fp8"))
            .collect();
        assert_eq!(
            fp8,
            [
                (format!("gpt-mini/fp8-matmul/b{batch}/s0/train"), false),
                (format!("gpt-mini/fp8-matmul/b{tta_batch}/s0/tta"), false),
                (format!("gpt-mini/fp8-matmul/b{tta_batch}/s1/tta"), false),
            ]
        );
        let cpu = gpt(vec![Trick::Fp8Matmul], Hardware::with_gpus(0));
        let cpu_fp8: Vec<&(String, bool)> = cpu.iter().filter(|(id, _)| id.contains("fp8")).collect();
        assert_eq!(cpu_fp8, [&(format!("gpt-mini/fp8-matmul/b{batch}/s0/train"), true)], "one cell says why");
        let amp = gpt(vec![Trick::AmpBf16], hopper);
        assert!(!amp.iter().any(|(id, _)| id.contains("amp-bf16") && id.ends_with("/tta")));
    }

    #[test]
    fn max_batch_needs_a_probed_size_and_time_to_accuracy() {
        let unprobed = Plan::ablation(&request(vec![Trick::MaxBatch]));
        let cell = unprobed.cells.iter().find(|c| c.key.tricks.has(Trick::MaxBatch)).unwrap();
        assert!(cell.not_applicable.as_deref().unwrap().contains("no batch size was probed"));
        let probed =
            Plan::ablation(&PlanRequest { max_batch_size: Some(2048), ..request(vec![Trick::MaxBatch]) });
        let ids: Vec<String> = probed.cells.iter().skip(2).map(|c| c.key.id().to_string()).collect();
        assert_eq!(ids, ["resnet20/max-batch/b2048/s0/tta", "resnet20/max-batch/b2048/s0/train"]);
        let no_tta = PlanRequest { time_to_accuracy_batch_size: None, ..request(vec![Trick::GradClipping]) };
        let plan = Plan::ablation(&no_tta);
        let reason = plan.cells[1].not_applicable.as_deref().unwrap();
        assert!(reason.contains("--no-time-to-accuracy"), "{reason}");
    }

    #[test]
    fn batch_sweep_measures_every_fitting_batch_and_probes_are_single_processes() {
        let plan = Plan::batch_sweep(&request(vec![]), WorkloadId::Resnet20, &[64, 128], Engine::Libtorch);
        let ids: Vec<String> = plan.cells.iter().map(|c| c.key.id().to_string()).collect();
        assert_eq!(
            ids,
            [
                "resnet20/baseline/b64/s0/train",
                "resnet20/baseline/b64/s0/tta",
                "resnet20/baseline/b128/s0/train",
                "resnet20/baseline/b128/s0/tta"
            ]
        );
        let probe =
            Plan::probe(&request(vec![]), WorkloadId::Resnet20, TrickSet::baseline(), 256, Engine::Libtorch);
        assert_eq!(probe.key.id(), "resnet20/baseline/b256/s0/probe");
        assert_eq!(Plan::processes_per_cell(&probe.key, 3), 1);
    }

    #[test]
    fn super_convergence_compares_the_step_schedule_with_one_cycle_per_seed() {
        let r = PlanRequest {
            workloads: vec![WorkloadId::Resnet56],
            time_to_accuracy_seeds: 2,
            ..request(vec![])
        };
        let ids: Vec<String> =
            Plan::super_convergence(&r).cells.iter().map(|c| c.key.id().to_string()).collect();
        assert_eq!(
            ids,
            [
                "resnet56/baseline/b64/s0/tta",
                "resnet56/baseline/b64/s1/tta",
                "resnet56/one-cycle/b64/s0/tta",
                "resnet56/one-cycle/b64/s1/tta"
            ]
        );
    }

    #[test]
    fn stack_adds_tricks_in_ranking_order() {
        let r = request(vec![Trick::ChannelsLast, Trick::ZeroGradNone, Trick::AvoidSync]);
        let ranking = vec![Trick::ZeroGradNone, Trick::ChannelsLast, Trick::AvoidSync];
        let plan = Plan::stack(&r, &[(Engine::Libtorch, ranking)]);
        let extra: Vec<String> =
            plan.cells[Plan::ablation(&r).cells.len()..].iter().map(|c| c.key.tricks.label()).collect();
        assert_eq!(extra, ["zero-grad-none+channels-last", "avoid-sync+zero-grad-none+channels-last"]);
    }

    #[test]
    fn each_engine_stacks_its_own_ranking_and_leaves_out_what_it_cannot_combine() {
        let tricks =
            vec![Trick::ChannelsLast, Trick::TorchCompile, Trick::ZeroGradNone, Trick::Checkpointing];
        let r = PlanRequest { engines: vec![Engine::Libtorch, Engine::Pytorch], ..request(tricks) };
        let rankings = [
            (Engine::Libtorch, vec![Trick::ChannelsLast, Trick::ZeroGradNone]),
            (Engine::Pytorch, vec![Trick::TorchCompile, Trick::Checkpointing, Trick::ChannelsLast]),
        ];
        let plan = Plan::stack(&r, &rankings);
        let extra: Vec<String> =
            plan.cells[Plan::ablation(&r).cells.len()..].iter().map(|c| c.key.id().to_string()).collect();
        assert_eq!(
            extra,
            [
                "resnet20/zero-grad-none+channels-last/b128/s0/train",
                "resnet20/channels-last+torch-compile/b128/s0/train@pytorch",
            ],
            "checkpointing is left out of the PyTorch stack: the engine does not combine it with torch-compile"
        );
        assert!(plan.cells.iter().all(|c| c.not_applicable.is_none() || c.key.engine == Engine::Libtorch));
    }

    #[test]
    fn each_round_opens_with_a_warm_up_then_runs_every_cell_once_in_a_seeded_order() {
        let tricks = vec![Trick::ChannelsLast, Trick::ZeroGradNone, Trick::Amp, Trick::OneCycle];
        let plan = Plan::ablation(&request(tricks));
        // cells: 0 baseline train, 1 A/A control, 2 baseline tta, 3 channels-last, 4 zero-grad-none,
        // 5 amp (n/a on CPU), 6 one-cycle tta
        assert!(plan.cells[1].key.aa_control && plan.cells[5].not_applicable.is_some());
        assert_eq!(plan.cells.len(), 7);
        let slots = plan.schedule(3, 7);
        assert_eq!(slots, plan.schedule(3, 7), "the order is a function of the seed");
        for round in 0..3 {
            let this: Vec<&Slot> =
                slots.iter().filter(|s| s.round == round && ![2, 6].contains(&s.cell)).collect();
            assert!(this[0].is_warmup() && this[1..].iter().all(|s| !s.is_warmup()), "{this:?}");
            assert_eq!(this[0].cell, 0, "the warm-up runs the baseline");
            let mut cells: Vec<usize> = this[1..].iter().map(|s| s.cell).collect();
            let positions: Vec<Option<usize>> = this[1..].iter().map(|s| s.position).collect();
            assert_eq!(positions, [Some(0), Some(1), Some(2), Some(3)]);
            cells.sort();
            assert_eq!(cells, [0, 1, 3, 4], "every applicable throughput cell once");
        }
        let firsts: std::collections::BTreeSet<usize> =
            (0..20).map(|seed| plan.schedule(1, seed)[1].cell).collect();
        assert!(firsts.len() > 1, "no cell always opens a round: {firsts:?}");
        let last: Vec<usize> = slots[slots.len() - 2..].iter().map(|s| s.cell).collect();
        assert_eq!(last, [2, 6], "time to accuracy last, once per cell");
        assert_eq!(slots.iter().filter(|s| [2, 6].contains(&s.cell)).count(), 2);
    }

    #[test]
    fn tricks_that_cannot_apply_get_one_cell_with_the_reason_and_no_reference_cells() {
        let mut gpt =
            request(vec![Trick::Adamw, Trick::Lars, Trick::InputNorm, Trick::MaxBatch, Trick::OneCycle]);
        gpt.workloads = vec![WorkloadId::GptMini];
        let plan = Plan::ablation(&gpt);
        let ids: Vec<String> = plan.cells.iter().map(|c| c.key.id().to_string()).collect();
        assert_eq!(
            ids,
            [
                "gpt-mini/baseline/b128/s0/train",
                "gpt-mini/baseline/b64/s0/tta",
                "gpt-mini/adamw/b64/s0/tta",
                "gpt-mini/lars/b64/s0/tta",
                "gpt-mini/input-norm/b64/s0/tta",
                "gpt-mini/max-batch/b64/s0/tta",
                "gpt-mini/one-cycle/b64/s0/tta",
            ]
        );
        let reasons: Vec<bool> = plan.cells.iter().map(|c| c.not_applicable.is_some()).collect();
        assert_eq!(reasons, [false, false, true, true, true, true, false]);
    }
    /// Each cell of `plan` measured under `design` with the cell it is paired with ("—" where it
    /// keeps processes of its own), by configuration and kind.
    fn pairs(plan: &Plan, design: Design) -> Vec<(String, String)> {
        let name = |k: &CellKey| {
            format!("{} {}", k.configuration_label(), k.id().as_str().rsplit('/').next().unwrap())
        };
        (0..plan.cells.len())
            .map(|i| {
                let paired = plan.paired_reference(i, design);
                (name(&plan.cells[i].key), paired.as_ref().map_or("—".to_owned(), name))
            })
            .collect()
    }

    #[test]
    fn each_trick_is_paired_with_the_cell_it_is_compared_with_where_it_can_be() {
        let r = request(vec![Trick::ChannelsLast, Trick::DebugOff, Trick::NoGradEval, Trick::LoaderWorkers]);
        let ablation = pairs(&Plan::ablation(&r), Design::Ablation);
        let expected = [
            ("baseline train", "—"),
            ("aa-control train", "baseline train"),
            ("baseline-alone train", "—"),
            ("aa-control-alone train", "—"),
            ("baseline eval", "—"),
            ("channels-last train", "baseline train"),
            ("baseline+debug-apis-on train", "—"),
            ("debug-off train", "baseline+debug-apis-on train"),
            ("no-grad-eval eval", "baseline eval"),
            ("loader-workers train", "—"),
        ];
        let expected: Vec<(String, String)> =
            expected.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        assert_eq!(ablation, expected);
        // A memory trick's throughput is paired too: its peaks are taken before the baseline exists.
        let memory = Plan::ablation(&request(vec![Trick::Checkpointing]));
        let checkpointing =
            pairs(&memory, Design::Ablation).into_iter().find(|(c, _)| c.starts_with("checkpointing"));
        assert_eq!(checkpointing.unwrap().1, "baseline train");
    }

    /// The ids of `plan`'s cells measured alone, in plan order.
    fn alone(plan: &Plan) -> Vec<String> {
        plan.cells.iter().filter(|c| c.key.alone).map(|c| c.key.id().to_string()).collect()
    }

    #[test]
    fn the_baseline_and_the_control_are_measured_alone_beside_a_cell_of_the_process_design() {
        let both = vec![Engine::Libtorch, Engine::Pytorch];
        let r =
            PlanRequest { engines: both.clone(), ..request(vec![Trick::ChannelsLast, Trick::LoaderWorkers]) };
        let plan = Plan::ablation(&r);
        let ids: Vec<String> = plan.cells.iter().take(8).map(|c| c.key.id().to_string()).collect();
        assert_eq!(
            ids,
            [
                "resnet20/baseline/b128/s0/train",
                "resnet20/baseline/b128/s0/train@pytorch",
                "resnet20/aa-control/b128/s0/train",
                "resnet20/aa-control/b128/s0/train@pytorch",
                "resnet20/baseline-alone/b128/s0/train",
                "resnet20/baseline-alone/b128/s0/train@pytorch",
                "resnet20/aa-control-alone/b128/s0/train",
                "resnet20/aa-control-alone/b128/s0/train@pytorch",
            ]
        );
        assert!(plan.cells[4..8].iter().all(|c| c.not_applicable.is_none()));
        let control = plan.cells.iter().position(|c| c.key.id() == "resnet20/aa-control-alone/b128/s0/train");
        assert_eq!(plan.paired_reference(control.unwrap(), Design::Ablation), None, "never paired");
        let one_engine = Plan::ablation(&request(vec![Trick::ChannelsLast, Trick::LoaderWorkers]));
        assert_eq!(alone(&one_engine).len(), 2);
        assert_eq!(alone(&Plan::leave_one_out(&r)).len(), 4, "under every design");
        let rankings = [(Engine::Libtorch, vec![Trick::ChannelsLast, Trick::LoaderWorkers])];
        assert_eq!(alone(&Plan::stack(&r, &rankings)).len(), 4, "once");

        assert!(alone(&Plan::ablation(&request(vec![Trick::ChannelsLast, Trick::ZeroGradNone]))).is_empty());
        let apart = PlanRequest { multi_arm: false, ..r };
        assert!(
            alone(&Plan::ablation(&apart)).is_empty(),
            "without multi-arm processes the baseline is alone"
        );
    }

    #[test]
    fn the_cells_measured_alone_are_planned_only_on_the_engines_and_workloads_where_the_process_design_applies(
    ) {
        // DDP runs on libtorch only; cudnn-benchmark on both engines, and only where there are
        // convolutions.
        let gpus = |tricks: Vec<Trick>, workloads: Vec<WorkloadId>| PlanRequest {
            hardware: Hardware::with_gpus(2),
            engines: vec![Engine::Libtorch, Engine::Pytorch],
            time_to_accuracy_batch_size: None,
            workloads,
            ..request(tricks)
        };
        let ddp = Plan::ablation(&gpus(vec![Trick::ChannelsLast, Trick::Ddp], vec![WorkloadId::Resnet20]));
        assert_eq!(
            alone(&ddp),
            ["resnet20/baseline-alone/b128/s0/train", "resnet20/aa-control-alone/b128/s0/train"]
        );
        let workloads = vec![WorkloadId::Resnet20, WorkloadId::GptMini];
        let cudnn = Plan::ablation(&gpus(vec![Trick::AmpBf16, Trick::CudnnBenchmark], workloads));
        assert_eq!(
            alone(&cudnn),
            [
                "resnet20/baseline-alone/b128/s0/train",
                "resnet20/baseline-alone/b128/s0/train@pytorch",
                "resnet20/aa-control-alone/b128/s0/train",
                "resnet20/aa-control-alone/b128/s0/train@pytorch",
            ],
            "the GPT has no convolution to autotune"
        );
    }

    #[test]
    fn cudnn_benchmark_keeps_processes_of_its_own_on_both_engines_beside_a_paired_trick() {
        let gpu = PlanRequest {
            hardware: Hardware::with_gpus(1),
            engines: vec![Engine::Libtorch, Engine::Pytorch],
            time_to_accuracy_batch_size: None,
            ..request(vec![Trick::CudnnBenchmark, Trick::ChannelsLast])
        };
        let plan = Plan::ablation(&gpu);
        let paired = |label: &str, engine: Engine| {
            let i = plan.cells.iter().position(|c| c.key.tricks.label() == label && c.key.engine == engine);
            plan.paired_reference(
                i.unwrap_or_else(|| panic!("no {label} cell on {engine}")),
                Design::Ablation,
            )
        };
        for engine in [Engine::Libtorch, Engine::Pytorch] {
            assert_eq!(paired("cudnn-benchmark", engine), None, "{engine}");
            let channels_last = paired("channels-last", engine).map(|k| (k.tricks.label(), k.engine));
            assert_eq!(channels_last, Some(("baseline".to_owned(), engine)));
        }
        let crate::tricks::Pairing::Processes(why) = Trick::CudnnBenchmark.pairing() else {
            panic!("cudnn-benchmark pairs")
        };
        assert!(why.contains("run_single_conv") && why.contains("keyed without it"), "{why}");
    }

    #[test]
    fn leave_one_out_pairs_all_but_one_with_all() {
        let r = request(vec![Trick::ChannelsLast, Trick::ZeroGradNone, Trick::AvoidSync]);
        let found = pairs(&Plan::leave_one_out(&r), Design::LeaveOneOut);
        let all = "avoid-sync+zero-grad-none+channels-last train";
        for without in
            ["zero-grad-none+channels-last", "avoid-sync+channels-last", "avoid-sync+zero-grad-none"]
        {
            let row = found.iter().find(|(cell, _)| *cell == format!("{without} train")).unwrap();
            assert_eq!(row.1, all, "{without}");
        }
        let all_row = found.iter().find(|(cell, _)| cell == all).unwrap();
        assert_eq!(all_row.1, "baseline train", "all on is compared with the baseline");
    }

    #[test]
    fn both_engines_plan_every_throughput_cell_on_pytorch_after_its_libtorch_cell() {
        let tricks =
            vec![Trick::ChannelsLast, Trick::DebugOff, Trick::TorchCompile, Trick::LoaderWorkers, Trick::Ddp];
        let both = Plan::ablation(&PlanRequest {
            engines: vec![Engine::Libtorch, Engine::Pytorch],
            time_to_accuracy_batch_size: None,
            ..request(tricks.clone())
        });
        let ids: Vec<String> = both.cells.iter().map(|c| c.key.id().to_string()).collect();
        let libtorch = Plan::ablation(&PlanRequest { time_to_accuracy_batch_size: None, ..request(tricks) });
        assert_eq!(both.cells.len(), 2 * libtorch.cells.len(), "{ids:#?}");
        for (i, cell) in libtorch.cells.iter().enumerate() {
            assert_eq!(both.cells[2 * i], *cell, "libtorch's cells keep their order");
            assert_eq!(both.cells[2 * i + 1].key, CellKey { engine: Engine::Pytorch, ..cell.key.clone() });
        }
        let reason = |id: &str| {
            let cell =
                both.cells.iter().find(|c| c.key.id().as_str() == id).unwrap_or_else(|| panic!("{id}"));
            cell.not_applicable.clone()
        };
        assert!(reason("resnet20/torch-compile/b128/s0/train").unwrap().contains("through PyTorch"));
        assert_eq!(reason("resnet20/torch-compile/b128/s0/train@pytorch"), None);
        assert_eq!(reason("resnet20/baseline+debug-apis-on/b128/s0/train@pytorch"), None);
        assert_eq!(reason("resnet20/loader-workers/b128/s0/train@pytorch"), None);
        let ddp = reason("resnet20/ddp/b128/s0/train@pytorch").unwrap();
        assert!(ddp.contains("on the PyTorch engine") && ddp.contains("one process"), "{ddp}");
        let paired = pairs(&both, Design::Ablation);
        assert!(
            paired.contains(&("channels-last train@pytorch".to_owned(), "baseline train@pytorch".to_owned()))
        );
        assert!(paired.contains(&("baseline train@pytorch".to_owned(), "—".to_owned())));
    }

    #[test]
    fn leave_one_out_and_super_convergence_plan_each_engine_with_the_tricks_that_apply_there() {
        let both = vec![Engine::Libtorch, Engine::Pytorch];
        let tricks = vec![Trick::ZeroGradNone, Trick::ChannelsLast, Trick::Ddp];
        let r = PlanRequest { engines: both.clone(), ..request(tricks) };
        let ids: Vec<String> = Plan::leave_one_out(&r).cells.iter().map(|c| c.key.id().to_string()).collect();
        for id in
            ["resnet20/zero-grad-none+channels-last/b128/s0/train", "resnet20/channels-last/b128/s0/train"]
        {
            assert!(ids.contains(&id.to_owned()), "{id}: {ids:?}");
            assert!(ids.contains(&format!("{id}@pytorch")), "{id}@pytorch: {ids:?}");
        }
        let sc = Plan::super_convergence(&PlanRequest { engines: both, ..request(vec![]) });
        let ids: Vec<String> = sc.cells.iter().map(|c| c.key.id().to_string()).collect();
        assert!(ids.contains(&"resnet20/one-cycle/b64/s0/tta@pytorch".to_owned()), "{ids:?}");
        assert_eq!(ids.len(), 4, "{ids:?}");
    }

    #[test]
    fn tricks_that_change_the_arithmetic_are_trained_to_the_target_beside_a_convergence_trick() {
        let both = vec![Engine::Libtorch, Engine::Pytorch];
        let ids = |tricks: Vec<Trick>| -> Vec<(String, Option<String>)> {
            let r = PlanRequest { engines: both.clone(), ..request(tricks) };
            Plan::ablation(&r).cells.into_iter().map(|c| (c.key.id().to_string(), c.not_applicable)).collect()
        };
        let alone = ids(vec![Trick::TorchCompile]);
        assert!(!alone.iter().any(|(id, _)| id.ends_with("tta") || id.ends_with("tta@pytorch")), "{alone:?}");
        let with = ids(vec![Trick::TorchCompile, Trick::OneCycle]);
        let reason = |id: &str| {
            with.iter().find(|(i, _)| i == id).unwrap_or_else(|| panic!("{id}: {with:?}")).1.clone()
        };
        assert_eq!(
            reason("resnet20/torch-compile/b64/s0/tta@pytorch"),
            None,
            "trained to the target in PyTorch"
        );
        assert!(reason("resnet20/torch-compile/b64/s0/tta").unwrap().contains("measured through PyTorch"));
        let on_cpu = ids(vec![Trick::AmpBf16, Trick::OneCycle]);
        assert!(!on_cpu.iter().any(|(id, _)| id.contains("amp-bf16") && id.contains("tta")), "{on_cpu:?}");
    }

    #[test]
    fn the_pytorch_engine_alone_trains_every_cell_the_design_plans() {
        let plan = Plan::ablation(&PlanRequest {
            engines: vec![Engine::Pytorch],
            ..request(vec![Trick::ZeroGradNone, Trick::OneCycle])
        });
        assert!(plan.cells.iter().all(|c| c.key.engine == Engine::Pytorch));
        let trained = |id: &str| plan.cells.iter().any(|c| c.key.id() == id);
        assert!(trained("resnet20/baseline/b64/s0/tta@pytorch"), "{:?}", plan.cells);
        assert!(trained("resnet20/one-cycle/b64/s0/tta@pytorch"));
    }

    #[test]
    fn a_users_model_with_its_own_dataset_trains_to_a_target_on_libtorch_only() {
        let mut model = crate::results::model::fixtures::cnn();
        let tensor =
            |shape: Vec<i64>, dtype: &str| crate::results::model::TensorInfo { shape, dtype: dtype.into() };
        model.dataset = Some(crate::results::model::ModelDataset {
            train_samples: 100,
            test_samples: 20,
            inputs: tensor(vec![100, 3, 32, 32], "float32"),
            targets: tensor(vec![100], "int64"),
        });
        let quick = ProfileName::Quick.settings(Family::UserModel);
        let mut request = PlanRequest::new(
            vec![WorkloadId::Model],
            vec![Trick::OneCycle],
            Hardware::probe(DeviceSpec::Cpu),
            &quick,
        );
        request.engines = vec![Engine::Libtorch, Engine::Pytorch];
        request.time_to_accuracy_batch_size = Some(64);
        request.model = Some(model);
        let plan = Plan::ablation(&request);
        let reason = |id: &str| plan.cells.iter().find(|c| c.key.id() == id).unwrap().not_applicable.clone();
        assert_eq!(reason("model/one-cycle/b64/s0/tta"), None);
        let why = reason("model/one-cycle/b64/s0/tta@pytorch").unwrap();
        assert!(why.contains("its own dataset() is trained on libtorch"), "{why}");
    }
}
