//! Fitting an ablation into a time budget: which tricks, taken in the order given (their value),
//! and how many rounds a run can afford when each of its processes costs a known number of
//! seconds. The cells and processes counted are those `run` would plan ([`Plan::ablation`], on
//! every engine of the request, scheduled by [`Plan::schedule`] and grouped into multi-arm
//! processes by [`processes::group`]), so the count includes every round's warm-up process, the
//! A/A control, each trick's own reference cells, and the baseline and the control measured alone
//! beside a trick of the process design. A process of several cells costs that of a
//! process of one, and a share of it for each further cell ([`ProcessCosts::arm_share`]). The
//! sequential rule may stop decided cells before the last round; the estimate does not count on
//! it. What a failure costs is counted too: a side that fails drops out of its process, which goes
//! on with the others, so a failed arm costs no process beyond its share of the one planned (a
//! test in `tests/runner.rs` holds it); only a process that dies costs another, the others run
//! again together, which no plan can foresee and a phase's own limit bounds.

use std::collections::BTreeMap;
use std::fmt;

use crate::bench::design::Design;
use crate::bench::plan::{factorial_factors, Plan, PlanRequest};
use crate::bench::processes;
use crate::engine::Engine;
use crate::error::Error;
use crate::factorial::{roman, Fraction, MIN_FACTORS};
use crate::results::factorial::LeftOutTrick;
use crate::results::schema::{CellKey, Results};
use crate::stats::median;
use crate::tricks::Trick;
use crate::workloads::WorkloadId;

/// What one cell process costs, seconds, by engine: its start, library loading, device context,
/// model build, warm-up and timed windows together.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessCosts {
    /// Seconds a process of one cell of each engine costs.
    pub per_engine_s: BTreeMap<Engine, f64>,
    /// The share of a one-cell process's seconds each further cell of a multi-arm process adds
    /// (its build, warm-up, windows and breakdown, without another start-up and data load).
    pub arm_share: f64,
    /// Seconds added to a process that compiles its model (`torch-compile` on either of its
    /// sides): the compiler's cold start.
    pub compile_s: f64,
}

impl ProcessCosts {
    /// Every engine's process costing `seconds`, with no compile time.
    pub fn uniform(seconds: f64) -> Self {
        let per_engine_s = [Engine::Libtorch, Engine::Pytorch].into_iter().map(|e| (e, seconds)).collect();
        ProcessCosts { per_engine_s, arm_share: DEFAULT_ARM_SHARE, compile_s: 0.0 }
    }

    /// What each engine's cell processes in `results` (measured runs) cost, all told: the median
    /// of their own wall times, plus the time a finished run spent outside its processes' clocks
    /// (starting each process and loading its libraries, the warm-up processes, the harness's
    /// writes) shared over its processes (the median share over the files); with no compile
    /// time. Engines with no process there are absent.
    ///
    /// A run with multi-arm processes gives the share of a further arm too: the median over those
    /// processes of what each cell beyond the first added to a one-cell process of its engine
    /// ([`DEFAULT_ARM_SHARE`] where the files have no such process, or no one-cell process to
    /// compare it with).
    pub fn measured(results: &[Results]) -> Self {
        let mut walls: BTreeMap<Engine, Vec<f64>> = BTreeMap::new();
        let mut multi_arm: Vec<(Engine, f64, usize)> = Vec::new();
        for cell in results.iter().flat_map(|r| &r.cells) {
            for p in cell.processes.iter().filter(|p| p.wall_s.is_finite() && p.wall_s > 0.0) {
                match p.process_cells {
                    1 => walls.entry(cell.key.engine).or_default().push(p.wall_s),
                    n => multi_arm.push((cell.key.engine, p.wall_s * n as f64, n)),
                }
            }
        }
        let shares: Vec<f64> = results.iter().filter_map(outside_share).collect();
        let share = median(&shares).unwrap_or(0.0);
        let one_cell: BTreeMap<Engine, f64> =
            walls.into_iter().filter_map(|(e, w)| Some((e, median(&w)?))).collect();
        let arm_shares: Vec<f64> = multi_arm
            .iter()
            .filter_map(|&(engine, wall_s, n)| {
                let one = *one_cell.get(&engine)?;
                Some(((wall_s - one) / (n - 1) as f64 / one).max(0.0))
            })
            .collect();
        let per_engine_s = one_cell.into_iter().map(|(e, s)| (e, s + share)).collect();
        ProcessCosts {
            per_engine_s,
            arm_share: median(&arm_shares).unwrap_or(DEFAULT_ARM_SHARE),
            compile_s: 0.0,
        }
    }

