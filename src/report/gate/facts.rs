//! What makes two runs' effects incomparable where it differs: the hardware (the device, the GPU
//! model, and on the CPU its model and libtorch's threads), the profile and design, the
//! measurement protocol, the batch sizes of the families both runs train, the data and the user's
//! model. The commit, the libtorch, CUDA and PyTorch versions and the host may differ: that is
//! what a gate compares, across the runners of one pool.

use crate::results::schema::{Protocol, Results};

/// One thing that differs between the two runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// What differs: "device", "GPU", "profile", "steps per window", "batch size (resnet)".
    pub fact: String,
    /// Its value in the base run.
    pub base: String,
    /// Its value in the new run.
    pub new: String,
}

/// Every difference between `base` and `new` that makes their effects incomparable, in the order
/// of [`facts`].
pub(super) fn mismatches(base: &Results, new: &Results) -> Vec<Mismatch> {
    let on_cpu = !base.run.device.is_cuda() && !new.run.device.is_cuda();
    let mut differences: Vec<Mismatch> = facts(base, on_cpu)
        .into_iter()
        .zip(facts(new, on_cpu))
        .filter(|((_, b), (_, n))| b != n)
        .map(|((fact, base), (_, new))| Mismatch { fact: fact.to_owned(), base, new })
        .collect();
    differences.extend(batch_sizes(base, new));
    differences
}

/// The differences as a refusal lists them: "device: base cpu, new cuda; profile: base quick, new
/// standard".
pub(super) fn list(differences: &[Mismatch]) -> String {
    let each: Vec<String> =
        differences.iter().map(|m| format!("{}: base {}, new {}", m.fact, m.base, m.new)).collect();
    each.join("; ")
}

/// The facts of `r` that must agree, as (name, value); the CPU's own where both runs are on it.
fn facts(r: &Results, on_cpu: bool) -> Vec<(&'static str, String)> {
    let (run, system) = (&r.run, &r.system);
    let device = if run.device.is_cuda() { "cuda" } else { "cpu" };
    let mut facts = vec![
        ("device", device.to_owned()),
        ("GPU", system.gpu.as_ref().map_or_else(|| "none".to_owned(), |g| g.name.clone())),
        ("profile", run.profile.to_string()),
        ("design", run.design.to_string()),
        ("dataset", run.data.name.clone()),
        ("synthetic data", run.data.synthetic.to_string()),
        ("own model", run.model.as_ref().map_or_else(|| "none".to_owned(), |m| m.spec.clone())),
    ];
    if on_cpu {
        facts.push(("CPU", system.cpu_model.clone().unwrap_or_else(|| "unknown".to_owned())));
        facts.push(("torch threads", system.torch_threads.to_string()));
    }
    facts.extend(protocol_facts(&run.protocol));
    facts
}

/// The protocol's settings that change what a throughput or its interval is.
fn protocol_facts(p: &Protocol) -> Vec<(&'static str, String)> {
    let optional = |v: Option<String>| v.unwrap_or_else(|| "none".to_owned());
    vec![
        ("warm-up steps", p.warmup_steps.to_string()),
        ("windows per process", p.windows_per_process.to_string()),
        ("steps per window", p.steps_per_window.to_string()),
        ("rounds", p.rounds.to_string()),
        ("bootstrap resamples", p.bootstrap_resamples.to_string()),
        ("confidence level", p.confidence_level.to_string()),
        ("target interval half-width", optional(p.target_ci_half_width.map(|w| w.to_string()))),
        ("max windows per process", optional(p.max_windows_per_process.map(|w| w.to_string()))),
        ("pairing", p.pairing.label().to_owned()),
        ("arms per process", format!("{:?}", p.arms_per_process).to_lowercase()),
        ("host allocator", format!("{:?}", p.host_allocator).to_lowercase()),
    ]
}

/// The batch sizes that differ, for each family both runs train.
fn batch_sizes(base: &Results, new: &Results) -> Vec<Mismatch> {
    let new_families = &new.run.profile_settings.families;
    base.run
        .profile_settings
        .families
        .iter()
        .filter_map(|b| {
            let n = new_families.iter().find(|n| n.family == b.family)?;
            (n.batch_size != b.batch_size).then(|| Mismatch {
                fact: format!("batch size ({})", b.family.name()),
                base: b.batch_size.to_string(),
                new: n.batch_size.to_string(),
            })
        })
        .collect()
}
