//! Command-line definitions (clap derive only; the commands live in `commands/`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use trickbench::bench::budget::ProcessSeconds;
use trickbench::bench::config::{TrickList, WorkloadChoice};
use trickbench::bench::design::Design;
use trickbench::bench::profile::ProfileRequest;
use trickbench::bench::trace::CellGlob;
use trickbench::device::DeviceSpec;
use trickbench::engine::EngineChoice;
use trickbench::measure::host_allocator::HostAllocator;
use trickbench::parity::side::CompileMode;
use trickbench::report::gate::FailOn;
use trickbench::report::CompareBy;
use trickbench::tricks::Trick;

/// Measures PyTorch training speed-up tricks, on and off, on reference models.
#[derive(Debug, Parser)]
#[command(name = "trickbench", version, about, max_term_width = 100)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a benchmark plan, writing results.json after every cell, then a summary.
    Run(Box<RunArgs>),
    /// Re-render plots, HTML, Markdown and CSV from results files.
    Report(ReportArgs),
    /// Merge the shards of a sharded sweep (`run --shard I/N`) into one results file and report.
    Merge(MergeArgs),
    /// Compare the same plan across GPUs or machines, or across versions (commits, libtorch) of
    /// one machine: one results file each.
    Compare(CompareArgs),
    /// List the trick catalogue: id, guide number, off/on, metric, applicability.
    List(ListArgs),
    /// Fit an ablation into a time budget: which tricks (in the order given, the most valuable
    /// first) and how many rounds fit, at a given or measured cost per cell process.
    Plan(Box<PlanArgs>),
    /// Show the libtorch, CUDA, cuDNN, GPU, CPU and memory a report would record.
    Env,
    /// Compare traced cells with their references operator by operator (calls, self time, bytes
    /// allocated per step): what a trick changed on each engine, where the two engines' changes
    /// differ, and where their references differ. Trace both first: `run --trace`.
    Ops(OpsArgs),
    /// Train the same network, weights and batches in trickbench and in eager PyTorch: do the
    /// losses agree, and how fast is each step.
    Parity(ParityArgs),
    /// Is a trick's effect on the PyTorch engine the effect your own plain script gets? Times each
    /// trick in a minimal eager script (plain.py, written apart from the engine) beside the
    /// engine, in the same rounds and pairing, and says where the two effects disagree.
    Crosscheck(CrosscheckArgs),
    /// Prepare datasets.
    #[command(subcommand)]
    Data(DataCommand),
    /// Start N copies of a trickbench command on this machine, one per rank, with the torchrun
    /// variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) set: `trickbench launch
    /// --nproc-per-node 2 -- ddp-check`.
    Launch(LaunchArgs),
    /// Check data-parallel training: train a small network for a few steps as one rank of the
    /// world the torchrun variables describe (or alone without them) and print a checksum of the
    /// weights, which is the same on every rank and equals a single process's on the whole batch.
    DdpCheck(DdpCheckArgs),
    /// Run one cell (used internally: `run` starts one such process per cell).
    #[command(hide = true)]
    Cell(CellArgs),
    /// Run trickbench's side of a parity case (used internally: `parity` starts these processes,
    /// with the same options as the PyTorch script's).
    #[command(hide = true)]
    ParitySide(ParitySideArgs),
}