    /// These costs with `given` replacing the cost of its engine, or of every engine.
    pub fn with(mut self, given: ProcessSeconds) -> Self {
        match given.engine {
            Some(engine) => {
                self.per_engine_s.insert(engine, given.seconds);
            }
            None => {
                self = ProcessCosts {
                    compile_s: self.compile_s,
                    arm_share: self.arm_share,
                    ..ProcessCosts::uniform(given.seconds)
                }
            }
        }
        self
    }

    /// Seconds one process of the cells `keys` (of one engine) costs: a one-cell process's, a
    /// share of it for each further cell, and the compile allowance for each cell that compiles;
    /// an error naming the engine when its cost is unknown.
    fn of(&self, keys: &[&CellKey]) -> Result<f64, BudgetError> {
        let engine = keys[0].engine;
        let one = *self.per_engine_s.get(&engine).ok_or(BudgetError::UnknownCost(engine))?;
        let compiling = keys
            .iter()
            .filter(|k| k.tricks.has(Trick::TorchCompile) || k.reference_for == Some(Trick::TorchCompile))
            .count();
        Ok(one * (1.0 + self.arm_share * (keys.len() - 1) as f64) + self.compile_s * compiling as f64)
    }
}

/// Seconds a finished run spent outside its processes' own clocks, from its start to its last
/// cell, per process, its warm-up processes (one per workload and round) counted among them (a
/// multi-arm process once, however many cells it measured); `None` for a run that did not finish
/// or measured no process.
fn outside_share(results: &Results) -> Option<f64> {
    let at = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    let total = at(results.run.finished_at.as_deref()?)? - at(&results.run.started_at)?;
    let processes: Vec<_> =
        results.cells.iter().flat_map(|c| c.processes.iter().map(move |p| (c, p))).collect();
    let wall_s: f64 = processes.iter().map(|(_, p)| p.wall_s).sum();
    let mut warmups: BTreeMap<WorkloadId, usize> = BTreeMap::new();
    for (cell, process) in processes.iter().filter(|(c, _)| !c.key.kind.runs_once()) {
        let rounds = warmups.entry(cell.key.workload).or_default();
        *rounds = (*rounds).max(process.round + 1);
    }
    let measured: f64 = processes.iter().map(|(_, p)| 1.0 / p.process_cells.max(1) as f64).sum();
    let count = measured + warmups.values().sum::<usize>() as f64;
    (count > 0.0).then(|| (total.num_milliseconds() as f64 / 1000.0 - wall_s).max(0.0) / count)
}

/// The share of a one-cell process each further cell of a multi-arm process adds, where no
/// measured run says: an assumption between what `make run` measured on the 2-core VM (0.9, the
/// windows being most of a CPU process) and a GPU, where a process's start dominates and an arm
/// adds its build, warm-up and a few short windows. A measured run (`--costs-from`) replaces it.
pub const DEFAULT_ARM_SHARE: f64 = 0.5;

/// A `--process-s` value: seconds for every engine, or for one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessSeconds {
    /// The engine it is for (`None`: every engine).
    pub engine: Option<Engine>,
    /// Seconds per process.
    pub seconds: f64,
}

impl std::str::FromStr for ProcessSeconds {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (engine, seconds) = match s.split_once('=') {
            Some((engine, seconds)) => (Some(<Engine as clap::ValueEnum>::from_str(engine, true)?), seconds),
            None => (None, s),
        };
        match seconds.parse::<f64>() {
            Ok(seconds) if seconds.is_finite() && seconds > 0.0 => Ok(ProcessSeconds { engine, seconds }),
            _ => Err(format!("'{seconds}' is not a positive number of seconds")),
        }
    }
}

