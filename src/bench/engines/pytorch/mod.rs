//! The PyTorch engine: a cell process on eager PyTorch. trickbench writes the case ([`case`]) into
//! a scratch folder, starts `scripts/engine/pytorch_engine.py` on it with the run's Python, and
//! drives it one request at a time over its standard input and output: build a side, warm it up,
//! time a window of steps. The protocol is trickbench's, the same as on libtorch (the cell's side
//! built and measured alone first, then its reference, then pairs of windows A B, B A, … until a
//! process has measured enough); the script applies the tricks and times the steps with the
//! device synchronised at both edges of each window.
//!
//! The case carries the data the engine's DataLoader assembles the same batches from ([`data`]).
//! A run keeps one fork server ([`server`]) that hands each cell process an engine with torch
//! already imported; a cell without one starts its own Python.

pub mod case;
mod data;
mod server;
mod tta;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde::Deserialize;
use serde_json::{json, Value};

use super::{CellEngine, RunServer};
use crate::bench::cell::measure::{
    end_energy, timed_flops_per_sample, wants_another_window, within_budget, PROBE_STEPS,
};
use crate::bench::cell::paired::{build_order, record_window, rotate};
use crate::bench::cell::phases::MIN_STEPS as BREAKDOWN_STEPS;
use crate::bench::cell::{announce, dropped_out, CellJob, Outcome, TRACED_STEPS};
use crate::bench::faults;
use crate::bench::profile::Profile;
use crate::bench::trace::TraceTarget;
use crate::bench::user_model::read_description;
use crate::device::DeviceSpec;
use crate::distributed::env::DistEnv;
use crate::error::Error;
use crate::ffi::Tf32;
use crate::measure::energy::EnergyError;
use crate::measure::flops::{Precision, StepArithmetic};
use crate::measure::host_allocator::HostAllocator;
use crate::measure::power::{EnergyMeter, EnergySpan};
use crate::measure::trace::read_trace_record;
use crate::results::machine::MachineState;
use crate::results::phases::StepBreakdown;
use crate::results::schema::{
    CellId, CellKey, CellKind, CompileCounters, Memory, PairedWindow, PairedWindows, Phase,
    ProcessMeasurement, TraceRecord,
};
use crate::standin;
use crate::train::recipe::Recipe;
use crate::tricks::Trick;
use crate::vocabulary::StandIn;
use crate::workloads::{user, WorkloadId};
use server::PytorchServer;

/// The PyTorch engine: eager PyTorch driven from Python, each trick applied as PyTorch's
/// documentation tells a user to.
pub struct Pytorch;

impl CellEngine for Pytorch {
    /// The fork server ([`PytorchServer`]), which hands each cell process an engine with torch
    /// already imported.
    fn start_run(
        &self,
        python: &Path,
        allocator: HostAllocator,
    ) -> Result<Option<Box<dyn RunServer>>, Error> {
        Ok(Some(Box::new(PytorchServer::start(python, allocator)?)))
    }

    /// The cells run in this one process: `ddp` does not apply on this engine, so `dist` is not
    /// used.
    fn run_cell(&self, job: &CellJob, _dist: Option<&DistEnv>) -> Result<Vec<Outcome>, Error> {
        run(job, job.reference_side().as_ref())
    }

    /// The case written as the cell's process writes it, read by the engine (a case it refuses
    /// refuses every side, with its message), and each side built there.
    fn check_cell(&self, job: &CellJob) -> Result<Vec<Result<(), String>>, Error> {
        let scratch = scratch_dir("trickbench-check-")?;
        let reference = job.reference_side();
        case::write(job, reference.as_ref(), scratch.path())?;
        let names: Vec<String> = (0..job.arm_jobs().len())
            .map(case::arm_name)
            .chain(reference.map(|_| case::REFERENCE_SIDE.to_owned()))
            .collect();
        let mut engine = match start_engine(job, scratch.path()) {
            Ok(engine) => engine,
            Err(refused) => return Ok(names.iter().map(|_| Err(refused.to_string())).collect()),
        };
        let accepted = names
            .iter()
            .map(|name| engine.request(json!({"op": "build", "side": name})).map(drop))
            .collect::<Vec<_>>();
        engine.quit()?;
        Ok(accepted.into_iter().map(|a| a.map_err(|e| e.to_string())).collect())
    }
}

/// The engine of the case in `dir` for `job`'s process: a child of the run's fork server, or a
/// Python of its own.
fn start_engine(job: &CellJob, dir: &Path) -> Result<EngineProcess, Error> {
    match &job.pytorch_server {
        Some(socket) => EngineProcess::connect(socket, dir),
        None => {
            let python = job.python.clone().unwrap_or_else(crate::engine::default_python);
            let script = case::write_scripts(dir)?;
            EngineProcess::start(&python, &script, dir)
        }
    }
}

/// An engine and the stream it is driven through: a Python process this process started, or a
/// child of the run's fork server ([`PytorchServer`]) on a socket.
struct EngineProcess {
    /// The Python process, when this process started it.
    child: Option<Child>,
    /// Where requests go, one JSON object a line.
    requests: Box<dyn Write>,
    /// Where replies come from, one JSON object a line.
    replies: BufReader<Box<dyn Read>>,
    /// The file a forked engine's stderr goes to, copied to this process's stderr when it ends.
    log: Option<PathBuf>,
    /// The engine, as messages name it.
    program: String,
    /// Whether the engine stopped or misbehaved (no request can be made of it any more), as
    /// opposed to refusing one request.
    stopped: bool,
}

