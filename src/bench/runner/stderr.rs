//! What is kept of a cell process's stderr: every line forwarded as it arrives, the last
//! [`STDERR_TAIL_BYTES`] without the frames of C++ backtraces, the line that says an
//! allocation failed, and the reason of a cell found not applicable.

use std::io::Read;

use super::process::LineSink;
use crate::bench::cell::SIDE_MARKER;

/// Bytes of a failed child's stderr kept in the results (less the frames of C++ backtraces).
pub const STDERR_TAIL_BYTES: usize = 4000;

/// What a process writes to stderr when an allocation fails (lower case): libtorch's CPU and CUDA
/// allocators, the C library, C++'s `new` and Rust's global allocator.
const OUT_OF_MEMORY_MESSAGES: [&str; 5] = [
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "std::bad_alloc",
    "memory allocation of",
];

/// The start of a frame line of libtorch's C++ backtraces, which would crowd the message out of
/// the tail.
const BACKTRACE_FRAME: &str = "frame #";

/// What libtorch's Kineto profiler writes when it saves a trace on a machine without a GPU driver
/// (CUDA error 35): the CUDA build looks for GPUs to describe, finds none, and the trace is whole.
/// Kept in the tail, not forwarded to the terminal, where every traced process would repeat it.
const KINETO_WITHOUT_GPU: &str = "gpuGetDeviceCount failed with code 35";

/// What comes before the reason on the `error:` line of a cell process whose cell is not
/// applicable (`Error::NotApplicable`'s message, after the causes that wrap it).
const NOT_APPLICABLE: &str = "not applicable: ";

/// A child's stderr read in chunks of any size, split into lines across chunk edges.
pub struct StderrTail {
    /// Where every complete line goes as it arrives.
    sink: Option<LineSink>,
    /// The line read so far, not yet ended by a newline.
    line: Vec<u8>,
    /// The lines kept, newline-terminated; trimmed to [`STDERR_TAIL_BYTES`] when it grows past
    /// four times that.
    kept: Vec<u8>,
    /// The last line that said an allocation failed, trimmed.
    out_of_memory: Option<String>,
    /// The reason on the last `error:` line that said the cell is not applicable.
    not_applicable: Option<String>,
    /// The cell whose side the process last said it began work on ([`SIDE_MARKER`]).
    working_on: Option<String>,
}

/// What a child's stderr said, once it is closed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StderrSummary {
    /// The last [`STDERR_TAIL_BYTES`] of the kept lines, as trimmed text.
    pub tail: String,
    /// The last line that said an allocation failed, trimmed (searched line by line: libtorch
    /// follows its allocator's message with a backtrace longer than the tail).
    pub out_of_memory: Option<String>,
    /// The reason on the last `error: … not applicable: REASON` line, trimmed: why the cell
    /// cannot run here, when the process found that out.
    pub not_applicable: Option<String>,
    /// The cell whose side the process last said it began work on alone ([`SIDE_MARKER`];
    /// `None` where it said none, or began the windows that alternate between its sides after
    /// it): where a process that died was, when it died.
    pub working_on: Option<String>,
}

impl StderrTail {
    /// An empty tail that forwards each line to `sink`, if given.
    pub fn new(sink: Option<LineSink>) -> Self {
        Self {
            sink,
            line: Vec::new(),
            kept: Vec::new(),
            out_of_memory: None,
            not_applicable: None,
            working_on: None,
        }
    }

