//! The checkout's tracked files stay small enough for the GPU machine: they travel there with
//! `.devcheck/` (the stripped binary gzipped, CIFAR-10, the GPT's text), and `scripts/device-pack` refuses
//! a sent set over 52 MiB ([docs/gpu.md](../docs/gpu.md)). What keeps them small as runs are
//! committed is the rule for committed reports ([docs/reports.md](../docs/reports.md)): a run keeps
//! its results files, README.md, summary.md, cells.csv, gzipped traces and first-screen.png, while
//! its page (`index.html`) and `plots/`, and `reports/index.html`, are ignored by git and rendered
//! by `make reports` (`scripts/render-reports`). Outside a git checkout (a copy of the tree) there
//! is nothing to measure, and the tests say so.

use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// What may travel to the GPU machine, in MiB: `limit_bytes` in `scripts/device-pack`.
const SENT_SET_LIMIT_MIB: u64 = 52;
/// `.devcheck/` as `scripts/device-pack` writes it, rounded up, in MiB: the stripped release
/// binary gzipped (`trickbench.gz`, 6.3 MiB), CIFAR-10 as JPEGs (`cifar10-jpeg.tar.gz`, 18.7 MiB),
/// tiny Shakespeare (1.1 MiB) and the manifest, 26.1 MiB together.
const PACK_MIB: u64 = 27;
/// Room left in the sent set for the binary to grow and for untracked files that git does not
/// ignore (they travel too), in MiB.
const MARGIN_MIB: u64 = 2;
/// The most the tracked files may weigh together, in MiB: with `.devcheck/` and the margin the
/// sent set stays inside device-pack's limit (52 − 27 − 2 = 23).
const TRACKED_LIMIT_MIB: u64 = SENT_SET_LIMIT_MIB - PACK_MIB - MARGIN_MIB;
/// Bytes per MiB.
const MIB_BYTES: u64 = 1024 * 1024;
/// How many of the largest files a failure names.
const LARGEST_SHOWN: usize = 10;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The checkout's tracked files, or `None` (saying the test is skipped) outside a git checkout.
fn tracked_here() -> Option<Vec<PathBuf>> {
    let files = tracked_files(root());
    if files.is_none() {
        eprintln!("skipped: {} is not the top of a git checkout, so no file is tracked", root().display());
    }
    files
}

#[test]
fn the_tracked_files_leave_room_for_the_gpu_machine_s_pack() {
    let root = root();
    let Some(files) = tracked_here() else {
        return;
    };
    // A tracked file deleted from the work tree does not travel; a link travels as a link.
    let mut sizes: Vec<(u64, PathBuf)> = files
        .into_iter()
        .filter_map(|file| Some((std::fs::symlink_metadata(root.join(&file)).ok()?.len(), file)))
        .collect();
    let total_bytes: u64 = sizes.iter().map(|(bytes, _)| bytes).sum();
    sizes.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let largest: Vec<String> = sizes
        .iter()
        .take(LARGEST_SHOWN)
        .map(|(bytes, file)| format!("  {:6.2} MiB  {}", mib(*bytes), file.display()))
        .collect();
    assert!(
        total_bytes <= TRACKED_LIMIT_MIB * MIB_BYTES,
        "the {} tracked files weigh {:.2} MiB, over the {TRACKED_LIMIT_MIB} MiB that leave room for \
         .devcheck/ ({PACK_MIB} MiB) in the GPU machine's {SENT_SET_LIMIT_MIB} MiB sent set \
         (docs/gpu.md); the largest:\n{}",
        sizes.len(),
        mib(total_bytes),
        largest.join("\n")
    );
}

/// The limit the test holds the tracked files to is computed from device-pack's own.
#[test]
fn device_pack_refuses_over_the_limit_this_test_counts_with() {
    let script = std::fs::read_to_string(root().join("scripts/device-pack")).unwrap();
    let expected = format!("limit_bytes=$(({SENT_SET_LIMIT_MIB} * 1024 * 1024))");
    assert!(
        script.lines().any(|line| line.trim() == expected),
        "scripts/device-pack does not set `{expected}`: change SENT_SET_LIMIT_MIB with it"
    );
}

/// No rendered report file is tracked, and git ignores the ones `make reports` writes, in every
/// report folder and in new ones, at any depth.
#[test]
fn rendered_report_files_are_neither_tracked_nor_left_unignored() {
    let root = root();
    let Some(files) = tracked_here() else {
        return;
    };
    let tracked: Vec<String> =
        files.iter().filter(|file| is_rendered(file)).map(|file| format!("  {}", file.display())).collect();
    assert!(
        tracked.is_empty(),
        "{} rendered report files are tracked; `make reports` renders them from the committed results \
         (docs/reports.md), so `git rm --cached` them:\n{}",
        tracked.len(),
        tracked.join("\n")
    );

    let mut folders: Vec<String> = files
        .iter()
        .filter_map(|file| match file.components().collect::<Vec<_>>()[..] {
            [Component::Normal(top), Component::Normal(folder), _, ..] if top == "reports" => {
                Some(folder.to_string_lossy().into_owned())
            }
            _ => None,
        })
        .collect();
    // A new run, and a report of several workloads with one folder each (a GPU check's).
    folders.extend(["a-run-not-yet-committed".to_owned(), "a-run-not-yet-committed/resnet56".to_owned()]);
    folders.sort();
    folders.dedup();
    let mut rendered = vec!["reports/index.html".to_owned()];
    for folder in &folders {
        rendered.push(format!("reports/{folder}/index.html"));
        rendered.push(format!("reports/{folder}/plots/speedup-resnet8-cpu-on-vm-quick.png"));
    }
    let ignored = ignored_paths(root, &rendered);
    let unignored: Vec<&String> = rendered.iter().filter(|path| !ignored.contains(*path)).collect();
    assert!(unignored.is_empty(), ".gitignore does not ignore these rendered report files: {unignored:#?}");
}

/// A report's rendered file: `index.html` anywhere under `reports/`, or a file in a `plots/` folder
/// there.
fn is_rendered(file: &Path) -> bool {
    file.starts_with("reports")
        && (file.file_name().is_some_and(|name| name == "index.html")
            || file.parent().is_some_and(|dir| dir.components().any(|c| c.as_os_str() == "plots")))
}

/// The files git tracks in the checkout whose top folder is `root`, relative to it; `None` where
/// git is missing or `root` is not the top of a checkout.
fn tracked_files(root: &Path) -> Option<Vec<PathBuf>> {
    let top = String::from_utf8(git(root, &["rev-parse", "--show-toplevel"])?).ok()?;
    if Path::new(top.trim_end()).canonicalize().ok()? != root.canonicalize().ok()? {
        return None;
    }
    let listed = git(root, &["ls-files", "-z"])?;
    let files = listed.split(|&b| b == 0).filter(|name| !name.is_empty());
    Some(files.map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned())).collect())
}

/// Those of `paths` (relative to `root`, existing or not) that `.gitignore` ignores, whether or not
/// they are tracked.
fn ignored_paths(root: &Path, paths: &[String]) -> Vec<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["check-ignore", "--no-index", "--"])
        .args(paths)
        .output()
        .expect("git runs");
    // Status 1: none of them is ignored.
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "git check-ignore failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).lines().map(str::to_owned).collect()
}

/// The standard output of `git -C root ARGS`, when it succeeds.
fn git(root: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let output = Command::new("git").arg("-C").arg(root).args(args).output().ok()?;
    output.status.success().then_some(output.stdout)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB_BYTES as f64
}
