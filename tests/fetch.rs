//! `trickbench::data::fetch` against a tiny HTTP server on 127.0.0.1: no
//! internet needed. Each server thread answers at most a fixed number of
//! requests and every connection has a read timeout, so nothing can hang (a
//! server thread still waiting in `accept` does not keep the test binary
//! alive).

#[allow(dead_code)]
mod common;

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use flate2::write::GzEncoder;
use flate2::Compression;
use sha2::{Digest, Sha256};
use trickbench::data::fetch::{
    cifar10_source, fetch, shakespeare_source, FetchError, FetchProgress, Source, SourceKind, MARKER_FILE,
};

use common::dirs::temp_dir;

/// One canned response.
#[derive(Clone)]
struct Reply {
    status: u16,
    body: Vec<u8>,
    /// Send `Content-Length`; without it the body ends when the connection closes.
    content_length: bool,
}

impl Reply {
    fn ok(body: Vec<u8>) -> Self {
        Reply { status: 200, body, content_length: true }
    }
}

/// A server that answers at most `max_requests` requests, then stops.
struct Server {
    base: String,
    hits: Arc<AtomicUsize>,
}

impl Server {
    fn start(routes: HashMap<&'static str, Reply>, max_requests: usize) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&hits);
        thread::spawn(move || {
            for stream in listener.incoming().take(max_requests) {
                let Ok(stream) = stream else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                // A broken client connection only affects that request.
                let _ = serve(stream, &routes);
            }
        });
        Server { base, hits }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn serve(stream: TcpStream, routes: &HashMap<&'static str, Reply>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/");
    let reply = routes.get(path).cloned().unwrap_or(Reply {
        status: 404,
        body: b"not found".to_vec(),
        content_length: true,
    });
    let reason = if reply.status == 200 { "OK" } else { "Not Found" };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n",
        reply.status
    );
    if reply.content_length {
        head += &format!("Content-Length: {}\r\n", reply.body.len());
    }
    head += "\r\n";
    let mut stream = stream;
    stream.write_all(head.as_bytes())?;
    stream.write_all(&reply.body)?;
    stream.flush()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Files with the CIFAR archive layout, under `cifar-10-batches-bin/`.
fn cifar_like_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("data_batch_1.bin", vec![1u8; 3073 * 2]),
        ("data_batch_2.bin", vec![2u8; 3073]),
        ("test_batch.bin", (0..3073u32).map(|i| (i % 251) as u8).collect()),
        ("batches.meta.txt", b"airplane\nautomobile\n".to_vec()),
    ]
}

/// A gzip-compressed tar with a directory entry for `prefix` and the given files.
fn tar_gz(prefix: &str, files: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    builder.append_data(&mut dir, format!("{prefix}/"), std::io::empty()).unwrap();
    for (name, data) in files {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        builder.append_data(&mut header, format!("{prefix}/{name}"), data.as_slice()).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// A gzip-compressed tar with one entry whose raw name is written directly
/// into the header, bypassing the `tar` crate's own path checks.
fn tar_gz_raw_entry(name: &[u8], entry_type: tar::EntryType, link: Option<&str>) -> Vec<u8> {
    let data = b"payload";
    let mut header = tar::Header::new_old();
    header.as_old_mut().name[..name.len()].copy_from_slice(name);
    header.set_entry_type(entry_type);
    header.set_mode(0o644);
    if let Some(target) = link {
        header.set_link_name(target).unwrap();
        header.set_size(0);
    } else {
        header.set_size(data.len() as u64);
    }
    header.set_cksum();
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    let body: &[u8] = if link.is_some() { &[] } else { data };
    builder.append(&header, body).unwrap();
    builder.into_inner().unwrap().finish().unwrap()
}

fn cifar_source_for(archive: &[u8], url: String) -> Source {
    Source { sha256: sha256_hex(archive), ..cifar10_source() }.with_url(url)
}

fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut names: Vec<PathBuf> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into()).collect();
    names.sort();
    names
}

fn no_progress() -> impl FnMut(FetchProgress) {
    |_| {}
}