/// A timed window, as the engine replies.
#[derive(Debug, Deserialize)]
struct WindowReply {
    /// Samples the window's steps took.
    samples: usize,
    /// Seconds between the window's two device synchronisations.
    seconds: f64,
    /// Host reads of training metrics in the window.
    host_reads: u64,
    /// Minor page faults the engine's process took in the window.
    #[serde(default)]
    minor_faults: Option<u64>,
}

/// The memory peaks, as the engine replies.
#[derive(Debug, Deserialize)]
struct MemoryReply {
    /// The caching allocator's peak of live bytes (CUDA only).
    peak_allocated_bytes: Option<u64>,
    /// Its peak of reserved bytes (CUDA only).
    peak_reserved_bytes: Option<u64>,
    /// The process's peak resident set, bytes.
    peak_rss_bytes: Option<u64>,
    /// Samples the probe's steps took (absent from the peaks since start).
    #[serde(default)]
    samples: usize,
}

impl From<MemoryReply> for Memory {
    fn from(m: MemoryReply) -> Self {
        Memory {
            peak_allocated_bytes: m.peak_allocated_bytes,
            peak_reserved_bytes: m.peak_reserved_bytes,
            peak_rss_bytes: m.peak_rss_bytes,
        }
    }
}

impl EngineProcess {
    /// Starts `python` on `script` with the case in `dir` and reads its ready line.
    fn start(python: &Path, script: &Path, dir: &Path) -> Result<Self, Error> {
        let program = format!("{} {}", python.display(), script.display());
        let mut child = Command::new(python)
            .arg(script)
            .arg("--case")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::Context {
                context: format!(
                    "starting the PyTorch engine with {} (the Python with torch; pass --python PATH, or run \
                     `make setup` for .venv/bin/python)",
                    python.display()
                ),
                source: Box::new(e),
            })?;
        let requests = Box::new(child.stdin.take().expect("stdin is piped"));
        let replies: Box<dyn Read> = Box::new(child.stdout.take().expect("stdout is piped"));
        EngineProcess {
            child: Some(child),
            requests,
            replies: BufReader::new(replies),
            log: None,
            program,
            stopped: false,
        }
        .ready()
    }

    /// Asks the fork server listening on `socket` for an engine on the case in `dir`, whose
    /// stderr goes to a file in `dir`, with this process's data limit; reads its ready line.
    fn connect(socket: &Path, dir: &Path) -> Result<Self, Error> {
        let program = format!("the fork server's child on {}", socket.display());
        let stream = UnixStream::connect(socket).map_err(|e| Error::Context {
            context: format!("connecting to the PyTorch engine's fork server at {}", socket.display()),
            source: Box::new(e),
        })?;
        let replies: Box<dyn Read> = Box::new(stream.try_clone().map_err(|e| Error::io(socket, e))?);
        let log = dir.join("engine-stderr.log");
        let mut engine = EngineProcess {
            child: None,
            requests: Box::new(stream),
            replies: BufReader::new(replies),
            log: None,
            program,
            stopped: false,
        };
        let hello = json!({
            "case": dir,
            "stderr": log,
            "client_pid": std::process::id(),
            "data_limit_bytes": data_limit_bytes(),
        });
        engine.send(&hello)?;
        engine.log = Some(log);
        engine.ready()
    }

    /// Reads the engine's ready line.
    fn ready(mut self) -> Result<Self, Error> {
        let ready = self.reply()?;
        if ready.get("ready") != Some(&Value::Bool(true)) {
            return Err(self.failed(&format!("began with {ready} instead of its ready line")));
        }
        Ok(self)
    }

    /// Writes `message` as a line.
    fn send(&mut self, message: &Value) -> Result<(), Error> {
        let line = format!("{message}\n");
        if self.requests.write_all(line.as_bytes()).and_then(|()| self.requests.flush()).is_err() {
            return Err(self.failed(&format!("stopped before it was sent {message}")));
        }
        Ok(())
    }

    /// Sends `request` and returns the reply; an `error` reply is an error, a `not_applicable` one
    /// [`Error::NotApplicable`] with its reason.
    fn request(&mut self, request: Value) -> Result<Value, Error> {
        self.send(&request)?;
        let reply = self.reply()?;
        self.replied(&request, reply)
    }

    /// `reply` to `request`: an `error` reply is an error, a `not_applicable` one
    /// [`Error::NotApplicable`] with its reason.
    fn replied(&self, request: &Value, reply: Value) -> Result<Value, Error> {
        if let Some(Value::String(why)) = reply.get("error") {
            let op = request.get("op").cloned().unwrap_or(Value::Null);
            return Err(Error::Process(format!("the PyTorch engine's {op} ({}): {why}", self.program)));
        }
        if let Some(Value::String(why)) = reply.get("not_applicable") {
            return Err(Error::not_applicable(&format!("on the PyTorch engine: {why}")));
        }
        Ok(reply)
    }

    /// Sends `request`, hands each `progress` line the engine writes before its reply to
    /// `progress`, and returns the reply (as [`Self::request`]).
    fn request_streaming(
        &mut self,
        request: Value,
        mut progress: impl FnMut(&Value) -> Result<(), Error>,
    ) -> Result<Value, Error> {
        self.send(&request)?;
        loop {
            let line = self.reply()?;
            match line.get("progress") {
                Some(point) => progress(point)?,
                None => return self.replied(&request, line),
            }
        }
    }

    /// Sends `request` and reads the reply as a `T`.
    fn request_as<T: for<'de> Deserialize<'de>>(&mut self, request: Value) -> Result<T, Error> {
        let reply = self.request(request)?;
        serde_json::from_value(reply.clone()).map_err(|e| {
            Error::Process(format!("the PyTorch engine ({}) replied {reply}: {e}", self.program))
        })
    }

    /// The next line the engine wrote, as JSON.
    fn reply(&mut self) -> Result<Value, Error> {
        let mut line = String::new();
        match self.replies.read_line(&mut line) {
            Ok(0) | Err(_) => Err(self.failed("ended without replying")),
            Ok(_) => serde_json::from_str(&line).map_err(|e| {
                Error::Process(format!("the PyTorch engine ({}) wrote {line:?}: {e}", self.program))
            }),
        }
    }

    /// The error of an engine that stopped or misbehaved, with its exit status when it exited.
    fn failed(&mut self, what: &str) -> Error {
        self.stopped = true;
        let status = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
        let status = status.map(|s| format!(" ({s})")).unwrap_or_default();
        Error::Process(format!(
            "the PyTorch engine ({}) {what}{status}; its stderr is in the cell's log",
            self.program
        ))
    }

    /// Asks the engine to quit and waits for it.
    fn quit(mut self) -> Result<(), Error> {
        self.request(json!({"op": "quit"}))?;
        let Some(child) = self.child.as_mut() else { return Ok(()) };
        let status = child.wait().map_err(|e| Error::Context {
            context: format!("waiting for {}", self.program),
            source: Box::new(e),
        })?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Process(format!("the PyTorch engine ({}) exited with {status}", self.program)))
        }
    }

    /// Runs `steps` untimed steps of `side`; returns the seconds of those that compiled a graph
    /// (`torch-compile`; `None` for a side not compiled).
    fn warm_up(&mut self, side: &str, steps: usize) -> Result<Option<f64>, Error> {
        let reply = self.request(json!({"op": "warm_up", "side": side, "steps": steps}))?;
        Ok(reply.get("compile_s").and_then(Value::as_f64))
    }

    /// `torch._dynamo`'s counters of the process for `side` under `torch-compile`: its graph
    /// breaks, graphs and recompiles (`None` where the engine has none for it).
    fn compile_counters(&mut self, side: &str) -> Result<Option<CompileCounters>, Error> {
        let reply = self.request(json!({"op": "compile_counters", "side": side}))?;
        let count = |key: &str| reply.get(key).and_then(Value::as_u64);
        Ok(match (count("graph_breaks"), count("graphs"), count("recompiles")) {
            (Some(graph_breaks), Some(graphs), Some(recompiles)) => {
                Some(CompileCounters { graph_breaks, graphs, recompiles })
            }
            _ => None,
        })
    }

    /// The calls that need a CUDA device that `side` and the engine's process stood in for on a
    /// rehearsed GPU.
    fn stood_in(&mut self, side: &str) -> Result<Vec<StandIn>, Error> {
        let reply = self.request(json!({"op": "stood_in", "side": side}))?;
        let names = reply.get("stood_in").and_then(Value::as_array).cloned().unwrap_or_default();
        names
            .iter()
            .map(|name| {
                name.as_str().and_then(StandIn::from_id).ok_or_else(|| {
                    Error::Process(format!("the PyTorch engine ({}) named no stand-in: {name}", self.program))
                })
            })
            .collect()
    }

    /// Times a window of `steps` steps of `side`.
    fn window(&mut self, side: &str, steps: usize) -> Result<WindowReply, Error> {
        self.request_as(json!({"op": "window", "side": side, "steps": steps}))
    }

    /// The memory peaks since the engine started.
    fn memory(&mut self) -> Result<Memory, Error> {
        self.request_as::<MemoryReply>(json!({"op": "memory"})).map(Memory::from)
    }

    /// The memory the engine holds now (in [`Memory`]'s fields, as [`crate::measure::memory::held`]).
    fn held(&mut self) -> Result<Memory, Error> {
        self.request_as::<MemoryReply>(json!({"op": "held"})).map(Memory::from)
    }

    /// The memory peaks over `steps` untimed steps of `side` (the device's, or on a CPU those of
    /// the live CPU tensors' bytes) and the samples the steps took.
    fn probe(&mut self, side: &str, steps: usize) -> Result<(Memory, usize), Error> {
        let request = json!({"op": "probe", "side": side, "steps": steps});
        let reply = self.request_as::<MemoryReply>(request)?;
        let samples = reply.samples;
        Ok((Memory::from(reply), samples))
    }

    /// Where the time of `steps` steps of `side` goes, phase by phase.
    fn breakdown(&mut self, side: &str, steps: usize) -> Result<StepBreakdown, Error> {
        self.request_as(json!({"op": "breakdown", "side": side, "steps": steps}))
    }
}

