//! Profiler traces: libtorch's Kineto profiler on around some steps, its Chrome-trace JSON written
//! gzipped and atomically, and the table of the longest operators read back from that file.

use std::collections::HashMap;
use std::io::Read;
use std::marker::PhantomData;
use std::path::Path;

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::Deserialize;

use crate::device::DeviceSpec;
use crate::error::Error;
use crate::ffi;
use crate::measure::ops::{sweep, traced_step};
use crate::measure::timer::synchronize;
use crate::results::schema::{TraceActivity, TraceOperator, TraceRecord};
use crate::results::store::{self, StoreError};

/// Rows of each activity (CPU operators, GPU kernels, GPU copies) kept in a trace's table.
pub const TOP_OPERATORS: usize = 15;

/// The profiler, on from [`Profiling::start`] until [`Profiling::save`]; dropped unsaved, it is
/// stopped and what it recorded discarded.
#[derive(Debug)]
pub struct Profiling {
    device: DeviceSpec,
    running: bool,
    /// The profiler was started on this thread, which stops it.
    _this_thread: PhantomData<*const ()>,
}

impl Profiling {
    /// Waits for the work queued on `device`, then starts the profiler: operators with their input
    /// shapes run by this thread (and by the autograd engine for it), and on a CUDA device its
    /// runtime calls, kernels and memory copies. Fails when a profiler is already on.
    pub fn start(device: DeviceSpec) -> Result<Self, Error> {
        synchronize(device);
        ffi::profiler_start(device.is_cuda())?;
        Ok(Self { device, running: true, _this_thread: PhantomData })
    }

    /// Waits for the work queued on the device (so that its kernels are in the trace), stops the
    /// profiler and writes the trace to `path` gzipped (a `.json.gz`, which Perfetto opens as it
    /// is), atomically: libtorch writes the JSON to a temporary file in the same directory, which
    /// is gzipped into another, renamed to `path` once whole.
    pub fn save(mut self, path: &Path) -> Result<(), Error> {
        synchronize(self.device);
        self.running = false;
        store::write_atomically(path, |gzipped| {
            let failed = |source| Error::from(StoreError::Write { path: path.into(), source });
            let dir = gzipped.path().parent().unwrap_or(Path::new("."));
            let json =
                tempfile::Builder::new().prefix(".tmp").suffix(".json").tempfile_in(dir).map_err(failed)?;
            ffi::profiler_stop(Some(json.path()))
                .map_err(|e| Error::from(e).context(format!("writing {}", path.display())))?;
            let mut encoder = GzEncoder::new(gzipped, flate2::Compression::default());
            // Opened by name: libtorch may have replaced the temporary file rather than written into it.
            let mut written = std::fs::File::open(json.path()).map_err(failed)?;
            std::io::copy(&mut written, &mut encoder).map_err(failed)?;
            encoder.finish().map(drop).map_err(failed)
        })
    }
}

impl Drop for Profiling {
    fn drop(&mut self) {
        if self.running {
            // Nothing is saved, so a failure to stop leaves nothing to report.
            let _ = ffi::profiler_stop(None);
        }
    }
}

/// A Chrome-trace file as far as the operator tables read it.
#[derive(Debug, Deserialize)]
struct ChromeTrace {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<TraceEvent>,
}

/// One event of a Chrome trace; timestamps and durations in microseconds.
#[derive(Debug, Deserialize)]
pub(crate) struct TraceEvent {
    /// The phase: "X" for a complete event (an operator, a kernel), "i" for an instant (a
    /// memory event).
    #[serde(default)]
    pub ph: String,
    /// The category: "cpu_op", "kernel", "gpu_memcpy", "cpu_instant_event", …
    #[serde(default)]
    pub cat: String,
    /// The operator's, kernel's or event's name ("[memory]" for an allocation or a free).
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub pid: serde_json::Value,
    #[serde(default)]
    pub tid: serde_json::Value,
    /// Start, microseconds.
    #[serde(default)]
    pub ts: f64,
    /// Duration, microseconds.
    #[serde(default)]
    pub dur: f64,
    #[serde(default)]
    pub args: EventArgs,
}

