//! The install `scripts/setup-libtorch` makes works as a Python venv: its scripts (`pip`,
//! `torchrun`) run, and an install made under a temporary name and renamed (whose scripts name
//! that name in their `#!` lines) is repaired in place, once. An install that did not finish is
//! removed to be made again.
//!
//! The repair is tried on a stand-in install in a temp dir that borrows the real one's Python and
//! packages through symbolic links, so that nothing is downloaded and the real install is only
//! read.

#[allow(dead_code)]
mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::cli::text;
use common::dirs::{checkout, temp_dir};

/// The checkout's `.venv`, which `make test` sets up before the tests run.
fn venv() -> PathBuf {
    let venv = checkout(".venv");
    assert!(venv.join("bin/python").exists(), "{} is missing: run scripts/setup-libtorch", venv.display());
    venv
}

/// Runs the script `program` with `arg`, which must succeed.
fn succeeds(program: &Path, arg: &str) -> Output {
    let out = Command::new(program).arg(arg).output().unwrap_or_else(|e| {
        // A script whose #! line names a python that is not there fails as if it were missing itself.
        let first = std::fs::read_to_string(program).ok().and_then(|s| s.lines().next().map(str::to_owned));
        panic!("{}: {e} (its first line: {first:?})", program.display())
    });
    assert!(out.status.success(), "{} {arg}: {}{}", program.display(), text(&out.stdout), text(&out.stderr));
    out
}

#[test]
fn the_venvs_pip_and_torchrun_run() {
    let venv = venv();
    assert!(text(&succeeds(&venv.join("bin/pip"), "--version").stdout).starts_with("pip "));
    assert!(text(&succeeds(&venv.join("bin/torchrun"), "--help").stdout).contains("--nproc-per-node"));
}

/// `body` (a script without its `#!` line) started by the python of `venv`.
fn script(venv: &Path, body: &str) -> String {
    format!("#!{}/bin/python\n{body}", venv.display())
}

/// The real install's `bin/NAME` without its `#!` line.
fn body_of(real: &Path, name: &str) -> String {
    let content = std::fs::read_to_string(real.join("bin").join(name)).unwrap();
    content.split_once('\n').unwrap().1.to_owned()
}

/// A copy of the real install `real` at `shared` as the old script left it: made under
/// `shared.partial.1742` and renamed, complete; its Python, packages and gloo headers are links
/// to the real install's.
fn moved_install(real: &Path, shared: &Path) {
    let partial = PathBuf::from(format!("{}.partial.1742", shared.display()));
    let bin = shared.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    symlink(real.join("bin/python").canonicalize().unwrap(), bin.join("python")).unwrap();
    symlink("python", bin.join("python3")).unwrap();
    for name in ["pip", "torchrun"] {
        std::fs::write(bin.join(name), script(&partial, &body_of(real, name))).unwrap();
        let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(bin.join(name), executable).unwrap();
    }
    let activate =
        format!("VIRTUAL_ENV=\"{}\"\nPS1=\"(shared.partial.1742) ${{PS1:-}}\"\n", partial.display());
    std::fs::write(bin.join("activate"), activate).unwrap();
    let config = std::fs::read_to_string(real.join("pyvenv.cfg")).unwrap();
    let config: String =
        config.lines().filter(|l| !l.starts_with("command")).map(|l| format!("{l}\n")).collect();
    std::fs::write(
        shared.join("pyvenv.cfg"),
        config + &format!("command = python3 -m venv {}\n", partial.display()),
    )
    .unwrap();
    for linked in ["lib", "gloo"] {
        symlink(real.join(linked), shared.join(linked)).unwrap();
    }
    std::fs::write(shared.join(".trickbench-complete"), "").unwrap();
}

/// Runs a copy of `scripts/setup-libtorch` in the checkout `repo` for the install `shared`.
fn setup(repo: &Path, shared: &Path, python: Option<&str>) -> Output {
    let script = repo.join("scripts/setup-libtorch");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    std::fs::copy(checkout("scripts/setup-libtorch"), &script).unwrap();
    let mut command = Command::new("bash");
    command.arg(&script).env("TRICKBENCH_VENV", shared).env_remove("PYTHON");
    if let Some(python) = python {
        command.env("PYTHON", python);
    }
    command.output().unwrap()
}

#[test]
fn setup_repairs_an_install_renamed_after_it_was_made_and_redoes_an_unfinished_one() {
    let real = venv().canonicalize().unwrap();
    // The repair must not need to download anything into the real install through the links.
    let cuda = real.join("libtorch/lib/libtorch_cuda.so").exists();
    let has_headers = std::fs::read_dir(real.join("libtorch/../nvidia")).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let include = e.path().join("include");
            include.join("crt/host_config.h").exists() && include.join("nv/target").exists()
        })
    });
    assert!(!cuda || has_headers, "the real install lacks the CUDA headers scripts/setup-libtorch adds");
    let dir = temp_dir();
    let (repo, shared) = (dir.path().join("repo"), dir.path().join("shared"));
    moved_install(&real, &shared);

    let out = setup(&repo, &shared, None);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("was made under a temporary name"), "{stdout}");
    let pip = std::fs::read_to_string(shared.join("bin/pip")).unwrap();
    assert_eq!(pip.lines().next().unwrap(), format!("#!{}/bin/python", shared.display()));
    let activate = std::fs::read_to_string(shared.join("bin/activate")).unwrap();
    assert!(activate.contains(&format!("VIRTUAL_ENV=\"{}\"", shared.display())), "{activate}");
    assert!(!activate.contains(".partial.") && activate.contains("(shared)"), "{activate}");
    assert!(!std::fs::read_to_string(shared.join("pyvenv.cfg")).unwrap().contains(".partial."));
    assert_eq!(std::fs::read_link(repo.join(".venv")).unwrap(), shared);
    assert!(text(&succeeds(&repo.join(".venv/bin/pip"), "--version").stdout).starts_with("pip "));
    succeeds(&repo.join(".venv/bin/torchrun"), "--help");

    // Idempotent: a second run finds nothing to do.
    let again = setup(&repo, &shared, None);
    assert!(
        again.status.success() && again.stdout.is_empty(),
        "{}{}",
        text(&again.stdout),
        text(&again.stderr)
    );
    assert_eq!(std::fs::read_to_string(shared.join("bin/pip")).unwrap(), pip);

    // An install interrupted before pip finished is removed and made again (here with a Python
    // that does not exist, so that nothing is downloaded: the script stops after the removal).
    std::fs::remove_file(shared.join(".trickbench-complete")).unwrap();
    std::fs::write(shared.join(".trickbench-installing"), "").unwrap();
    let redo = setup(&repo, &shared, Some("/nonexistent/python3"));
    let said = format!("{}{}", text(&redo.stdout), text(&redo.stderr));
    assert!(!redo.status.success() && said.contains("did not finish; removing it"), "{said}");
    assert!(said.contains("'/nonexistent/python3' not found"), "{said}");
    assert!(!shared.exists(), "the unfinished install is gone");
    assert!(real.join("bin/python").exists() && real.join("lib").is_dir(), "the real install is untouched");
}
