//! The experimental designs: what each measures, the rules it sets for sharding, comparisons and
//! cell recipes, and its phases (memory probes, the main plan, the stack's second half ranked by
//! what the ablation measured). The one place that matches on a [`Design`].

use crate::bench::plan::{factorial_factors, Plan, PlanRequest};
use crate::bench::speedrun::{choose, Evidence, THIS_RUN};
use crate::engine::Engine;
use crate::error::Error;
use crate::factorial::{roman, Fraction, MIN_FACTORS};
use crate::results::schema::{CellKind, CellStatus, Phase, Results, SpeedrunChoice, SpeedrunDecision};
use crate::tricks::{Applicability, Metric, Reference, Trick, TrickSet};
pub use crate::vocabulary::Design;
use crate::workloads::{Family, WorkloadId};

/// The first batch size a probe tries; each next one doubles it.
pub const PROBE_START_BATCH: usize = 64;
/// The largest batch size a probe tries.
pub const PROBE_MAX_BATCH: usize = 65_536;

/// What each design measures and how: its rules for sharding, comparisons and cell recipes, and
/// its phases.
impl Design {
    /// What the design measures, in a line of `--help`.
    fn help(self) -> &'static str {
        match self {
            Design::Ablation => "the baseline against the baseline plus each trick",
            Design::LeaveOneOut => "all tricks on against all on minus each",
            Design::Stack => "the ablation, then the tricks added cumulatively, best first",
            Design::BatchSweep => {
                "throughput, memory and time to accuracy from batch 64 up to the largest that fits"
            }
            Design::SuperConvergence => "Smith & Topin's ResNet-56 step schedule against 1cycle",
            Design::Speedrun => {
                "the ablation (or --from results), then the tricks that helped, combined and trained to \
                 the target against the baseline"
            }
            Design::Factorial => {
                "up to 7 tricks on and off in a fractional factorial: main effects and two-trick \
                 interactions, then the best configuration predicted against measured"
            }
        }
    }

    /// The workloads `--workload all` means under this design: ResNet-56 alone for the
    /// super-convergence design, which is about it; `None` for the profile's ResNet and GPT.
    pub fn all_workloads(self) -> Option<Vec<WorkloadId>> {
        (self == Design::SuperConvergence).then(|| vec![WorkloadId::Resnet56])
    }

    /// Whether the design can measure the user's own model (`run --model`): the ablation, and the
    /// stack built from it.
    pub fn measures_own_model(self) -> bool {
        matches!(self, Design::Ablation | Design::Stack)
    }

    /// Whether every batch size of a cell comes from a probe (so its cells must share the probe's
    /// machine in a sharded run).
    pub fn probes_every_batch(self) -> bool {
        self == Design::BatchSweep
    }

    /// Whether the design measures throughput cells (every one but the super-convergence
    /// comparison, which is time-to-accuracy only).
    pub fn measures_throughput(self) -> bool {
        self != Design::SuperConvergence
    }

    /// Whether the design needs the whole ablation in one process: its second half is chosen from
    /// every effect the ablation measured, so it cannot be split into shards.
    pub fn needs_whole_ablation(self) -> bool {
        self == Design::Speedrun
    }

    /// Whether its cells train with the super-convergence experiment's own recipe.
    pub fn trains_super_convergence(self) -> bool {
        self == Design::SuperConvergence
    }

    /// The cells of the plans of `requests` known before anything is measured: what a sharded
    /// run splits and what an estimate counts (probes, the cells planned from their answers and
    /// the stack's and the speedrun's second halves come later; the speedrun's ablation is counted
    /// even where `--from` files stand in for it).
    pub fn known_plan(self, requests: &[PlanRequest]) -> Plan {
        let mut plan = Plan { cells: Vec::new() };
        for request in requests {
            plan.extend(match self {
                Design::Ablation | Design::Stack | Design::Speedrun => Plan::ablation(request).cells,
                Design::LeaveOneOut => Plan::leave_one_out(request).cells,
                Design::Factorial => Plan::factorial(request).cells,
                Design::SuperConvergence => Plan::super_convergence(request).cells,
                Design::BatchSweep => Vec::new(),
            });
        }
        plan
    }

    /// Runs the phases of `request` under this design on `phases`: first the probes it needs,
    /// then its cells, for the stack design the tricks added cumulatively, and for the speedrun
    /// the combination of the tricks that helped against the baseline (after the ablation, or at
    /// once from the `--from` files). `train_samples` (the training split's size) caps a ResNet's
    /// probe.
    pub fn run_phases(
        self,
        phases: &mut dyn Phases,
        request: &PlanRequest,
        train_samples: usize,
    ) -> Result<(), Error> {
        // The probe doubles the batch up to what the training split can fill.
        let probe_cap = match request.workloads[0].family() {
            Family::CifarResnet => train_samples.min(PROBE_MAX_BATCH),
            Family::CharGpt | Family::UserModel => PROBE_MAX_BATCH,
        };
        match self {
            Design::BatchSweep => {
                for &workload in &request.workloads {
                    for &engine in &request.engines {
                        let probed = Probed { tricks: TrickSet::baseline(), engine };
                        let fitting = probe(phases, request, workload, probed, probe_cap)?;
                        phases.run(Plan::batch_sweep(request, workload, &fitting, engine))?;
                    }
                }
                Ok(())
            }
            Design::SuperConvergence => phases.run(Plan::super_convergence(request)),
            Design::Factorial => factorial(phases, request),
            Design::Speedrun if !phases.evidence().is_empty() => speedrun(phases, request),
            Design::Speedrun => {
                let request = with_max_batch(phases, request, probe_cap)?;
                probe_expandable_segments(phases, &request, probe_cap)?;
                phases.run(Plan::ablation(&request))?;
                speedrun(phases, &request)
            }
            Design::Ablation | Design::Stack | Design::LeaveOneOut => {
                let request = with_max_batch(phases, request, probe_cap)?;
                probe_expandable_segments(phases, &request, probe_cap)?;
                probe_own_model(phases, &request, probe_cap)?;
                phases.run(match self {
                    Design::LeaveOneOut => Plan::leave_one_out(&request),
                    _ => Plan::ablation(&request),
                })?;
                if self == Design::Stack {
                    stack(phases, &request)?;
                }
                Ok(())
            }
        }
    }
}

