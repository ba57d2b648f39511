//! The trick catalogue: every fact about each trick the vocabulary names ([`Trick`]), looked up in
//! one table (`table.rs`); where each can be measured on the hardware the caller describes
//! (`applicability.rs`); sets of tricks switched on together (`set.rs`); the `--tricks` list
//! (`list.rs`); the catalogue `trickbench list` prints (`catalogue.rs`).

mod applicability;
pub mod catalogue;
mod info;
mod list;
mod set;
mod table;

use crate::hardware::Hardware;
use crate::vocabulary::Family;

pub use crate::vocabulary::{MemoryFigure, Metric, Trick, TrickSet};
pub use applicability::{Applicability, Need};
pub use info::{ActsOn, InPytorch, Pairing, Reference, Stage, TrickInfo, Wording};
pub use list::{parse_trick_list, TRICK_GROUPS};

/// The peak figure a configuration with `tricks` on is judged by against one without them:
/// reserved bytes where one of them is judged by them (`expandable-segments`), else live bytes.
pub fn memory_figure_of(tricks: impl IntoIterator<Item = Trick>) -> MemoryFigure {
    if tricks.into_iter().any(|t| t.memory_figure() == MemoryFigure::Reserved) {
        MemoryFigure::Reserved
    } else {
        MemoryFigure::Live
    }
}

impl Trick {
    /// The tricks that choose the optimizer; at most one can be on.
    pub const OPTIMIZERS: [Trick; 4] = [Trick::Adamw, Trick::Lars, Trick::Lamb, Trick::Muon];

    /// The tricks judged by training throughput that are also trained to the target beside the
    /// baseline: they change the arithmetic of the model's matmuls (a narrower format, or a
    /// compiler's reordering of the sums), so what they gain in speed could be lost in
    /// convergence. `fp8-matmul` is trained wherever it is measured; the others only in a run
    /// that trains a convergence trick to the target as well ([`Trick::QUALITY_CHECKED`]).
    pub const ALSO_TIME_TO_ACCURACY: [Trick; 5] =
        [Trick::Fp8Matmul, Trick::Amp, Trick::AmpBf16, Trick::Tf32, Trick::TorchCompile];

    /// The tricks of [`Trick::ALSO_TIME_TO_ACCURACY`] trained to the target only in a run that
    /// trains a convergence trick there too: `make run`'s default, throughput and memory alone,
    /// stays minutes long.
    pub const QUALITY_CHECKED: [Trick; 4] = [Trick::Amp, Trick::AmpBf16, Trick::Tf32, Trick::TorchCompile];

    /// Everything the catalogue says about the trick: its entry in the table.
    pub fn info(self) -> &'static TrickInfo {
        table::info(self)
    }

    /// The trick's number in the 2021 guide "Faster Deep Learning Training with PyTorch";
    /// `None` for tricks that became standard after it.
    pub fn guide_number(self) -> Option<u8> {
        self.info().guide_number
    }

    /// What the baseline ("off") does for a workload of `family`.
    pub fn off(self, family: Family) -> &'static str {
        self.info().off.of(family)
    }

    /// What the trick ("on") does for a workload of `family`.
    pub fn on(self, family: Family) -> &'static str {
        self.info().on.of(family)
    }

    /// The metric the trick is judged by.
    pub fn metric(self) -> Metric {
        self.info().metric
    }

    /// Whether the trick, judged by training throughput, is also trained to the target (see
    /// [`Trick::ALSO_TIME_TO_ACCURACY`]).
    pub fn also_time_to_accuracy(self) -> bool {
        Trick::ALSO_TIME_TO_ACCURACY.contains(&self)
    }

    /// The part of training the trick changes.
    pub fn stage(self) -> Stage {
        self.info().stage
    }

    /// The part of a step that bounds the trick's speed-up, or why none does.
    pub fn acts_on(self) -> ActsOn {
        self.info().acts_on
    }

    /// Which peak memory the trick's cells are compared by.
    pub fn memory_figure(self) -> MemoryFigure {
        table::memory_figure(self)
    }

    /// Whether the trick is compared with its own reference cell rather than with the baseline.
    pub fn judged_against_own_reference(self) -> bool {
        matches!(self.info().reference, Reference::Own)
    }

    /// Whether the trick's throughput can be measured in pairs beside its reference, or why not.
    pub fn pairing(self) -> Pairing {
        self.info().pairing
    }

    /// Whether the trick's side can be built beside its reference in one process (its
    /// [`Pairing`] is not [`Pairing::Processes`]).
    pub fn pairs(self) -> bool {
        !matches!(self.pairing(), Pairing::Processes(_))
    }

    /// Whether the trick's side can be one arm among several in a multi-arm process
    /// ([`Pairing::Paired`]).
    pub fn joins_arms(self) -> bool {
        self.pairing() == Pairing::Paired
    }

    /// Whether the trick's effect is measured against the plain recipe (the baseline), not against
    /// a reference of its own or another trick in its place.
    pub fn compared_with_baseline(self) -> bool {
        matches!(self.info().reference, Reference::Baseline | Reference::Beside)
    }

    /// What the trick is compared with when that is not the baseline, in words: "its own
    /// reference (debug-apis-on)", or the trick in its place ("flash-attention in its place");
    /// `None` for a trick compared with the baseline.
    pub fn reference_text(self) -> Option<String> {
        match self.info().reference {
            Reference::Baseline | Reference::Beside => None,
            Reference::Own => self.reference_label().map(|label| format!("its own reference ({label})")),
            Reference::Swapped { with, .. } => Some(format!("{with} in its place")),
        }
    }

    /// The tricks on in the cell that measures this trick alone on `hardware`: the trick, and on a
    /// CUDA GPU the precision its reference asks for there ([`Reference::Swapped`]).
    pub fn ablation_set(self, hardware: &Hardware) -> TrickSet {
        match self.info().reference {
            Reference::Swapped { cuda_precision: Some(precision), .. } if hardware.device.is_cuda() => {
                [self, precision].into_iter().collect()
            }
            _ => TrickSet::only(self),
        }
    }

    /// What the guides claim for the trick, in one sentence naming its source.
    pub fn claim(self) -> &'static str {
        self.info().claim
    }

    /// The trick's colour in every plot, as sRGB red, green and blue.
    pub fn colour(self) -> [u8; 3] {
        self.info().colour
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_the_tricks_with_a_reference_cell_have_a_reference_label() {
        for trick in Trick::ALL {
            let has_cell = matches!(trick.info().reference, Reference::Own | Reference::Beside);
            assert_eq!(trick.reference_label().is_some(), has_cell, "{trick}");
        }
    }

    #[test]
    fn all_is_in_declaration_order_without_repeats() {
        assert!(Trick::ALL.windows(2).all(|pair| pair[0] < pair[1]));
        let optimizers: Vec<Trick> =
            Trick::ALL.into_iter().filter(|t| Trick::OPTIMIZERS.contains(t)).collect();
        assert_eq!(optimizers, Trick::OPTIMIZERS);
        let forcing: Vec<Trick> =
            Trick::ALL.into_iter().filter(|t| t.forced_attention_backend().is_some()).collect();
        assert_eq!(forcing, Trick::SDPA_BACKENDS);
    }
}
