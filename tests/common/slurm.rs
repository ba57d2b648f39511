//! A one-node Slurm cluster on this machine: MUNGE's and Slurm's daemons from Debian's packages
//! (`munge`, `slurmctld`, `slurmd`, `slurm-client`), started in the foreground as children of the
//! test, for the user running it, with their configuration, state, sockets and logs in a folder of
//! the test's; stopped by their pids when the value is dropped, also when the test fails.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the daemons may take to start, and jobs to end once cancelled, before the test says
/// what it was waiting for.
const STARTUP: Duration = Duration::from_secs(60);

/// How long a daemon may take to exit after SIGTERM before it is killed.
const STOP: Duration = Duration::from_secs(15);

/// The cluster's one partition, holding its one node.
pub const PARTITION: &str = "trickbench";

/// The daemons and key tool the cluster needs, found on PATH or in the sbin folders.
pub struct Programs {
    munged: PathBuf,
    mungekey: PathBuf,
    slurmctld: PathBuf,
    slurmd: PathBuf,
}

impl Programs {
    /// The programs, or which one is missing and the Debian package that has it. The client
    /// commands (`sbatch`, `squeue`, `scontrol`, `scancel`, `sinfo`) must be on PATH.
    pub fn find() -> Result<Programs, String> {
        let find = |name: &str, package: &str| {
            find_program(name).ok_or_else(|| {
                format!(
                    "no {name} on PATH or in /usr/sbin (Debian's {package} package; \
                     scripts/install-test-deps installs it)"
                )
            })
        };
        for client in ["sbatch", "squeue", "scontrol", "scancel", "sinfo"] {
            find(client, "slurm-client")?;
        }
        Ok(Programs {
            munged: find("munged", "munge")?,
            mungekey: find("mungekey", "munge")?,
            slurmctld: find("slurmctld", "slurmctld")?,
            slurmd: find("slurmd", "slurmd")?,
        })
    }
}

/// `name` in a folder of PATH, /usr/sbin or /sbin (not on a user's PATH on Debian).
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A daemon the cluster started, with the file its output goes to.
struct Daemon {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// Starts `program args` with its standard output and error in `log`.
    fn start(name: &'static str, program: &Path, args: &[&str], log: PathBuf) -> Daemon {
        let file = fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        Daemon { name, child, log }
    }

    /// Stops the daemon by its pid: SIGTERM, then SIGKILL after [`STOP`].
    fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill only sends a signal, to a child of this test that has not been reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < STOP {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("{} (pid {pid}) did not stop on SIGTERM within {STOP:?}: killing it", self.name);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The last lines of the daemon's output.
    fn tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- {} ({}):\n{}",
            self.name,
            self.log.display(),
            lines[lines.len().saturating_sub(15)..].join("\n")
        )
    }
}

/// A job as `scontrol show job` describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Its own id (an array task has one of its own).
    pub id: u64,
    /// The id of its job array, the `%A` of its output file name; its own id if not an array.
    pub array_id: u64,
    /// Its task of the array (`0`), or the tasks still pending together (`1-2`), if any.
    pub array_task: Option<String>,
    /// `--job-name`.
    pub name: String,
    /// `PENDING`, `RUNNING`, `COMPLETED`, `FAILED`, `CANCELLED`…
    pub state: String,
    /// The exit status and the signal that ended the batch script, as `STATUS:SIGNAL`.
    pub exit_code: String,
    /// Its output file.
    pub stdout: PathBuf,
}

impl Job {
    /// The job of one line of `scontrol show job --oneliner`.
    fn parse(line: &str) -> Job {
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|pair| pair.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
                .unwrap_or_else(|| panic!("no {key} in: {line}"))
                .to_owned()
        };
        let number = |key: &str| field(key).parse::<u64>().unwrap_or_else(|e| panic!("{key} in {line}: {e}"));
        let id = number("JobId");
        let array_task = line.contains(" ArrayTaskId=").then(|| field("ArrayTaskId"));
        Job {
            id,
            array_id: if array_task.is_some() { number("ArrayJobId") } else { id },
            array_task,
            name: field("JobName"),
            state: field("JobState"),
            exit_code: field("ExitCode"),
            stdout: PathBuf::from(field("StdOut")),
        }
    }

    /// Its output file's content.
    pub fn output(&self) -> String {
        fs::read_to_string(&self.stdout)
            .unwrap_or_else(|e| panic!("job {}: {}: {e}", self.id, self.stdout.display()))
    }
}