#[test]
fn tar_gz_success_strips_prefix_and_reports_progress() {
    let files = cifar_like_files();
    let archive = tar_gz("cifar-10-batches-bin", &files);
    let server = Server::start(HashMap::from([("/cifar-10-binary.tar.gz", Reply::ok(archive.clone()))]), 1);
    let root = temp_dir();
    let out = root.path().join("data").join("cifar10");
    let source = cifar_source_for(&archive, server.url("/cifar-10-binary.tar.gz"));

    let mut seen = Vec::new();
    let summary = fetch(&source, &out, &mut |p| seen.push(p)).unwrap();

    assert!(!summary.already_present);
    assert_eq!(summary.out_dir, out);
    assert_eq!(summary.bytes_downloaded, archive.len() as u64);
    assert_eq!(summary.sha256, sha256_hex(&archive));
    let mut expected_names: Vec<PathBuf> = files.iter().map(|(n, _)| PathBuf::from(n)).collect();
    expected_names.sort();
    assert_eq!(summary.files, expected_names);
    for (name, data) in &files {
        assert_eq!(&fs::read(out.join(name)).unwrap(), data, "{name}");
    }
    assert!(!out.join("cifar-10-batches-bin").exists());
    let mut on_disk = expected_names.clone();
    on_disk.push(PathBuf::from(MARKER_FILE));
    on_disk.sort();
    assert_eq!(listing(&out), on_disk);
    // No temporary files next to the output directory.
    assert_eq!(listing(out.parent().unwrap()), vec![PathBuf::from("cifar10")]);

    let last = *seen.last().unwrap();
    assert_eq!(last.bytes_done, archive.len() as u64);
    assert_eq!(last.bytes_total, Some(archive.len() as u64));
    assert_eq!(seen.first().unwrap().bytes_done, 0);
    assert!(seen.windows(2).all(|w| w[0].bytes_done <= w[1].bytes_done));

    // A second fetch into the completed directory downloads nothing.
    let again = fetch(&source, &out, &mut no_progress()).unwrap();
    assert!(again.already_present);
    assert_eq!(again.files, expected_names);
    assert_eq!(again.bytes_downloaded, 0);
    assert_eq!(server.hits(), 1);

    // If a listed file went missing, the directory is no longer complete, and
    // it is not empty either: refuse rather than overwrite.
    fs::remove_file(out.join("test_batch.bin")).unwrap();
    let err = fetch(&source, &out, &mut no_progress()).unwrap_err();
    assert!(matches!(err, FetchError::OutDirOccupied { .. }), "{err}");
    assert_eq!(server.hits(), 1);
}