impl Drop for EngineProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                child.kill().ok();
                child.wait().ok();
            }
        }
        if let Some(log) = &self.log {
            if let Ok(text) = std::fs::read(log) {
                std::io::stderr().write_all(&text).ok();
            }
        }
    }
}

/// This process's data limit (RLIMIT_DATA, which `run --memory-limit-mib` sets), bytes, for a
/// forked engine to take on; `None` when unlimited.
fn data_limit_bytes() -> Option<u64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_DATA, &mut limit) } == 0;
    (got && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// A scratch folder of its own in the temporary folder, named from `prefix`, removed when dropped.
fn scratch_dir(prefix: &str) -> Result<tempfile::TempDir, Error> {
    let temp = std::env::temp_dir();
    tempfile::Builder::new().prefix(prefix).tempdir_in(&temp).map_err(|e| Error::io(&temp, e))
}

/// Runs the cells of `job` on the PyTorch engine (its arms paired with `reference`, the job of
/// their reference side, when they have one) and returns what became of each, in
/// [`CellJob::members`] order. An arm the engine refuses or fails drops out with its own status
/// and the others go on; the process fails with its reference, or when the engine stops.
fn run(job: &CellJob, reference: Option<&CellJob>) -> Result<Vec<Outcome>, Error> {
    let scratch = scratch_dir("trickbench-pytorch-")?;
    let written = case::write(job, reference, scratch.path())?;
    let profile = job.settings();
    if job.device.rehearsed().is_some() {
        standin::record(StandIn::Kernels);
        standin::record(StandIn::DeviceProperties);
    }
    let mut engine = start_engine(job, scratch.path())?;
    if job.key.kind == CellKind::TimeToAccuracy {
        let flops = written.forward_flops_per_sample[0];
        let side = Built { job, index: 0, name: case::arm_name(0), forward_flops_per_sample: flops };
        let measurement = trained_to_target(&mut engine, side, &written.recipe)?;
        engine.quit()?;
        return Ok(vec![Ok(measurement)]);
    }
    let reference = reference.filter(|_| job.key.kind != CellKind::MemoryProbe);
    let (arms, reference_side) = build_sides(&mut engine, &profile, job, reference, &written)?;
    let members = match reference_side {
        Some(reference_side) => paired(&mut engine, &profile, job, arms, reference_side)?,
        None => alone(&mut engine, &profile, arms)?,
    };
    let outcomes = finish_members(&mut engine, &profile, job.device, members)?;
    engine.quit()?;
    Ok(outcomes)
}

/// A side of the process: measuring, or dropped out with the error that stopped it.
enum SideState {
    Live(Box<MeasuredSide>),
    Dropped(Error),
}

impl SideState {
    /// `side` measured, or dropped out with its error where the engine refused or failed it and
    /// still serves; the engine's own stop fails the process.
    fn of(engine: &EngineProcess, side: Result<MeasuredSide, Error>) -> Result<Self, Error> {
        match side {
            Ok(side) => Ok(SideState::Live(Box::new(side))),
            Err(e) if engine.stopped => Err(e),
            Err(e) => Ok(SideState::Dropped(e)),
        }
    }
}

/// Builds and measures alone, in [`build_order`], each arm of `job` (in job order) and the
/// `reference` side where there is one (measured alone too where the job measures it, else only
/// warmed up); each side's peaks less what the sides built before it hold.
fn build_sides(
    engine: &mut EngineProcess,
    profile: &Profile,
    job: &CellJob,
    reference: Option<&CellJob>,
    written: &case::Written,
) -> Result<(Vec<SideState>, Option<MeasuredSide>), Error> {
    let flops = &written.forward_flops_per_sample;
    let arm_jobs = job.arm_jobs();
    let base = engine.held()?;
    let mut arms: Vec<Option<SideState>> = arm_jobs.iter().map(|_| None).collect();
    let mut reference_side = None;
    let mut earlier = None;
    for index in build_order(arm_jobs.len(), job.round) {
        let built = match arm_jobs.get(index) {
            Some(arm) => {
                Built { job: arm, index, name: case::arm_name(index), forward_flops_per_sample: flops[index] }
            }
            None => match reference {
                Some(reference) => {
                    let name = case::REFERENCE_SIDE.to_owned();
                    Built { job: reference, index, name, forward_flops_per_sample: flops[index] }
                }
                None => continue,
            },
        };
        if index == arm_jobs.len() && !job.measures_reference {
            reference_side = Some(warmed_side(engine, profile, built)?);
        } else if index == arm_jobs.len() {
            reference_side = Some(measure_side(engine, profile, built, earlier)?);
        } else {
            let side = measure_side(engine, profile, built, earlier);
            arms[index] = Some(SideState::of(engine, side)?);
        }
        earlier = Some(base);
    }
    Ok((arms.into_iter().map(|a| a.expect("every arm is built")).collect(), reference_side))
}

/// The arms' windows paired with `reference`'s ([`time_arms`]); returns the process's members
/// with their windows: the arms, then the reference where the job measures it.
fn paired(
    engine: &mut EngineProcess,
    profile: &Profile,
    job: &CellJob,
    mut arms: Vec<SideState>,
    mut reference: MeasuredSide,
) -> Result<Vec<SideState>, Error> {
    let timed = time_arms(engine, profile, &mut arms, &mut reference)?;
    let reference_id = reference.id.clone();
    for (arm, windows) in arms.iter_mut().zip(timed.arms) {
        if let SideState::Live(arm) = arm {
            arm.measurement.paired = Some(PairedWindows { reference: reference_id.clone(), windows });
        }
    }
    if job.measures_reference {
        arms.push(SideState::Live(Box::new(reference)));
    }
    let cells = arms.iter().filter(|a| matches!(a, SideState::Live(_))).count().max(1);
    for arm in &mut arms {
        if let SideState::Live(side) = arm {
            side.measurement.process_cells = cells;
            side.measurement.timed_s = Some(timed.seconds / cells as f64);
        }
    }
    Ok(arms)
}

/// The windows of a process's one side, timed alone; a failure fails the process.
fn alone(
    engine: &mut EngineProcess,
    profile: &Profile,
    mut arms: Vec<SideState>,
) -> Result<Vec<SideState>, Error> {
    match arms.first_mut() {
        Some(SideState::Live(side)) => time_alone(engine, profile, &mut side.measurement)?,
        Some(SideState::Dropped(_)) => {
            if let Some(SideState::Dropped(e)) = arms.pop() {
                return Err(e);
            }
        }
        None => {}
    }
    Ok(arms)
}

/// What became of each of `members` once the live ones are finished ([`finish_arm`], where an
/// error drops one out), with the machine after them and the calls each stood in for.
fn finish_members(
    engine: &mut EngineProcess,
    profile: &Profile,
    device: DeviceSpec,
    members: Vec<SideState>,
) -> Result<Vec<Outcome>, Error> {
    let mut outcomes = Vec::with_capacity(members.len());
    for member in members {
        let side = match member {
            SideState::Live(mut side) => {
                let finished = finish_arm(engine, profile, &mut side, device);
                SideState::of(engine, finished.map(|()| *side))?
            }
            dropped => dropped,
        };
        outcomes.push(match side {
            SideState::Live(side) => Ok(side.measurement),
            SideState::Dropped(e) => Err(dropped_out(&e)),
        });
    }
    Ok(outcomes)
}

/// A side the engine builds: the job of its cell, its place in the process (the arms in job
/// order, then the reference), its name in the case and its network's forward FLOPs per sample.
struct Built<'a> {
    job: &'a CellJob,
    index: usize,
    name: String,
    forward_flops_per_sample: f64,
}