/// The cluster: its folder, its `slurm.conf` and its running daemons.
pub struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<Daemon>,
}

impl Cluster {
    /// Starts MUNGE, `slurmctld` and `slurmd` with everything in `dir/slurm`, and waits until the
    /// node takes jobs. munged refuses a socket in a folder that others cannot enter, so `dir` and
    /// the cluster's folder are made enterable by all.
    pub fn start(programs: &Programs, dir: &Path) -> Cluster {
        let root = dir.join("slurm");
        for sub in ["state", "spool", "log"] {
            fs::create_dir_all(root.join(sub)).unwrap();
        }
        for folder in [dir, &root] {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(folder, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let mut cluster = Cluster { conf: root.join("slurm.conf"), dir: root, daemons: Vec::new() };
        cluster.start_munge(programs);
        fs::write(&cluster.conf, cluster.configuration(programs))
            .unwrap_or_else(|e| panic!("{}: {e}", cluster.conf.display()));
        let conf = cluster.conf.display().to_string();
        let log = cluster.dir.join("log");
        let slurmctld =
            Daemon::start("slurmctld", &programs.slurmctld, &["-D", "-f", &conf], log.join("slurmctld.out"));
        cluster.daemons.push(slurmctld);
        let slurmd_args = ["-D", "-N", "localhost", "-f", &conf];
        cluster.daemons.push(Daemon::start("slurmd", &programs.slurmd, &slurmd_args, log.join("slurmd.out")));
        cluster.wait_until("the node is idle", STARTUP, |c| {
            c.client("sinfo")
                .args(["-h", "-o", "%T"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
        });
        cluster
    }

    /// Creates a MUNGE key and starts munged on a socket in the cluster's folder.
    fn start_munge(&mut self, programs: &Programs) {
        let key = self.dir.join("munge.key");
        let created = Command::new(&programs.mungekey).arg("--create").arg("--keyfile").arg(&key).status();
        assert!(created.is_ok_and(|s| s.success()), "mungekey --create --keyfile {}", key.display());
        let path = |name: &str| self.dir.join(name).display().to_string();
        let args = [
            "--foreground".to_owned(),
            format!("--socket={}", path("munge.socket")),
            format!("--key-file={}", key.display()),
            format!("--pid-file={}", path("munged.pid")),
            format!("--seed-file={}", path("munged.seed")),
            format!("--log-file={}", path("log/munged.log")),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.daemons.push(Daemon::start("munged", &programs.munged, &args, self.dir.join("log/munged.out")));
        self.wait_until("munged's socket exists", STARTUP, |c| c.dir.join("munge.socket").exists());
    }

    /// `slurm.conf`: this machine as node `localhost` with the CPUs and memory `slurmd -C` reads,
    /// free ports, the current user as SlurmUser, and plugins that need no cgroups, accounting
    /// database or MPI library (a container has none of them).
    fn configuration(&self, programs: &Programs) -> String {
        let probe = Command::new(&programs.slurmd).arg("-C").output().expect("slurmd -C runs");
        let probe = String::from_utf8_lossy(&probe.stdout).into_owned();
        let hardware = probe
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("NodeName="))
            .and_then(|line| line.split_once(' '))
            .unwrap_or_else(|| panic!("slurmd -C printed: {probe}"))
            .1;
        let user = Command::new("id").arg("-un").output().expect("id -un runs");
        let user = String::from_utf8_lossy(&user.stdout).trim().to_owned();
        let (ctld_port, slurmd_port) = free_ports();
        let path = |name: &str| self.dir.join(name).display().to_string();
        let settings = [
            ("ClusterName", "trickbench-test".to_owned()),
            ("SlurmctldHost", "localhost".to_owned()),
            ("SlurmctldPort", ctld_port.to_string()),
            ("SlurmdPort", slurmd_port.to_string()),
            ("SlurmUser", user.clone()),
            ("SlurmdUser", user),
            ("AuthType", "auth/munge".to_owned()),
            ("CredType", "cred/munge".to_owned()),
            ("AuthInfo", format!("socket={}", path("munge.socket"))),
            ("StateSaveLocation", path("state")),
            ("SlurmdSpoolDir", path("spool")),
            ("SlurmctldPidFile", path("slurmctld.pid")),
            ("SlurmdPidFile", path("slurmd.pid")),
            ("SlurmctldLogFile", path("log/slurmctld.log")),
            ("SlurmdLogFile", path("log/slurmd.log")),
            ("ProctrackType", "proctrack/linuxproc".to_owned()),
            ("TaskPlugin", "task/none".to_owned()),
            ("JobAcctGatherType", "jobacct_gather/none".to_owned()),
            ("AccountingStorageType", "accounting_storage/none".to_owned()),
            ("JobCompType", "jobcomp/none".to_owned()),
            ("SwitchType", "switch/none".to_owned()),
            ("MpiDefault", "none".to_owned()),
            ("MailProg", "/bin/true".to_owned()),
            ("SchedulerType", "sched/backfill".to_owned()),
            ("SelectType", "select/cons_tres".to_owned()),
            ("SelectTypeParameters", "CR_CPU".to_owned()),
            ("ReturnToService", "2".to_owned()),
            // Seconds between a cancelled job's SIGTERM and its SIGKILL.
            ("KillWait", "5".to_owned()),
            // Ended jobs stay visible to `scontrol show job` for an hour.
            ("MinJobAge", "3600".to_owned()),
        ];
        let mut conf: String = settings.iter().map(|(key, value)| format!("{key}={value}\n")).collect();
        conf += &format!("NodeName=localhost {hardware} State=UNKNOWN\n");
        conf += &format!("PartitionName={PARTITION} Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n");
        conf
    }

    /// `program` (a Slurm client, or a shell that runs some) talking to this cluster: its
    /// `SLURM_CONF`, and no `SLURM_*` or `SBATCH_*` variable of a Slurm the test may run under.
    pub fn client(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name.starts_with("SLURM_") || name.starts_with("SBATCH_") {
                command.env_remove(name.as_ref());
            }
        }
        command.env("SLURM_CONF", &self.conf).stdin(Stdio::null());
        command
    }

    /// Every job the controller knows, ended ones included (for `MinJobAge`, an hour).
    pub fn jobs(&self) -> Vec<Job> {
        let out =
            self.client("scontrol").args(["show", "job", "--oneliner"]).output().expect("scontrol runs");
        assert!(
            out.status.success(),
            "scontrol show job: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("JobId="))
            .map(Job::parse)
            .collect()
    }

    /// Waits until no job is pending or running, failing the test after `patience`.
    pub fn wait_for_jobs(&self, patience: Duration) {
        self.wait_until("every job has ended", patience, |c| {
            c.client("squeue")
                .args(["-h", "-o", "%i"])
                .output()
                .is_ok_and(|o| o.status.success() && o.stdout.is_empty())
        });
    }

    /// Waits until `ready` holds, failing the test after `patience` with the queue and the
    /// daemons' logs, or as soon as a daemon has exited.
    pub fn wait_until(&self, what: &str, patience: Duration, mut ready: impl FnMut(&Cluster) -> bool) {
        let start = Instant::now();
        while !ready(self) {
            let queue =
                || self.client("squeue").output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
            assert!(
                start.elapsed() < patience,
                "gave up waiting until {what}; queue:\n{:?}\n{}",
                queue(),
                self.logs()
            );
            if let Some(daemon) = self.daemons.iter().find(|d| !alive(d.child.id())) {
                panic!("{} exited while waiting until {what}\n{}", daemon.name, self.logs());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The last lines of every daemon's output, for a failing test's message.
    pub fn logs(&self) -> String {
        self.daemons.iter().map(Daemon::tail).collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Cluster {
    /// Cancels every job (their processes are the cluster's), waits for them to end, then stops
    /// slurmd, slurmctld and munged by their pids.
    fn drop(&mut self) {
        if self.daemons.iter().any(|d| d.name == "slurmctld") {
            let _ = self.client("scancel").arg(format!("--partition={PARTITION}")).status();
            let start = Instant::now();
            while start.elapsed() < STARTUP {
                let queue = self.client("squeue").args(["-h", "-o", "%i"]).output();
                if !queue.is_ok_and(|o| o.status.success() && !o.stdout.is_empty()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        for daemon in self.daemons.iter_mut().rev() {
            daemon.stop();
        }
    }
}

/// Whether process `pid` exists and has not exited (a zombie has exited).
fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
}

/// Two TCP ports that nothing listens on now.
fn free_ports() -> (u16, u16) {
    let bind = || TcpListener::bind("127.0.0.1:0").expect("a free port");
    let (first, second) = (bind(), bind());
    (first.local_addr().unwrap().port(), second.local_addr().unwrap().port())
}