#[test]
fn wrong_checksum_leaves_nothing_behind() {
    let archive = tar_gz("cifar-10-batches-bin", &cifar_like_files());
    let server = Server::start(HashMap::from([("/a.tar.gz", Reply::ok(archive.clone()))]), 1);
    let root = temp_dir();
    let out = root.path().join("cifar10");
    let url = server.url("/a.tar.gz");
    let wrong = "ab".repeat(32);
    let source = Source { sha256: wrong.clone(), ..cifar10_source() }.with_url(url.clone());

    let err = fetch(&source, &out, &mut no_progress()).unwrap_err();
    match &err {
        FetchError::Checksum { url: u, expected, actual } => {
            assert_eq!(u, &url);
            assert_eq!(expected, &wrong);
            assert_eq!(actual, &sha256_hex(&archive));
        }
        other => panic!("expected a checksum error, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains(&url), "{message}");
    assert!(message.contains(&wrong), "{message}");
    assert!(message.contains(&sha256_hex(&archive)), "{message}");
    assert!(!out.exists());
    assert!(listing(root.path()).is_empty(), "{:?}", listing(root.path()));
}

#[test]
fn http_404_names_url_and_status() {
    let server = Server::start(HashMap::new(), 1);
    let root = temp_dir();
    let out = root.path().join("cifar10");
    let url = server.url("/missing.tar.gz");
    let source = cifar10_source().with_url(url.clone());

    let err = fetch(&source, &out, &mut no_progress()).unwrap_err();
    assert!(matches!(&err, FetchError::Status { url: u, status: 404 } if *u == url), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&url), "{message}");
    assert!(message.contains("404"), "{message}");
    assert!(message.contains("Not Found"), "{message}");
    assert!(!out.exists());
    assert!(listing(root.path()).is_empty());
}

#[test]
fn connection_refused_names_url() {
    // Bind, note the port, close: nothing listens there any more.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/x.tar.gz");
    let root = temp_dir();
    let out = root.path().join("cifar10");
    let err = fetch(&cifar10_source().with_url(url.clone()), &out, &mut no_progress()).unwrap_err();
    assert!(matches!(&err, FetchError::Http { url: u, .. } if *u == url), "{err:?}");
    assert!(err.to_string().contains(&url));
    assert!(std::error::Error::source(&err).is_some());
    assert!(listing(root.path()).is_empty());
}

#[test]
fn unsafe_archives_are_rejected_without_writing_anything() {
    let elsewhere = temp_dir();
    let absolute = elsewhere.path().join("evil");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "/dotdot.tar.gz",
            tar_gz_raw_entry(b"cifar-10-batches-bin/../../evil", tar::EntryType::Regular, None),
            "..",
        ),
        ("/plain-dotdot.tar.gz", tar_gz_raw_entry(b"../evil", tar::EntryType::Regular, None), ".."),
        (
            "/absolute.tar.gz",
            tar_gz_raw_entry(absolute.to_str().unwrap().as_bytes(), tar::EntryType::Regular, None),
            "absolute",
        ),
        (
            "/symlink.tar.gz",
            tar_gz_raw_entry(b"cifar-10-batches-bin/evil", tar::EntryType::Symlink, Some("/etc/passwd")),
            "link",
        ),
        (
            "/hardlink.tar.gz",
            tar_gz_raw_entry(
                b"cifar-10-batches-bin/evil",
                tar::EntryType::Link,
                Some("cifar-10-batches-bin/x"),
            ),
            "link",
        ),
        ("/outside.tar.gz", tar_gz_raw_entry(b"other-dir/evil", tar::EntryType::Regular, None), "outside"),
    ];
    let routes: HashMap<&'static str, Reply> =
        cases.iter().map(|(path, archive, _)| (*path, Reply::ok(archive.clone()))).collect();
    let server = Server::start(routes, cases.len());

    for (path, archive, reason) in &cases {
        // `root/a/b/cifar10`: `..` entries would land in `root/a` or `root`.
        let root = temp_dir();
        let parent = root.path().join("a").join("b");
        fs::create_dir_all(&parent).unwrap();
        let out = parent.join("cifar10");
        let url = server.url(path);
        let err = fetch(&cifar_source_for(archive, url.clone()), &out, &mut no_progress()).unwrap_err();
        match &err {
            FetchError::UnsafeEntry { url: u, reason: r, .. } => {
                assert_eq!(u, &url);
                assert!(r.contains(reason), "{path}: {r}");
            }
            other => panic!("{path}: expected an unsafe-entry error, got {other:?}"),
        }
        assert!(err.to_string().contains(&url));
        assert!(!out.exists(), "{path}");
        assert!(listing(&parent).is_empty(), "{path}: {:?}", listing(&parent));
        assert_eq!(listing(&root.path().join("a")), vec![PathBuf::from("b")], "{path}");
        assert_eq!(listing(root.path()), vec![PathBuf::from("a")], "{path}");
    }
    assert!(!absolute.exists());
    assert_eq!(server.hits(), cases.len());
}

#[test]
fn corrupt_archive_with_matching_checksum_is_an_archive_error() {
    let garbage = b"this is not gzip".to_vec();
    let server = Server::start(HashMap::from([("/bad.tar.gz", Reply::ok(garbage.clone()))]), 1);
    let root = temp_dir();
    let out = root.path().join("cifar10");
    let url = server.url("/bad.tar.gz");
    let err = fetch(&cifar_source_for(&garbage, url.clone()), &out, &mut no_progress()).unwrap_err();
    assert!(matches!(&err, FetchError::Archive { url: u, .. } if *u == url), "{err:?}");
    assert!(listing(root.path()).is_empty());
}