impl TraceEvent {
    /// The thread it ran on, as one key (process and thread).
    pub fn thread(&self) -> (String, String) {
        (self.pid.to_string(), self.tid.to_string())
    }
}

/// The arguments of an event the tables use.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct EventArgs {
    /// One entry per input: a tensor's sizes, `[]` for a non-tensor, a list of sizes for a list of
    /// tensors.
    #[serde(rename = "Input Dims", default)]
    input_dims: Vec<serde_json::Value>,
    /// One entry per input: its type as the profiler names it (`float`, `c10::Half`, `Scalar`),
    /// empty for an absent input.
    #[serde(rename = "Input type", default)]
    input_types: Vec<serde_json::Value>,
    /// A memory event's bytes: allocated (> 0) or freed (< 0).
    #[serde(rename = "Bytes", default)]
    pub bytes: Option<i64>,
}

/// The events of the Chrome trace in `path` (gzipped where its name ends in `.gz`).
pub(crate) fn read_events(path: &Path) -> Result<Vec<TraceEvent>, Error> {
    let mut bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut json = Vec::new();
        GzDecoder::new(bytes.as_slice()).read_to_end(&mut json).map_err(|e| Error::io(path, e))?;
        bytes = json;
    }
    let trace: ChromeTrace =
        serde_json::from_slice(&bytes).map_err(|source| Error::Json { path: path.into(), source })?;
    Ok(trace.trace_events)
}

/// The activity of a complete event's category, for the categories the table counts.
fn activity(category: &str) -> Option<TraceActivity> {
    match category {
        "cpu_op" => Some(TraceActivity::CpuOp),
        "kernel" => Some(TraceActivity::GpuKernel),
        "gpu_memcpy" | "gpu_memset" => Some(TraceActivity::GpuMemory),
        _ => None,
    }
}

/// The complete events (`ph` "X") of `events` whose category an operator table counts, each with
/// its activity.
pub(crate) fn complete_events(events: &[TraceEvent]) -> Vec<(&TraceEvent, TraceActivity)> {
    events.iter().filter(|e| e.ph == "X").filter_map(|e| activity(&e.cat).map(|a| (e, a))).collect()
}

/// Per activity, the `top` operators of `events` with the longest total duration, longest first
/// (ties by name). Only complete events (`ph` "X") count.
fn operator_table(events: &[TraceEvent], top: usize) -> Vec<TraceOperator> {
    let counted = complete_events(events);
    let self_us = sweep(&counted, &[]).into_iter().map(|found| found.self_us);
    let mut rows: HashMap<(TraceActivity, &str), (TraceOperator, f64)> = HashMap::new();
    for (&(event, activity), own) in counted.iter().zip(self_us) {
        let (row, longest_us) = rows.entry((activity, event.name.as_str())).or_insert_with(|| {
            let row = TraceOperator {
                name: event.name.clone(),
                activity,
                calls: 0,
                total_us: 0.0,
                self_us: 0.0,
                input_shapes: None,
            };
            (row, f64::NEG_INFINITY)
        });
        row.calls += 1;
        row.total_us += event.dur;
        row.self_us += own;
        if event.dur > *longest_us {
            *longest_us = event.dur;
            row.input_shapes = shapes_text(&event.args.input_dims);
        }
    }
    let mut rows: Vec<TraceOperator> = rows
        .into_values()
        .map(|(row, _)| TraceOperator {
            total_us: to_nanoseconds(row.total_us),
            self_us: to_nanoseconds(row.self_us),
            ..row
        })
        .collect();
    rows.sort_by(|a, b| {
        a.activity.cmp(&b.activity).then(b.total_us.total_cmp(&a.total_us)).then(a.name.cmp(&b.name))
    });
    let mut kept: HashMap<TraceActivity, usize> = HashMap::new();
    rows.retain(|row| {
        let n = kept.entry(row.activity).or_insert(0);
        *n += 1;
        *n <= top
    });
    rows
}

/// Microseconds rounded to the nanosecond the trace records them in, without the summation's
/// rounding noise.
fn to_nanoseconds(us: f64) -> f64 {
    (us * 1e3).round() / 1e3
}