/// Options of `trickbench launch`.
#[derive(Debug, Args)]
pub struct LaunchArgs {
    /// Processes to start on this machine (one per GPU for DDP).
    #[arg(long)]
    pub nproc_per_node: usize,
    /// Host of the rendezvous store (rank 0 hosts it).
    #[arg(long, default_value = "127.0.0.1")]
    pub master_addr: String,
    /// Port of the rendezvous store (default: a free port).
    #[arg(long)]
    pub master_port: Option<u16>,
    /// The trickbench command and arguments every rank runs, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}

/// Options of `trickbench ddp-check`.
#[derive(Debug, Args)]
pub struct DdpCheckArgs {
    /// Training steps.
    #[arg(long, default_value_t = 3)]
    pub steps: usize,
    /// Samples per step on each rank (the whole batch is this times WORLD_SIZE).
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Bucket size of the gradient all-reduce, KiB.
    #[arg(long, default_value_t = 25 * 1024)]
    pub bucket_kib: usize,
    /// Device: cpu (gloo), or cuda (NCCL; each rank on the GPU of its LOCAL_RANK).
    #[arg(long, default_value = "cpu")]
    pub device: DeviceSpec,
    /// Fail on purpose right after joining the world, as this rank (to see how the other ranks
    /// and the launcher react to a dead peer).
    #[arg(long)]
    pub fail_rank: Option<usize>,
    /// Write the trained weights (rank 0's, or the single process's) to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// The options `run` and `parity` share: the profile, device, seed, batch size and data.
#[derive(Debug, Args)]
pub struct TrainingArgs {
    /// Measurement profile (`parity` compares its baseline cell: recipe, batch size, data subset).
    #[arg(long, default_value = "auto")]
    pub profile: ProfileRequest,
    /// Device: auto, cpu, cuda or cuda:N; for `run`, as-if-cuda:sm80|sm90|sm100 rehearses on the
    /// CPU what a run on that GPU plans, every case built and stepped on the CPU with each call
    /// that needs a CUDA device stood in (docs/gpu.md).
    #[arg(long, default_value = "auto")]
    pub device: DeviceSpec,
    /// Seed of weights, data order and augmentation.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Samples per step (default: the profile's, 128 for a ResNet).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Directory of CIFAR-10 binary files; synthetic data is generated when it holds none.
    #[arg(long, default_value = "data/cifar10")]
    pub data: PathBuf,
    /// UTF-8 text file the GPT workloads train on (character-level; the first 90% trains, the
    /// last 10% validates). `trickbench data fetch shakespeare --out data/shakespeare` (or `make
    /// data`) writes the default.
    #[arg(long, default_value = "data/shakespeare/tinyshakespeare.txt")]
    pub text: PathBuf,
}

/// Options of `trickbench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Workload: resnet8, resnet20, resnet56, resnet110, gpt-mini, gpt-shakespeare; resnet or gpt
    /// (the profile's member of the family: ResNet-8 and the 2-layer GPT in smoke and quick,
    /// ResNet-56 and the shakespeare-char GPT in standard and full); or all (both families).
    /// Default: all, or none beside --model.
    #[arg(long)]
    pub workload: Option<WorkloadChoice>,
    /// Your own network, measured as a workload of its own: FILE.py or FILE.py:FUNCTION (a
    /// function that returns the nn.Module, `model` by default; the file may also define
    /// batch(batch_size), loss(output, targets) and optimizer(parameters)), or a library's model,
    /// torchvision:NAME or timm:NAME. Built by the PyTorch engine's Python; exported to
    /// TorchScript for the libtorch engine (docs/own-model.md).
    #[arg(long, value_name = "SPEC")]
    pub model: Option<String>,
    /// Side of the square images made for a --model without its own batch() function, pixels
    /// (default: 224).
    #[arg(long, value_name = "PX", requires = "model")]
    pub image_size: Option<u32>,
    /// Do not probe the largest batch that fits your --model (by default each engine trains it at
    /// batch 64, 128, … one process each, until one runs out of memory).
    #[arg(long, requires = "model")]
    pub no_batch_probe: bool,
    /// Comma-separated trick ids and groups: all, throughput, memory, convergence (the tricks
    /// judged by training throughput, peak memory, or time to accuracy); or none, for the
    /// baselines alone.
    #[arg(long, default_value = "all")]
    pub tricks: TrickList,
    /// Experimental design.
    #[arg(long, default_value = "ablation")]
    pub design: Design,
    /// TOML file whose values replace the profile's: the measurement protocol at its top level,
    /// workload and time-to-accuracy settings at the top level (every family) or in [resnet] and
    /// [gpt] tables (see docs/designs.md, "The profile file"). Flags replace the file's values.
    #[arg(long, value_name = "FILE")]
    pub profile_file: Option<PathBuf>,
    /// The profile, device, seed, batch size and data.
    #[command(flatten)]
    pub training: TrainingArgs,
    /// Skip the time-to-accuracy cells (the tricks judged by them become not applicable).
    #[arg(long)]
    pub no_time_to_accuracy: bool,
    /// Measure every trick cell in processes of its own, interleaved across rounds (the process
    /// design), instead of pairing each with its reference inside one process, windows
    /// alternating, wherever the trick allows it (the default).
    #[arg(long)]
    pub unpaired: bool,
    /// Measure each paired cell in a process of its own, beside its reference, instead of every
    /// cell paired with the same reference in one process a round, as arms (the default): the
    /// two-arm design, to check an effect measured among other arms.
    #[arg(long, conflicts_with = "unpaired")]
    pub single_arm: bool,
    /// The host allocator every measuring process starts with: tuned (glibc malloc keeps the
    /// memory a step frees for the next, so paired models do not change each other's page
    /// faults; docs/methodology.md) or system (glibc's defaults, what a plain Python training
    /// script gets). Recorded in the results and shown on the first screen.
    #[arg(long, value_enum, default_value_t = HostAllocator::Tuned)]
    pub host_allocator: HostAllocator,
    /// The engine the throughput cells train on: libtorch (trickbench's own loop, no Python in
    /// the timed steps), pytorch (eager PyTorch driven from Python, each trick applied as PyTorch's
    /// documentation shows; what a Python training script gets), or both, in the same rounds.
    /// Default: both where the design is the ablation and the set-up's Python (--python, else
    /// .venv/bin/python) imports torch, else libtorch; the run's first lines say which and why.
    #[arg(long, value_enum)]
    pub engine: Option<EngineChoice>,
    /// The Python with torch that runs the PyTorch engine (default: .venv/bin/python when present,
    /// else python3).
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Seeds per time-to-accuracy configuration (default: the profile's).
    #[arg(long, allow_negative_numbers = true)]
    pub seeds: Option<usize>,
    /// Target of the time-to-accuracy cells: test accuracy as a fraction in (0, 1] for a ResNet
    /// (0.6 for 60%), validation loss in nats per token for a GPT (default: the profile's). Your
    /// --model trains to a test accuracy on CIFAR-10 only when this (or a profile file) sets one.
    /// With a GPT and a ResNet or your model in the run, set each in a --profile-file instead.
    #[arg(long, allow_negative_numbers = true)]
    pub target: Option<f64>,
    /// Epochs of the training split the time-to-accuracy schedule is planned over; training stops
    /// there if the target is not reached (default: the profile's epochs or steps).
    #[arg(long, conflicts_with = "steps", allow_negative_numbers = true)]
    pub epochs: Option<usize>,
    /// Optimizer steps the time-to-accuracy schedule is planned over; training stops there if the
    /// target is not reached (default: the profile's epochs or steps).
    #[arg(long, allow_negative_numbers = true)]
    pub steps: Option<usize>,
    /// Training time a time-to-accuracy cell may spend reaching its target, seconds (evaluation
    /// excluded; default: the profile's).
    #[arg(long, allow_negative_numbers = true)]
    pub budget_s: Option<f64>,
    /// Run only shard I of N (0 ≤ I < N) of the plan, for a sweep spread over machines (e.g. a
    /// Slurm job array); `trickbench merge` joins the shards' results. Each workload's throughput
    /// cells stay together in one shard; time-to-accuracy cells are spread round-robin.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<trickbench::bench::shard::Shard>,
    /// Peak memory a cell may use, MiB, beyond which it ends out of memory (default: on a CPU the
    /// profile's budget, on a GPU the device's own memory).
    #[arg(long)]
    pub memory_budget_mib: Option<u64>,
    /// Hard cap on each cell process's memory, MiB (its data segment, RLIMIT_DATA, which includes
    /// the ≈500 MiB libtorch takes when loaded): a cell that needs more fails to allocate and is
    /// recorded as out of memory, instead of the machine swapping or the kernel killing processes.
    /// Default: no cap.
    #[arg(long)]
    pub memory_limit_mib: Option<u64>,
    /// Processes per cell, run in interleaved rounds (default: the profile's).
    #[arg(long, allow_negative_numbers = true)]
    pub rounds: Option<usize>,
    /// Timed windows per cell process, exactly this many: the profile's extension of noisy
    /// processes up to its maximum is off (default: the profile's minimum and maximum).
    #[arg(long, allow_negative_numbers = true)]
    pub windows: Option<usize>,
    /// Training steps (or evaluation batches) per timed window (default: the profile's).
    #[arg(long, allow_negative_numbers = true)]
    pub steps_per_window: Option<usize>,
    /// Untimed steps at the start of each cell process before its first window (default: the
    /// profile's).
    #[arg(long, allow_negative_numbers = true)]
    pub warmup_steps: Option<usize>,
    /// Seconds a cell process may run before it is stopped and recorded as timed out (default: the
    /// profile's).
    #[arg(long, allow_negative_numbers = true)]
    pub cell_timeout_s: Option<f64>,
    /// ImageFolder directory or tar of 32×32 JPEG/PNG files (as for `data import`) to train on
    /// instead of --data: every batch decodes its files unless packed-dataset is on, which packs
    /// them once. Without it packed-dataset is not applicable.
    #[arg(long)]
    pub images: Option<PathBuf>,
    /// Output directory (default: reports/runs/<run id>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue the run in --out, skipping cells already measured.
    #[arg(long, requires = "out")]
    pub resume: bool,
    /// Which cells record a profiler trace (default: every training and evaluation throughput
    /// cell): 3 steps after the timed windows of each one's first process, under the Kineto
    /// profiler of the cell's engine (libtorch's, or torch.profiler's on the PyTorch engine:
    /// operators with input shapes and the memory they allocate; CUDA kernels on a GPU), written to
    /// <out>/traces/ as gzipped Chrome-trace JSON (.json.gz), which https://ui.perfetto.dev and
    /// chrome://tracing open as it is. The traces give each trick its ceiling and the cause of a
    /// null, negative or disputed effect, a table of the longest operators in the report, and what
    /// `trickbench ops` compares operator by operator. The glob traces the cells whose id matches
    /// it instead, the A/A controls among them (`*` also matches `/`). Ids are
    /// WORKLOAD/CONFIGURATION/bBATCH/sSEED/KIND, e.g. resnet8/baseline/b32/s0/train or
    /// resnet8/amp+channels-last/b32/s0/eval: `--trace 'resnet8/*/train'`, `--trace
    /// '*channels-last*'`.
    #[arg(long, value_name = "CELL_GLOB", conflicts_with = "no_trace")]
    pub trace: Option<CellGlob>,
    /// Record no profiler trace: no ceiling for the tricks that act on operators, and no cause read
    /// from their operators.
    #[arg(long)]
    pub no_trace: bool,
    /// With --design speedrun: take the tricks' measured effects from this results file instead of
    /// running the ablation first. Repeatable (a throughput run and a convergence run, say); a
    /// trick measured in several files is taken from the first. A file measured on another kind of
    /// device is refused; one without cells of a workload is ignored for it, with a note.
    #[arg(long, value_name = "RESULTS")]
    pub from: Vec<PathBuf>,
    /// Show no progress and no summary: only errors and, at the end, where the results are.
    #[arg(long)]
    pub quiet: bool,
    /// Print the table of every cell (throughput, interval, design, memory, status) beside the
    /// verdicts; cells.csv and the report have it either way.
    #[arg(long, short, conflicts_with = "quiet")]
    pub verbose: bool,
}

/// Options of `trickbench plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Workload, as for `run`: resnet or gpt (the profile's member of the family), a workload id,
    /// or all.
    #[arg(long, default_value = "all")]
    pub workload: WorkloadChoice,
    /// Trick ids and groups, comma-separated, in order of value: each is added while it fits.
    #[arg(long, default_value = "throughput")]
    pub tricks: TrickList,
    /// Measurement profile (its workloads and batch size).
    #[arg(long, default_value = "auto")]
    pub profile: ProfileRequest,
    /// Device the run will use: auto, cpu, cuda, cuda:N, or as-if-cuda:sm80|sm90|sm100 (one GPU
    /// of that compute capability with every CUDA path built in, whatever this machine has).
    #[arg(long, default_value = "auto")]
    pub device: DeviceSpec,
    /// Plan for one Hopper GPU with every CUDA path built in, whatever this machine has: a GPU
    /// run's plan made on another machine (the same as --device as-if-cuda:sm90).
    #[arg(long, conflicts_with = "device")]
    pub assume_gpu: bool,
    /// The engines the cells train on.
    #[arg(long, value_enum, default_value = "both")]
    pub engine: EngineChoice,
    /// The design to plan: the ablation, fitted into the budget trick by trick (the most valuable
    /// first), or the factorial, priced whole against it (its tricks cannot be dropped one by one
    /// without changing the fraction).
    #[arg(long, value_enum, default_value = "ablation")]
    pub design: Design,
    /// Seconds the run may take.
    #[arg(long, allow_negative_numbers = true)]
    pub budget_s: f64,
    /// Seconds one cell process costs (start, loading, device context, model build, warm-up and
    /// windows): SECONDS for every engine, or ENGINE=SECONDS; repeatable. Replaces what
    /// --costs-from measured.
    #[arg(long, value_name = "[ENGINE=]SECONDS")]
    pub process_s: Vec<ProcessSeconds>,
    /// Results files of measured runs: each engine's cost per process is its processes' median
    /// wall time plus their share of the run's time outside them (starting and loading them, the
    /// warm-up processes, the harness's writes).
    #[arg(long, value_name = "RESULTS")]
    pub costs_from: Vec<PathBuf>,
    /// Seconds added to each process that compiles its model (`torch-compile`).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub compile_s: f64,
    /// The most rounds (processes per cell) to plan, when every trick fits (default: the
    /// profile's).
    #[arg(long)]
    pub max_rounds: Option<usize>,
    /// Print the plan as one tab-separated line on stdout for scripts: rounds, tricks, processes,
    /// seconds, tricks left out (the readable plan goes to stderr).
    #[arg(long)]
    pub tsv: bool,
}

/// Options of `trickbench report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// results.json files (shards of a run, or runs of different workloads).
    #[arg(required_unless_present = "index")]
    pub results: Vec<PathBuf>,
    /// Output directory (default: the directory of the first results file).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Instead of rendering a report, write DIR/index.html listing every report and comparison
    /// below DIR with its one-line conclusion.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["results", "out"])]
    pub index: Option<PathBuf>,
}

