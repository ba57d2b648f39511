//! Download public data sets over HTTP(S), verify their SHA-256 checksum and
//! install them atomically (`trickbench data fetch cifar10|shakespeare`).
//!
//! [`fetch`] streams the download into a temporary file next to the output
//! directory while hashing it, checks the checksum, unpacks (or moves) the
//! payload into a temporary directory beside the output directory, and only
//! then renames that directory into place. Every temporary file and directory
//! is removed again on any failure, so the output directory either ends up
//! complete or is left exactly as it was. (A process killed mid-way can leave
//! a hidden `.NAME.download-*` file or `.NAME.partial-*` directory in the
//! parent directory; it is safe to delete.)
//!
//! The output directory:
//! - does not exist: it is created, together with any missing parents;
//! - exists and is empty: it is replaced by the fetched one;
//! - exists and holds a completed fetch of the same source (its
//!   [`MARKER_FILE`] names the same SHA-256 and every file listed there is
//!   present): nothing is downloaded, and the summary says
//!   [`FetchSummary::already_present`];
//! - anything else (a non-empty directory, a file, a link): the fetch stops
//!   with [`FetchError::OutDirOccupied`] before any download, so user data is
//!   never overwritten.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use flate2::read::GzDecoder;
use sha2::{Digest, Sha256};
use tar::EntryType;
use tempfile::{NamedTempFile, TempDir};

/// Longest wait for name resolution, and separately for the TCP connection
/// plus TLS handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest silence tolerated on any single network read (response headers or
/// body), so a stalled server cannot hang a fetch forever. A slow but moving
/// download is never cut off.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Size of the buffer the download is streamed through.
const CHUNK_BYTES: usize = 64 * 1024;

/// Name of the file that [`fetch`] writes into a completed output directory.
///
/// It records the SHA-256 of the downloaded artifact, its URL and the files
/// installed, one per line (`sha256 HEX`, `url URL`, `file RELATIVE/PATH`), so
/// that a repeated fetch into the same directory can tell it is already done.
pub const MARKER_FILE: &str = ".trickbench-fetch";

/// A downloadable data set: where it lives, what it must hash to, and how to
/// install it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Short name used in messages and temporary file names, e.g. `cifar10`.
    pub name: &'static str,
    /// Full URL of the artifact (`https://…`; `http://` works for local
    /// mirrors and tests, the checksum still guards the content).
    pub url: String,
    /// Expected SHA-256 of the downloaded bytes, as 64 hex digits (either case).
    pub sha256: String,
    /// How the verified download is installed into the output directory.
    pub kind: SourceKind,
}

/// How a verified download is installed into the output directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    /// A gzip-compressed tar archive. Only regular files and directories whose
    /// paths start with `strip_prefix` are accepted; the prefix is removed so
    /// the files land directly in the output directory. An empty prefix keeps
    /// paths as they are. Absolute paths, `..` components, links and special
    /// files are rejected.
    TarGz {
        /// Leading directory removed from every entry, e.g.
        /// `cifar-10-batches-bin`.
        strip_prefix: String,
    },
    /// A single file stored in the output directory under `file_name`, which
    /// must be a plain file name without directory separators.
    PlainFile {
        /// Name of the installed file, e.g. `tinyshakespeare.txt`.
        file_name: String,
    },
}

impl Source {
    /// The same source fetched from another URL (a mirror, a local server).
    /// The expected checksum stays, so the mirror must serve identical bytes.
    pub fn with_url(self, url: impl Into<String>) -> Source {
        Source { url: url.into(), ..self }
    }
}

/// The official CIFAR-10 binary archive (170,052,171 bytes; MD5
/// `c32a1d4ab5d03f1284b67883e8d87530`). Installs `data_batch_1.bin` …
/// `data_batch_5.bin`, `test_batch.bin`, `batches.meta.txt` and `readme.html`
/// directly into the output directory.
pub fn cifar10_source() -> Source {
    Source {
        name: "cifar10",
        url: "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz".to_owned(),
        sha256: "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd".to_owned(),
        kind: SourceKind::TarGz { strip_prefix: "cifar-10-batches-bin".to_owned() },
    }
}

