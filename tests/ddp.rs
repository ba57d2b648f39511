//! Data-parallel training on CPU: two gloo processes on loopback started by `trickbench launch`
//! train exactly as one process on the whole batch, and a missing or dead peer or a bad
//! rendezvous ends with a clear error within a bounded time instead of hanging.

#[allow(dead_code)]
mod common;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use tch::Tensor;
use wait_timeout::ChildExt;

use trickbench::distributed::env::{REQUIRED, TIMEOUT_S};
use trickbench::distributed::launch::free_port;
use trickbench::results::schema::CellStatus;
use trickbench::results::store;
use trickbench::tricks::Trick;

use common::cells::{train_key, KeyWith};
use common::cli::{command, synthetic_cifar, text};
use common::dirs::temp_dir;

/// Longest any one command here may take before the test calls it hung (a guard, not a timing
/// assertion: every wait inside is bounded by TRICKBENCH_DIST_TIMEOUT_S, a few seconds).
const HUNG: Duration = Duration::from_secs(120);

/// Runs trickbench in `dir` with `env` on top of an environment without the torchrun variables.
fn trickbench(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut run = command(dir, args);
    run.stdout(Stdio::piped()).stderr(Stdio::piped());
    for name in REQUIRED {
        run.env_remove(name);
    }
    run.env(TIMEOUT_S, "5");
    run.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    let mut child = run.spawn().expect("trickbench starts");
    if child.wait_timeout(HUNG).expect("waiting for trickbench").is_none() {
        child.kill().expect("killing a hung trickbench");
        panic!("trickbench {args:?} hung for {HUNG:?}");
    }
    child.wait_with_output().expect("trickbench output")
}

/// The weight checksum a `ddp-check` line reports.
fn checksum(line: &str) -> f64 {
    line.rsplit("weight checksum ").next().unwrap().trim().parse().unwrap()
}