impl clap::ValueEnum for Design {
    fn value_variants<'a>() -> &'a [Self] {
        &Design::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.id()).help(self.help()))
    }
}

/// What runs a design's phases: each phase a plan that extends the cells of the phases before
/// it, all in one results file.
pub trait Phases {
    /// Runs the cells planned so far plus `plan`'s (what is already measured is skipped).
    fn run(&mut self, plan: Plan) -> Result<(), Error>;
    /// The results so far.
    fn results(&self) -> Result<&Results, Error>;
    /// Tells the user `line`.
    fn note(&self, line: &str);
    /// The results files the speedrun takes the tricks' effects from (`run --from`) instead of
    /// measuring an ablation; empty when it measures its own.
    fn evidence(&self) -> &[Evidence];
    /// Keeps the speedrun's `choice` in the results, in place of an earlier one for its workload.
    fn record(&mut self, choice: SpeedrunChoice);
}

/// The factorial design: says which tricks each workload's design varies and which it leaves out
/// (with why), measures the fraction's configurations, then the configuration its model predicts
/// best where that was not among them.
fn factorial(phases: &mut dyn Phases, request: &PlanRequest) -> Result<(), Error> {
    for &workload in &request.workloads {
        let (factors, left_out) = factorial_factors(request, workload);
        let names: Vec<&str> = factors.iter().map(|t| t.id()).collect();
        match Fraction::for_factors(factors.len()) {
            Some(fraction) => phases.note(&format!(
                "{workload}: a {} of {} tricks, {} configurations: {}",
                match fraction.resolution() {
                    Some(r) => format!("fraction of resolution {}", roman(r)),
                    None => "full factorial".to_owned(),
                },
                factors.len(),
                fraction.runs().len(),
                names.join(", ")
            )),
            None => phases.note(&format!(
                "{workload}: {} trick(s) can be varied together ({}), fewer than the {MIN_FACTORS} a factorial needs; \
                 each is measured alone",
                factors.len(),
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            )),
        }
        for left in &left_out {
            phases.note(&format!("{workload}: {} is measured alone: {}", left.trick, left.reason));
        }
    }
    phases.run(Plan::factorial(request))?;
    let analyses = phases.results()?.factorial.clone();
    phases.run(Plan::factorial_best(request, &analyses))
}

