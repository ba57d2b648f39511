//! One writer per output folder: a run (or a merge) holds a lock on its `--out` folder for as
//! long as it writes there, so that a second one started into the same folder is refused instead
//! of racing on `results.json`.
//!
//! The lock is `flock(2)` on `.trickbench.lock` in the folder, not a file created with `O_EXCL`:
//! the kernel releases a `flock` whenever its holder ends, however it ends (a second Ctrl-C, which
//! exits at once, SIGKILL, the out-of-memory killer, a node that reboots), so a lock can never be
//! left held by a process that is gone, and no process id has to be judged alive or dead (process
//! ids are reused, and mean nothing on another host of a shared file system). The file holds the
//! holder's process id, host and start time, for the message that refuses a second writer; a
//! file left with content but no lock on it is what a holder that did not end cleanly leaves, and
//! the next writer takes it over, saying so. On Linux NFS clients `flock` is carried by the
//! server's POSIX locks, so it holds across hosts. A file system without locks (some cluster
//! file systems mounted without them) is reported as such, and the writer goes on unprotected.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Name of the lock file inside the output folder.
pub const LOCK_FILE: &str = ".trickbench.lock";

/// Why an output folder could not be locked. Every variant names the lock file.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock.
    #[error(
        "{}: another trickbench process ({holder}) is writing into {}; wait for it to end, stop it, \
         or choose another --out",
        path.display(),
        path.parent().map_or_else(|| ".".into(), |dir| dir.display().to_string())
    )]
    Held {
        /// The lock file.
        path: PathBuf,
        /// Who holds it, as its file says.
        holder: Holder,
    },
    /// Creating, locking, reading or writing the lock file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The lock file (or the folder, when it could not be created).
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl From<LockError> for crate::error::Error {
    fn from(error: LockError) -> Self {
        crate::error::Error::Module(Box::new(error))
    }
}

/// The process a lock file names: one line, `pid host started-at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its process id; 0 when the file does not say.
    pub pid: u32,
    /// The host it runs on.
    pub host: String,
    /// When it took the lock (RFC 3339).
    pub started_at: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pid {
            0 => write!(f, "its process id is not in the lock file"),
            pid => write!(f, "pid {pid} on {}, since {}", self.host, self.started_at),
        }
    }
}

impl Holder {
    /// This process.
    fn this_process() -> Self {
        Holder {
            pid: std::process::id(),
            host: sysinfo::System::host_name().unwrap_or_else(|_| "an unknown host".to_owned()),
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }
    }

    /// The holder a lock file's content names (a partly written file gives pid 0).
    fn parse(text: &str) -> Self {
        let mut fields = text.split_whitespace();
        Holder {
            pid: fields.next().and_then(|pid| pid.parse().ok()).unwrap_or(0),
            host: fields.next().unwrap_or("an unknown host").to_owned(),
            started_at: fields.next().unwrap_or("an unknown time").to_owned(),
        }
    }
}

/// How an output folder was locked.
#[derive(Debug)]
pub enum Locked {
    /// This process holds the lock until the value is dropped; `previous` is the holder whose
    /// file was left behind, when one was.
    Held {
        /// The lock.
        lock: OutputLock,
        /// The process that left the file without releasing it (it ended uncleanly).
        previous: Option<Holder>,
    },
    /// The folder's file system does not support locks: nothing stops a second writer.
    Unsupported {
        /// The lock file that could not be locked.
        path: PathBuf,
        /// What the file system answered.
        source: std::io::Error,
    },
}

/// A held lock on an output folder: its file is removed and the lock released on drop.
#[derive(Debug)]
pub struct OutputLock {
    file: File,
    path: PathBuf,
}

