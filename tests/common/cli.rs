//! The trickbench binary as a user runs it: a command in a folder, what it printed, and the
//! synthetic data it writes for the runs that train.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The binary under test.
pub const BINARY: &str = env!("CARGO_BIN_EXE_trickbench");

pub use trickbench::bench::faults::FAULT_VARIABLE;

/// `trickbench args` in `dir`, with nothing on its standard input and no injected fault.
pub fn command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BINARY);
    command.current_dir(dir).args(args).env_remove(FAULT_VARIABLE).stdin(Stdio::null());
    command
}

/// Runs `trickbench args` in `dir` to its end and returns its status and output.
pub fn trickbench(dir: &Path, args: &[&str]) -> Output {
    command(dir, args).output().expect("trickbench runs")
}

/// An output stream as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes a synthetic CIFAR-10 of `train` training and `test` test images into `dir/name`.
pub fn synthetic_cifar(dir: &Path, name: &str, train: usize, test: usize) {
    let (train, test) = (train.to_string(), test.to_string());
    let out = trickbench(dir, &["data", "synth", "--train", &train, "--test", &test, "--out", name]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}