/// `request` with the largest batch that fits when `max-batch` is asked for with
/// time-to-accuracy cells: probed for every workload it applies to (not the GPT, whose recipe
/// fixes the batch), and with `checkpointing` too, how much larger a batch it lets fit.
fn with_max_batch(phases: &mut dyn Phases, request: &PlanRequest, cap: usize) -> Result<PlanRequest, Error> {
    let mut request = request.clone();
    if !request.tricks.contains(&Trick::MaxBatch) || request.time_to_accuracy_batch_size.is_none() {
        return Ok(request);
    }
    let hardware = request.hardware.clone();
    let probed = request
        .workloads
        .clone()
        .into_iter()
        .filter(|&workload| Trick::MaxBatch.applicability(workload, &hardware) == Applicability::Applies);
    for workload in probed {
        let fitting = probe(phases, &request, workload, Probed::baseline(), cap)?;
        if request.tricks.contains(&Trick::Checkpointing) {
            probe(phases, &request, workload, Probed::only(Trick::Checkpointing), cap)?;
        }
        request.max_batch_size = fitting.last().copied();
    }
    Ok(request)
}

/// Probes the largest batch that fits with and without `expandable-segments`, when it is asked
/// for, on every workload it applies to: the second of the two things it is judged by (its
/// throughput cell records the peak reserved memory). A probe already run (by `max-batch`) is not
/// run again.
fn probe_expandable_segments(
    phases: &mut dyn Phases,
    request: &PlanRequest,
    cap: usize,
) -> Result<(), Error> {
    if !request.tricks.contains(&Trick::ExpandableSegments) {
        return Ok(());
    }
    let trick = Trick::ExpandableSegments;
    let hardware = request.hardware.clone();
    for &workload in &request.workloads {
        if trick.applicability(workload, &hardware) == Applicability::Applies {
            probe(phases, request, workload, Probed::baseline(), cap)?;
            probe(phases, request, workload, Probed::only(trick), cap)?;
        }
    }
    Ok(())
}

/// Probes the largest batch that fits the user's model's baseline on every engine of `request`
/// that trains it, unless the request turns the probe off: what its throughput and memory are
/// read against. An engine that cannot train
/// the model probes nothing (its first probe is not applicable, with the reason).
fn probe_own_model(phases: &mut dyn Phases, request: &PlanRequest, cap: usize) -> Result<(), Error> {
    if !request.probe_model_batch || !request.workloads.contains(&WorkloadId::Model) {
        return Ok(());
    }
    for &engine in &request.engines {
        let probed = Probed { tricks: TrickSet::baseline(), engine };
        probe(phases, request, WorkloadId::Model, probed, cap)?;
    }
    Ok(())
}

/// The stack's second half: the tricks added cumulatively, best measured first (in the shard
/// that measured them).
fn stack(phases: &mut dyn Phases, request: &PlanRequest) -> Result<(), Error> {
    let mut rankings = Vec::new();
    for &engine in &request.engines {
        let ranking = stack_ranking(phases.results()?, request.workloads[0], engine);
        if ranking.is_empty() {
            continue;
        }
        let order: Vec<&str> = ranking.iter().map(|t| t.id()).collect();
        let on = if request.engines.len() > 1 { format!(" on {engine}") } else { String::new() };
        phases.note(&format!("stacking tricks{on}, best first: {}", order.join(", ")));
        rankings.push((engine, ranking));
    }
    if rankings.is_empty() {
        return Ok(());
    }
    phases.run(Plan::stack(request, &rankings))
}

/// The speedrun's second half: for each workload and engine, the tricks whose effect was
/// significant on that engine (in the ablation just measured, or in the `--from` files) combined,
/// then the baseline and the combination trained to the target there, per seed.
fn speedrun(phases: &mut dyn Phases, request: &PlanRequest) -> Result<(), Error> {
    for &workload in &request.workloads {
        for &engine in &request.engines {
            speedrun_on(phases, request, workload, engine)?;
        }
    }
    Ok(())
}