/// Tiny Shakespeare (1,115,394 bytes of plain text) from karpathy/char-rnn,
/// installed as `tinyshakespeare.txt`.
pub fn shakespeare_source() -> Source {
    Source {
        name: "shakespeare",
        url: "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
            .to_owned(),
        sha256: "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed".to_owned(),
        kind: SourceKind::PlainFile { file_name: "tinyshakespeare.txt".to_owned() },
    }
}

/// Download progress, reported after every chunk received (and once with
/// `bytes_done == 0` when the response headers arrive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchProgress {
    /// Bytes received so far.
    pub bytes_done: u64,
    /// Total size from the `Content-Length` header, if the server sent one.
    pub bytes_total: Option<u64>,
}

/// What a successful [`fetch`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSummary {
    /// The output directory, now complete.
    pub out_dir: PathBuf,
    /// SHA-256 of the artifact (lower-case hex).
    pub sha256: String,
    /// Bytes downloaded; 0 when the data was already present.
    pub bytes_downloaded: u64,
    /// Installed files, relative to `out_dir`, sorted (the marker file is not
    /// listed).
    pub files: Vec<PathBuf>,
    /// True when `out_dir` already held a completed fetch of this source and
    /// nothing was downloaded.
    pub already_present: bool,
}

/// Why a [`fetch`] failed. Every variant names the URL or path involved;
/// underlying causes are available through [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The output directory exists and is not empty (or is not a directory)
    /// and holds no completed fetch of this source.
    #[error(
        "output path {} already exists and is not an empty directory or a complete \
         fetch of this data set; remove it or choose another --out",
        path.display()
    )]
    OutDirOccupied {
        /// The output path given by the caller.
        path: PathBuf,
    },
    /// A local file system operation failed.
    #[error("{action} {}", path.display())]
    Io {
        /// What was being done, e.g. "cannot create directory".
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The request could not be made or answered (DNS, connection, TLS,
    /// timeout, malformed response).
    #[error("cannot download {url}")]
    Http {
        /// The URL requested.
        url: String,
        /// The underlying error.
        #[source]
        source: Box<ureq::Error>,
    },
    /// The server answered with a status other than 2xx.
    #[error("downloading {url} failed: HTTP {status}{}", reason_suffix(*status))]
    Status {
        /// The URL requested.
        url: String,
        /// The HTTP status code.
        status: u16,
    },
    /// The connection failed or stalled while the body was being received.
    #[error("download of {url} was interrupted")]
    Interrupted {
        /// The URL requested.
        url: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The downloaded bytes do not hash to the expected SHA-256.
    #[error(
        "checksum mismatch for {url}: expected SHA-256 {expected}, got {actual}; \
         nothing was installed"
    )]
    Checksum {
        /// The URL downloaded.
        url: String,
        /// The SHA-256 the source declares.
        expected: String,
        /// The SHA-256 of what was received.
        actual: String,
    },
    /// The archive is not a readable gzip-compressed tar file.
    #[error("cannot unpack the archive downloaded from {url}")]
    Archive {
        /// The URL downloaded.
        url: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The archive holds an entry that could escape the output directory or
    /// that this installer does not accept.
    #[error("refusing to unpack {url}: entry {entry:?} {reason}")]
    UnsafeEntry {
        /// The URL downloaded.
        url: String,
        /// The entry's path as stored in the archive.
        entry: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The archive holds no regular file under the expected prefix.
    #[error("the archive downloaded from {url} contains no files under {prefix:?}")]
    EmptyArchive {
        /// The URL downloaded.
        url: String,
        /// The prefix files were expected under.
        prefix: String,
    },
}

/// " Not Found"-style suffix for an HTTP status, empty when unknown.
fn reason_suffix(status: u16) -> String {
    ureq::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .map(|r| format!(" {r}"))
        .unwrap_or_default()
}

/// Shorthand for building [`FetchError::Io`] in `map_err`.
fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FetchError + 'a {
    move |source| FetchError::Io { action, path: path.to_owned(), source }
}

/// Download `source`, verify its SHA-256 and install it into `out_dir`
/// atomically (see the module documentation for how an existing `out_dir` is
/// treated). `progress` is called as bytes arrive. On any error, every
/// temporary file is removed and `out_dir` is left as it was.
pub fn fetch(
    source: &Source,
    out_dir: &Path,
    progress: &mut dyn FnMut(FetchProgress),
) -> Result<FetchSummary, FetchError> {
    let occupied = || FetchError::OutDirOccupied { path: out_dir.to_owned() };
    let expected = source.sha256.to_ascii_lowercase();

    let out_name = out_dir.file_name().ok_or_else(occupied)?.to_string_lossy().into_owned();
    match inspect_out_dir(out_dir, &expected)? {
        OutDirState::Missing | OutDirState::Empty => {}
        OutDirState::Complete(files) => {
            return Ok(FetchSummary {
                out_dir: out_dir.to_owned(),
                sha256: expected,
                bytes_downloaded: 0,
                files,
                already_present: true,
            });
        }
        OutDirState::Occupied => return Err(occupied()),
    }

    let parent = parent_dir(out_dir)?;
    let (download, bytes_downloaded) = download_verified(source, &expected, parent, &out_name, progress)?;
    let staging = temp_dir(parent, &format!(".{out_name}.partial-"))?;
    let files = stage(source, download, staging.path())?;
    write_marker(staging.path(), &expected, &source.url, &files)?;
    install(staging, out_dir, &expected)?;

    Ok(FetchSummary {
        out_dir: out_dir.to_owned(),
        sha256: expected,
        bytes_downloaded,
        files,
        already_present: false,
    })
}

/// The directory `out_dir` is installed in, created with any missing
/// parents: the download and the staging directory are made there, so that
/// the final rename stays on one file system.
fn parent_dir(out_dir: &Path) -> Result<&Path, FetchError> {
    let parent = match out_dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    fs::create_dir_all(parent).map_err(io_err("cannot create directory", parent))?;
    Ok(parent)
}

/// Download `source` into a hidden temporary file in `parent` named after
/// `out_name`, and check that it hashes to `expected`. Returns the file and
/// the bytes downloaded.
fn download_verified(
    source: &Source,
    expected: &str,
    parent: &Path,
    out_name: &str,
    progress: &mut dyn FnMut(FetchProgress),
) -> Result<(NamedTempFile, u64), FetchError> {
    let mut download = temp_file(parent, &format!(".{out_name}.download-"))?;
    let (bytes_downloaded, actual) =
        download_to(&source.url, download.as_file_mut(), progress).map_err(|e| e.at_path(download.path()))?;
    if actual != expected {
        return Err(FetchError::Checksum { url: source.url.clone(), expected: expected.to_owned(), actual });
    }
    Ok((download, bytes_downloaded))
}

/// Put the payload of the verified `download` into `staging`: the archive's
/// files, unpacked, or the plain file itself, moved. Returns the files
/// installed, relative to `staging`, sorted and without duplicates.
fn stage(source: &Source, mut download: NamedTempFile, staging: &Path) -> Result<Vec<PathBuf>, FetchError> {
    let mut files = match &source.kind {
        SourceKind::TarGz { strip_prefix } => {
            let download_path = download.path().to_owned();
            let file = download.as_file_mut();
            file.seek(SeekFrom::Start(0)).map_err(io_err("cannot read", &download_path))?;
            unpack_tar_gz(&source.url, file, strip_prefix, staging)?
        }
        SourceKind::PlainFile { file_name } => {
            if !is_plain_name(Path::new(file_name)) {
                return Err(FetchError::UnsafeEntry {
                    url: source.url.clone(),
                    entry: file_name.clone(),
                    reason: "is not a plain file name".to_owned(),
                });
            }
            let dest = staging.join(file_name);
            download.persist(&dest).map_err(|e| FetchError::Io {
                action: "cannot move the download to",
                path: dest,
                source: e.error,
            })?;
            vec![PathBuf::from(file_name)]
        }
    };
    files.sort();
    files.dedup();
    Ok(files)
}

/// Rename the complete `staging` directory to `out_dir`.
fn install(staging: TempDir, out_dir: &Path, expected_sha256: &str) -> Result<(), FetchError> {
    // Re-check right before the rename: never replace anything that appeared
    // while downloading. An empty directory is removed so the rename can take
    // its place.
    match inspect_out_dir(out_dir, expected_sha256)? {
        OutDirState::Missing => {}
        OutDirState::Empty => {
            fs::remove_dir(out_dir).map_err(io_err("cannot replace empty directory", out_dir))?
        }
        OutDirState::Complete(_) | OutDirState::Occupied => {
            return Err(FetchError::OutDirOccupied { path: out_dir.to_owned() })
        }
    }
    fs::rename(staging.path(), out_dir).map_err(io_err("cannot move data into", out_dir))?;
    // The directory now lives at `out_dir`; only forget the temporary name.
    let _installed = staging.keep();
    Ok(())
}

/// What [`fetch`] found at the output path.
enum OutDirState {
    /// Nothing there.
    Missing,
    /// An empty directory.
    Empty,
    /// A completed fetch of the same artifact; its files, sorted.
    Complete(Vec<PathBuf>),
    /// Anything else.
    Occupied,
}

/// Classify `out_dir` (links are never followed: a link is `Occupied`).
fn inspect_out_dir(out_dir: &Path, expected_sha256: &str) -> Result<OutDirState, FetchError> {
    let meta = match fs::symlink_metadata(out_dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(OutDirState::Missing),
        Err(e) => return Err(io_err("cannot inspect", out_dir)(e)),
    };
    if !meta.is_dir() {
        return Ok(OutDirState::Occupied);
    }
    let mut entries = fs::read_dir(out_dir).map_err(io_err("cannot list directory", out_dir))?;
    if entries.next().is_none() {
        return Ok(OutDirState::Empty);
    }
    let marker_path = out_dir.join(MARKER_FILE);
    let marker = match fs::read_to_string(&marker_path) {
        Ok(text) => text,
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::InvalidData) => {
            return Ok(OutDirState::Occupied);
        }
        Err(e) => return Err(io_err("cannot read", &marker_path)(e)),
    };
    let mut sha_matches = false;
    let mut files = Vec::new();
    for line in marker.lines() {
        if let Some(sha) = line.strip_prefix("sha256 ") {
            sha_matches = sha == expected_sha256;
        } else if let Some(file) = line.strip_prefix("file ") {
            files.push(PathBuf::from(file));
        }
    }
    let all_present = files.iter().all(|f| {
        is_safe_relative(f) && fs::symlink_metadata(out_dir.join(f)).is_ok_and(|m| m.file_type().is_file())
    });
    if sha_matches && !files.is_empty() && all_present {
        files.sort();
        Ok(OutDirState::Complete(files))
    } else {
        Ok(OutDirState::Occupied)
    }
}

