//! The paired design against the process design on a stand-in machine: window throughputs drawn
//! from a seeded model of a noisy 2-core VM (no training, no timing) and run through the real
//! analysis (`summarise_cell`, `comparisons`, `noise_floors`).
//!
//! The stand-in has a known true effect, an offset per process drawn uniformly from ±20% (what
//! processes differ by on such a VM), throughput falling linearly by 4% over each process's
//! windows, and ±2% jitter per window. Both designs measure it over the same 3 rounds and the same
//! windows per side: the process design runs each side in processes of its own, the paired design
//! runs both sides in each process, their windows alternating A B, B A, … Shown: the paired
//! interval holds the true effect and is narrow (the offset is common to both sides of a pair and
//! cancels), while the process design's is several times wider and cannot call a 10% effect; the
//! paired A/A floor is a few per cent, the process design's tens of per cent. Also shown on one
//! drifting process: the A B, B A order cancels a linear drift that pairs always run A then B turn
//! into a bias.

#[allow(dead_code)]
mod common;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use trickbench::analysis::{comparisons, noise_floors, summarise_cell};
use trickbench::bench::design::Design;
use trickbench::device::DeviceSpec;
use trickbench::results::schema::{
    CellId, CellKey, CellResult, CellStatus, MeasurementDesign, NoiseFloor, PairedWindow, PairedWindows,
    ProcessMeasurement, Side,
};
use trickbench::results::system::SystemInfo;
use trickbench::stats::{median, relative_half_width, Estimate};
use trickbench::tricks::Trick;
use trickbench::workloads::WorkloadId;

use common::cells::{measurement, train_key};

/// The trick's true throughput ÷ the reference's on the stand-in.
const TRUE_EFFECT: f64 = 1.10;
/// The reference's throughput with no offset, drift or jitter, samples per second.
const BASE_SAMPLES_PER_S: f64 = 1000.0;
/// A process's offset factor is drawn uniformly from 1 ± this.
const PROCESS_OFFSET: f64 = 0.20;
/// Throughput falls linearly by this fraction from a process's first window to its last.
const DRIFT: f64 = 0.04;
/// Each window's throughput is multiplied by a factor drawn uniformly from 1 ± this.
const JITTER: f64 = 0.02;
/// Rounds: processes per side in the process design, processes per cell in the paired design.
const ROUNDS: usize = 3;
/// Windows per side in each process: pairs in a paired process, windows in a process of one side.
const WINDOWS_PER_SIDE: usize = 10;
/// Seeds of the stand-in machine every claim is checked over.
const SEEDS: u64 = 10;

/// The stand-in machine: a seeded source of window throughputs.
struct Machine {
    rng: ChaCha8Rng,
}

impl Machine {
    fn new(seed: u64) -> Self {
        Machine { rng: ChaCha8Rng::seed_from_u64(seed) }
    }

    /// A new process's offset factor, shared by every window it times.
    fn process_offset(&mut self) -> f64 {
        1.0 + self.rng.random_range(-PROCESS_OFFSET..PROCESS_OFFSET)
    }

    /// The throughput of the `index`th of `windows` windows a process with `offset` timed, of a
    /// side `effect` × as fast as the reference.
    fn window(&mut self, offset: f64, effect: f64, index: usize, windows: usize) -> f64 {
        let drift = 1.0 - DRIFT * index as f64 / (windows - 1) as f64;
        let jitter = 1.0 + self.rng.random_range(-JITTER..JITTER);
        BASE_SAMPLES_PER_S * effect * offset * drift * jitter
    }

    /// A process of the process design in `round`: one side, `effect` × the reference.
    fn solo_process(&mut self, round: usize, effect: f64) -> ProcessMeasurement {
        let offset = self.process_offset();
        let windows =
            (0..WINDOWS_PER_SIDE).map(|i| self.window(offset, effect, i, WINDOWS_PER_SIDE)).collect();
        measurement(round, windows)
    }

    /// A paired process in `round`: the cell (`effect` × the reference) beside `reference`, pair
    /// `k` timing the reference first when `k` is even and the cell first when it is odd.
    fn paired_process(&mut self, round: usize, effect: f64, reference: &CellId) -> ProcessMeasurement {
        let offset = self.process_offset();
        let total = 2 * WINDOWS_PER_SIDE;
        let mut windows = Vec::with_capacity(total);
        for pair in 0..WINDOWS_PER_SIDE {
            let order =
                if pair % 2 == 0 { [Side::Reference, Side::Trick] } else { [Side::Trick, Side::Reference] };
            for side in order {
                let side_effect = if side == Side::Trick { effect } else { 1.0 };
                let samples_per_s = self.window(offset, side_effect, windows.len(), total);
                windows.push(PairedWindow { pair, side, samples_per_s });
            }
        }
        let own = windows.iter().filter(|w| w.side == Side::Trick).map(|w| w.samples_per_s).collect();
        let mut process = measurement(round, own);
        process.paired = Some(PairedWindows { reference: reference.clone(), windows });
        process
    }
}