#[test]
fn plain_file_is_verified_and_installed() {
    let text = b"First Citizen:\nBefore we proceed any further, hear me speak.\n".to_vec();
    let routes = HashMap::from([
        ("/input.txt", Reply::ok(text.clone())),
        ("/no-length.txt", Reply { content_length: false, ..Reply::ok(text.clone()) }),
    ]);
    let server = Server::start(routes, 3);
    let root = temp_dir();
    let plain = |url: String, sha256: String| Source { sha256, ..shakespeare_source().with_url(url) };

    // Correct checksum, with Content-Length.
    let out = root.path().join("shakespeare");
    let mut last = None;
    let summary = fetch(&plain(server.url("/input.txt"), sha256_hex(&text).to_uppercase()), &out, &mut |p| {
        last = Some(p)
    })
    .unwrap();
    assert_eq!(summary.files, vec![PathBuf::from("tinyshakespeare.txt")]);
    assert_eq!(summary.sha256, sha256_hex(&text));
    assert_eq!(fs::read(out.join("tinyshakespeare.txt")).unwrap(), text);
    assert_eq!(
        last,
        Some(FetchProgress { bytes_done: text.len() as u64, bytes_total: Some(text.len() as u64) })
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // Readable like any normal file, not a 0600 temp file.
        let mode = fs::metadata(out.join("tinyshakespeare.txt")).unwrap().permissions().mode();
        assert_ne!(mode & 0o077, 0, "mode {mode:o}");
    }

    // Without Content-Length the total is unknown but the fetch still works,
    // and an existing empty directory is filled.
    let out2 = root.path().join("shakespeare2");
    fs::create_dir(&out2).unwrap();
    let mut last = None;
    fetch(&plain(server.url("/no-length.txt"), sha256_hex(&text)), &out2, &mut |p| last = Some(p)).unwrap();
    assert_eq!(fs::read(out2.join("tinyshakespeare.txt")).unwrap(), text);
    assert_eq!(last, Some(FetchProgress { bytes_done: text.len() as u64, bytes_total: None }));

    // Wrong checksum: nothing installed, nothing left over.
    let out3 = root.path().join("shakespeare3");
    let err = fetch(&plain(server.url("/input.txt"), "0".repeat(64)), &out3, &mut no_progress()).unwrap_err();
    assert!(matches!(err, FetchError::Checksum { .. }), "{err:?}");
    assert!(!out3.exists());
    assert_eq!(listing(root.path()), vec![PathBuf::from("shakespeare"), PathBuf::from("shakespeare2")]);
    assert_eq!(server.hits(), 3);
}

#[test]
fn occupied_output_is_refused_before_downloading() {
    // Answers no request at all: a download attempt would fail differently.
    let server = Server::start(HashMap::new(), 0);
    let root = temp_dir();
    let out = root.path().join("cifar10");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("mine.txt"), b"user data").unwrap();
    let source = cifar10_source().with_url(server.url("/never.tar.gz"));

    let err = fetch(&source, &out, &mut no_progress()).unwrap_err();
    assert!(matches!(&err, FetchError::OutDirOccupied { path } if *path == out), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&out.display().to_string()), "{message}");
    assert!(message.contains("--out"), "{message}");
    assert_eq!(fs::read(out.join("mine.txt")).unwrap(), b"user data");
    assert_eq!(listing(&out), vec![PathBuf::from("mine.txt")]);

    // A plain file at the output path is refused too.
    let file_out = root.path().join("file");
    fs::write(&file_out, b"x").unwrap();
    let err = fetch(&source, &file_out, &mut no_progress()).unwrap_err();
    assert!(matches!(err, FetchError::OutDirOccupied { .. }), "{err:?}");
    assert_eq!(server.hits(), 0);
}

#[test]
fn builtin_sources_are_well_formed() {
    let cifar = cifar10_source();
    assert_eq!(cifar.name, "cifar10");
    assert_eq!(cifar.url, "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz");
    assert_eq!(cifar.kind, SourceKind::TarGz { strip_prefix: "cifar-10-batches-bin".to_owned() });
    let shakespeare = shakespeare_source();
    assert_eq!(shakespeare.kind, SourceKind::PlainFile { file_name: "tinyshakespeare.txt".to_owned() });
    for source in [cifar, shakespeare] {
        assert!(source.url.starts_with("https://"));
        assert_eq!(source.sha256.len(), 64);
        assert!(source.sha256.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        let moved = source.clone().with_url("http://127.0.0.1:1/mirror");
        assert_eq!(moved.url, "http://127.0.0.1:1/mirror");
        assert_eq!(moved.sha256, source.sha256);
    }
}
