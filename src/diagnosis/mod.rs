//! Why a trick did what it did: beside each comparison of a trick with its reference, the most the
//! trick could have given here (its ceiling: Amdahl's bound on the share of the reference's step
//! taken by the part the catalogue says it acts on) and, for an effect that is null, negative or
//! disputed between the engines, a measured cause: chosen from the step breakdowns, the profiler
//! traces of the cell and its reference, the noise floor and `torch.compile`'s counters, in a fixed
//! order, or "cause not found". It reads only the results file, so a report re-rendered from one
//! says the same.

mod cause;
mod ceiling;
pub mod parts;

use crate::results::diagnosis::Diagnosis;
use crate::results::schema::{CellResult, Comparison, NoiseFloor, Verdict};
use crate::tricks::Trick;

pub use ceiling::ceiling;

/// What the diagnosis of one comparison reads.
pub(crate) struct Case<'a> {
    /// The trick the comparison measures.
    pub trick: Trick,
    /// The comparison.
    pub comparison: &'a Comparison,
    /// The trick's cell.
    pub cell: &'a CellResult,
    /// Its reference's cell.
    pub reference: &'a CellResult,
    /// The A/A noise floor's half-width that applies, a fraction (`None`: no control measured).
    pub floor: Option<f64>,
    /// Whether the same comparison on the other engine disagrees with this one
    /// ([`engines_disagree`]).
    pub disputed: bool,
}

/// Sets the diagnosis of every comparison in `comparisons` that measures one trick against its
/// reference (not the A/A controls, stacks or leave-one-out sets), reading the cells of `cells`
/// and the noise floors of `floors`.
pub fn diagnose(comparisons: &mut [Comparison], cells: &[CellResult], floors: &[NoiseFloor]) {
    let diagnoses: Vec<Option<Diagnosis>> = comparisons
        .iter()
        .map(|c| case_of(c, comparisons, cells, floors).map(|case| diagnosis(&case)))
        .collect();
    for (c, d) in comparisons.iter_mut().zip(diagnoses) {
        c.diagnosis = d;
    }
}

/// The diagnosis of `case`: its ceiling (or why there is none) and, where its effect is null,
/// negative or disputed, its cause.
fn diagnosis(case: &Case) -> Diagnosis {
    let (ceiling, ceiling_unavailable) = match ceiling(case.trick, case.reference) {
        Ok(c) => (Some(c), None),
        Err(why) => (None, Some(why)),
    };
    let needs_cause = case.comparison.verdict != Verdict::Faster || case.disputed;
    let cause = needs_cause.then(|| cause::cause(case, ceiling.as_ref()));
    Diagnosis { ceiling, ceiling_unavailable, cause }
}

/// What diagnosing comparison `c` reads, where it measures one trick against its reference.
fn case_of<'a>(
    c: &'a Comparison,
    all: &[Comparison],
    cells: &'a [CellResult],
    floors: &[NoiseFloor],
) -> Option<Case<'a>> {
    let cell = cells.iter().find(|x| x.id() == c.cell)?;
    let reference = cells.iter().find(|x| x.id() == c.baseline)?;
    let key = &cell.key;
    if key.aa_control || key.reference_for.is_some() {
        return None;
    }
    let trick = key.tricks.ablated_trick().filter(|t| !reference.key.tricks.has(*t))?;
    let twin = all.iter().find(|o| {
        cells.iter().any(|x| {
            x.id() == o.cell && x.key.engine != key.engine && x.key.id_on(key.engine) == key.id_on(key.engine)
        })
    });
    Some(Case {
        trick,
        comparison: c,
        cell,
        reference,
        floor: floor_for(c, cell, floors).map(|f| f.half_width),
        disputed: twin.is_some_and(|t| engines_disagree(c, t)),
    })
}

/// The noise floor that judges comparison `c` of `cell`: its workload's and engine's floor of the
/// same design, or any of them where none was measured in that design (the control's own
/// comparison has none).
pub fn floor_for<'f>(c: &Comparison, cell: &CellResult, floors: &'f [NoiseFloor]) -> Option<&'f NoiseFloor> {
    let of_workload = |f: &&NoiseFloor| {
        (f.workload, f.engine) == (cell.key.workload, cell.key.engine) && f.control != cell.id()
    };
    floors
        .iter()
        .filter(of_workload)
        .find(|f| f.design == c.design)
        .or_else(|| floors.iter().find(of_workload))
}

/// Whether two engines' comparisons of the same cell disagree on its throughput: one is faster
/// where the other is slower, or their intervals do not overlap and at least one of them is an
/// effect (faster or slower beyond the noise floor). Two verdicts of no effect never disagree,
/// however their intervals lie.
pub fn engines_disagree(a: &Comparison, b: &Comparison) -> bool {
    let effect = |v: Verdict| matches!(v, Verdict::Faster | Verdict::Slower);
    let opposite = matches!(
        (a.verdict, b.verdict),
        (Verdict::Faster, Verdict::Slower) | (Verdict::Slower, Verdict::Faster)
    );
    let apart = a.speedup_ci_high < b.speedup_ci_low || b.speedup_ci_high < a.speedup_ci_low;
    opposite || (apart && (effect(a.verdict) || effect(b.verdict)))
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests {
    use super::testing::comparison;
    use super::*;

    #[test]
    fn two_no_effect_verdicts_never_disagree_however_their_intervals_lie() {
        let within = comparison(0.89, (0.86, 0.92), Verdict::WithinNoise);
        let none = comparison(1.0, (0.98, 1.02), Verdict::NoSignificantEffect);
        assert!(!engines_disagree(&within, &none));
        let slower = comparison(0.89, (0.86, 0.92), Verdict::Slower);
        assert!(engines_disagree(&slower, &none));
        let faster = comparison(1.05, (1.0, 1.1), Verdict::Faster);
        assert!(engines_disagree(&faster, &slower));
        let also_faster = comparison(1.07, (1.04, 1.12), Verdict::Faster);
        assert!(!engines_disagree(&faster, &also_faster));
    }
}