impl OutputLock {
    /// Locks `dir` (created if needed) for this process, or fails naming the process that holds
    /// it. Never waits.
    pub fn acquire(dir: &Path) -> Result<Locked, LockError> {
        std::fs::create_dir_all(dir).map_err(|source| LockError::Io { path: dir.to_path_buf(), source })?;
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io { path: path.clone(), source };
        loop {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(io)?;
            // SAFETY: flock takes a file descriptor this function owns and flags; it touches no memory.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let source = std::io::Error::last_os_error();
                return match source.raw_os_error() {
                    Some(libc::EWOULDBLOCK) => Err(LockError::Held { holder: read_holder(&mut file), path }),
                    Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS) => {
                        Ok(Locked::Unsupported { path, source })
                    }
                    _ => Err(io(source)),
                };
            }
            // A holder that was releasing removed the file after this process opened it: the
            // lock is on a file no longer in the folder, so start again with the folder's own.
            if !names_file(&path, &file) {
                continue;
            }
            let left = read_holder(&mut file);
            let previous = (left.pid != 0).then_some(left);
            let me = Holder::this_process();
            file.set_len(0)
                .and_then(|()| file.rewind())
                .and_then(|()| writeln!(file, "{} {} {}", me.pid, me.host, me.started_at))
                .and_then(|()| file.flush())
                .map_err(io)?;
            return Ok(Locked::Held { lock: OutputLock { file, path }, previous });
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for OutputLock {
    /// Removes the file while still holding the lock (so that no other process can lock it in
    /// between and then lose it), then releases the lock by closing it.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        // SAFETY: as in `acquire`; the descriptor is still open.
        unsafe {
            libc::flock(self.file.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

/// Who a lock file names (read from its start).
fn read_holder(file: &mut File) -> Holder {
    let mut text = String::new();
    let _ = file.rewind().and_then(|()| file.read_to_string(&mut text));
    Holder::parse(&text)
}

/// Whether `path` still names the open `file` (the same inode on the same device).
fn names_file(path: &Path, file: &File) -> bool {
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(on_disk), Ok(open)) => on_disk.dev() == open.dev() && on_disk.ino() == open.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(locked: Locked) -> (OutputLock, Option<Holder>) {
        match locked {
            Locked::Held { lock, previous } => (lock, previous),
            Locked::Unsupported { path, source } => panic!("{}: {source}", path.display()),
        }
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        let (lock, previous) = held(OutputLock::acquire(&out).unwrap());
        assert_eq!(previous, None);
        assert_eq!(lock.path(), out.join(LOCK_FILE));
        let text = std::fs::read_to_string(lock.path()).unwrap();
        assert!(text.starts_with(&format!("{} ", std::process::id())), "{text}");
        // A second open file description of the same file: flock refuses it as it would refuse
        // another process.
        let error = OutputLock::acquire(&out).unwrap_err();
        let message = error.to_string();
        assert!(matches!(&error, LockError::Held { holder, .. } if holder.pid == std::process::id()));
        assert!(
            message.contains(LOCK_FILE) && message.contains(&format!("pid {}", std::process::id())),
            "{message}"
        );
        drop(lock);
        assert!(!out.join(LOCK_FILE).exists(), "released and removed");
        let (_again, previous) = held(OutputLock::acquire(&out).unwrap());
        assert_eq!(previous, None, "a clean release leaves nothing to take over");
    }

    #[test]
    fn a_file_left_without_a_lock_is_taken_over_and_its_holder_reported() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), "4194000 node7 2026-12-01T10:00:00Z\n").unwrap();
        let (lock, previous) = held(OutputLock::acquire(dir.path()).unwrap());
        let previous = previous.expect("the file named a holder");
        assert_eq!((previous.pid, previous.host.as_str()), (4_194_000, "node7"));
        assert_eq!(previous.to_string(), "pid 4194000 on node7, since 2026-12-01T10:00:00Z");
        let text = std::fs::read_to_string(lock.path()).unwrap();
        assert!(text.starts_with(&format!("{} ", std::process::id())) && text.lines().count() == 1, "{text}");
    }
}
