//! What a run shows while it runs. On a terminal: a progress bar with the cell process running,
//! the processes done of those planned, and an estimate of the time left. Elsewhere (CI logs,
//! batch jobs): a plain line as each cell process starts and as it ends. With `--quiet`: nothing.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::bench::runner::{LineSink, RunObserver};
use crate::bench::stopping::Decision;
use crate::results::schema::{CellKey, CellResult, CellStatus};
use crate::stats::median;
use crate::terminal::{wrap, Terminal};

/// How a run shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A progress bar on the terminal (stderr), with a line per finished process above it.
    Bar,
    /// A plain line on stderr as each cell process starts and ends.
    Lines,
    /// Nothing but errors (and, at the end, where the results are).
    Quiet,
}

impl ProgressMode {
    /// `Quiet` when asked, else `Bar` when stderr is a terminal and `Lines` when it is not.
    pub fn detect(quiet: bool) -> Self {
        match (quiet, std::io::stderr().is_terminal()) {
            (true, _) => ProgressMode::Quiet,
            (false, true) => ProgressMode::Bar,
            (false, false) => ProgressMode::Lines,
        }
    }
}

/// The time a run has left, estimated from the cell processes finished so far: their mean wall
/// time times the processes left.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Eta {
    finished: usize,
    total_s: f64,
}

impl Eta {
    /// Counts a finished process that took `wall_s` seconds.
    pub fn record(&mut self, wall_s: f64) {
        self.finished += 1;
        self.total_s += wall_s;
    }

    /// Seconds that `left` more processes will take (`None` until one has finished).
    pub fn remaining_s(&self, left: usize) -> Option<f64> {
        (self.finished > 0).then(|| self.total_s / self.finished as f64 * left as f64)
    }

    /// "ETA 3 min 10 s" for `left` more processes, or "ETA —" until one has finished.
    pub fn text(&self, left: usize) -> String {
        match self.remaining_s(left) {
            Some(seconds) => format!("ETA {}", duration_text(seconds)),
            None => "ETA —".to_owned(),
        }
    }
}

