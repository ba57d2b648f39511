//! Machines named from their hardware: the GPU model (and how many the machine holds), or the CPU
//! model and its cores; where two runs share a name, what else tells them apart.

use crate::results::schema::Results;

/// The hardware a run measured on, in words: "NVIDIA H200", "NVIDIA H100 80GB HBM3 (1 of 8)",
/// "AMD EPYC (2 cores)", "Intel Xeon Platinum 8481C (16 cores)".
pub(crate) fn hardware_name(r: &Results) -> String {
    let s = &r.system;
    if r.run.device.is_cuda() {
        let model = s.gpu.as_ref().map_or_else(|| format!("CUDA GPU {}", r.run.device), |g| g.name.clone());
        return match s.cuda_device_count {
            0 | 1 => model,
            n => format!("{model} (1 of {n})"),
        };
    }
    let model = s.cpu_model.as_deref().map_or_else(|| "unknown CPU".to_owned(), cpu_model);
    let cores = s.cpu_physical_cores.unwrap_or(s.cpu_logical_cores);
    format!("{model} ({cores} core{})", if cores == 1 { "" } else { "s" })
}

/// A CPU's model name without its trademark signs, clock and core-count words: "Intel(R)
/// Xeon(R) Platinum 8481C CPU @ 2.70GHz" is "Intel Xeon Platinum 8481C", "AMD EPYC 7B13 64-Core
/// Processor" is "AMD EPYC 7B13".
fn cpu_model(name: &str) -> String {
    let name = name.split(" @ ").next().unwrap_or(name);
    let cleaned = name.replace("(R)", "").replace("(r)", "").replace("(TM)", "").replace("(tm)", "");
    let kept: Vec<&str> = cleaned
        .split_whitespace()
        .filter(|w| !matches!(*w, "CPU" | "Processor"))
        .filter(|w| !w.to_ascii_lowercase().ends_with("-core"))
        .collect();
    if kept.is_empty() {
        name.trim().to_owned()
    } else {
        kept.join(" ")
    }
}

/// One name per run, unique among `results`, in their order: each run's hardware, and where
/// several runs share it, the first of the GPU driver, the libtorch version, the start date and
/// the host whose values tell all of those runs apart; a number where none does.
pub(crate) fn machine_names(results: &[Results]) -> Vec<String> {
    let hardware: Vec<String> = results.iter().map(hardware_name).collect();
    let distinctions: [fn(&Results) -> Option<String>; 4] = [
        |r| {
            r.system
                .gpu
                .as_ref()
                .filter(|_| r.run.device.is_cuda())
                .map(|g| format!("driver {}", g.driver_version))
        },
        |r| Some(format!("libtorch {}", r.system.libtorch_version)),
        |r| r.run.started_at.get(..10).map(str::to_owned),
        |r| r.system.hostname.clone(),
    ];
    (0..results.len())
        .map(|i| {
            let twins: Vec<&Results> =
                (0..results.len()).filter(|k| hardware[*k] == hardware[i]).map(|k| &results[k]).collect();
            if twins.len() == 1 {
                return hardware[i].clone();
            }
            let telling = distinctions.iter().find(|d| {
                let values: Vec<Option<String>> = twins.iter().map(|r| d(r)).collect();
                values.iter().all(Option::is_some)
                    && (1..values.len()).all(|k| !values[..k].contains(&values[k]))
            });
            match telling.and_then(|d| d(&results[i])) {
                Some(extra) => format!("{} · {extra}", hardware[i]),
                None => format!("{} #{}", hardware[i], i + 1),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::cpu_model;

    #[test]
    fn a_cpu_model_loses_its_trademark_signs_clock_and_core_count() {
        assert_eq!(cpu_model("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"), "Intel Xeon Platinum 8481C");
        assert_eq!(cpu_model("AMD EPYC 7B13 64-Core Processor"), "AMD EPYC 7B13");
        assert_eq!(cpu_model("Intel(R) Xeon(R) Processor"), "Intel Xeon");
        assert_eq!(cpu_model("Apple M2 Pro"), "Apple M2 Pro");
        assert_eq!(cpu_model("Processor"), "Processor");
    }
}
