//! The `--tricks` list: trick ids, and the groups that select the tricks judged by some metrics.

use super::{Metric, Trick};
use crate::error::Error;

/// The groups `--tricks` accepts besides trick ids, each with the metrics of its tricks.
pub const TRICK_GROUPS: [(&str, &[Metric]); 4] = [
    ("all", &[Metric::Throughput, Metric::EvalThroughput, Metric::Memory, Metric::TimeToAccuracy]),
    ("throughput", &[Metric::Throughput, Metric::EvalThroughput]),
    ("memory", &[Metric::Memory]),
    ("convergence", &[Metric::TimeToAccuracy]),
];

/// The `--tricks` value that asks for no trick: the baselines alone.
pub const NO_TRICKS: &str = "none";

/// Parses a `--tricks` value (clap names the flag in its errors): a comma-separated list of trick ids and groups (`all`, `throughput`,
/// `memory`, `convergence`: the tricks judged by that metric), in catalogue order within a group;
/// or `none` alone, for the baselines only.
/// The groups leave out the tricks measured through PyTorch (`torch-compile`), which a cell never
/// runs; asked for by id, such a trick's cells are reported not applicable with the reason.
pub fn parse_trick_list(s: &str) -> Result<Vec<Trick>, Error> {
    if s.trim() == NO_TRICKS {
        return Ok(Vec::new());
    }
    let mut tricks = Vec::new();
    for id in s.split(',').map(str::trim).filter(|id| !id.is_empty()) {
        let group = TRICK_GROUPS.iter().find(|(name, _)| *name == id);
        let members: Vec<Trick> = match group {
            Some((_, metrics)) => Trick::ALL
                .into_iter()
                .filter(|t| t.runs_in_cells() && metrics.contains(&t.metric()))
                .collect(),
            None => vec![id.parse().map_err(|e| {
                Error::Invalid(format!(
                    "{e}; or a group: all, throughput, memory, convergence (or '{NO_TRICKS}' alone)"
                ))
            })?],
        };
        for trick in members {
            if !tricks.contains(&trick) {
                tricks.push(trick);
            }
        }
    }
    if tricks.is_empty() {
        return Err(Error::Invalid(format!(
            "empty list; give trick ids or groups such as 'all', or '{NO_TRICKS}' for the baselines only"
        )));
    }
    Ok(tricks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_select_tricks_by_metric_and_mix_with_ids() {
        let convergence = parse_trick_list("convergence").unwrap();
        assert!(convergence.contains(&Trick::OneCycle) && convergence.contains(&Trick::BatchNorm));
        assert!(convergence.iter().all(|t| t.metric() == Metric::TimeToAccuracy));
        let airbench = [Trick::LabelSmoothing, Trick::EmaWeights, Trick::FlipTta, Trick::BnMomentum];
        assert!(airbench.iter().all(|t| convergence.contains(t)), "{convergence:?}");
        let mixed = parse_trick_list("memory,amp,checkpointing").unwrap();
        assert_eq!(
            mixed,
            [Trick::Checkpointing, Trick::GradAccumulation, Trick::ExpandableSegments, Trick::Amp]
        );
        let all = parse_trick_list("all").unwrap();
        assert_eq!(all.len(), Trick::ALL.len() - 1);
        assert!(
            !all.contains(&Trick::TorchCompile)
                && !parse_trick_list("throughput").unwrap().contains(&Trick::TorchCompile)
        );
        assert_eq!(parse_trick_list("torch-compile").unwrap(), [Trick::TorchCompile]);
    }

    #[test]
    fn unknown_trick_lists_the_valid_names() {
        let message = parse_trick_list("amp,turbo").unwrap_err().to_string();
        assert!(message.contains("'turbo'") && message.contains("channels-last"), "{message}");
        assert!(parse_trick_list(" , ").is_err());
    }

    #[test]
    fn none_alone_asks_for_the_baselines_only() {
        assert_eq!(parse_trick_list("none").unwrap(), []);
        assert!(parse_trick_list("none,amp").is_err(), "'none' is not a trick to mix with others");
    }
}