/// Why a budget cannot be planned.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BudgetError {
    /// A planned cell runs on an engine whose process cost was not given or measured.
    #[error("no process cost for the {0} engine: give one (--process-s {0}=SECONDS) or a results file with its processes (--costs-from)")]
    UnknownCost(Engine),
}

impl From<BudgetError> for Error {
    fn from(e: BudgetError) -> Self {
        Error::Invalid(e.to_string())
    }
}

/// An ablation fitted into a budget.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetPlan {
    /// Rounds of the interleaved schedule (0: not even the baselines fit).
    pub rounds: usize,
    /// The tricks measured, in the order given: those that fit, and those whose cells cannot run
    /// here (their cells are recorded not applicable, at no cost).
    pub tricks: Vec<Trick>,
    /// The tricks left out because they did not fit, each with the processes and seconds it
    /// would have added to one round.
    pub left_out: Vec<(Trick, usize, f64)>,
    /// The tricks that add no process here, with the reason of one of their cells (not
    /// applicable on this device or engine, say).
    pub free: Vec<(Trick, String)>,
    /// Whether the plan measures the baseline and the A/A control alone too, one model a process
    /// (a trick of the process design is among those measured).
    pub alone: bool,
    /// Cell processes the plan runs, warm-ups included.
    pub processes: usize,
    /// Seconds the plan's processes are expected to take.
    pub estimate_s: f64,
    /// The budget, seconds.
    pub budget_s: f64,
}

/// The processes and seconds of the ablation of `tricks` on `requests` (one per workload) over
/// `rounds` rounds.
fn estimate(
    requests: &[PlanRequest],
    tricks: &[Trick],
    rounds: usize,
    costs: &ProcessCosts,
) -> Result<(usize, f64), BudgetError> {
    estimate_design(requests, tricks, rounds, costs, Design::Ablation)
}

/// The processes and seconds of `design` (the ablation or the factorial's first half) of
/// `tricks` on `requests` (one per workload) over `rounds` rounds.
fn estimate_design(
    requests: &[PlanRequest],
    tricks: &[Trick],
    rounds: usize,
    costs: &ProcessCosts,
    design: Design,
) -> Result<(usize, f64), BudgetError> {
    let (mut processes, mut seconds) = (0, 0.0);
    for request in requests {
        let request = PlanRequest { tricks: tricks.to_vec(), ..request.clone() };
        let plan =
            if design == Design::Factorial { Plan::factorial(&request) } else { Plan::ablation(&request) };
        let slots = plan.schedule(rounds, 0);
        let grouped = processes::group(&plan, &slots, design, true);
        processes += grouped.len();
        for process in grouped {
            let keys: Vec<&CellKey> = process.slots().map(|s| &plan.cells[s.cell].key).collect();
            seconds += costs.of(&keys)?;
        }
    }
    Ok((processes, seconds))
}

/// The reason a cell of `trick` in `requests`' plans gives for not running, if one does.
fn not_applicable_reason(requests: &[PlanRequest], trick: Trick) -> Option<String> {
    requests.iter().find_map(|request| {
        let request = PlanRequest { tricks: vec![trick], ..request.clone() };
        let plan = Plan::ablation(&request);
        plan.cells
            .into_iter()
            .filter(|c| c.key.tricks.has(trick) || c.key.reference_for == Some(trick))
            .find_map(|c| c.not_applicable.map(|why| format!("{}: {why}", c.key.engine)))
    })
}

/// Whether the ablation of `tricks` on `requests` measures the baseline and the A/A control alone.
fn measures_alone(requests: &[PlanRequest], tricks: &[Trick]) -> bool {
    requests.iter().any(|request| {
        let request = PlanRequest { tricks: tricks.to_vec(), ..request.clone() };
        Plan::ablation(&request).cells.iter().any(|c| c.key.alone)
    })
}

