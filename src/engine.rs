//! The engines a cell can train on: the names the plan, the runner, the results and the reports
//! know an engine by.

use serde::{Deserialize, Serialize};

/// The engine a cell trains on: what runs its training loop and applies its tricks.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// trickbench's own training loop on libtorch, driven from Rust: no Python in the timed steps.
    /// Files that predate engines were all measured on it.
    #[default]
    Libtorch,
    /// Eager PyTorch driven from Python (`scripts/engine/pytorch_engine.py`), each trick applied as
    /// PyTorch's documentation tells a user to: what a Python training script gets.
    Pytorch,
}

impl Engine {
    /// The engine's name in ids and tables ("libtorch", "pytorch").
    pub fn id(self) -> &'static str {
        match self {
            Engine::Libtorch => "libtorch",
            Engine::Pytorch => "pytorch",
        }
    }

    /// Whether this is libtorch, the engine a file that names none was measured on.
    pub fn is_libtorch(&self) -> bool {
        *self == Engine::Libtorch
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// Which engines a run trains its cells on (`run --engine`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineChoice {
    /// trickbench's own loop on libtorch only.
    #[default]
    Libtorch,
    /// Eager PyTorch only.
    Pytorch,
    /// Both, every cell the PyTorch engine can run measured on each, in the same rounds.
    Both,
}

impl EngineChoice {
    /// The engines chosen, libtorch first.
    pub fn engines(self) -> Vec<Engine> {
        match self {
            EngineChoice::Libtorch => vec![Engine::Libtorch],
            EngineChoice::Pytorch => vec![Engine::Pytorch],
            EngineChoice::Both => vec![Engine::Libtorch, Engine::Pytorch],
        }
    }
}

/// The checkout's `.venv/bin/python` (set up by `make setup`, with the PyTorch wheel), when
/// present in the working directory.
pub fn setup_python() -> Option<std::path::PathBuf> {
    let venv = std::path::PathBuf::from(".venv/bin/python");
    venv.is_file().then_some(venv)
}

/// [`setup_python`] when present, else `python3` from the PATH.
pub fn default_python() -> std::path::PathBuf {
    setup_python().unwrap_or_else(|| std::path::PathBuf::from("python3"))
}

/// The Python that runs the PyTorch engine, as a run records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PytorchInfo {
    /// The interpreter, as given (`--python`) or found.
    pub python: String,
    /// Its version (`3.11.7`).
    pub python_version: String,
    /// The torch it imports (`2.11.0+cu130`).
    pub torch_version: String,
}

/// Prints torch's version (`torch/version.py`, read without importing torch, which takes seconds
/// and which the run's fork server does anyway) and Python's; fails where there is no torch.
const VERSION_PROBE: &str = "import importlib.util, os, sys
spec = importlib.util.find_spec('torch')
if spec is None or not spec.submodule_search_locations:
    sys.exit('No module named torch')
names = {}
exec(open(os.path.join(spec.submodule_search_locations[0], 'version.py')).read(), names)
print(names['__version__'])
print(sys.version.split()[0])";

/// What `python` runs the PyTorch engine with, or why it cannot: it does not start, or it has no
/// `torch` package. A torch that is installed but broken is found when the run's fork server
/// imports it, before any cell runs.
pub fn probe_python(python: &std::path::Path) -> Result<PytorchInfo, String> {
    let output = std::process::Command::new(python)
        .args(["-c", VERSION_PROBE])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{} does not start: {e}", python.display()))?;
    if output.status.success() {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let mut lines = stdout.lines().map(str::trim);
        let (torch, version) = (lines.next().unwrap_or_default(), lines.next().unwrap_or_default());
        return Ok(PytorchInfo {
            python: python.display().to_string(),
            python_version: version.to_owned(),
            torch_version: torch.to_owned(),
        });
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("no message");
    Err(format!("{} cannot import torch ({}): {last}", python.display(), output.status))
}
