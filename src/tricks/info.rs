//! The shape of an entry of the trick table: the facts the catalogue holds about every trick.

use serde::{Deserialize, Serialize};

use super::{Metric, Need, Trick};
use crate::vocabulary::{Family, StepPart};

/// Every fact about one trick; the trick table holds one per trick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrickInfo {
    /// The trick's number in the 2021 guide "Faster Deep Learning Training with PyTorch"; `None`
    /// for tricks that became standard after it.
    pub guide_number: Option<u8>,
    /// What the trick is judged by.
    pub metric: Metric,
    /// The part of training the trick changes.
    pub stage: Stage,
    /// The part of a training step whose share of the reference's step bounds the trick's
    /// speed-up (its ceiling), or why none does.
    pub acts_on: ActsOn,
    /// What the baseline ("off") does.
    pub off: Wording,
    /// What the trick ("on") does.
    pub on: Wording,
    /// The cell the trick is compared with.
    pub reference: Reference,
    /// Whether the trick's throughput can be measured in pairs of windows inside one process
    /// beside its reference, or why it keeps a process of its own.
    pub pairing: Pairing,
    /// What measuring the trick needs of the workload and the hardware, checked in order: the
    /// first unmet need is the reason it cannot be measured.
    pub needs: &'static [Need],
    /// How the PyTorch engine applies the trick, in the PyTorch calls a user makes, or why it
    /// does not.
    pub pytorch: InPytorch,
    /// Why the trick's effect differs between libtorch and eager PyTorch, where the cause is
    /// known (`None`: none known); a report shows it where the two engines disagree.
    pub engine_gap: Option<&'static str>,
    /// Why the trick changes different ATen operators on the two engines, where it does: what
    /// `trickbench ops` shows and the engine-equivalence test allows (`None`: it changes the same
    /// operators on both, beyond the harness's own [`crate::engine::HARNESS_OPS`]).
    pub ops_differ: Option<&'static str>,
    /// The trick's colour in every plot, as sRGB red, green and blue.
    pub colour: [u8; 3],
    /// What the guides claim for the trick, in one sentence naming its source.
    pub claim: &'static str,
}

/// What bounds a trick's speed-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActsOn {
    /// A part of the step: removed entirely, it would give `1 / (1 - its share)` of the
    /// reference's step (Amdahl's bound).
    Part(StepPart),
    /// No one part of a step bounds it; the text says why.
    Unbounded(&'static str),
}

/// A description in each workload family's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wording {
    /// The same words in every family's recipe.
    Same(&'static str),
    /// Different words in the CIFAR ResNet recipe and in the char-level GPT's.
    ByFamily {
        /// In the CIFAR ResNet recipe.
        cifar_resnet: &'static str,
        /// In the char-level GPT recipe.
        char_gpt: &'static str,
    },
}

impl Wording {
    /// The words for a workload of `family`.
    pub fn of(self, family: Family) -> &'static str {
        match (self, family) {
            (Wording::Same(words), _) => words,
            // The user's model trains with the ResNet recipe.
            (Wording::ByFamily { cifar_resnet, .. }, Family::CifarResnet | Family::UserModel) => cifar_resnet,
            (Wording::ByFamily { char_gpt, .. }, Family::CharGpt) => char_gpt,
        }
    }
}

/// What a trick's "on" cell is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference {
    /// The baseline, the plain recipe, which is the trick's "off" side.
    Baseline,
    /// A reference cell of its own (labelled [`Trick::reference_label`]): the baseline with the
    /// trick's "off" side switched on, for tricks whose "off" side is not the plain recipe (debugging left on, Adam
    /// with L2, DataParallel, or a trick of the recipe taken out).
    Own,
    /// The baseline, with a further cell (labelled [`Trick::reference_label`]) measured beside it
    /// and itself compared with the baseline, for a trick whose recipe default is already partly on: `tf32`'s
    /// `strict-fp32` cell forbids TF32 everywhere, which shows what PyTorch's default of TF32 in
    /// cuDNN is worth.
    Beside,
    /// The same cell with another trick on in this one's place, for a trick that refines that
    /// other: each forced SDPA backend against `scaled_dot_product_attention` under PyTorch's own
    /// choice of backend (`flash-attention`). On a CUDA GPU both cells also run with
    /// `cuda_precision` on, a precision every backend supports there.
    Swapped {
        /// The trick on in the reference cell instead.
        with: Trick,
        /// The trick both cells also switch on on a CUDA GPU (`None`: none).
        cuda_precision: Option<Trick>,
    },
}

/// How the PyTorch engine (`scripts/engine/pytorch_engine.py`) applies a trick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InPytorch {
    /// As PyTorch's documentation tells a user to; the text names the calls.
    Applies(&'static str),
    /// Not by the PyTorch engine; the text says why (its cells on that engine are not
    /// applicable with this reason).
    NotApplied(&'static str),
}

/// How a trick's throughput is measured against its reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing {
    /// In pairs: one process holds both sides, built from the same initial weights and fed the same
    /// batches, and times their windows alternately (A B B A …); its switches flip between
    /// windows without leaking from one side to the other. The trick's side is built and measured
    /// first, alone in its process, so its peak memory is its own. The process holds the other
    /// tricks paired with the same reference too, as further arms (a multi-arm process).
    Paired,
    /// In pairs, as [`Pairing::Paired`], but in a process of its own pair, not among other arms;
    /// the text says why.
    OwnPairs(&'static str),
    /// One process per side, interleaved across rounds; the text says why it cannot be paired.
    Processes(&'static str),
}

/// The part of training a trick changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// The loader: how batches are read, assembled, augmented, standardised and copied to the
    /// device before the step.
    Loader,
    /// The training step: its model, precision, forward, loss, backward, optimizer update,
    /// launch and memory.
    Step,
    /// Evaluation on the held-out set only.
    Evaluation,
    /// The schedule across steps: the learning rate and momentum over training, or the batch size.
    Schedule,
    /// How training is spread over processes and devices.
    Processes,
}

impl Stage {
    /// What the stage is, in the words of `trickbench list`.
    pub fn label(self) -> &'static str {
        match self {
            Stage::Loader => "the loader",
            Stage::Step => "the training step",
            Stage::Evaluation => "evaluation",
            Stage::Schedule => "the schedule",
            Stage::Processes => "the processes",
        }
    }
}