/// A download failure before the path of the temporary file is known to the
/// error: everything except local I/O already names the URL.
enum DownloadError {
    /// Writing the temporary file failed.
    Write(io::Error),
    /// A network or HTTP failure, already complete.
    Remote(FetchError),
}

impl DownloadError {
    /// Attach the temporary file's path to a local write failure.
    fn at_path(self, path: &Path) -> FetchError {
        match self {
            DownloadError::Write(source) => {
                FetchError::Io { action: "cannot write the download to", path: path.to_owned(), source }
            }
            DownloadError::Remote(e) => e,
        }
    }
}

/// Stream `url` into `file`, hashing as it goes. Returns the byte count and
/// the lower-case hex SHA-256.
fn download_to(
    url: &str,
    file: &mut File,
    progress: &mut dyn FnMut(FetchProgress),
) -> Result<(u64, String), DownloadError> {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_resolve(Some(CONNECT_TIMEOUT))
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .timeout_recv_response(Some(READ_TIMEOUT))
        .timeout_per_read(Some(READ_TIMEOUT))
        .build();
    let agent = ureq::Agent::new_with_config(config);
    let response = agent
        .get(url)
        .call()
        .map_err(|e| DownloadError::Remote(FetchError::Http { url: url.to_owned(), source: Box::new(e) }))?;
    let status = response.status();
    if !status.is_success() {
        return Err(DownloadError::Remote(FetchError::Status {
            url: url.to_owned(),
            status: status.as_u16(),
        }));
    }

    let body = response.into_body();
    let bytes_total = body.content_length();
    let mut reader = body.into_reader();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut bytes_done = 0u64;
    progress(FetchProgress { bytes_done, bytes_total });
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(DownloadError::Remote(FetchError::Interrupted { url: url.to_owned(), source }));
            }
        };
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n]).map_err(DownloadError::Write)?;
        bytes_done += n as u64;
        progress(FetchProgress { bytes_done, bytes_total });
    }
    file.sync_all().map_err(DownloadError::Write)?;

    let mut hex = String::with_capacity(64);
    for byte in hasher.finalize() {
        write!(hex, "{byte:02x}").expect("writing to a String cannot fail");
    }
    Ok((bytes_done, hex))
}