/// The three cells both designs measure: the baseline, the trick and the baseline's A/A control.
struct Keys {
    baseline: CellKey,
    trick: CellKey,
    control: CellKey,
}

impl Keys {
    fn new() -> Self {
        let baseline = train_key(WorkloadId::Resnet20, &[]);
        let control = CellKey { aa_control: true, ..baseline.clone() };
        Keys { trick: train_key(WorkloadId::Resnet20, &[Trick::AvoidSync]), baseline, control }
    }
}

/// `key`'s cell with `processes`, summarised as a run summarises it.
fn cell(key: &CellKey, processes: Vec<ProcessMeasurement>) -> CellResult {
    let mut c = CellResult { processes, ..CellResult::new(key.clone(), CellStatus::Ok) };
    summarise_cell(&mut c, &SystemInfo::collect(DeviceSpec::Cpu));
    c
}

/// The process design on `machine`: in each round a process of the baseline, of the trick
/// (`effect` × the baseline) and of the A/A control.
fn process_design(machine: &mut Machine, effect: f64) -> Vec<CellResult> {
    let keys = Keys::new();
    let mut sides: [Vec<ProcessMeasurement>; 3] = Default::default();
    for round in 0..ROUNDS {
        for (side, side_effect) in sides.iter_mut().zip([1.0, effect, 1.0]) {
            side.push(machine.solo_process(round, side_effect));
        }
    }
    let [baseline, trick, control] = sides;
    vec![cell(&keys.baseline, baseline), cell(&keys.trick, trick), cell(&keys.control, control)]
}

/// The paired design on `machine`: in each round a process of the trick (`effect` × the
/// baseline) and one of the A/A control, each beside the baseline; the baseline cell holds the
/// reference side of the trick's processes.
fn paired_design(machine: &mut Machine, effect: f64) -> Vec<CellResult> {
    let keys = Keys::new();
    let reference = keys.baseline.id();
    let trick: Vec<ProcessMeasurement> =
        (0..ROUNDS).map(|round| machine.paired_process(round, effect, &reference)).collect();
    let control = (0..ROUNDS).map(|round| machine.paired_process(round, 1.0, &reference)).collect();
    let baseline = trick
        .iter()
        .map(|p| measurement(p.round, p.paired.as_ref().map(PairedWindows::reference_samples_per_s).unwrap()))
        .collect();
    vec![cell(&keys.baseline, baseline), cell(&keys.trick, trick), cell(&keys.control, control)]
}

/// What a design concluded on one machine: the trick's speed-up with its design, and the A/A
/// control's noise floor.
struct Outcome {
    speedup: Estimate,
    design: MeasurementDesign,
    floor: NoiseFloor,
}

/// The analysis of `cells` as a run's results derive it.
fn analyse(cells: &[CellResult]) -> Outcome {
    let found = comparisons(cells, Design::Ablation);
    let trick = found.iter().find(|c| c.cell == cells[1].id()).expect("the trick is compared");
    let speedup = Estimate { point: trick.speedup, low: trick.speedup_ci_low, high: trick.speedup_ci_high };
    let floors = noise_floors(cells, &found);
    let floor = floors.into_iter().next().expect("the A/A control gives a noise floor");
    Outcome { speedup, design: trick.design, floor }
}

/// Both designs measured on the stand-in of each seed (the process design first, then the paired
/// one, from the same machine), with the true effect [`TRUE_EFFECT`].
fn both_designs() -> Vec<(Outcome, Outcome)> {
    (0..SEEDS)
        .map(|seed| {
            let mut machine = Machine::new(seed);
            let processes = analyse(&process_design(&mut machine, TRUE_EFFECT));
            let paired = analyse(&paired_design(&mut machine, TRUE_EFFECT));
            (processes, paired)
        })
        .collect()
}

fn contains(e: &Estimate, x: f64) -> bool {
    e.low <= x && x <= e.high
}

// Over seeds 0–199 the stand-in gives: the paired interval holds the true effect 98% of the time
// (median half-width ±1.0%, A/A floor ±1.3%), the process design's 80% of the time, with 1
// inside it 61% of the time (median half-width ±13%, A/A floor ±23%); 76% of its intervals miss
// the effect or cannot call it. Other stand-ins: with offsets of ±5% instead of ±20% the process
// design calls the effect in 84% of seeds (±3.6%, A/A ±6%), still about 4× wider than paired;
// with 10 rounds instead of 3 it is still ±14% and calls it in 23%, while paired is ±0.6%. The
// thresholds below hold for about 98% of sets of 10 seeds; seeds 0–9 are the first ten.