    /// Takes the next bytes the child wrote.
    pub fn push(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if byte == b'\n' {
                self.end_line();
            } else {
                self.line.push(byte);
            }
        }
    }

    /// Reads `reader` to its end (or its first error) and summarises what it said.
    pub fn read_to_end(mut self, mut reader: impl Read) -> StderrSummary {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = reader.read(&mut chunk) {
            if n == 0 {
                break;
            }
            self.push(&chunk[..n]);
        }
        self.finish()
    }

    /// Ends a last line left without a newline and summarises what was read.
    pub fn finish(mut self) -> StderrSummary {
        if !self.line.is_empty() {
            self.end_line();
        }
        let start = self.kept.len().saturating_sub(STDERR_TAIL_BYTES);
        let tail = String::from_utf8_lossy(&self.kept[start..]).trim().to_owned();
        StderrSummary {
            tail,
            out_of_memory: self.out_of_memory,
            not_applicable: self.not_applicable,
            working_on: self.working_on,
        }
    }

    /// Handles the line read so far: notes the side an announcement names (neither forwarded nor
    /// kept); else forwards it (unless it is Kineto's [`KINETO_WITHOUT_GPU`]), notes an allocation failure or a reason the cell is not
    /// applicable, keeps it unless it is a backtrace frame.
    fn end_line(&mut self) {
        let text = String::from_utf8_lossy(&self.line);
        if let Some(id) = text.strip_prefix(SIDE_MARKER) {
            self.working_on = Some(id.trim()).filter(|id| !id.is_empty()).map(str::to_owned);
            self.line.clear();
            return;
        }
        if let Some(sink) = self.sink.as_ref().filter(|_| !text.contains(KINETO_WITHOUT_GPU)) {
            sink(&text);
        }
        if says_out_of_memory(&text) {
            self.out_of_memory = Some(text.trim().to_owned());
        }
        if let Some(reason) = not_applicable_reason(&text) {
            self.not_applicable = Some(reason);
        }
        if !text.starts_with(BACKTRACE_FRAME) {
            self.kept.extend_from_slice(&self.line);
            self.kept.push(b'\n');
            if self.kept.len() > 4 * STDERR_TAIL_BYTES {
                self.kept.drain(..self.kept.len() - STDERR_TAIL_BYTES);
            }
        }
        self.line.clear();
    }
}

/// Whether a line a process wrote to stderr (or an error's message) says that an allocation
/// failed.
pub(in crate::bench) fn says_out_of_memory(line: &str) -> bool {
    let line = line.to_lowercase();
    OUT_OF_MEMORY_MESSAGES.iter().any(|message| line.contains(message))
}