/// Unpack the gzip-compressed tar `reader` into `dest`, removing
/// `strip_prefix` and rejecting anything unsafe. Returns the files written,
/// relative to `dest`.
fn unpack_tar_gz(
    url: &str,
    reader: impl Read,
    strip_prefix: &str,
    dest: &Path,
) -> Result<Vec<PathBuf>, FetchError> {
    let prefix: Vec<Component> =
        Path::new(strip_prefix).components().filter(|c| *c != Component::CurDir).collect();
    let mut archive = tar::Archive::new(GzDecoder::new(reader));
    let mut files = Vec::new();
    let mut buf = vec![0u8; CHUNK_BYTES];
    for entry in archive.entries().map_err(archive_err(url))? {
        let mut entry = entry.map_err(archive_err(url))?;
        let Some(relative) = entry_destination(url, &entry, &prefix, strip_prefix)? else {
            continue;
        };
        let target = dest.join(&relative);
        if entry.header().entry_type() == EntryType::Directory {
            fs::create_dir_all(&target).map_err(io_err("cannot create directory", &target))?;
            continue;
        }
        write_entry(url, &mut entry, &target, &mut buf)?;
        files.push(relative);
    }
    if files.is_empty() {
        return Err(FetchError::EmptyArchive { url: url.to_owned(), prefix: strip_prefix.to_owned() });
    }
    Ok(files)
}