impl Built<'_> {
    /// The side's measurement before it has measured anything: its work per sample and its
    /// arithmetic.
    fn unmeasured(&self) -> Result<ProcessMeasurement, Error> {
        let job = self.job;
        let flops = timed_flops_per_sample(job.key.kind, self.forward_flops_per_sample);
        Ok(ProcessMeasurement::new(job.round, flops, precision(job)?))
    }
}

/// A side the engine has built and measured alone, and what is measured of it.
struct MeasuredSide {
    id: CellId,
    index: usize,
    name: String,
    kind: CellKind,
    /// Where its profiler trace goes, when its job asks for one (`run --trace`).
    trace: Option<TraceTarget>,
    /// Whether it runs under `torch-compile`, whose counters are read after its windows.
    compiled: bool,
    measurement: ProcessMeasurement,
}

/// Builds `side` in `engine` and measures it alone ([`measure_alone`]), its peaks less what the
/// engine held beyond `base` before it was built (the sides built before it; `base` is `None`
/// for the process's first side).
fn measure_side(
    engine: &mut EngineProcess,
    profile: &Profile,
    side: Built,
    base: Option<Memory>,
) -> Result<MeasuredSide, Error> {
    let job = side.job;
    let _scope = standin::SideScope::enter(side.index);
    announce(Some(&job.key.id()));
    faults::inject_into_side(job.key.id().as_str())?;
    let others = match base {
        Some(base) => Some(engine.held()?.without(base)),
        None => None,
    };
    let mut measurement = side.unmeasured()?;
    measurement.machine_before = Some(MachineState::read(job.device));
    measure_alone(engine, profile, job, &side.name, &mut measurement, others)?;
    Ok(MeasuredSide {
        id: job.key.id(),
        index: side.index,
        name: side.name,
        kind: job.key.kind,
        trace: job.trace_target(),
        compiled: job.key.tricks.has(Trick::TorchCompile),
        measurement,
    })
}