impl EventArgs {
    /// The shapes of its tensor inputs ([`shapes_text`]).
    pub(crate) fn shapes(&self) -> Option<String> {
        shapes_text(&self.input_dims)
    }

    /// The types of the inputs that are tensors (those with sizes), space-separated (`float
    /// c10::Half`); `None` when no input is a tensor or the trace records no types.
    pub(crate) fn tensor_types(&self) -> Option<String> {
        let types: Vec<&str> = self
            .input_dims
            .iter()
            .zip(&self.input_types)
            .filter(|(d, _)| d.as_array().is_some_and(|sizes| !sizes.is_empty()))
            .filter_map(|(_, t)| t.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        (!types.is_empty()).then(|| types.join(" "))
    }
}

/// The operator table and the per-step operators ([`TracedStep`]) of the trace in `path`, which
/// recorded `steps` steps, as its [`TraceRecord`] under `file` (its path relative to the results
/// folder).
pub fn read_trace_record(path: &Path, file: &str, steps: usize) -> Result<TraceRecord, Error> {
    let events = read_events(path)?;
    Ok(TraceRecord {
        path: file.to_owned(),
        steps,
        operators: operator_table(&events, TOP_OPERATORS),
        step: Some(traced_step(&events, steps)),
    })
}

/// The shapes of the tensor inputs among `dims` (one entry per input), space-separated in compact
/// JSON (`[32,3,32,32] [16,3,3,3]`); `None` when no input is a tensor.
fn shapes_text(dims: &[serde_json::Value]) -> Option<String> {
    let tensors: Vec<String> = dims
        .iter()
        .filter(|d| d.as_array().is_some_and(|sizes| !sizes.is_empty()))
        .map(|d| d.to_string())
        .collect();
    (!tensors.is_empty()).then(|| tensors.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace by hand: on one thread a convolution (10 µs) calling a convolution kernel (6 µs)
    /// twice, then a ReLU; on another thread a matmul; two GPU kernels and a copy; metadata.
    const TRACE: &str = r#"{
      "schemaVersion": 1,
      "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 100.0, "dur": 10.0,
         "args": {"Input Dims": [[8, 3, 32, 32], [16, 3, 3, 3], [], []]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mkldnn_convolution", "pid": 1, "tid": 1, "ts": 101.0, "dur": 3.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mkldnn_convolution", "pid": 1, "tid": 1, "ts": 105.0, "dur": 3.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 110.0, "dur": 2.0,
         "args": {"Input Dims": [[]]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 200.0, "dur": 30.0,
         "args": {"Input Dims": [[64, 3, 32, 32], [16, 3, 3, 3], [[1], [2, 2]]]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 101.0, "dur": 50.0},
        {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": "stream 7", "ts": 120.0, "dur": 4.0},
        {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": "stream 7", "ts": 130.0, "dur": 5.0},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": "stream 7", "ts": 90.0, "dur": 1.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 102.0, "dur": 0.5},
        {"ph": "i", "cat": "cpu_op", "name": "an instant", "pid": 1, "tid": 1, "ts": 103.0},
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}
      ]
    }"#;

    fn table(top: usize) -> Vec<TraceOperator> {
        let trace: ChromeTrace = serde_json::from_str(TRACE).unwrap();
        operator_table(&trace.trace_events, top)
    }

    fn row<'a>(rows: &'a [TraceOperator], name: &str) -> &'a TraceOperator {
        rows.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no row {name}"))
    }

