//! Starting the processes of a data-parallel world on one machine: N copies of a program, each
//! with the torchrun variables of its rank, their output forwarded line by line with a rank
//! prefix. When one fails the others are stopped and the launch fails naming it.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::distributed::env::DistEnv;
use crate::error::Error;

/// What to start.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    /// The program every rank runs.
    pub program: PathBuf,
    /// Its arguments (the same for every rank).
    pub args: Vec<OsString>,
    /// Processes to start (ranks 0 to N-1, local ranks the same).
    pub nproc: usize,
    /// Host of the rendezvous store.
    pub master_addr: String,
    /// Port of the rendezvous store (`None`: a free port of this machine).
    pub master_port: Option<u16>,
    /// Extra environment variables for every rank.
    pub env: Vec<(String, String)>,
}

/// A TCP port nobody listens on now (the OS picks it; it is free again when this returns).
pub fn free_port() -> Result<u16, Error> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| Error::io("127.0.0.1:0", e))?;
    let port = listener.local_addr().map_err(|e| Error::io("127.0.0.1:0", e))?.port();
    Ok(port)
}

/// Starts every rank, forwards their stdout and stderr to ours with a `[rank R] ` prefix, and
/// waits. Succeeds when every rank exits with status 0. When one fails (non-zero status or a
/// signal) the others are stopped (after [`GRACE`]) and the error names the ranks that failed and
/// how, the first first.
/// Each rank leads its own process group, so stopping it stops what it started; ranks are killed
/// too if the launcher itself dies (Linux's parent-death signal), so a killed benchmark cell leaves
/// no worker behind.
pub fn launch(spec: &LaunchSpec) -> Result<(), Error> {
    if spec.nproc == 0 {
        return Err(Error::Invalid("--nproc-per-node: at least 1 process".to_owned()));
    }
    let port = match spec.master_port {
        Some(port) => port,
        None => free_port()?,
    };
    let mut children: Vec<Child> = Vec::with_capacity(spec.nproc);
    let mut forwarders: Vec<JoinHandle<()>> = Vec::new();
    for rank in 0..spec.nproc {
        let mut command = Command::new(&spec.program);
        command
            .args(&spec.args)
            .envs(DistEnv::local_vars(rank, spec.nproc, &spec.master_addr, port))
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to kill the child when the
        // launching thread exits.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                stop(&mut children);
                return Err(Error::io(&spec.program, e));
            }
        };
        let prefix = format!("[rank {rank}] ");
        let out = child.stdout.take().expect("stdout is piped");
        let err = child.stderr.take().expect("stderr is piped");
        forwarders.push(forward(out, prefix.clone(), false));
        forwarders.push(forward(err, prefix, true));
        children.push(child);
    }
    supervise(&mut children)?;
    // Every rank exited: their output ends once the processes they started close it too. (After
    // a failure the forwarders are left to finish on their own.)
    for forwarder in forwarders {
        let _ = forwarder.join();
    }
    Ok(())
}

/// How long the other ranks may take to end on their own once one has failed, before they are
/// killed: a rank's death makes its peers fail soon after, of the broken connection, and their
/// own messages say so.
pub const GRACE: Duration = Duration::from_secs(2);

/// Waits for every child, taking them in the order they exit. When one fails, the others get
/// [`GRACE`] to end on their own, then are killed; the error names every rank that failed, in
/// the order they ended, and how.
fn supervise(children: &mut [Child]) -> Result<(), Error> {
    let (exited, exits) = mpsc::channel();
    for (rank, child) in children.iter().enumerate() {
        let (exited, pid) = (exited.clone(), child.id());
        std::thread::spawn(move || {
            wait_without_reaping(pid);
            // The supervisor may have returned already: then nobody needs to know.
            let _ = exited.send(rank);
        });
    }
    drop(exited);
    let mut running = children.len();
    let mut failures: Vec<String> = Vec::new();
    let mut deadline: Option<Instant> = None;
    while running > 0 {
        let next = match deadline {
            None => exits.recv().ok(),
            Some(deadline) => exits.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok(),
        };
        let Some(rank) = next else { break };
        let status =
            children[rank].wait().map_err(|e| Error::Distributed(format!("waiting for rank {rank}: {e}")))?;
        running -= 1;
        if !status.success() {
            failures.push(format!("rank {rank} {}", describe(status)));
            deadline.get_or_insert_with(|| Instant::now() + GRACE);
        }
    }
    if failures.is_empty() {
        return Ok(());
    }
    stop(children);
    let stopped = if running > 0 { format!("; stopped the other {running} rank(s)") } else { String::new() };
    Err(Error::Distributed(format!("{}{stopped}", failures.join(", then "))))
}

/// Blocks until process `pid` (a child of ours) has exited, leaving it for `Child::wait` to reap,
/// so that its `Child` stays valid (and safe to kill) until then.
fn wait_without_reaping(pid: u32) {
    loop {
        // SAFETY: a zeroed siginfo_t is a valid buffer for waitid to fill; WNOWAIT leaves the
        // child unreaped.
        let status = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT)
        };
        if status == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
    }
}

/// Kills every child that is still running, with the processes it started, and reaps them all.
fn stop(children: &mut [Child]) {
    for child in children.iter_mut() {
        if matches!(child.try_wait(), Ok(None)) {
            // The child leads its own process group (unreaped, so the group still exists): this
            // kills whatever it started too.
            // SAFETY: plain system call on a process group id of ours.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
        }
        let _ = child.wait();
    }
}

/// How a rank ended, in words.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "ended without a status".to_owned(),
    }
}

/// Copies `stream` line by line to our stdout (or stderr), each line prefixed.
fn forward(stream: impl Read + Send + 'static, prefix: String, to_stderr: bool) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            if !line.ends_with(b"\n") {
                line.push(b'\n');
            }
            let mut text = prefix.clone().into_bytes();
            text.extend_from_slice(&line);
            // A closed terminal or pipe only loses the copy, not the child's work.
            let _ = if to_stderr {
                std::io::stderr().write_all(&text)
            } else {
                std::io::stdout().write_all(&text)
            };
            line.clear();
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str, nproc: usize) -> LaunchSpec {
        LaunchSpec {
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            nproc,
            master_addr: "127.0.0.1".to_owned(),
            master_port: Some(29999),
            env: vec![("EXTRA".to_owned(), "x".to_owned())],
        }
    }

    #[test]
    fn every_rank_gets_its_variables_and_success_is_all_zero() {
        let script = r#"[ "$WORLD_SIZE" = 3 ] && [ "$LOCAL_RANK" = "$RANK" ] && [ "$MASTER_PORT" = 29999 ] && [ "$EXTRA" = x ]"#;
        launch(&shell(script, 3)).unwrap();
    }

    #[test]
    fn a_failing_rank_stops_the_others_and_is_named() {
        let message =
            launch(&shell(r#"if [ "$RANK" = 1 ]; then exit 7; fi; sleep 30"#, 3)).unwrap_err().to_string();
        assert_eq!(message, "distributed: rank 1 exited with status 7; stopped the other 2 rank(s)");
        let killed = launch(&shell(r#"if [ "$RANK" = 0 ]; then kill -9 $$; fi"#, 2)).unwrap_err().to_string();
        assert!(killed.starts_with("distributed: rank 0 was killed by signal 9"), "{killed}");
    }

    #[test]
    fn the_free_port_is_usable() {
        let port = free_port().unwrap();
        assert_ne!(port, 0);
        TcpListener::bind(("127.0.0.1", port)).unwrap();
    }
}