/// A duration for a person: "0.4 s", "42 s", "3 min 10 s", "2 h 05 min".
pub fn duration_text(seconds: f64) -> String {
    if seconds < 10.0 {
        return format!("{seconds:.1} s");
    }
    match seconds.round() as u64 {
        s @ ..60 => format!("{s} s"),
        s @ ..3600 => format!("{} min {} s", s / 60, s % 60),
        s => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

/// Shows a run's progress as its mode says, and the run's messages between the processes. A run
/// in phases (probes, the plan, the stack) counts the processes of every phase so far.
pub struct Progress {
    mode: ProgressMode,
    terminal: Terminal,
    bar: ProgressBar,
    eta: Eta,
    /// Processes of the phases before this one.
    earlier: usize,
    /// Processes of this phase.
    phase_total: usize,
    running: Option<Running>,
}

/// The cell process running.
struct Running {
    /// Its number in the run, from 1.
    number: usize,
    /// When it started.
    started: Instant,
    /// Its cell and round, in words: "resnet8/amp/b128/s0/train round 2".
    label: String,
    /// Its round.
    round: usize,
}

impl Progress {
    /// Progress shown as `mode` says, its lines fitted to `terminal`.
    pub fn new(mode: ProgressMode, terminal: Terminal) -> Self {
        let bar = match mode {
            ProgressMode::Bar => {
                let style = ProgressStyle::with_template(
                    "[{elapsed_precise}] {bar:12} {pos}/{len} processes · {wide_msg}",
                )
                .expect("valid template");
                let bar =
                    ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr()).with_style(style);
                bar.enable_steady_tick(Duration::from_secs(1));
                bar
            }
            ProgressMode::Lines | ProgressMode::Quiet => ProgressBar::hidden(),
        };
        Self { mode, terminal, bar, eta: Eta::default(), earlier: 0, phase_total: 0, running: None }
    }

    /// How progress is shown.
    pub fn mode(&self) -> ProgressMode {
        self.mode
    }

    /// The terminal the run's text is fitted to.
    pub fn terminal(&self) -> Terminal {
        self.terminal
    }

    /// Starts the next phase of the run: the processes of the one before are all accounted for.
    pub fn begin_phase(&mut self) {
        self.earlier += self.phase_total;
        self.phase_total = 0;
    }

    /// Shows a line of the run's own (nothing under `--quiet`).
    pub fn note(&self, line: &str) {
        self.show(line);
    }

    /// Prints `text` (a table of results) on stdout, between the progress lines (nothing under
    /// `--quiet`).
    pub fn table(&self, text: &str) {
        match self.mode {
            ProgressMode::Bar => self.bar.suspend(|| println!("{text}")),
            ProgressMode::Lines => println!("{text}"),
            ProgressMode::Quiet => {}
        }
    }

    /// "about 4 min 10 s" for `processes` more cell processes at the pace of those finished so
    /// far, or `None` before any has finished.
    pub fn time_for(&self, processes: usize) -> Option<String> {
        self.eta.remaining_s(processes).map(|s| format!("about {}", duration_text(s)))
    }

    /// Where the lines a cell process writes to stderr go: indented, as notes.
    pub fn child_lines(&self) -> LineSink {
        let (mode, bar, columns) = (self.mode, self.bar.clone(), self.terminal.columns);
        Arc::new(move |line: &str| show(mode, &bar, &wrap(&format!("    {line}"), columns, 2)))
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    /// Processes of the run so far, every phase's.
    fn total(&self) -> usize {
        self.earlier + self.phase_total
    }

    /// Shows `line`, wrapped to the terminal, as the mode says.
    fn show(&self, line: &str) {
        show(self.mode, &self.bar, &wrap(line, self.terminal.columns, 4));
    }
}

/// Shows `line` above the bar, on stderr, or not at all, as `mode` says.
fn show(mode: ProgressMode, bar: &ProgressBar, line: &str) {
    match mode {
        ProgressMode::Bar => bar.println(line),
        ProgressMode::Lines => eprintln!("{line}"),
        ProgressMode::Quiet => {}
    }
}

impl RunObserver for Progress {
    fn process_started(&mut self, done: usize, total: usize, cells: &[CellKey], round: usize) {
        if total > 0 {
            self.phase_total = total;
        }
        let number =
            if total > 0 { self.earlier + done + 1 } else { self.running.as_ref().map_or(1, |r| r.number) };
        let label = process_label(cells, round);
        let eta = self.eta.text(self.total() + 1 - number.min(self.total() + 1));
        match self.mode {
            ProgressMode::Bar => {
                self.bar.set_length(self.total() as u64);
                self.bar.set_position(number as u64 - 1);
                self.bar.set_message(format!("{eta} · {label}"));
            }
            ProgressMode::Lines => self.show(&format!("[{number}/{}] {label} started · {eta}", self.total())),
            ProgressMode::Quiet => {}
        }
        self.running = Some(Running { number, started: Instant::now(), label, round });
    }

    fn cell_decided(&mut self, cell: &CellResult, decision: Decision, round: usize) {
        let verdict = match decision {
            Decision::BeyondNoise => "beyond the noise",
            Decision::WithinNoise => "within the noise",
            Decision::DesignDecided => "every effect of the design decided",
        };
        let rounds = cell.processes.len();
        let line = format!(
            "  {}: decided after {rounds} round{} ({verdict}), from round {} on no more processes",
            cell.id(),
            if rounds == 1 { "" } else { "s" },
            round + 1
        );
        self.show(&line);
    }

    fn warmup_started(&mut self, done: usize, total: usize, cell: &CellKey, round: usize) {
        self.phase_total = total;
        let number = self.earlier + done + 1;
        let label = format!("round {} warm-up ({}, not measured)", round + 1, cell.id());
        match self.mode {
            ProgressMode::Bar => {
                self.bar.set_length(self.total() as u64);
                self.bar.set_position(number as u64 - 1);
                self.bar.set_message(label);
            }
            ProgressMode::Lines => self.show(&format!("[{number}/{}] {label}", self.total())),
            ProgressMode::Quiet => {}
        }
        self.running = None;
    }

    fn process_finished(&mut self, cells: &[&CellResult]) {
        let Some(running) = self.running.take() else {
            return;
        };
        let wall_s = running.started.elapsed().as_secs_f64();
        self.eta.record(wall_s);
        let eta = self.eta.text(self.total().saturating_sub(running.number));
        let outcome = match cells {
            [cell] => format!("{}: {}", running.label, outcome_text(cell, running.round)),
            _ => {
                let each =
                    cells.iter().map(|c| format!("\n    {}: {}", c.id(), outcome_text(c, running.round)));
                format!("{}:{}", running.label, each.collect::<String>())
            }
        };
        let outcome = format!("{outcome} · {}", duration_text(wall_s));
        match self.mode {
            ProgressMode::Bar => {
                self.bar.set_position(running.number as u64);
                self.bar.set_message(eta);
                self.show(&format!("  {outcome}"));
            }
            ProgressMode::Lines => {
                self.show(&format!("[{}/{}] {outcome} · {eta}", running.number, self.total()))
            }
            ProgressMode::Quiet => {}
        }
    }
}

/// A process's cells and round in words: "resnet8/amp/b128/s0/train round 2", or for a multi-arm
/// process "round 2: 9 cells in one process".
fn process_label(cells: &[CellKey], round: usize) -> String {
    match cells {
        [cell] if cell.kind.runs_once() => cell.id().to_string(),
        [cell] => format!("{} round {}", cell.id(), round + 1),
        _ => format!("round {}: {} cells in one process", round + 1, cells.len()),
    }
}

/// How the process of `cell` in `round` ended, in words: "ok, 1163 images/s", "ok, reached test
/// accuracy ≥ 60.0% after 50.2 s of training", "FAILED: …" (the error's first line).
fn outcome_text(cell: &CellResult, round: usize) -> String {
    let first_line = |error: &str| error.lines().next().unwrap_or_default().to_owned();
    match &cell.status {
        CellStatus::Ok => match &cell.time_to_accuracy {
            Some(tta) => {
                let target = tta.metric.target_text(tta.target);
                match tta.time_to_target_s {
                    Some(s) => format!("ok, reached {target} after {s:.1} s of training"),
                    None => format!(
                        "ok, did not reach {target} (best {})",
                        tta.metric.value_text(tta.best_metric)
                    ),
                }
            }
            None => {
                let process = cell.processes.iter().find(|p| p.round == round);
                match process.and_then(|p| median(&p.window_samples_per_s)) {
                    Some(rate) => format!("ok, {rate:.0} {}/s", cell.key.workload.family().sample_unit()),
                    None => "ok".to_owned(),
                }
            }
        },
        CellStatus::NotApplicable { reason, .. } => format!("not applicable: {reason}"),
        CellStatus::Failed { .. } => format!("FAILED: {}", cell.failure_reason().unwrap_or_default()),
        CellStatus::OutOfMemory { .. } => {
            format!("out of memory: {}", first_line(&cell.failure_reason().unwrap_or_default()))
        }
        CellStatus::Timeout { limit_s, .. } => {
            format!("TIMEOUT: stopped after the {limit_s:.0} s cell timeout")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eta_is_the_mean_process_time_times_the_processes_left() {
        let mut eta = Eta::default();
        assert_eq!(eta.remaining_s(10), None);
        assert_eq!(eta.text(10), "ETA —");
        eta.record(4.0);
        eta.record(8.0);
        assert_eq!(eta.remaining_s(10), Some(60.0));
        assert_eq!(eta.remaining_s(0), Some(0.0));
        assert_eq!(eta.text(10), "ETA 1 min 0 s");
        eta.record(18.0);
        assert_eq!(eta.text(19), "ETA 3 min 10 s");
    }

    #[test]
    fn durations_read_as_a_person_would_say_them() {
        assert_eq!(duration_text(0.44), "0.4 s");
        assert_eq!(duration_text(9.94), "9.9 s");
        assert_eq!(duration_text(42.4), "42 s");
        assert_eq!(duration_text(59.6), "1 min 0 s");
        assert_eq!(duration_text(190.0), "3 min 10 s");
        assert_eq!(duration_text(7_500.0), "2 h 05 min");
    }
}