    #[test]
    fn operators_add_up_their_calls_and_lose_their_children_s_time_from_their_own() {
        let rows = table(TOP_OPERATORS);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["aten::mm", "aten::conv2d", "aten::mkldnn_convolution", "aten::relu", "sgemm", "Memcpy HtoD"],
            "CPU operators, then kernels, then copies, each longest first; runtime calls and \
             instants not counted"
        );
        let conv = row(&rows, "aten::conv2d");
        assert_eq!((conv.calls, conv.total_us, conv.self_us), (2, 40.0, 34.0));
        assert_eq!(
            conv.input_shapes.as_deref(),
            Some("[64,3,32,32] [16,3,3,3] [[1],[2,2]]"),
            "the longest call"
        );
        let inner = row(&rows, "aten::mkldnn_convolution");
        assert_eq!((inner.calls, inner.total_us, inner.self_us), (2, 6.0, 6.0));
        assert_eq!(inner.input_shapes, None);
        // The matmul overlaps the convolution in time but runs on another thread: not its child.
        assert_eq!(row(&rows, "aten::mm").self_us, 50.0);
        assert_eq!(row(&rows, "aten::relu").input_shapes, None, "a scalar input is not a shape");
        let gemm = row(&rows, "sgemm");
        assert_eq!(
            (gemm.activity, gemm.calls, gemm.total_us, gemm.self_us),
            (TraceActivity::GpuKernel, 2, 9.0, 9.0)
        );
        assert_eq!(row(&rows, "Memcpy HtoD").activity, TraceActivity::GpuMemory);
    }

    #[test]
    fn the_table_keeps_the_longest_of_each_activity() {
        let names: Vec<String> = table(1).into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["aten::mm", "sgemm", "Memcpy HtoD"]);
    }

    #[test]
    fn a_trace_reads_the_same_gzipped_or_plain() {
        let dir = tempfile::tempdir().unwrap();
        let (plain, gzipped) = (dir.path().join("t.json"), dir.path().join("t.json.gz"));
        std::fs::write(&plain, TRACE).unwrap();
        let mut encoder = GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut encoder, TRACE.as_bytes()).unwrap();
        std::fs::write(&gzipped, encoder.finish().unwrap()).unwrap();
        assert_eq!(
            read_trace_record(&plain, "t.json.gz", 1).map(|r| r.operators).unwrap(),
            table(TOP_OPERATORS)
        );
        assert_eq!(
            read_trace_record(&gzipped, "t.json.gz", 1).map(|r| r.operators).unwrap(),
            table(TOP_OPERATORS)
        );
    }

    #[test]
    fn a_file_that_is_not_a_trace_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broken.json");
        std::fs::write(&path, r#"{"schemaVersion": 1}"#).unwrap();
        let error = read_trace_record(&path, "t.json.gz", 1).unwrap_err().to_string();
        assert!(error.contains("broken.json") && error.contains("traceEvents"), "{error}");
        let missing =
            read_trace_record(&dir.path().join("absent.json"), "t.json.gz", 1).unwrap_err().to_string();
        assert!(missing.contains("absent.json"), "{missing}");
        let not_gzipped = dir.path().join("plain.json.gz");
        std::fs::write(&not_gzipped, TRACE).unwrap();
        let error = read_trace_record(&not_gzipped, "t.json.gz", 1).unwrap_err().to_string();
        assert!(error.contains("plain.json.gz"), "{error}");
    }

    #[test]
    fn a_profiled_convolution_is_in_the_saved_trace_and_a_second_profiler_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("traces/conv.json.gz");
        let profiling = Profiling::start(DeviceSpec::Cpu).unwrap();
        let error = Profiling::start(DeviceSpec::Cpu).unwrap_err().to_string();
        assert!(error.contains("already on"), "{error}");
        let input = tch::Tensor::ones([2, 3, 8, 8], (tch::Kind::Float, tch::Device::Cpu));
        let weight = tch::Tensor::ones([4, 3, 3, 3], (tch::Kind::Float, tch::Device::Cpu));
        let _ = input.conv2d(&weight, None::<&tch::Tensor>, [1, 1], [0, 0], [1, 1], 1);
        profiling.save(&path).unwrap();
        assert!(std::fs::read(&path).unwrap().starts_with(&[0x1f, 0x8b]), "the trace is gzipped");
        let rows = read_trace_record(&path, "t.json.gz", 1).map(|r| r.operators).unwrap();
        let conv = row(&rows, "aten::conv2d");
        assert_eq!(conv.input_shapes.as_deref(), Some("[2,3,8,8] [4,3,3,3]"));
        assert_eq!(
            std::fs::read_dir(dir.path().join("traces")).unwrap().count(),
            1,
            "no temporary file left"
        );
        // Dropped unsaved, the profiler stops: the next one starts.
        drop(Profiling::start(DeviceSpec::Cpu).unwrap());
        drop(Profiling::start(DeviceSpec::Cpu).unwrap());
    }
}