/// Builds `side` in `engine` and trains it from scratch to its target with `recipe`
/// ([`tta::train_to_target`]): its time to accuracy, its last training loss and, on a GPU, the
/// device's memory peaks (on a CPU the engine has no peak of its tensors' bytes over a whole
/// training, and a Python process's resident set is not one: none is recorded).
fn trained_to_target(
    engine: &mut EngineProcess,
    side: Built,
    recipe: &Recipe,
) -> Result<ProcessMeasurement, Error> {
    let job = side.job;
    let profile = job.settings();
    announce(Some(&job.key.id()));
    faults::inject_into_side(job.key.id().as_str())?;
    let mut measurement = side.unmeasured()?;
    measurement.machine_before = Some(MachineState::read(job.device));
    engine.request(json!({"op": "build", "side": side.name}))?;
    let metric = job.key.workload.family().quality_metric();
    let tta = tta::train_to_target(engine, &side.name, recipe, &profile, metric)?;
    measurement.last_loss = tta.curve.last().and_then(|p| p.train_loss);
    measurement.time_to_accuracy = Some(tta);
    if job.device.is_cuda() {
        measurement.memory = engine.memory()?;
    }
    measurement.machine_after = Some(MachineState::read(job.device));
    if job.device.rehearsed().is_some() {
        measurement.stood_in = stood_in(engine, &side.name, side.index)?;
    }
    Ok(measurement)
}