/// Options of `trickbench ops`.
#[derive(Debug, Args)]
pub struct OpsArgs {
    /// A results.json whose cells and their references were traced (`run --trace`).
    pub results: PathBuf,
    /// Only the cells whose id matches this glob (`*` also matches `/`), e.g. --cell
    /// 'gpt-mini/jit-fusion/*'.
    #[arg(long, value_name = "CELL_GLOB")]
    pub cell: Option<CellGlob>,
    /// Operators shown in each table, the largest differences first.
    #[arg(long, default_value_t = 15)]
    pub top: usize,
    /// Also write the comparison to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Options of `trickbench merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' results.json files, or directories holding one (or holding one directory per
    /// shard, each with its results.json).
    #[arg(required = true)]
    pub shards: Vec<PathBuf>,
    /// Output directory of the merged results.json and its report.
    #[arg(long)]
    pub out: PathBuf,
    /// Write the merge even when shards are absent or did not finish (they are listed as warnings
    /// and in the merged file); without it such a merge is refused.
    #[arg(long)]
    pub allow_missing: bool,
}

/// Options of `trickbench compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// results.json files, one per device, machine or version.
    #[arg(required = true, num_args = 2..)]
    pub results: Vec<PathBuf>,
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// What the files are. `auto` takes them as versions when every file was measured on the
    /// same machine and device (host, CPU or GPU model) and they differ in git commit or libtorch
    /// version: the page then orders them by start time, draws each trick's effect across them
    /// and flags changes whose intervals do not overlap (docs/reports.md). Otherwise, and with
    /// `device`, they are compared side by side in the order given.
    #[arg(long, value_enum, default_value_t = CompareBy::Auto)]
    pub by: CompareBy,
    /// Gate a CI job on exactly two files, BASE then NEW: judge the baseline's throughput and
    /// every trick's effect against the base run (a regression: outside the new interval and
    /// beyond both runs' A/A noise floors, the worse way), write gate.md and gate.junit.xml into
    /// --out, and with `regression` exit with status 1 when anything regressed (docs/ci-gate.md).
    #[arg(long, value_enum, value_name = "WHEN")]
    pub fail_on: Option<FailOn>,
    /// With --fail-on: gate runs that differ in hardware or protocol (device, GPU or CPU model,
    /// profile, design, protocol, batch sizes, data) instead of refusing them; the differences
    /// are listed in gate.md.
    #[arg(long, requires = "fail_on")]
    pub allow_mismatch: bool,
}