/// The reason on an `error:` line that says the cell is not applicable (`error: cell ID: not
/// applicable: REASON`), if the line is one.
fn not_applicable_reason(line: &str) -> Option<String> {
    let (_, reason) = line.strip_prefix("error: ")?.split_once(NOT_APPLICABLE)?;
    Some(reason.trim().to_owned()).filter(|reason| !reason.is_empty())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Feeds `chunks` one by one and summarises them, collecting the forwarded lines.
    fn read(chunks: &[&[u8]]) -> (StderrSummary, Vec<String>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&lines);
        let sink: LineSink = Arc::new(move |line: &str| seen.lock().unwrap().push(line.to_owned()));
        let mut tail = StderrTail::new(Some(sink));
        for chunk in chunks {
            tail.push(chunk);
        }
        let summary = tail.finish();
        let lines = lines.lock().unwrap().clone();
        (summary, lines)
    }

    #[test]
    fn the_last_side_announced_is_where_the_process_was_and_the_announcements_are_not_kept() {
        let announce = |id: &str| format!("{SIDE_MARKER}{id}\n").into_bytes();
        let (summary, lines) = read(&[&announce("a/b"), b"step\n", &announce("c/d")]);
        assert_eq!(summary.working_on.as_deref(), Some("c/d"));
        assert_eq!(lines, ["step"]);
        assert_eq!(summary.tail, "step");
        let (windows, _) = read(&[&announce("a/b"), &announce("")]);
        assert_eq!(windows.working_on, None, "the windows belong to every side");
    }

    #[test]
    fn kinetos_note_of_no_gpu_is_kept_but_not_forwarded() {
        let note = b"ERROR:2026-12-06 08:53:53 16718:16718 DeviceProperties.cpp:48] gpuGetDeviceCount failed with code 35\n";
        let (summary, lines) = read(&[b"step\n", note, b"done\n"]);
        assert_eq!(lines, ["step", "done"]);
        assert!(summary.tail.contains("gpuGetDeviceCount failed with code 35"), "{}", summary.tail);
    }

    #[test]
    fn lines_split_across_reads_are_joined_and_forwarded_whole() {
        let (summary, lines) = read(&[b"step 1 lo", b"ss 2.3\nstep", b" 2 loss 2.1\n", b"done"]);
        assert_eq!(lines, ["step 1 loss 2.3", "step 2 loss 2.1", "done"]);
        assert_eq!(summary.tail, "step 1 loss 2.3\nstep 2 loss 2.1\ndone");
        assert_eq!(summary.out_of_memory, None);
    }

    #[test]
    fn the_out_of_memory_line_is_found_behind_a_backtrace_longer_than_the_tail() {
        let mut chunks: Vec<Vec<u8>> =
            vec![b"Error: CUDA out of memory. Tried to allocate 2.00 GiB\n".to_vec()];
        for i in 0..400 {
            chunks.push(format!("frame #{i}: 0x7f00 in at::native::something_long_enough()\n").into_bytes());
        }
        // A frame line split between two reads is still recognised as a frame.
        chunks.push(b"fra".to_vec());
        chunks.push(b"me #400: 0x7f01\nexception raised\n".to_vec());
        let borrowed: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let (summary, lines) = read(&borrowed);
        assert_eq!(
            summary.out_of_memory.as_deref(),
            Some("Error: CUDA out of memory. Tried to allocate 2.00 GiB")
        );
        assert_eq!(summary.tail, "Error: CUDA out of memory. Tried to allocate 2.00 GiB\nexception raised");
        assert_eq!(lines.len(), 403, "frames are forwarded even though they are not kept");
    }

    #[test]
    fn each_allocator_s_message_counts_as_out_of_memory() {
        for line in [
            "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes",
            "terminate called after throwing an instance of 'std::bad_alloc'",
            "memory allocation of 1048576 bytes failed",
            "mmap: Cannot allocate memory",
        ] {
            let (summary, _) = read(&[line.as_bytes()]);
            assert_eq!(summary.out_of_memory.as_deref(), Some(line));
        }
        assert_eq!(read(&[b"loss is nan\n"]).0.out_of_memory, None);
    }

    #[test]
    fn the_reason_of_a_cell_not_applicable_is_read_from_its_last_error_line() {
        let stderr: &[u8] = b"UserWarning: Flash attention kernel not used because: dropout\n\
            error: cell gpt-mini/sdpa-flash/b8/s0/train: not applicable: sdpa-flash: no kernel (a: b)\n";
        let (summary, _) = read(&[stderr]);
        assert_eq!(summary.not_applicable.as_deref(), Some("sdpa-flash: no kernel (a: b)"));
        assert_eq!(summary.out_of_memory, None);
        let later: &[u8] = b"error: not applicable: first\nerror: cell x: not applicable: second  \n";
        assert_eq!(read(&[later]).0.not_applicable.as_deref(), Some("second"));
        for other in
            ["error: cell x: libtorch: boom", "note: not applicable: hearsay", "error: not applicable: "]
        {
            assert_eq!(read(&[other.as_bytes()]).0.not_applicable, None, "{other}");
        }
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_only() {
        let long: Vec<u8> =
            (0..3 * STDERR_TAIL_BYTES).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
        let (summary, _) = read(&[&long]);
        assert!(summary.tail.len() <= STDERR_TAIL_BYTES);
        assert!(summary.tail.ends_with(&format!("line {}", 3 * STDERR_TAIL_BYTES - 1)));
        assert!(!summary.tail.contains("line 0\n"));
    }

    #[test]
    fn reading_a_stream_to_its_end_equals_pushing_it() {
        let bytes: &[u8] = b"warning: slow\nstd::bad_alloc\n";
        let summary = StderrTail::new(None).read_to_end(bytes);
        assert_eq!(summary, read(&[bytes]).0);
        assert_eq!(summary.out_of_memory.as_deref(), Some("std::bad_alloc"));
    }
}