/// Builds `side` in `engine` and warms it up, measuring nothing of it alone (a reference whose
/// measurement is not kept).
fn warmed_side(engine: &mut EngineProcess, profile: &Profile, side: Built) -> Result<MeasuredSide, Error> {
    let _scope = standin::SideScope::enter(side.index);
    announce(Some(&side.job.key.id()));
    engine.request(json!({"op": "build", "side": side.name}))?;
    engine.warm_up(&side.name, profile.warmup_steps)?;
    let measurement = side.unmeasured()?;
    let (id, kind) = (side.job.key.id(), side.job.key.kind);
    Ok(MeasuredSide {
        id,
        index: side.index,
        name: side.name,
        kind,
        trace: None,
        compiled: false,
        measurement,
    })
}

/// What the windows of the arms timed: each arm's windows with the reference's next to them, and
/// the seconds in every window.
struct TimedArms {
    arms: Vec<Vec<PairedWindow>>,
    seconds: f64,
}

/// Times the arms' windows and the reference's ([`rotate`]); an arm whose window the engine
/// refuses or fails drops out.
fn time_arms(
    engine: &mut EngineProcess,
    profile: &Profile,
    arms: &mut [SideState],
    reference: &mut MeasuredSide,
) -> Result<TimedArms, Error> {
    let mut seconds = 0.0;
    announce(None);
    let windows = rotate(profile, arms.len(), |which| {
        let Some(i) = which else {
            let window = engine.window(&reference.name, profile.steps_per_window)?;
            seconds += window.seconds;
            return Ok(Some(timed(window, &mut reference.measurement)));
        };
        let SideState::Live(side) = &mut arms[i] else { return Ok(None) };
        match engine.window(&side.name, profile.steps_per_window) {
            Ok(window) => {
                seconds += window.seconds;
                Ok(Some(timed(window, &mut side.measurement)))
            }
            Err(e) if engine.stopped => Err(e),
            Err(e) => {
                arms[i] = SideState::Dropped(e);
                Ok(None)
            }
        }
    })?;
    Ok(TimedArms { arms: windows, seconds })
}

/// A measured side after the windows: where its training steps' time goes, its last loss, its
/// trace when asked for, the machine after it, and on a rehearsed GPU the calls it stood in for.
fn finish_arm(
    engine: &mut EngineProcess,
    profile: &Profile,
    arm: &mut MeasuredSide,
    device: DeviceSpec,
) -> Result<(), Error> {
    let _scope = standin::SideScope::enter(arm.index);
    announce(Some(&arm.id));
    if arm.kind == (CellKind::Throughput { phase: Phase::Train }) {
        let steps = profile.steps_per_window.max(BREAKDOWN_STEPS);
        match engine.breakdown(&arm.name, steps) {
            Ok(breakdown) => arm.measurement.step_breakdown = Some(breakdown),
            Err(why) => arm.measurement.step_breakdown_unavailable = Some(why.to_string()),
        }
    }
    let loss = engine.request(json!({"op": "loss", "side": arm.name}))?;
    arm.measurement.last_loss = loss.get("loss").and_then(Value::as_f64);
    if arm.compiled {
        arm.measurement.compile_counters = engine.compile_counters(&arm.name)?;
    }
    if let Some(target) = &arm.trace {
        arm.measurement.trace = Some(traced(engine, &arm.name, target)?);
    }
    arm.measurement.machine_after = Some(MachineState::read(device));
    if device.rehearsed().is_some() {
        arm.measurement.stood_in = stood_in(engine, &arm.name, arm.index)?;
    }
    Ok(())
}

/// The calls side `name` (the `index`th of the process) stood in for: the engine's, and this
/// process's own for it (NVML, the kernels).
fn stood_in(engine: &mut EngineProcess, name: &str, index: usize) -> Result<Vec<StandIn>, Error> {
    let mut all: BTreeSet<StandIn> = engine.stood_in(name)?.into_iter().collect();
    all.extend(standin::taken_by(index));
    Ok(all.into_iter().collect())
}

/// Records side `name`'s profiler trace where `target` says: one step untraced, then
/// [`TRACED_STEPS`] under torch.profiler, as libtorch's cells record theirs.
fn traced(engine: &mut EngineProcess, name: &str, target: &TraceTarget) -> Result<TraceRecord, Error> {
    let path = std::path::absolute(target.path()).map_err(|e| Error::io(target.path(), e))?;
    engine.request(json!({"op": "trace", "side": name, "steps": TRACED_STEPS, "path": path}))?;
    read_trace_record(&path, &target.file, TRACED_STEPS)
}