/// Fits the tricks (in their order, the most valuable first) into `budget_s` at `costs`:
/// one round first, adding each trick whose processes still fit and leaving out those that do not;
/// then, when every trick fit, as many more rounds (up to `max_rounds`) as the budget holds.
/// `requests` holds one request per workload, each with the same tricks; they should plan no
/// time-to-accuracy cells (`time_to_accuracy_batch_size: None`): those train for as long as their
/// target takes, which no process cost describes.
pub fn fit(
    requests: &[PlanRequest],
    costs: &ProcessCosts,
    budget_s: f64,
    max_rounds: usize,
) -> Result<BudgetPlan, BudgetError> {
    let candidates = requests.first().map(|r| r.tricks.clone()).unwrap_or_default();
    let (mut processes, mut estimate_s) = estimate(requests, &[], 1, costs)?;
    let mut plan = BudgetPlan {
        rounds: 1,
        tricks: Vec::new(),
        left_out: Vec::new(),
        free: Vec::new(),
        alone: false,
        processes,
        estimate_s,
        budget_s,
    };
    if estimate_s > budget_s || max_rounds == 0 {
        plan.rounds = 0;
        plan.left_out = candidates.iter().map(|&t| (t, 0, 0.0)).collect();
        return Ok(plan);
    }
    for &trick in &candidates {
        let mut with = plan.tricks.clone();
        with.push(trick);
        let (p, s) = estimate(requests, &with, 1, costs)?;
        if p == processes && s == estimate_s {
            let why = not_applicable_reason(requests, trick)
                .unwrap_or_else(|| "its cells are already planned".to_owned());
            plan.free.push((trick, why));
            plan.tricks = with;
        } else if s <= budget_s {
            (processes, estimate_s) = (p, s);
            plan.tricks = with;
        } else {
            plan.left_out.push((trick, p - processes, s - estimate_s));
        }
    }
    (plan.processes, plan.estimate_s) = (processes, estimate_s);
    plan.alone = measures_alone(requests, &plan.tricks);
    if plan.left_out.is_empty() {
        for rounds in 2..=max_rounds {
            let (p, s) = estimate(requests, &plan.tricks, rounds, costs)?;
            if s > budget_s {
                break;
            }
            (plan.rounds, plan.processes, plan.estimate_s) = (rounds, p, s);
        }
    }
    Ok(plan)
}

/// What the factorial design of `requests`' tricks costs: each workload's design, and the
/// processes and seconds of its rounds (the sequential rule stops it sooner once every effect is
/// decided; the best configuration, where it is not among the fraction's, adds one arm's
/// processes after).
#[derive(Debug, Clone, PartialEq)]
pub struct FactorialPrice {
    /// Each workload's design.
    pub designs: Vec<PricedDesign>,
    /// Rounds priced.
    pub rounds: usize,
    /// Cell processes of one round, warm-ups included.
    pub processes_per_round: usize,
    /// Seconds one round is expected to take.
    pub round_s: f64,
    /// Seconds every round together is expected to take.
    pub estimate_s: f64,
    /// The budget, seconds.
    pub budget_s: f64,
}

/// One workload's factorial design, as priced.
#[derive(Debug, Clone, PartialEq)]
pub struct PricedDesign {
    /// The workload.
    pub workload: WorkloadId,
    /// The tricks it varies.
    pub factors: Vec<Trick>,
    /// The configurations its fraction measures (0: fewer than two factors, each measured alone).
    pub configurations: usize,
    /// Its resolution (`None`: a full factorial, or no design).
    pub resolution: Option<u32>,
    /// The tricks measured alone instead, with why.
    pub left_out: Vec<LeftOutTrick>,
}

/// Prices the factorial design of `requests`' tricks (one request per workload, each with the
/// same tricks) over `rounds` rounds at `costs`, against `budget_s`.
pub fn price_factorial(
    requests: &[PlanRequest],
    costs: &ProcessCosts,
    budget_s: f64,
    rounds: usize,
) -> Result<FactorialPrice, BudgetError> {
    let tricks = requests.first().map(|r| r.tricks.clone()).unwrap_or_default();
    let (processes_per_round, round_s) = estimate_design(requests, &tricks, 1, costs, Design::Factorial)?;
    let (_, estimate_s) = estimate_design(requests, &tricks, rounds, costs, Design::Factorial)?;
    let designs = requests
        .iter()
        .flat_map(|request| {
            request.workloads.iter().map(move |&workload| {
                let (factors, left_out) = factorial_factors(request, workload);
                let fraction = Fraction::for_factors(factors.len());
                let configurations = fraction.as_ref().map_or(0, |f| f.runs().len());
                let resolution = fraction.and_then(|f| f.resolution());
                PricedDesign { workload, factors, configurations, resolution, left_out }
            })
        })
        .collect();
    Ok(FactorialPrice { designs, rounds, processes_per_round, round_s, estimate_s, budget_s })
}

