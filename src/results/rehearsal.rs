//! How far a rehearsal of a GPU run on the CPU (`--device as-if-cuda:GPU`) took each case it
//! planned: stepped on the CPU, stepped with calls its tricks make stood in for, or refused; and
//! the tally of a run's cases.

use std::collections::BTreeMap;

use crate::results::schema::{CellId, CellKind, CellResult, CellStatus, Results};
use crate::vocabulary::StandIn;

/// How far the rehearsal took one case (a cell the plan made).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rehearsed {
    /// Built and stepped on the CPU, every call it made made there but those every case stands
    /// in for (the kernels, the device's clock and allocator, NVML).
    Stepped,
    /// Built, its switches applied and stepped, with these calls its tricks make stood in for:
    /// what only a GPU can confirm of it.
    StoodIn(Vec<StandIn>),
    /// An engine refused the case, or it failed, ran out of memory or time: a defect the first
    /// GPU run would meet. The reason in one line.
    Refused(String),
}

impl Rehearsed {
    /// The status's name on the terminal and in reports.
    pub fn label(&self) -> &'static str {
        match self {
            Rehearsed::Stepped => "stepped",
            Rehearsed::StoodIn(_) => "stood in",
            Rehearsed::Refused(_) => "refused",
        }
    }
}

impl CellResult {
    /// How far the rehearsal took this cell; `None` where the plan made it not applicable (or
    /// the run has not reached it).
    pub fn rehearsed(&self) -> Option<Rehearsed> {
        match &self.status {
            CellStatus::Ok => Some(self.stood_in_by_tricks()),
            CellStatus::NotApplicable { when_run: false, .. } => None,
            CellStatus::NotApplicable { reason, when_run: true } => {
                Some(Rehearsed::Refused(format!("not applicable when it ran: {reason}")))
            }
            CellStatus::OutOfMemory { .. } if self.key.kind == CellKind::MemoryProbe => {
                Some(Rehearsed::Stepped)
            }
            CellStatus::Failed { .. } | CellStatus::OutOfMemory { .. } | CellStatus::Timeout { .. } => {
                Some(Rehearsed::Refused(self.failure_reason().unwrap_or_default()))
            }
        }
    }

    /// Stepped, or stood in for with the calls of this measured cell's processes that not every
    /// case goes through.
    fn stood_in_by_tricks(&self) -> Rehearsed {
        let mut own: Vec<StandIn> = self
            .processes
            .iter()
            .flat_map(|p| p.stood_in.iter().copied())
            .filter(|s| !s.every_case())
            .collect();
        own.sort_unstable();
        own.dedup();
        if own.is_empty() {
            Rehearsed::Stepped
        } else {
            Rehearsed::StoodIn(own)
        }
    }
}

/// A rehearsal's cases by how far it took them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RehearsalTally {
    /// Cases stepped on the CPU.
    pub stepped: usize,
    /// Cases stepped with calls their tricks make stood in for, by the call stood in for (a case
    /// counted under each of its calls).
    pub stood_in: BTreeMap<StandIn, usize>,
    /// Cases with stand-ins, whatever their calls.
    pub stood_in_cases: usize,
    /// The refused cases, with why.
    pub refused: Vec<(CellId, String)>,
}

impl RehearsalTally {
    /// The tally of `results`' cases (none where the run is not a rehearsal).
    pub fn of(results: &Results) -> Option<RehearsalTally> {
        results.run.device.rehearsed()?;
        let mut tally = RehearsalTally::default();
        for cell in &results.cells {
            match cell.rehearsed() {
                None => {}
                Some(Rehearsed::Stepped) => tally.stepped += 1,
                Some(Rehearsed::StoodIn(calls)) => {
                    tally.stood_in_cases += 1;
                    for call in calls {
                        *tally.stood_in.entry(call).or_default() += 1;
                    }
                }
                Some(Rehearsed::Refused(why)) => tally.refused.push((cell.id().clone(), why)),
            }
        }
        Some(tally)
    }

    /// The cases the rehearsal planned.
    pub fn cases(&self) -> usize {
        self.stepped + self.stood_in_cases + self.refused.len()
    }

    /// The tally in one line: `41 cases: 30 stepped, 9 stood in for (graph-capture 4,
    /// attention-kernel 3, …), 2 refused`.
    pub fn line(&self) -> String {
        let calls: Vec<String> = self.stood_in.iter().map(|(call, n)| format!("{call} {n}")).collect();
        let calls = if calls.is_empty() { String::new() } else { format!(" ({})", calls.join(", ")) };
        format!(
            "{} cases: {} stepped, {} stood in for{calls}, {} refused",
            self.cases(),
            self.stepped,
            self.stood_in_cases,
            self.refused.len()
        )
    }
}
