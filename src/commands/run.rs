//! `trickbench run`: the flags as a checked run configuration, the run, then the closing table,
//! the results file and the report.

use anyhow::{Context, Result};

use trickbench::bench::config::{InputPaths, RunConfig, RunRequest};
use trickbench::bench::overrides::{ProfileOverrides, TtaOverrides};
use trickbench::bench::progress::{Progress, ProgressMode};
use trickbench::bench::session::{self, Presenter};
use trickbench::bench::trace::CellGlob;
use trickbench::results::schema::{ArmsPerProcess, MeasurementDesign, Results};
use trickbench::summary::{closing_summary, workload_summary};
use trickbench::terminal::{wrap, Terminal};
use trickbench::workloads::WorkloadId;

use crate::cli::RunArgs;

/// Runs the plan the flags describe.
pub fn run(args: &RunArgs) -> Result<()> {
    let terminal = Terminal::detect(args.verbose);
    let mut progress = Progress::new(ProgressMode::detect(args.quiet), terminal);
    let config = RunConfig::new(request(args))?;
    let program = std::env::current_exe().context("finding the trickbench executable")?;
    let finished = session::run(&config, program, &mut progress, &mut WorkloadSummaries)?;
    progress.table(&closing_summary(&finished.results, &finished.shown, terminal));
    for line in trickbench::report::speedrun_headlines(&finished.results) {
        println!("{}", wrap(&line, terminal.columns, 2));
    }
    println!("results: {}", finished.results_path().display());
    super::write_report(
        std::slice::from_ref(&finished.results),
        std::slice::from_ref(&finished.out_dir),
        &finished.out_dir,
    )?;
    Ok(session::refuse_failed_cells(&finished.results, &finished.out_dir)?)
}

/// Each workload's terminal summary, as soon as it is measured: its verdicts, and under `--verbose`
/// its cells' table.
struct WorkloadSummaries;

impl Presenter for WorkloadSummaries {
    fn workload_measured(
        &mut self,
        results: &Results,
        workload: WorkloadId,
        terminal: Terminal,
    ) -> Option<String> {
        Some(workload_summary(results, workload, terminal))
    }
}

/// The cells the run traces: those `--trace` chooses, every throughput cell without it, none
/// with `--no-trace`.
fn traced_cells(args: &RunArgs) -> Option<CellGlob> {
    if args.no_trace {
        return None;
    }
    Some(args.trace.clone().unwrap_or_else(CellGlob::every_cell))
}

/// The run the flags ask for.
fn request(args: &RunArgs) -> RunRequest {
    let training = &args.training;
    RunRequest {
        workload: args.workload,
        model: args.model.clone(),
        image_size: args.image_size,
        probe_model_batch: !args.no_batch_probe,
        tricks: args.tricks.0.clone(),
        design: args.design,
        profile: training.profile,
        profile_file: args.profile_file.clone(),
        flags: ProfileOverrides {
            rounds: args.rounds,
            windows_per_process: args.windows,
            // `--windows N` times exactly N windows.
            max_windows_per_process: args.windows,
            steps_per_window: args.steps_per_window,
            warmup_steps: args.warmup_steps,
            cell_timeout_s: args.cell_timeout_s,
            time_to_accuracy_seeds: args.seeds,
            time_to_accuracy: TtaOverrides {
                target: args.target,
                planned_epochs: args.epochs,
                planned_steps: args.steps,
                budget_s: args.budget_s,
                ..TtaOverrides::default()
            },
            ..ProfileOverrides::default()
        },
        device: training.device,
        seed: training.seed,
        batch_size: training.batch_size,
        time_to_accuracy: !args.no_time_to_accuracy,
        shard: args.shard,
        memory_budget_mib: args.memory_budget_mib,
        memory_limit_mib: args.memory_limit_mib,
        pairing: if args.unpaired { MeasurementDesign::Processes } else { MeasurementDesign::Paired },
        arms_per_process: if args.single_arm { ArmsPerProcess::One } else { ArmsPerProcess::Many },
        host_allocator: args.host_allocator,
        inputs: InputPaths {
            data: training.data.clone(),
            images: args.images.clone(),
            text: training.text.clone(),
        },
        out: args.out.clone(),
        resume: args.resume,
        trace: traced_cells(args),
        from: args.from.clone(),
        engine: args.engine,
        python: args.python.clone(),
        command: std::env::args().collect(),
    }
}