impl FactorialPrice {
    /// The price as one tab-separated line for scripts: rounds, each workload's factors
    /// (comma-separated, workloads separated by `;`), processes, estimated seconds (whole),
    /// whether it fits the budget (`fits` or `over`).
    pub fn tsv(&self) -> String {
        let factors: Vec<String> = self
            .designs
            .iter()
            .map(|d| d.factors.iter().map(|t| t.id()).collect::<Vec<_>>().join(","))
            .collect();
        let fits = if self.estimate_s <= self.budget_s { "fits" } else { "over" };
        let processes = self.processes_per_round * self.rounds;
        format!("{}\t{}\t{processes}\t{:.0}\t{fits}", self.rounds, factors.join(";"), self.estimate_s.ceil())
    }
}

impl fmt::Display for FactorialPrice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "the factorial design, {} rounds at most (the sequential rule stops it once every effect is decided):", self.rounds)?;
        for PricedDesign { workload, factors, configurations, resolution, left_out } in &self.designs {
            let names: Vec<&str> = factors.iter().map(|t| t.id()).collect();
            match resolution {
                _ if factors.len() < MIN_FACTORS => writeln!(
                    f,
                    "  {workload}: {} trick(s) can be varied together; each is measured alone",
                    factors.len()
                )?,
                Some(r) => writeln!(
                    f,
                    "  {workload}: {} tricks in {configurations} configurations, resolution {}: {}",
                    factors.len(),
                    roman(*r),
                    names.join(", ")
                )?,
                None => writeln!(
                    f,
                    "  {workload}: {} tricks in all {configurations} configurations: {}",
                    factors.len(),
                    names.join(", ")
                )?,
            }
            for left in left_out {
                writeln!(f, "    measured alone: {}: {}", left.trick, left.reason)?;
            }
        }
        let verdict = if self.estimate_s <= self.budget_s {
            format!("fits the {:.0} s budget", self.budget_s)
        } else {
            format!(
                "over the {:.0} s budget: drop tricks with --tricks or plan fewer --max-rounds",
                self.budget_s
            )
        };
        writeln!(
            f,
            "  {} processes a round, about {:.0} s a round; {} rounds about {:.0} s: {verdict}",
            self.processes_per_round, self.round_s, self.rounds, self.estimate_s
        )
    }
}

impl BudgetPlan {
    /// The plan as one tab-separated line for scripts: rounds, the tricks measured
    /// (comma-separated), processes, estimated seconds (whole), the tricks left out
    /// (comma-separated).
    pub fn tsv(&self) -> String {
        let ids =
            |tricks: &mut dyn Iterator<Item = Trick>| tricks.map(|t| t.id()).collect::<Vec<_>>().join(",");
        format!(
            "{}\t{}\t{}\t{:.0}\t{}",
            self.rounds,
            ids(&mut self.tricks.iter().copied()),
            self.processes,
            self.estimate_s.ceil(),
            ids(&mut self.left_out.iter().map(|(t, _, _)| *t)),
        )
    }
}

