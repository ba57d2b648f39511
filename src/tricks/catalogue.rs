//! The trick catalogue as `trickbench list` prints it: each trick's guide number, metric, what
//! off and on mean in each family's recipe, how each engine applies it and where they differ,
//! and where it does not apply on a device.

use std::io::{self, Write};

use super::{Applicability, InPytorch, Pairing, Trick};
use crate::device::DeviceSpec;
use crate::hardware::Hardware;
use crate::vocabulary::{Family, WorkloadId};

/// Writes the catalogue to `out`, with applicability on `device`, whose `hardware` is given.
pub fn write_catalogue(out: &mut impl Write, device: DeviceSpec, hardware: &Hardware) -> io::Result<()> {
    writeln!(
        out,
        "Tricks (what off and on mean in each family's recipe, and where they apply on {device}):\n"
    )?;
    for trick in Trick::ALL {
        let guide = trick.guide_number().map_or("new".to_owned(), |n| format!("#{n}"));
        let metric = match trick.also_time_to_accuracy() {
            true => format!("{} and time-to-accuracy", trick.metric().label()),
            false => trick.metric().label().to_owned(),
        };
        writeln!(
            out,
            "{:<19} guide {guide:<4} acts on: {:<18} metric: {metric}",
            trick.id(),
            trick.stage().label()
        )?;
        write_off_on(out, trick)?;
        let measured = trick.ablation_set(hardware);
        if let Some(reference) = measured.swapped_reference() {
            writeln!(out, "    measured on {device} as {} against {}", measured.label(), reference.label())?;
        }
        match trick.pairing() {
            Pairing::Paired => {
                writeln!(out, "    design: paired with its reference in each process, beside the other arms")?
            }
            Pairing::OwnPairs(why) => {
                writeln!(out, "    design: paired with its reference in a process of their own: {why}")?
            }
            Pairing::Processes(why) => writeln!(out, "    design: processes of its own, not paired: {why}")?,
        }
        match trick.info().pytorch {
            InPytorch::Applies(how) => writeln!(out, "    in PyTorch (--engine pytorch): {how}")?,
            InPytorch::NotApplied(why) => {
                writeln!(out, "    in PyTorch (--engine pytorch): not applied: {why}")?
            }
        }
        if let Some(why) = trick.info().engine_gap {
            writeln!(out, "    why the two engines' effects differ: {why}")?;
        }
        if let Some(how) = trick.info().ops_differ {
            writeln!(out, "    the two engines' operators differ: {how}")?;
        }
        // One line per family: the first member's reason stands for the family.
        for family in [Family::CifarResnet, Family::CharGpt] {
            let first = WorkloadId::ALL.into_iter().find(|w| w.family() == family);
            if let Some(workload) = first {
                if let Applicability::NotApplicable(reason) = trick.applicability(workload, hardware) {
                    writeln!(out, "    not applicable to {workload} on {device}: {reason}")?;
                }
            }
        }
        writeln!(out)?;
    }
    Ok(())
}

/// What off and on mean: once when both families agree, else for each.
fn write_off_on(out: &mut impl Write, trick: Trick) -> io::Result<()> {
    let (cnn, gpt) = (Family::CifarResnet, Family::CharGpt);
    if (trick.off(cnn), trick.on(cnn)) == (trick.off(gpt), trick.on(gpt)) {
        writeln!(out, "    off: {}", trick.off(cnn))?;
        writeln!(out, "    on:  {}", trick.on(cnn))
    } else {
        writeln!(out, "    off (ResNet): {}", trick.off(cnn))?;
        writeln!(out, "    on  (ResNet): {}", trick.on(cnn))?;
        writeln!(out, "    off (GPT):    {}", trick.off(gpt))?;
        writeln!(out, "    on  (GPT):    {}", trick.on(gpt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalogue(hardware: &Hardware) -> String {
        let mut out = Vec::new();
        write_catalogue(&mut out, hardware.device, hardware).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_forced_backend_says_what_it_is_measured_as_and_against() {
        let gpu = catalogue(&Hardware::with_gpus(1));
        assert!(
            gpu.contains("    measured on cuda:0 as amp-bf16+sdpa-cudnn against amp-bf16+flash-attention\n"),
            "{gpu}"
        );
        let cpu = catalogue(&Hardware::with_gpus(0));
        assert!(cpu.contains("    measured on cpu as sdpa-math against flash-attention\n"), "{cpu}");
        assert!(!cpu.contains("as channels-last against"), "only tricks measured against another say so");
    }

    #[test]
    fn every_trick_says_whether_it_is_paired() {
        let cpu = catalogue(&Hardware::with_gpus(0));
        assert_eq!(cpu.matches("\n    design: ").count(), Trick::ALL.len(), "{cpu}");
        let entry =
            |id: &str| cpu.split("\n\n").find(|e| e.starts_with(&format!("{id} "))).unwrap().to_owned();
        assert!(entry("channels-last")
            .contains("design: paired with its reference in each process, beside the other arms"));
        assert!(
            entry("loader-workers").contains("design: processes of its own, not paired: its worker threads")
        );
        assert!(entry("checkpointing").contains(
            "design: paired with its reference in a process of their own: judged by its peak memory"
        ));
        assert!(entry("one-cycle")
            .contains("design: processes of its own, not paired: judged by time to accuracy"));
    }

    #[test]
    fn every_trick_says_how_the_pytorch_engine_applies_it_or_why_not() {
        let cpu = catalogue(&Hardware::with_gpus(0));
        assert_eq!(cpu.matches("\n    in PyTorch (--engine pytorch): ").count(), Trick::ALL.len(), "{cpu}");
        assert!(cpu.contains("in PyTorch (--engine pytorch): torch.backends.cudnn.benchmark = True"));
        assert!(cpu.contains("in PyTorch (--engine pytorch): torch.utils.data.DataLoader(num_workers=N)"));
        assert!(cpu
            .contains("in PyTorch (--engine pytorch): not applied: the PyTorch engine runs in one process"));
    }
}