/// The arithmetic most of the engine's FLOPs run in for the cell of `job`, by the rule libtorch's
/// cells follow ([`StepArithmetic::precision`]): the engine sets PyTorch's defaults, TF32 in
/// cuDNN's convolutions (except in `tf32`'s `strict-fp32` reference) and, under `tf32` only, in
/// matmuls; its linears multiply in fp8 under `fp8-matmul`. The user's model is mostly
/// convolutions as its description says.
fn precision(job: &CellJob) -> Result<Precision, Error> {
    let mostly_convolutions = match job.key.workload {
        WorkloadId::Model => user::mostly_convolutions(&read_description(job.model_dir()?)?),
        workload => workload.is_cnn(),
    };
    Ok(arithmetic(&job.key, job.device, mostly_convolutions).precision())
}

/// What decides the arithmetic of a PyTorch engine's step of cell `key` on `device`.
fn arithmetic(key: &CellKey, device: DeviceSpec, mostly_convolutions: bool) -> StepArithmetic {
    let tricks = &key.tricks;
    StepArithmetic {
        fp8_linears: tricks.has(Trick::Fp8Matmul),
        autocast: tricks.has(Trick::Amp) || tricks.has(Trick::AmpBf16),
        tf32: Tf32 { matmul: tricks.has(Trick::Tf32), cudnn: !key.is_reference_for(Trick::Tf32) },
        on_cuda: device.is_cuda(),
        mostly_convolutions,
    }
}

/// Side `name` (of `job`'s cell) alone: built, warmed up (its peaks kept apart; under
/// `torch-compile` the seconds of the steps that compiled are kept), then a memory probe's steps
/// whose peaks, less `others` (what the sides built before it hold), are the cell's (on a CPU
/// those of its live tensors' bytes, as a libtorch process counts them), the device's held to the
/// job's memory budget; on a GPU then the energy of windows of steps (synchronised at their edges
/// only, as libtorch's untimed steps are) until the span is long enough to read. The first side's
/// warm-up peaks are the engine's since it started; a later side's are not kept apart, since
/// those peaks include the sides before it. `others` is `None` for the process's first side.
fn measure_alone(
    engine: &mut EngineProcess,
    profile: &Profile,
    job: &CellJob,
    name: &str,
    measurement: &mut ProcessMeasurement,
    others: Option<Memory>,
) -> Result<(), Error> {
    let first = others.is_none();
    let others = others.unwrap_or_default();
    engine.request(json!({"op": "build", "side": name}))?;
    measurement.compile_s = engine.warm_up(name, profile.warmup_steps)?;
    measurement.warmup_memory = if first { Some(engine.memory()?) } else { None };
    let (memory, _) = engine.probe(name, profile.steps_per_window.max(PROBE_STEPS))?;
    measurement.memory = memory.without(others);
    // A memory probe is not timed, so its energy is not measured. The engine synchronised the
    // device before replying, and this process runs nothing on the GPU: the span starts with the
    // device idle.
    if job.key.kind != CellKind::MemoryProbe {
        let energy = EnergyMeter::open(job.device).and_then(EnergyMeter::begin);
        end_energy(measurement, energy_over_windows(engine, profile, name, energy)?);
    }
    let whole = measurement.warmup_memory.map_or(measurement.memory, |w| w.max(measurement.memory));
    // A Python process's resident set holds the interpreter and torch itself: the budget, a
    // bound on the tensors' bytes, holds the tensor peaks only (the device's, or on a CPU the
    // live CPU tensors').
    within_budget(&Memory { peak_rss_bytes: None, ..whole }, job.memory_budget_bytes)
}

/// `energy`'s span over windows of side `name`, at least one, until it is long enough to read.
fn energy_over_windows(
    engine: &mut EngineProcess,
    profile: &Profile,
    name: &str,
    mut energy: Result<EnergySpan, EnergyError>,
) -> Result<Result<EnergySpan, EnergyError>, Error> {
    if energy.is_err() {
        return Ok(energy);
    }
    loop {
        let window = engine.window(name, profile.steps_per_window)?;
        if let Ok(span) = &mut energy {
            span.count(window.samples);
            if !span.wants_more_time() {
                return Ok(energy);
            }
        }
    }
}

/// Times windows of the cell's side alone while the profile wants another.
fn time_alone(
    engine: &mut EngineProcess,
    profile: &Profile,
    measurement: &mut ProcessMeasurement,
) -> Result<(), Error> {
    while wants_another_window(profile, &measurement.window_samples_per_s) {
        let window = engine.window(&case::arm_name(0), profile.steps_per_window)?;
        *measurement.timed_s.get_or_insert(0.0) += window.seconds;
        timed(window, measurement);
    }
    Ok(())
}