impl fmt::Display for BudgetPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rounds == 0 {
            return writeln!(
                f,
                "nothing fits: the baselines alone take {} processes, about {:.0} s of the {:.0} s budget",
                self.processes, self.estimate_s, self.budget_s
            );
        }
        let rounds = if self.rounds == 1 { "1 round".to_owned() } else { format!("{} rounds", self.rounds) };
        writeln!(
            f,
            "{rounds}, {} processes, about {:.0} s of the {:.0} s budget",
            self.processes, self.estimate_s, self.budget_s
        )?;
        let measured: Vec<&str> =
            self.tricks.iter().filter(|t| !self.free.iter().any(|(f, _)| f == *t)).map(|t| t.id()).collect();
        let control = if measured.is_empty() { "" } else { ", A/A control" };
        let alone = if self.alone { ", baseline and A/A control alone" } else { "" };
        let tricks: String = measured.iter().map(|t| format!(", {t}")).collect();
        writeln!(f, "  measured: baseline{control}{alone}{tricks}")?;
        for (trick, why) in &self.free {
            writeln!(f, "  no process of its own: {trick}: {why}")?;
        }
        for (trick, processes, seconds) in &self.left_out {
            writeln!(f, "  left out for time: {trick} (+{processes} processes, +{seconds:.0} s)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::profile::ProfileName;
    use crate::hardware::Hardware;
    use crate::workloads::WorkloadId;

    /// The standard profile's requests for `workloads` with `tricks` on both engines of one
    /// assumed Hopper GPU, without time-to-accuracy cells.
    fn requests(workloads: &[WorkloadId], tricks: &[Trick]) -> Vec<PlanRequest> {
        workloads
            .iter()
            .map(|&w| PlanRequest {
                time_to_accuracy_batch_size: None,
                engines: vec![Engine::Libtorch, Engine::Pytorch],
                ..PlanRequest::new(
                    vec![w],
                    tricks.to_vec(),
                    Hardware::rehearsing(crate::device::RehearsedGpu::Sm90),
                    &ProfileName::Standard.settings(w.family()),
                )
            })
            .collect()
    }

    #[test]
    fn the_factorial_is_priced_whole_with_its_fraction_and_the_tricks_it_leaves_out() {
        let tricks = [
            Trick::AmpBf16,
            Trick::ChannelsLast,
            Trick::ZeroGradNone,
            Trick::AvoidSync,
            Trick::FusedOptimizer,
        ];
        let requests = requests(&[WorkloadId::Resnet56], &[&tricks[..], &[Trick::DebugOff]].concat());
        let price = price_factorial(&requests, &ProcessCosts::uniform(1.0), 60.0, 3).unwrap();
        let design = &price.designs[0];
        assert_eq!((design.factors.len(), design.configurations, design.resolution), (5, 16, Some(5)));
        assert_eq!(design.left_out.len(), 1, "debug-off, against its own reference");
        // A warm-up, then on each engine one process of the 16 configurations (the A/A control
        // among them) beside the baseline, and debug-off's pair: 1 + 2 × (1 + 0.5 × 16 + 1 + 0.5).
        assert_eq!((price.processes_per_round, price.round_s), (5, 22.0));
        assert_eq!(price.estimate_s, 66.0);
        assert!(price.tsv().ends_with("\t66\tover"), "{}", price.tsv());
        assert!(price.to_string().contains("5 tricks in 16 configurations, resolution V"), "{price}");
    }

    #[test]
    fn tricks_are_added_in_the_order_given_while_they_fit() {
        let tricks = [Trick::AmpBf16, Trick::ChannelsLast, Trick::CudaGraphs];
        // A warm-up and, on each engine, one process: the baseline alone (1 s), then with the
        // A/A control and amp-bf16 as its arms (1 + 2 × 0.5 s), each further trick another arm.
        let plan =
            fit(&requests(&[WorkloadId::Resnet56], &tricks), &ProcessCosts::uniform(1.0), 6.5, 3).unwrap();
        assert_eq!((plan.rounds, plan.processes, plan.estimate_s), (1, 3, 6.0));
        assert_eq!(plan.tricks, [Trick::AmpBf16, Trick::ChannelsLast]);
        assert_eq!(plan.left_out, [(Trick::CudaGraphs, 0, 1.0)]);
        assert_eq!(plan.tsv(), "1\tamp-bf16,channels-last\t3\t6\tcuda-graphs");
    }

    #[test]
    fn a_later_cheaper_trick_still_fits_after_a_dearer_one_is_left_out() {
        // tf32 brings its own strict-fp32 reference: two arms on each engine where channels-last
        // is one.
        let tricks = [Trick::AmpBf16, Trick::Tf32, Trick::ChannelsLast];
        let plan =
            fit(&requests(&[WorkloadId::Resnet56], &tricks), &ProcessCosts::uniform(1.0), 6.5, 1).unwrap();
        assert_eq!(plan.tricks, [Trick::AmpBf16, Trick::ChannelsLast]);
        assert_eq!(plan.left_out, [(Trick::Tf32, 0, 2.0)]);
    }

    #[test]
    fn rounds_grow_only_when_every_trick_fits() {
        let requests = requests(&[WorkloadId::Resnet56], &[Trick::AmpBf16]);
        let costs = ProcessCosts::uniform(1.0);
        // 5 s a round: 2 rounds take 10 s, 3 take 15.
        assert_eq!(fit(&requests, &costs, 12.0, 5).unwrap().rounds, 2);
        assert_eq!(fit(&requests, &costs, 20.0, 3).unwrap().rounds, 3);
        assert_eq!(fit(&requests, &costs, 20.0, 1).unwrap().rounds, 1);
    }

    #[test]
    fn a_multi_arm_process_costs_a_share_of_a_process_for_each_further_arm() {
        let requests = requests(&[WorkloadId::Resnet56], &[Trick::AmpBf16, Trick::ChannelsLast]);
        let cheap = ProcessCosts { arm_share: 0.25, ..ProcessCosts::uniform(4.0) };
        let plan = fit(&requests, &cheap, 100.0, 1).unwrap();
        // The warm-up, then on each engine the baseline with three arms: 4 × (1 + 3 × 0.25) s.
        assert_eq!((plan.processes, plan.estimate_s), (3, 4.0 + 2.0 * 7.0));
    }

    #[test]
    fn a_trick_of_the_process_design_brings_the_baseline_and_the_control_measured_alone() {
        let tricks = [Trick::ChannelsLast, Trick::CudnnBenchmark];
        let requests = requests(&[WorkloadId::Resnet56], &tricks);
        let costs = ProcessCosts::uniform(1.0);
        // The warm-up, then on each engine the baseline with the A/A control and channels-last as
        // its arms (1 + 2 × 0.5 s); cudnn-benchmark adds on each engine its own process and the
        // baseline's and the control's alone.
        let plan = fit(&requests, &costs, 100.0, 1).unwrap();
        assert_eq!((plan.processes, plan.estimate_s, plan.alone), (9, 1.0 + 2.0 * 5.0, true));
        assert!(plan
            .to_string()
            .contains("measured: baseline, A/A control, baseline and A/A control alone, "));
        let short = fit(&requests, &costs, 7.0, 1).unwrap();
        assert_eq!((short.processes, short.estimate_s, short.alone), (3, 5.0, false));
        assert_eq!(short.left_out, [(Trick::CudnnBenchmark, 6, 6.0)]);
    }

    #[test]
    fn tricks_that_cannot_run_cost_nothing_and_say_why() {
        // After amp-bf16, which brings the A/A control that any throughput trick does.
        let tricks = [Trick::AmpBf16, Trick::FlashAttention];
        let plan =
            fit(&requests(&[WorkloadId::Resnet56], &tricks), &ProcessCosts::uniform(1.0), 100.0, 1).unwrap();
        assert_eq!(plan.tricks, tricks);
        assert_eq!(plan.free.len(), 1);
        let (trick, why) = &plan.free[0];
        assert_eq!(*trick, Trick::FlashAttention);
        assert!(why.contains("has no attention"), "{why}");
    }

    #[test]
    fn nothing_fits_when_the_baselines_alone_are_over_the_budget() {
        let plan =
            fit(&requests(&[WorkloadId::Resnet56], &[Trick::AmpBf16]), &ProcessCosts::uniform(10.0), 25.0, 2)
                .unwrap();
        assert_eq!((plan.rounds, plan.tricks.len()), (0, 0));
        assert_eq!(plan.tsv(), "0\t\t3\t30\tamp-bf16");
        assert!(plan.to_string().starts_with("nothing fits"), "{plan}");
    }

    #[test]
    fn compiling_processes_carry_the_compile_allowance_on_each_workload() {
        let requests: Vec<PlanRequest> =
            requests(&[WorkloadId::Resnet56, WorkloadId::GptShakespeare], &[Trick::TorchCompile])
                .into_iter()
                .map(|r| PlanRequest { engines: vec![Engine::Pytorch], ..r })
                .collect();
        let costs = ProcessCosts { compile_s: 30.0, ..ProcessCosts::uniform(8.0) };
        let plan = fit(&requests, &costs, 1000.0, 1).unwrap();
        // Per workload: a warm-up, then the baseline with the A/A control and torch-compile as its
        // arms in one process, torch-compile compiling.
        assert_eq!((plan.processes, plan.estimate_s), (4, 2.0 * (8.0 + 8.0 * 2.0 + 30.0)));
    }

    #[test]
    fn an_engine_without_a_cost_is_named() {
        let mut costs = ProcessCosts::uniform(1.0);
        costs.per_engine_s.remove(&Engine::Pytorch);
        let error = fit(&requests(&[WorkloadId::Resnet56], &[Trick::AmpBf16]), &costs, 100.0, 1).unwrap_err();
        assert_eq!(error, BudgetError::UnknownCost(Engine::Pytorch));
        assert!(error.to_string().contains("--process-s pytorch=SECONDS"), "{error}");
    }

    #[test]
    fn measured_costs_are_each_engine_s_median_process_and_a_share_of_the_time_outside_them() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("reports/cpu-epyc-2core-20261204-quick-make-run-both-engines/results-1.json");
        let results = crate::results::store::load(&path).unwrap();
        let costs = ProcessCosts::measured(std::slice::from_ref(&results));
        let share = outside_share(&results).unwrap();
        assert!(share > 0.0, "a run's time outside its processes' clocks: {share}");
        for engine in [Engine::Libtorch, Engine::Pytorch] {
            let walls: Vec<f64> = results
                .cells
                .iter()
                .filter(|c| c.key.engine == engine)
                .flat_map(|c| c.processes.iter().map(|p| p.wall_s))
                .collect();
            assert_eq!(
                costs.per_engine_s.get(&engine).copied(),
                median(&walls).map(|m| m + share),
                "{engine}"
            );
        }
    }

    #[test]
    fn the_time_outside_the_processes_is_shared_over_them_and_the_warm_ups() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("reports/cpu-epyc-2core-20261204-quick-make-run-both-engines/results-1.json");
        let mut results = crate::results::store::load(&path).unwrap();
        results.run.started_at = "2026-12-05T00:00:00Z".to_owned();
        results.run.finished_at = Some("2026-12-05T00:00:10Z".to_owned());
        // Two throughput cells of one workload, one process each in round 0, of 2 s each, and a
        // round-0 warm-up: 10 s − 4 s outside them, over 3 processes.
        results.cells.retain(|c| !c.key.kind.runs_once() && !c.processes.is_empty());
        let workload = results.cells[0].key.workload;
        results.cells.retain(|c| c.key.workload == workload);
        results.cells.truncate(2);
        for cell in &mut results.cells {
            cell.processes.truncate(1);
            cell.processes[0].wall_s = 2.0;
            cell.processes[0].round = 0;
        }
        assert_eq!(outside_share(&results), Some(2.0));
        results.run.finished_at = None;
        assert_eq!(outside_share(&results), None, "a run in progress");
    }

    #[test]
    fn given_seconds_replace_one_engine_or_all() {
        let pytorch: ProcessSeconds = "pytorch=3.5".parse().unwrap();
        let costs = ProcessCosts::uniform(8.0).with(pytorch);
        assert_eq!(costs.per_engine_s[&Engine::Pytorch], 3.5);
        assert_eq!(costs.per_engine_s[&Engine::Libtorch], 8.0);
        let all = costs.with("2".parse().unwrap());
        assert!(all.per_engine_s.values().all(|&s| s == 2.0));
        for bad in ["0", "-1", "nan", "gpu=3", "pytorch="] {
            assert!(bad.parse::<ProcessSeconds>().is_err(), "{bad}");
        }
    }
}
