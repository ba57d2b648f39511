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

/// The arithmetic ATen operators ([`crate::measure::ops::OpProfile::kernels`]) whose calls a step
/// may differ in between the two engines' references, and why: each concerns how the harness
/// around the model is written (the optimizer's update, the metrics, the batch made from host
/// data, a no-op call), not the model's forward and backward, which call the same operators on
/// both engines (`tests/engine_ops.rs` holds them to it, trick by trick).
pub const HARNESS_OPS: [(&str, &str); 15] = [
    ("aten::add_", "torch.optim.SGD adds −lr·d where trickbench's SGD subtracts lr·d (aten::sub_); PyTorch's BatchNorm2d also counts its batches (num_batches_tracked += 1), which trickbench's keeps no count of"),
    ("aten::sub_", "trickbench's SGD and AdamW subtract their updates, torch.optim's add them with a negative factor"),
    ("aten::copy_", "trickbench's optimizers cast their scalar factors to the parameters' dtype (aten::to, then a copy); a batch made from host data is an aten::copy_ in PyTorch, a memcpy the profiler does not see in tch"),
    ("aten::fill_", "tch makes a tensor of host data with aten::zeros, then copies the bytes in; PyTorch fills its scalar tensors where tch does not"),
    ("aten::zero_", "as aten::fill_: tch's zeros for a tensor of host data"),
    ("aten::div", "trickbench's AdamW divides by its bias corrections; torch.optim.AdamW folds them into addcdiv_"),
    ("aten::lerp_", "trickbench's AdamW moves both moments with lerp_, torch.optim.AdamW the second with mul_ and addcmul_"),
    ("aten::addcdiv_", "torch.optim.AdamW's update (trickbench's divides, then subtracts)"),
    ("aten::addcmul_", "torch.optim.AdamW's second moment (trickbench's lerps)"),
    ("aten::result_type", "trickbench's AdamW asks the dtype of its step's factor"),
    ("aten::_local_scalar_dense", "torch.optim.AdamW reads its step count on the host (.item()) for the bias corrections; trickbench keeps it on the host"),
    ("aten::_fused_sgd_", "PyTorch's fused SGD takes its learning rate as a number; trickbench's passes a tensor, which the kernel reads (aten::_local_scalar_dense inside it)"),
    ("aten::dropout", "nanoGPT's model calls F.dropout even at p = 0 (a call that returns its input at once); trickbench skips the call"),
    ("aten::bitwise_not", "the causal mask is inverted with ~mask in Python"),
    ("aten::logical_not", "and with logical_not in tch"),
];