/// Shorthand for building [`FetchError::Archive`] for `url` in `map_err`.
fn archive_err(url: &str) -> impl Fn(io::Error) -> FetchError + '_ {
    move |source| FetchError::Archive { url: url.to_owned(), source }
}

/// Where the archive `entry` unpacks to, relative to the destination once
/// `prefix` (the components of `strip_prefix`) is removed: `None` for an entry
/// that writes nothing (a pax global header, the prefix directory itself), an
/// error for one that is a link, not a regular file or directory, or could
/// land outside the prefix.
fn entry_destination<R: Read>(
    url: &str,
    entry: &tar::Entry<'_, R>,
    prefix: &[Component],
    strip_prefix: &str,
) -> Result<Option<PathBuf>, FetchError> {
    let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
    let unsafe_entry = |reason: &str| FetchError::UnsafeEntry {
        url: url.to_owned(),
        entry: raw.clone(),
        reason: reason.to_owned(),
    };
    match entry.header().entry_type() {
        EntryType::Regular | EntryType::Continuous | EntryType::Directory => {}
        // pax global headers carry metadata only
        EntryType::XGlobalHeader => return Ok(None),
        EntryType::Symlink | EntryType::Link => {
            return Err(unsafe_entry("is a link; links are not allowed"));
        }
        _ => return Err(unsafe_entry("is not a regular file or directory")),
    }
    let path = entry.path().map_err(archive_err(url))?.into_owned();
    if path.has_root() || path.components().any(|c| matches!(c, Component::Prefix(_))) {
        return Err(unsafe_entry("has an absolute path"));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(unsafe_entry("contains a `..` component"));
    }
    let parts: Vec<Component> = path.components().filter(|c| *c != Component::CurDir).collect();
    if !parts.starts_with(prefix) {
        return Err(unsafe_entry(&format!("is outside {strip_prefix:?}")));
    }
    let relative: PathBuf = parts[prefix.len()..].iter().collect();
    if relative.as_os_str().is_empty() {
        // the prefix directory itself
        return Ok(None);
    }
    if relative.to_str().is_none_or(|s| s.contains('\n')) {
        return Err(unsafe_entry("has a name that is not valid UTF-8 or has a newline"));
    }
    Ok(Some(relative))
}

