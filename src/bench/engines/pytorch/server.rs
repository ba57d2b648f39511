//! The PyTorch engine's fork server: one Python process for the whole run that imports torch
//! once and forks a clean engine for each cell process that connects (`--serve` in
//! `scripts/engine/pytorch_engine.py`), so that a cell on the PyTorch engine does not pay
//! Python's start and torch's import, seconds on a small CPU, every time.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use serde_json::Value;

use crate::bench::engines::RunServer;
use crate::error::Error;
use crate::measure::host_allocator::HostAllocator;

/// A running fork server; stopped, and its folder removed, when dropped.
#[derive(Debug)]
pub struct PytorchServer {
    /// The Python process.
    child: Child,
    /// Its standard input, held open: the server ends at EOF on it, so also when the run is
    /// killed.
    _stdin: ChildStdin,
    /// The folder holding the scripts and the socket, one of its own for each server (a process
    /// may hold several), removed when dropped, once the server is stopped.
    _dir: tempfile::TempDir,
    /// The Unix socket cell processes connect to.
    socket: PathBuf,
}

impl PytorchServer {
    /// Starts the server with `python` and the host allocator `allocator` (which the engines
    /// forked from it inherit) and waits until it listens.
    pub fn start(python: &Path, allocator: HostAllocator) -> Result<Self, Error> {
        let dir = super::scratch_dir("trickbench-engine-")?;
        let script = super::case::write_scripts(dir.path())?;
        let socket = dir.path().join("engine.sock");
        let program = format!("{} {} --serve {}", python.display(), script.display(), socket.display());
        let mut child = server_command(python, &script, &socket, allocator)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .map_err(|e| Error::Context {
                context: format!("starting the PyTorch engine's fork server ({program})"),
                source: Box::new(e),
            })?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let mut first = String::new();
        let read = BufReader::new(child.stdout.take().expect("stdout is piped")).read_line(&mut first);
        let server = PytorchServer { child, _stdin: stdin, _dir: dir, socket };
        let serving = serde_json::from_str::<Value>(&first).ok().and_then(|v| v.get("serving").cloned());
        match (read, serving) {
            (Ok(_), Some(Value::Bool(true))) => Ok(server),
            _ => Err(Error::Process(format!(
                "the PyTorch engine's fork server ({program}) began with {first:?} instead of its serving line; \
                 its stderr is above"
            ))),
        }
    }
}

impl RunServer for PytorchServer {
    fn socket(&self) -> &Path {
        &self.socket
    }
}

/// The command that starts the server: `python script --serve socket`, with the run's host
/// allocator, as every measuring process has it; the engines forked from the server inherit it,
/// since malloc reads its tunables when a process starts.
fn server_command(python: &Path, script: &Path, socket: &Path, allocator: HostAllocator) -> Command {
    let mut command = Command::new(python);
    command.arg(script).arg("--serve").arg(socket);
    allocator.apply(&mut command);
    command
}

impl Drop for PytorchServer {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;
    use crate::measure::host_allocator::KEEP_FREED_MEMORY;

    #[test]
    fn the_server_and_so_every_engine_it_forks_keep_freed_memory() {
        let command = server_command(
            Path::new("python3"),
            Path::new("engine.py"),
            Path::new("engine.sock"),
            HostAllocator::Tuned,
        );
        let envs: Vec<(&OsStr, Option<&OsStr>)> = command.get_envs().collect();
        for (name, value) in KEEP_FREED_MEMORY {
            let expected = std::env::var_os(name).is_none().then_some(OsStr::new(value));
            let given = envs.iter().find(|(n, _)| *n == OsStr::new(name)).and_then(|(_, v)| *v);
            assert_eq!(given, expected, "{name}: the user's own value is inherited, not overridden");
        }
        let args: Vec<&OsStr> = command.get_args().collect();
        assert_eq!(args, ["engine.py", "--serve", "engine.sock"]);
    }
}