#[test]
fn two_gloo_ranks_train_exactly_as_one_process_on_the_concatenated_batch() {
    let dir = temp_dir();
    // 3 steps, 4 images per rank, 64 KiB buckets: the ResNet-8's 300 KiB of gradients go out in
    // several buckets, each all-reduced while backward is still running.
    let args = ["--steps", "3", "--batch-size", "4", "--bucket-kib", "64", "--out", "ddp.ot"];
    let launch = ["launch", "--nproc-per-node", "2", "--", "ddp-check"];
    let ddp = trickbench(dir.path(), &[&launch[..], &args[..]].concat(), &[]);
    let stdout = text(&ddp.stdout);
    assert!(ddp.status.success(), "{stdout}\n{}", text(&ddp.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    let rank = |r: usize| {
        *lines
            .iter()
            .find(|l| l.starts_with(&format!("[rank {r}] rank {r} of 2: 3 steps of 4 samples")))
            .unwrap_or_else(|| panic!("no line from rank {r} in:\n{stdout}"))
    };
    let buckets: usize = rank(0).split(", ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(buckets > 1, "{}", rank(0));
    // Every rank ends with the same weights.
    assert_eq!(checksum(rank(0)), checksum(rank(1)), "{stdout}");

    let single =
        trickbench(dir.path(), &["ddp-check", "--steps", "3", "--batch-size", "8", "--out", "one.ot"], &[]);
    assert!(single.status.success(), "{}", text(&single.stderr));
    assert!(text(&single.stdout).starts_with("rank 0 of 1: 3 steps of 8 samples, 0 gradient buckets"));

    let ddp_weights = Tensor::load_multi(dir.path().join("ddp.ot")).unwrap();
    let one_weights = Tensor::load_multi(dir.path().join("one.ot")).unwrap();
    assert_eq!(ddp_weights.len(), one_weights.len());
    assert!(!ddp_weights.is_empty());
    for ((name, a), (other, b)) in ddp_weights.iter().zip(&one_weights) {
        assert_eq!(name, other);
        // fp32 sums in a different order (two halves, then the all-reduce) differ in the last
        // bits; after 3 momentum-SGD steps they agree to |a − b| ≤ 1e-5 + 1e-4·|b|.
        assert!(a.allclose(b, 1e-4, 1e-5, false), "{name}: max difference {}", (a - b).abs().max());
    }
}

/// The torchrun variables of rank `rank` of 2 meeting on `port` of loopback.
fn rank_env(rank: usize, port: u16) -> Vec<(&'static str, String)> {
    trickbench::distributed::env::DistEnv::local_vars(rank, 2, "127.0.0.1", port)
}

#[test]
fn a_world_whose_peer_never_comes_fails_within_the_timeout_naming_the_rendezvous() {
    let dir = temp_dir();
    for rank in [0, 1] {
        let port = free_port().unwrap();
        let mut env = rank_env(rank, port);
        env.push((TIMEOUT_S, "2".to_owned()));
        let out = trickbench(dir.path(), &["ddp-check"], &env);
        assert!(!out.status.success());
        let stderr = text(&out.stderr);
        let expected =
            format!("rendezvous at 127.0.0.1:{port} as rank {rank} of 2 did not complete within 2 s");
        assert!(stderr.contains(&expected), "{stderr}");
    }
}

#[test]
fn a_rank_that_dies_stops_the_launch_which_names_it() {
    let dir = temp_dir();
    let out = trickbench(
        dir.path(),
        &["launch", "--nproc-per-node", "2", "--", "ddp-check", "--fail-rank", "1"],
        &[],
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("[rank 1] error: distributed: rank 1 stops here on purpose"), "{stderr}");
    // Rank 0 then fails too, of the broken connection, and says so; whichever ends first, the
    // launcher names both.
    assert!(stderr.contains("[rank 0] error: distributed: broadcast failed on rank 0 of 2"), "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(last.starts_with("error: distributed: rank "), "{last}");
    assert!(
        last.contains("rank 1 exited with status 1") && last.contains("rank 0 exited with status 1"),
        "{last}"
    );
}

#[test]
fn bad_rendezvous_variables_are_refused_naming_the_variable() {
    let dir = temp_dir();
    let port = free_port().unwrap();
    let with = |name: &'static str, value: Option<&str>| {
        let mut env: Vec<(&str, String)> =
            rank_env(0, port).into_iter().filter(|(k, _)| *k != name).collect();
        if let Some(value) = value {
            env.push((name, value.to_owned()));
        }
        let out = trickbench(dir.path(), &["ddp-check"], &env);
        assert!(!out.status.success());
        text(&out.stderr)
    };
    let cases = [
        (with("RANK", Some("2")), "RANK='2' is not below WORLD_SIZE='2'"),
        (with("MASTER_PORT", Some("http")), "MASTER_PORT='http' is not a TCP port"),
        (with("MASTER_ADDR", None), "MASTER_ADDR is not set"),
        (with("WORLD_SIZE", Some("-2")), "WORLD_SIZE='-2' is not a non-negative integer"),
    ];
    for (stderr, expected) in cases {
        assert!(stderr.contains(expected), "'{expected}' not in: {stderr}");
    }
    let run = trickbench(dir.path(), &["run", "--profile", "smoke"], &rank_env(1, port));
    assert!(!run.status.success());
    assert!(text(&run.stderr).contains("run is not started under a launcher (RANK=1 of WORLD_SIZE=2"));
}

#[test]
fn ddp_is_not_applicable_with_fewer_than_two_gpus_and_the_run_says_why() {
    if tch::Cuda::device_count() >= 2 {
        return;
    }
    let dir = temp_dir();
    let out = trickbench(
        dir.path(),
        &["run", "--profile", "smoke", "--tricks", "ddp", "--no-time-to-accuracy", "--out", "out"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let results = store::load(&dir.path().join("out/results.json")).unwrap();
    let ddp = results.cells.iter().find(|c| c.key.tricks.has(Trick::Ddp)).expect("a ddp cell");
    match &ddp.status {
        CellStatus::NotApplicable { reason, .. } => {
            assert!(reason.starts_with("ddp: needs ≥ 2 GPUs"), "{reason}")
        }
        other => panic!("ddp must be not applicable here, not {other:?}"),
    }
    assert!(
        !results.cells.iter().any(|c| c.key.is_reference_for(Trick::Ddp)),
        "no data-parallel cell is trained"
    );
}

#[test]
fn a_ddp_cell_runs_as_two_gloo_ranks_and_rank_0_reports_their_summed_throughput() {
    use trickbench::bench::cell::CellJob;
    use trickbench::bench::profile::ProfileName;
    use trickbench::device::DeviceSpec;
    use trickbench::results::phases::StepPhase;
    use trickbench::results::schema::ProcessMeasurement;
    use trickbench::workloads::{Family, WorkloadId};

    let dir = temp_dir();
    synthetic_cifar(dir.path(), "cifar", 256, 64);
    // The cell machinery on CPU: the plan never makes this cell here (ddp needs ≥ 2 GPUs), but a
    // job handed to two launched ranks runs the same code a GPU machine's ranks run, with gloo.
    let key = train_key(WorkloadId::Resnet8, &[Trick::Ddp]).with_batch(8);
    let job = CellJob::new(key, DeviceSpec::Cpu, ProfileName::Smoke, dir.path().join("cifar"));
    std::fs::write(dir.path().join("job.json"), serde_json::to_vec(&job).unwrap()).unwrap();
    let launch =
        ["launch", "--nproc-per-node", "2", "--", "cell", "--job", "job.json", "--output", "out.json"];
    let out = trickbench(dir.path(), &launch, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let outcomes: Vec<trickbench::bench::cell::Outcome> =
        serde_json::from_slice(&std::fs::read(dir.path().join("out.json")).unwrap()).unwrap();
    let [Ok(measured)] = &outcomes[..] else { panic!("one cell, one measurement: {outcomes:?}") };
    let measured: ProcessMeasurement = measured.clone();
    assert!(!measured.window_samples_per_s.is_empty());
    assert!(measured.last_loss.is_some_and(f64::is_finite));
    // Both ranks' samples count: each timed step took 8 images on each of the 2 ranks.
    let steps = measured.window_samples_per_s.len()
        * ProfileName::Smoke.settings(Family::CifarResnet).steps_per_window;
    assert_eq!(measured.timed_samples, 2 * 8 * steps);
    // The gradient exchange left after backward is a phase of its own in the step's breakdown.
    let breakdown = measured.step_breakdown.expect("a training cell's step breakdown");
    assert!(breakdown.phase_ms(StepPhase::AllReduce).is_some(), "{breakdown:?}");
    // Without the variables the cell refuses (here) rather than starting ranks on a CPU.
    let alone = trickbench(dir.path(), &["cell", "--job", "job.json", "--output", "alone.json"], &[]);
    assert!(!alone.status.success());
    assert!(text(&alone.stderr).contains("ddp needs ≥ 2 GPUs"), "{}", text(&alone.stderr));
}