/// Write the file `entry` of the archive from `url` to `target`, creating
/// its directory, streaming through `buf`.
fn write_entry(url: &str, entry: &mut impl Read, target: &Path, buf: &mut [u8]) -> Result<(), FetchError> {
    if let Some(dir) = target.parent() {
        fs::create_dir_all(dir).map_err(io_err("cannot create directory", dir))?;
    }
    let mut out = File::create(target).map_err(io_err("cannot create", target))?;
    // A failed read means a corrupt archive; a failed write is local.
    loop {
        let n = match entry.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(archive_err(url)(e)),
        };
        out.write_all(&buf[..n]).map_err(io_err("cannot write", target))?;
    }
    Ok(())
}

/// Write [`MARKER_FILE`] into the staging directory.
fn write_marker(dir: &Path, sha256: &str, url: &str, files: &[PathBuf]) -> Result<(), FetchError> {
    let mut text = format!("sha256 {sha256}\nurl {url}\n");
    for file in files {
        // Names were checked to be UTF-8 without newlines when unpacked.
        writeln!(text, "file {}", file.display()).expect("writing to a String cannot fail");
    }
    let path = dir.join(MARKER_FILE);
    fs::write(&path, text).map_err(io_err("cannot write", &path))
}

/// True for a relative path of normal components only (no `..`, no root).
fn is_safe_relative(path: &Path) -> bool {
    path.components().all(|c| matches!(c, Component::Normal(_))) && path.components().next().is_some()
}

/// True for a single normal path component, e.g. `input.txt`.
fn is_plain_name(path: &Path) -> bool {
    is_safe_relative(path) && path.components().count() == 1
}

/// A temporary file in `dir` with ordinary (umask-governed) permissions,
/// deleted on drop unless persisted.
fn temp_file(dir: &Path, prefix: &str) -> Result<NamedTempFile, FetchError> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(fs::Permissions::from_mode(0o666));
    }
    builder.tempfile_in(dir).map_err(io_err("cannot create a temporary file in", dir))
}

/// A temporary directory in `dir` with ordinary (umask-governed) permissions,
/// deleted with its contents on drop unless kept.
fn temp_dir(dir: &Path, prefix: &str) -> Result<TempDir, FetchError> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(fs::Permissions::from_mode(0o777));
    }
    builder.tempdir_in(dir).map_err(io_err("cannot create a temporary directory in", dir))
}