/// Options of `trickbench list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Device to judge applicability for: auto, cpu, cuda, cuda:N or as-if-cuda:sm80|sm90|sm100.
    #[arg(long, default_value = "auto")]
    pub device: DeviceSpec,
}

/// `trickbench data …`.
#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Download a dataset over HTTPS and verify its checksum.
    Fetch(FetchArgs),
    /// Convert an ImageFolder directory or tar (train/<class>/*.jpg, test/<class>/…) to the
    /// CIFAR-10 binary format.
    Import(ImportArgs),
    /// Write a learnable synthetic dataset in the CIFAR-10 binary format.
    Synth(SynthArgs),
}

/// Options of `trickbench data fetch`.
#[derive(Debug, Args)]
pub struct FetchArgs {
    /// Dataset.
    pub dataset: Dataset,
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Download from this URL instead (a mirror serving the identical file).
    #[arg(long)]
    pub url: Option<String>,
}

/// Options of `trickbench data import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// ImageFolder directory or .tar/.tar.gz archive.
    pub path: PathBuf,
    /// Output directory.
    #[arg(long, default_value = "data/cifar10")]
    pub out: PathBuf,
}

/// Options of `trickbench data synth`.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Training images.
    #[arg(long, default_value_t = 50_000)]
    pub train: usize,
    /// Test images.
    #[arg(long, default_value_t = 10_000)]
    pub test: usize,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Options of the internal `trickbench cell`.
