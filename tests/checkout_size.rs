//! The checkout's tracked files stay small enough for the GPU machine: they travel there with
//! `.devcheck/` (about 32 MiB: the stripped binary, CIFAR-10, the GPT's text), and
//! `scripts/device-pack` refuses a sent set over 60 MiB ([docs/gpu.md](../docs/gpu.md)). Outside a
//! git checkout (a copy of the tree) there is nothing to measure, and the test says so.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The most the tracked files may weigh together, in MiB: with `.devcheck/` the sent set stays
/// at or under 55 MiB, inside device-pack's limit.
const TRACKED_LIMIT_MIB: u64 = 23;
/// Bytes per MiB.
const MIB_BYTES: u64 = 1024 * 1024;
/// How many of the largest files a failure names.
const LARGEST_SHOWN: usize = 10;

#[test]
fn the_tracked_files_leave_room_for_the_gpu_machine_s_pack() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Some(files) = tracked_files(root) else {
        eprintln!("skipped: {} is not the top of a git checkout, so no file is tracked", root.display());
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
         .devcheck/ in the GPU machine's sent set (docs/gpu.md); the largest:\n{}",
        sizes.len(),
        mib(total_bytes),
        largest.join("\n")
    );
}

/// The files git tracks in the checkout whose top folder is `root`, relative to it; `None` where
/// git is missing or `root` is not the top of a checkout.
fn tracked_files(root: &Path) -> Option<Vec<PathBuf>> {
    let git = |args: &[&str]| {
        let output = Command::new("git").arg("-C").arg(root).args(args).output().ok()?;
        output.status.success().then_some(output.stdout)
    };
    let top = String::from_utf8(git(&["rev-parse", "--show-toplevel"])?).ok()?;
    if Path::new(top.trim_end()).canonicalize().ok()? != root.canonicalize().ok()? {
        return None;
    }
    let listed = git(&["ls-files", "-z"])?;
    let files = listed.split(|&b| b == 0).filter(|name| !name.is_empty());
    Some(files.map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned())).collect())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB_BYTES as f64
}
