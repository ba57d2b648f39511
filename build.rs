//! Compiles `csrc/shim.cpp` against the libtorch that torch-sys found, and makes every binary and
//! test find libtorch at run time without environment variables (rpath to the real `torch/lib`).
use std::path::PathBuf;

fn main() {
    record_git_commit();
    println!("cargo:rerun-if-changed=csrc/shim.cpp");
    println!("cargo:rerun-if-changed=csrc/distributed.cpp");
    println!("cargo:rerun-if-changed=csrc/guarded.h");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB").expect(
        "torch-sys did not report where libtorch is; run scripts/setup-libtorch (or `make setup`) first",
    );
    // The wheel's libraries find their CUDA dependencies through their own $ORIGIN-relative RPATH,
    // which only works from the real folder, not through the .venv symlink.
    let lib = std::fs::canonicalize(&lib).unwrap_or_else(|_| PathBuf::from(&lib));
    let include = lib.join("../include");
    let libtorch_build = |file: &str| {
        let mut build = cc::Build::new();
        build
            .cpp(true)
            .file(file)
            .include(&include)
            .include(include.join("torch/csrc/api/include"))
            .flag("-std=c++17")
            .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
            .flag("-Wno-unused-parameter")
            .flag("-Wno-deprecated-declarations")
            .warnings(false)
            // Debug info for libtorch's headers would double the compile time for line numbers
            // in C++ frames, which the runner filters out of a cell's errors anyway.
            .debug(false);
        build
    };
    let mut shim = libtorch_build("csrc/shim.cpp");
    // The profiler's headers include Kineto's `ActivityType.h` by its bare name.
    shim.include(include.join("kineto"));
    let cuda_include = cuda_graph_headers(&lib);
    if let Some(cuda_include) = &cuda_include {
        shim.include(cuda_include).define("TRICKBENCH_CUDA_GRAPHS", None);
    } else {
        println!(
            "cargo:warning=no CUDA headers (crt/host_config.h) next to {} or under $CUDA_HOME: \
             building without CUDA graph support (scripts/setup-libtorch installs them)",
            lib.display()
        );
    }
    let mut distributed = libtorch_build("csrc/distributed.cpp");
    match gloo_headers() {
        Some(gloo) => {
            distributed.include(gloo).define("USE_C10D_GLOO", None).define("TRICKBENCH_DDP", None);
            match (&cuda_include, nccl_headers(&lib, cuda_include.as_deref())) {
                (Some(cuda), Some(nccl)) => {
                    distributed
                        .include(cuda)
                        .include(nccl)
                        .define("USE_C10D_NCCL", None)
                        .define("TRICKBENCH_NCCL", None)
                        .flag("-Wno-interference-size");
                }
                _ if cuda_include.is_some() => println!(
                    "cargo:warning=no NCCL or CCCL headers (nccl.h, nv/target) next to {}: building \
                     data-parallel training for CPU (gloo) only (scripts/setup-libtorch installs \
                     nvidia-cuda-cccl)",
                    lib.display()
                ),
                _ => {}
            }
        }
        None => println!(
            "cargo:warning=no gloo headers (gloo/algorithm.h) in .venv/gloo/include, \
             $TRICKBENCH_GLOO_INCLUDE or /usr/include: building without data-parallel training \
             (scripts/setup-libtorch fetches Debian's libgloo-dev headers)"
        ),
    }
    // The two files take the same time to compile: side by side, on two cores where there are.
    std::thread::scope(|scope| {
        scope.spawn(|| shim.compile("trickbench_shim"));
        distributed.compile("trickbench_distributed");
    });
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    // Without --no-as-needed the linker drops libtorch_cuda (nothing references it directly) and
    // CUDA then reads as unavailable on GPU machines.
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg=-ltorch");
    println!("cargo:rustc-link-arg=-ltorch_cpu");
    println!("cargo:rustc-link-arg=-lc10");
    if cuda_include.is_some() {
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-lc10_cuda");
    }
}

/// The CUDA include folder to compile the shim's CUDA graph calls against, when this libtorch has
/// CUDA libraries and the CUDA runtime headers are at hand: `$CUDA_HOME/include`, or the pip
/// wheels' `nvidia/cu*/include` next to the torch wheel (`nvidia-cuda-runtime` and
/// `nvidia-cuda-crt`).
fn cuda_graph_headers(lib: &std::path::Path) -> Option<PathBuf> {
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    if !lib.join("libtorch_cuda.so").exists() || !lib.join("libc10_cuda.so").exists() {
        return None;
    }
    let mut candidates: Vec<PathBuf> =
        std::env::var_os("CUDA_HOME").map(|home| PathBuf::from(home).join("include")).into_iter().collect();
    if let Ok(entries) = std::fs::read_dir(lib.join("../../nvidia")) {
        let mut wheels: Vec<PathBuf> = entries.flatten().map(|e| e.path().join("include")).collect();
        wheels.sort();
        // Rebuild when scripts/setup-libtorch adds the headers later.
        for dir in wheels.iter().filter(|dir| dir.is_dir()) {
            println!("cargo:rerun-if-changed={}", dir.display());
        }
        candidates.extend(wheels);
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    let found = candidates
        .into_iter()
        .find(|dir| dir.join("cuda_runtime_api.h").exists() && dir.join("crt/host_config.h").exists())?;
    Some(found)
}

/// The folder holding gloo's headers (`gloo/algorithm.h`), which libtorch's
/// `ProcessGroupGloo.hpp` includes but the torch wheel does not ship: `$TRICKBENCH_GLOO_INCLUDE`,
/// the copy scripts/setup-libtorch extracts from Debian's libgloo-dev into the shared install
/// (`.venv/gloo/include`), or a system-wide libgloo-dev.
fn gloo_headers() -> Option<PathBuf> {
    println!("cargo:rerun-if-env-changed=TRICKBENCH_GLOO_INCLUDE");
    let venv_copy = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?).join(".venv/gloo/include");
    println!("cargo:rerun-if-changed={}", venv_copy.display());
    let candidates = std::env::var_os("TRICKBENCH_GLOO_INCLUDE")
        .map(PathBuf::from)
        .into_iter()
        .chain([venv_copy, PathBuf::from("/usr/include")]);
    candidates.into_iter().find(|dir| dir.join("gloo/algorithm.h").exists())
}

/// The folder holding `nccl.h` (the nvidia-nccl wheel next to the torch wheel, or
/// `$CUDA_HOME/include`), when the CUDA headers at `cuda_include` also carry CCCL's `nv/target`,
/// which libtorch's CUDA headers need.
fn nccl_headers(lib: &std::path::Path, cuda_include: Option<&std::path::Path>) -> Option<PathBuf> {
    if !cuda_include?.join("nv/target").exists() {
        return None;
    }
    let mut candidates = vec![lib.join("../../nvidia/nccl/include")];
    candidates.extend(std::env::var_os("CUDA_HOME").map(|home| PathBuf::from(home).join("include")));
    candidates.into_iter().find(|dir| dir.join("nccl.h").exists())
}

/// Passes the checkout's commit (with `-dirty` when it has uncommitted changes) to the crate as
/// `TRICKBENCH_GIT_COMMIT`, so every results file says which code measured it.
fn record_git_commit() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
        // HEAD names the branch; a commit moves the branch's own ref, not HEAD.
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{branch}");
        }
    }
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let suffix = if dirty && !commit.is_empty() { "-dirty" } else { "" };
    println!("cargo:rustc-env=TRICKBENCH_GIT_COMMIT={commit}{suffix}");
}