#[derive(Debug, Args)]
pub struct CellArgs {
    /// JSON file describing the cell.
    #[arg(long)]
    pub job: PathBuf,
    /// Where to write the measurement (JSON).
    #[arg(long)]
    pub output: PathBuf,
}

/// Options of `trickbench parity`.
#[derive(Debug, Args)]
pub struct ParityArgs {
    /// Comma-separated workloads: ids (resnet8, gpt-mini, …), resnet or gpt (the profile's member
    /// of the family), or all (both).
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub workload: Vec<WorkloadChoice>,
    /// The profile, device (both sides run on it), seed, batch size and data.
    #[command(flatten)]
    pub training: TrainingArgs,
    /// Training steps whose losses are compared (one exported batch each).
    #[arg(long, default_value_t = 20)]
    pub steps: usize,
    /// Timing rounds, each one trickbench process and one PyTorch process in alternating order
    /// (0: compare losses only).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Untimed steps at the start of each timing process.
    #[arg(long, default_value_t = 3)]
    pub warmup_steps: usize,
    /// Timed windows per timing process.
    #[arg(long, default_value_t = 3)]
    pub windows: usize,
    /// Training steps per timed window.
    #[arg(long, default_value_t = 10)]
    pub steps_per_window: usize,
    /// Comma-separated torch.compile modes, each a PyTorch side with its model compiled (forward,
    /// and backward through AOTAutograd; the optimizer step stays eager), its losses checked
    /// against eager PyTorch's and timed in the same rounds, its compile seconds reported apart.
    /// Default: none (compiling takes minutes on a CPU); where inductor cannot build (no C++
    /// compiler), a mode is reported not available with the reason.
    #[arg(long, value_delimiter = ',', value_name = "MODES")]
    pub compile: Vec<CompileMode>,
    /// Comma-separated trick ids: a trickbench side with these tricks on together, timed in the
    /// same rounds (its losses are not compared: a trick may change the arithmetic). A trick that
    /// does not apply to a workload here is left out of its stack, with the reason; tricks that act
    /// on the loader, evaluation, the schedule or several processes are refused, since parity
    /// times training steps on exported batches.
    #[arg(long, value_delimiter = ',', value_name = "TRICKS", conflicts_with = "stack_from")]
    pub stack: Vec<Trick>,
    /// Results file of an earlier run: the stacked side takes, per workload, the tricks whose
    /// training throughput was significantly faster than the baseline's there (its best stack, as
    /// the speedrun design combines them). Repeatable; a trick measured in several files is taken
    /// from the first.
    #[arg(long, value_name = "RESULTS")]
    pub stack_from: Vec<PathBuf>,
    /// Python interpreter with PyTorch (default: .venv/bin/python when present, else python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Output directory (default: reports/runs/<time>-<profile>-parity).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Options of `trickbench crosscheck`.
#[derive(Debug, Args)]
pub struct CrosscheckArgs {
    /// Comma-separated trick ids, each checked on the workload the plain script writes it for:
    /// channels-last, zero-grad-none, fused-optimizer, no-bias-before-bn and debug-off on ResNet-8;
    /// flash-attention and jit-fusion on the 2-layer GPT. Default: all of them.
    #[arg(long, value_delimiter = ',', value_name = "TRICKS")]
    pub tricks: Vec<Trick>,
    /// The profile (batch sizes, warm-up, window length), device, seed, batch size and data.
    #[command(flatten)]
    pub training: TrainingArgs,
    /// Rounds, each one process of the engine and one of the plain script for every trick, the
    /// order of the tricks and of the two sources reversed every other round.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Pairs of windows every process times (both sources time exactly this many).
    #[arg(long, default_value_t = 40)]
    pub pairs: usize,
    /// Training steps per timed window, on both sources (default: the profile's).
    #[arg(long)]
    pub steps_per_window: Option<usize>,
    /// The host allocator every process starts with: tuned or system (as `run --host-allocator`).
    #[arg(long, value_enum, default_value_t = HostAllocator::Tuned)]
    pub host_allocator: HostAllocator,
    /// Python interpreter with PyTorch, for both sources (default: .venv/bin/python when present,
    /// else python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Output directory (default: reports/runs/<time>-<profile>-crosscheck).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Options of the internal `trickbench parity-side` (the PyTorch script takes the same).
#[derive(Debug, Args)]
pub struct ParitySideArgs {
    /// Directory of an exported parity case.
    #[arg(long)]
    pub case: PathBuf,
    /// What the side does with the case.
    #[arg(long)]
    pub mode: ParityMode,
    /// JSON file to write.
    #[arg(long)]
    pub output: PathBuf,
    /// Untimed steps first (mode time).
    #[arg(long, default_value_t = 3)]
    pub warmup_steps: usize,
    /// Timed windows (mode time).
    #[arg(long, default_value_t = 3)]
    pub windows: usize,
    /// Steps per window (mode time).
    #[arg(long, default_value_t = 10)]
    pub steps_per_window: usize,
    /// Comma-separated tricks on together: the stacked side (none: trickbench's baseline).
    #[arg(long, value_delimiter = ',')]
    pub tricks: Vec<Trick>,
}

/// A dataset `trickbench data fetch` downloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dataset {
    /// CIFAR-10's binary version (the ResNets').
    Cifar10,
    /// Karpathy's tiny Shakespeare (the GPTs').
    Shakespeare,
}

/// What a parity side does with a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ParityMode {
    /// One step per batch, each loss recorded.
    Losses,
    /// Windows of timed steps.
    Time,
}
