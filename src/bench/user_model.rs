//! The user's own network (`run --model SPEC`), prepared once per run before any cell: the Python
//! with torch builds it, records what it is (`model.json`, [`UserModel`]), writes its initial
//! weights and the batches both engines train on, and exports it to TorchScript for the libtorch
//! engine. Cells read the prepared folder; the results record the description.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::Error;
use crate::results::model::{UserModel, MODEL_FORMAT};
pub use crate::workloads::scripted::{EXPORT_FILE, LOSS_FILE, NO_BIAS_EXPORT_FILE};

/// The description inside a prepared folder.
pub const DESCRIPTION_FILE: &str = "model.json";
/// The network's initial weights (its state_dict) inside a prepared folder.
pub const WEIGHTS_FILE: &str = "weights.safetensors";
/// The prepared batches (`inputs.K`, `targets.K`) inside a prepared folder.
pub const BATCHES_FILE: &str = "batches.safetensors";
/// The splits of the file's `dataset()` (`train.inputs`, `train.targets`, `test.inputs`,
/// `test.targets`) inside a prepared folder, where it defines one.
pub const DATASET_FILE: &str = "dataset.safetensors";
/// Batches prepared: training cycles through them.
pub const PREPARED_BATCHES: usize = 4;
/// Side of the images made for a model without its own `batch()`, pixels, unless
/// `--image-size` says otherwise.
pub const DEFAULT_IMAGE_SIZE: u32 = 224;

/// What to prepare, and where.
#[derive(Debug, Clone)]
pub struct Preparation {
    /// The SPEC as given.
    pub spec: String,
    /// The Python with torch that builds it.
    pub python: PathBuf,
    /// Samples per batch.
    pub batch_size: usize,
    /// Side of the images made for a model without its own `batch()`.
    pub image_size: u32,
    /// Seed of the weights and the batches.
    pub seed: u64,
}

/// A model prepared in a temporary folder, removed when this value drops.
#[derive(Debug)]
pub struct PreparedModel {
    /// Its description.
    pub model: UserModel,
    /// The temporary folder holding the prepared folder.
    folder: tempfile::TempDir,
}

impl PreparedModel {
    /// The prepared folder, which the cells read.
    pub fn dir(&self) -> PathBuf {
        self.folder.path().join("model")
    }
}

impl Preparation {
    /// Prepares the network into a new temporary folder ([`Self::prepare`]).
    pub fn prepare_temporary(&self) -> Result<PreparedModel, Error> {
        let folder = tempfile::Builder::new()
            .prefix("trickbench-model-")
            .tempdir()
            .map_err(|e| Error::io(std::env::temp_dir(), e))?;
        let model = self.prepare(&folder.path().join("model"))?;
        Ok(PreparedModel { model, folder })
    }

    /// Prepares the network into the new folder `dir` and returns its description. A bad SPEC is
    /// an error naming it and what is wrong, and leaves no `dir` behind.
    pub fn prepare(&self, dir: &Path) -> Result<UserModel, Error> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let prepared = self.run_script(dir).and_then(|()| read_description(dir));
        if prepared.is_err() {
            let _ = std::fs::remove_dir_all(dir);
        }
        prepared
    }

    /// Runs `user_model.py prepare` into `dir`, the scripts written beside its output for the
    /// time it runs.
    fn run_script(&self, dir: &Path) -> Result<(), Error> {
        let scripts = dir.join("scripts");
        let engine = crate::bench::engines::pytorch::case::write_scripts(&scripts)?;
        let output = Command::new(&self.python)
            .arg(engine.with_file_name("user_model.py"))
            .arg("prepare")
            .args(["--spec", &self.spec])
            .args(["--batch-size", &self.batch_size.to_string()])
            .args(["--image-size", &self.image_size.to_string()])
            .args(["--seed", &self.seed.to_string()])
            .args(["--batches", &PREPARED_BATCHES.to_string()])
            .arg("--out")
            .arg(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                Error::Invalid(format!(
                    "--model {}: {} does not start: {e}",
                    self.spec,
                    self.python.display()
                ))
            })?;
        if !output.status.success() {
            return Err(Error::Invalid(failure(&self.spec, &output)));
        }
        std::fs::remove_dir_all(&scripts).map_err(|e| Error::io(&scripts, e))
    }
}

/// The message of a failed preparation: the script's own line where it wrote one (it names the
/// SPEC, the file and what is wrong), else the last line of its stderr.
fn failure(spec: &str, output: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let said = stderr.lines().rev().find_map(|l| l.trim().strip_prefix("trickbench: "));
    match said {
        Some(line) => line.to_owned(),
        None => {
            let last = stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("no message");
            format!("--model {spec}: preparing the model failed ({}): {last}", output.status)
        }
    }
}

/// The description in the prepared folder `dir`.
pub fn read_description(dir: &Path) -> Result<UserModel, Error> {
    let path = dir.join(DESCRIPTION_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let model: UserModel =
        serde_json::from_str(&text).map_err(|source| Error::Json { path: path.clone(), source })?;
    if model.format != MODEL_FORMAT {
        return Err(Error::Invalid(format!(
            "{}: format {} (this trickbench reads format {MODEL_FORMAT})",
            path.display(),
            model.format
        )));
    }
    Ok(model)
}