/// Adds `window` to a side's windows, samples and host reads; returns its throughput, samples
/// per second.
fn timed(window: WindowReply, measurement: &mut ProcessMeasurement) -> f64 {
    measurement.host_metric_reads += window.host_reads;
    measurement.count_page_faults(window.minor_faults);
    record_window(measurement, window.samples, window.seconds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::schema::Phase;
    use crate::workloads::WorkloadId;

    /// A training cell of the shakespeare GPT (ResNet-56 where `convolutions`) with `tricks`.
    fn key(tricks: &[Trick], convolutions: bool) -> CellKey {
        CellKey {
            workload: if convolutions { WorkloadId::Resnet56 } else { WorkloadId::GptShakespeare },
            tricks: tricks.iter().copied().collect(),
            batch_size: 64,
            seed: 0,
            kind: CellKind::Throughput { phase: Phase::Train },
            reference_for: None,
            aa_control: false,
            alone: false,
            engine: crate::engine::Engine::Pytorch,
        }
    }

    /// An engine that answers every request at once, but a window, which takes 50 ms (and a
    /// warm-up, whose steps took 2.5 s to compile), and keeps the ops it was asked for.
    #[derive(Clone, Default)]
    struct FakeEngine(std::rc::Rc<std::cell::RefCell<(Vec<u8>, Vec<String>)>>);

    impl FakeEngine {
        /// The reply to `request`.
        fn reply(op: &str) -> Value {
            match op {
                "build" => json!({"ok": true}),
                "warm_up" => json!({"ok": true, "compile_s": 2.5}),
                "probe" => {
                    json!({"peak_allocated_bytes": 1, "peak_reserved_bytes": 1, "peak_rss_bytes": 1, "samples": 64})
                }
                "window" => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    json!({"samples": 32, "seconds": 0.05, "host_reads": 0})
                }
                _ => json!({"peak_allocated_bytes": 1, "peak_reserved_bytes": 1, "peak_rss_bytes": 1}),
            }
        }

        /// The ops asked for, in order.
        fn ops(&self) -> Vec<String> {
            self.0.borrow().1.clone()
        }
    }

    impl Write for FakeEngine {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            let request: Value = serde_json::from_slice(bytes.trim_ascii()).expect("one request a write");
            let op = request["op"].as_str().unwrap().to_owned();
            let reply = format!("{}\n", Self::reply(&op));
            let mut state = self.0.borrow_mut();
            state.0.extend(reply.bytes());
            state.1.push(op);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Read for FakeEngine {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let mut state = self.0.borrow_mut();
            let n = out.len().min(state.0.len());
            out[..n].copy_from_slice(&state.0[..n]);
            state.0.drain(..n);
            Ok(n)
        }
    }

    #[test]
    fn a_sides_energy_span_holds_its_windows_and_not_its_memory_probe_and_its_compile_seconds_are_kept() {
        let fake = FakeEngine::default();
        let mut engine = EngineProcess {
            child: None,
            requests: Box::new(fake.clone()),
            replies: BufReader::new(Box::new(fake.clone())),
            log: None,
            program: "a fake engine".to_owned(),
            stopped: false,
        };
        let rehearsed = DeviceSpec::AsIfCuda(crate::device::RehearsedGpu::Sm90);
        let job = CellJob::new(
            key(&[], false),
            rehearsed,
            crate::bench::profile::ProfileName::Smoke,
            PathBuf::new(),
        );
        let profile = job.settings();
        let mut measurement = ProcessMeasurement::new(0, 1.0, Precision::Fp32);
        measure_alone(&mut engine, &profile, &job, "trick", &mut measurement, None).unwrap();
        let ops = fake.ops();
        let windows = ops.iter().filter(|op| *op == "window").count();
        assert_eq!(ops[..4], ["build", "warm_up", "memory", "probe"], "{ops:?}");
        assert!(ops[4..].iter().all(|op| op == "window") && windows >= 2, "{ops:?}");
        let energy = measurement.energy.unwrap_or_else(|| panic!("{:?}", measurement.energy_unavailable));
        assert_eq!(
            energy.samples,
            Some(32 * windows),
            "the span counts its windows' samples, not the probe's"
        );
        assert!(energy.interval_s >= 1.0, "{energy:?}");
        assert_eq!(measurement.compile_s, Some(2.5), "the warm-up's compile seconds");
    }

    #[test]
    fn the_engines_arithmetic_counts_fp8_linears_in_fp8_as_libtorch_does() {
        let gpu = DeviceSpec::Cuda(0);
        let of = |tricks: &[Trick], convolutions| {
            arithmetic(&key(tricks, convolutions), gpu, convolutions).precision()
        };
        assert_eq!(of(&[Trick::Fp8Matmul], false), Precision::Fp8);
        assert_eq!(of(&[Trick::Fp8Matmul, Trick::AmpBf16], false), Precision::Fp8);
        assert_eq!(of(&[Trick::Fp8Matmul, Trick::AmpBf16], true), Precision::Half);
        assert_eq!(of(&[], false), Precision::Fp32);
        assert_eq!(of(&[Trick::Tf32], false), Precision::Tf32);
        assert_eq!(of(&[], true), Precision::Tf32, "cuDNN's convolutions take TF32 by default");
        let cpu = arithmetic(&key(&[Trick::Fp8Matmul, Trick::Tf32], false), DeviceSpec::Cpu, false);
        assert_eq!(cpu.precision(), Precision::Fp8);
        assert_eq!(
            arithmetic(&key(&[Trick::Tf32], false), DeviceSpec::Cpu, false).precision(),
            Precision::Fp32
        );
    }

    #[test]
    fn the_strict_fp32_reference_runs_its_convolutions_in_fp32() {
        let strict = CellKey { reference_for: Some(Trick::Tf32), ..key(&[], true) };
        assert_eq!(arithmetic(&strict, DeviceSpec::Cuda(0), true).precision(), Precision::Fp32);
        let rehearsed = DeviceSpec::AsIfCuda(crate::device::RehearsedGpu::Sm90);
        assert_eq!(arithmetic(&strict, rehearsed, true).precision(), Precision::Fp32);
        assert_eq!(arithmetic(&key(&[], true), rehearsed, true).precision(), Precision::Tf32);
    }
}