/// The speedrun's second half for `workload` on `engine`.
fn speedrun_on(
    phases: &mut dyn Phases,
    request: &PlanRequest,
    workload: WorkloadId,
    engine: Engine,
) -> Result<(), Error> {
    let choice = {
        let own;
        let evidence: Vec<(&str, &Results)> = if phases.evidence().is_empty() {
            own = phases.results()?;
            vec![(THIS_RUN, own)]
        } else {
            phases.evidence().iter().map(|e| (e.source.as_str(), &e.results)).collect()
        };
        for (source, results) in &evidence {
            if !results.cells.iter().any(|c| c.key.workload == workload) {
                phases.note(&format!("note: {source} holds no {workload} cells; ignored for {workload}"));
            }
        }
        choose(&evidence, request, workload, engine)
    };
    let added: Vec<&str> = choice.combination.iter().map(|t| t.id()).collect();
    let on = if request.engines.len() > 1 { format!(" on {engine}") } else { String::new() };
    phases.note(&match added.as_slice() {
        [] => {
            format!("speedrun {workload}{on}: no trick helped significantly; training the baseline alone")
        }
        _ => format!("speedrun {workload}{on}: combining, largest effect first: {}", added.join(", ")),
    });
    for refused in choice.tricks.iter().filter(|t| t.decision == SpeedrunDecision::Refused) {
        let reason = refused.reason.as_deref().unwrap_or_default();
        phases.note(&format!("  refused {}: {reason}", refused.trick));
    }
    let plan = Plan::speedrun(request, workload, &choice.combination, engine);
    phases.record(choice);
    phases.run(plan)?;
    Ok(())
}

/// What a probe trains: a trick set on an engine.
#[derive(Debug, Clone)]
struct Probed {
    tricks: TrickSet,
    engine: Engine,
}

impl Probed {
    /// The baseline on libtorch.
    fn baseline() -> Self {
        Self { tricks: TrickSet::baseline(), engine: Engine::Libtorch }
    }

    /// `trick` alone on libtorch.
    fn only(trick: Trick) -> Self {
        Self { tricks: TrickSet::only(trick), engine: Engine::Libtorch }
    }

    /// How notes name it: "baseline", "checkpointing on pytorch".
    fn label(&self) -> String {
        if self.engine.is_libtorch() {
            self.tricks.label()
        } else {
            format!("{} on {}", self.tricks.label(), self.engine)
        }
    }
}

/// Probes `probed` on `workload` at batch sizes 64, 128, … up to `cap`, one process each, until
/// one runs out of memory (or fails): each probe is a cell of the results. Returns the batch
/// sizes that fit, smallest first.
fn probe(
    phases: &mut dyn Phases,
    request: &PlanRequest,
    workload: WorkloadId,
    probed: Probed,
    cap: usize,
) -> Result<Vec<usize>, Error> {
    let mut fitting = Vec::new();
    let mut batch = PROBE_START_BATCH;
    let label = probed.label();
    while batch <= cap {
        let cell = Plan::probe(request, workload, probed.tricks.clone(), batch, probed.engine);
        if cell.not_applicable.is_some() {
            break;
        }
        let id = cell.key.id();
        phases.run(Plan { cells: vec![cell] })?;
        match phases.results()?.cells.iter().find(|c| c.id() == id).map(|c| &c.status) {
            Some(CellStatus::Ok) => fitting.push(batch),
            Some(CellStatus::OutOfMemory { .. }) => {
                phases.note(&format!("  {workload} {label}: batch {batch} does not fit"));
                break;
            }
            _ => break,
        }
        batch *= 2;
    }
    if let Some(largest) = fitting.last() {
        phases.note(&format!("  {workload} {label}: largest batch that fits {largest}"));
    }
    Ok(fitting)
}

/// The tricks whose ablation cells of `workload` on `engine` measured training throughput,
/// fastest first.
pub fn stack_ranking(results: &Results, workload: WorkloadId, engine: Engine) -> Vec<Trick> {
    let mut ranked: Vec<(Trick, f64)> = results
        .comparisons
        .iter()
        .filter_map(|c| {
            let cell = results.cells.iter().find(|cell| {
                cell.id() == c.cell && cell.key.workload == workload && cell.key.engine == engine
            })?;
            let only: Vec<Trick> = cell.key.tricks.iter().collect();
            match (only.as_slice(), cell.key.kind) {
                // The stack starts from the plain recipe, in which debugging is already off; a trick
                // measured against another in its place has no effect on the plain recipe to rank.
                ([trick], CellKind::Throughput { phase: Phase::Train })
                    if *trick != Trick::DebugOff
                        && trick.metric() == Metric::Throughput
                        && !matches!(trick.info().reference, Reference::Swapped { .. }) =>
                {
                    Some((*trick, c.speedup))
                }
                _ => None,
            }
        })
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranked.into_iter().map(|(t, _)| t).collect()
}