#[test]
fn the_paired_interval_holds_the_true_effect_and_is_narrow() {
    let outcomes = both_designs();
    for (_, paired) in &outcomes {
        assert_eq!(paired.design, MeasurementDesign::Paired);
        assert!(relative_half_width(&paired.speedup) < 0.03, "wider than ±3%: {:?}", paired.speedup);
    }
    let called = outcomes
        .iter()
        .filter(|(_, paired)| paired.speedup.low > 1.0 && contains(&paired.speedup, TRUE_EFFECT))
        .count();
    let intervals: Vec<Estimate> = outcomes.iter().map(|(_, p)| p.speedup).collect();
    assert!(called >= 9, "{called} of {SEEDS} intervals hold {TRUE_EFFECT} and exclude 1: {intervals:?}");
}

#[test]
fn the_process_design_is_much_wider_and_cannot_call_the_effect() {
    let outcomes = both_designs();
    let mut widths = (Vec::new(), Vec::new());
    for (processes, paired) in &outcomes {
        assert_eq!(processes.design, MeasurementDesign::Processes);
        let (wide, narrow) = (relative_half_width(&processes.speedup), relative_half_width(&paired.speedup));
        assert!(wide > narrow, "processes ±{wide:.3} against paired ±{narrow:.3}");
        widths.0.push(wide);
        widths.1.push(narrow);
    }
    let (wide, narrow) = (median(&widths.0).unwrap(), median(&widths.1).unwrap());
    assert!(wide > 5.0 * narrow, "median half-widths: processes ±{wide:.3}, paired ±{narrow:.3}");
    let uncalled = outcomes
        .iter()
        .filter(|(p, _)| contains(&p.speedup, 1.0) || !contains(&p.speedup, TRUE_EFFECT))
        .count();
    let intervals: Vec<Estimate> = outcomes.iter().map(|(p, _)| p.speedup).collect();
    assert!(
        uncalled >= 5,
        "the process design called the effect in {} of {SEEDS}: {intervals:?}",
        SEEDS as usize - uncalled
    );
}

#[test]
fn the_paired_aa_floor_is_small_and_the_process_design_floor_large() {
    let outcomes = both_designs();
    let floors = |pick: fn(&(Outcome, Outcome)) -> &Outcome| -> Vec<f64> {
        outcomes.iter().map(|o| pick(o).floor.half_width).collect()
    };
    let (processes, paired) = (floors(|o| &o.0), floors(|o| &o.1));
    assert!(paired.iter().all(|&f| f < 0.03), "paired A/A floors: {paired:?}");
    let process_median = median(&processes).unwrap();
    assert!(process_median > 0.10, "process-design A/A floors: {processes:?}");
    assert!(process_median > 4.0 * median(&paired).unwrap(), "{processes:?} against {paired:?}");
}

/// Throughput of the drifting process below falls by this fraction over its windows.
const STRONG_DRIFT: f64 = 0.10;

/// One process's `pairs` paired windows on a machine whose throughput falls by [`STRONG_DRIFT`]
/// from its first window to its last, without jitter, the trick [`TRUE_EFFECT`] × the
/// reference; `abba`: pair `k` runs the reference first when `k` is even and the trick first
/// when odd, else the reference always first.
fn drifting_process(pairs: usize, abba: bool) -> PairedWindows {
    let total = 2 * pairs;
    let throughput = |index: usize, effect: f64| {
        BASE_SAMPLES_PER_S * effect * (1.0 - STRONG_DRIFT * index as f64 / (total - 1) as f64)
    };
    let mut windows = Vec::with_capacity(total);
    for pair in 0..pairs {
        let reference_first = !abba || pair % 2 == 0;
        let order =
            if reference_first { [Side::Reference, Side::Trick] } else { [Side::Trick, Side::Reference] };
        for side in order {
            let effect = if side == Side::Trick { TRUE_EFFECT } else { 1.0 };
            windows.push(PairedWindow { pair, side, samples_per_s: throughput(windows.len(), effect) });
        }
    }
    PairedWindows { reference: Keys::new().baseline.id(), windows }
}

/// The median of `windows`' pair ratios relative to the true effect, less 1.
fn bias(windows: &PairedWindows) -> f64 {
    median(&windows.ratios()).unwrap() / TRUE_EFFECT - 1.0
}

#[test]
fn abba_cancels_a_linear_drift_that_a_then_b_turns_into_a_bias() {
    let pairs = WINDOWS_PER_SIDE;
    // One window's drift, relative: what the side timed second loses in a pair.
    let step = STRONG_DRIFT / (2 * pairs - 1) as f64;
    let abba = bias(&drifting_process(pairs, true));
    assert!(abba.abs() < 0.05 * step, "ABBA is off by {abba:.5} (one window drifts {step:.5})");
    let a_then_b = bias(&drifting_process(pairs, false));
    assert!(a_then_b < -0.9 * step, "A-then-B is off by {a_then_b:.5}, not about -{step:.5}");
    // With an odd number of pairs one order has a pair more and the median falls on its side:
    // without jitter to mix the two orders, up to one window's drift is left.
    let odd_step = STRONG_DRIFT / (2 * (pairs - 1) - 1) as f64;
    let odd = bias(&drifting_process(pairs - 1, true));
    assert!(odd.abs() <= 1.01 * odd_step, "ABBA with an odd number of pairs is off by {odd:.5}");
}
