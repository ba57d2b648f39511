//! The data a run's cells read, found and checked before anything runs: CIFAR-10 (or synthetic
//! data generated in its place) for the ResNets, a text file for the GPTs, each described for the
//! results with the sizes its family's settings cut it to.

use std::path::{Path, PathBuf};

use crate::bench::config::{RunConfig, WorkloadChoice};
use crate::bench::profile::{Profile, ProfileName};
use crate::data::text::TextCorpus;
use crate::data::{cifar, import, synth};
use crate::error::Error;
use crate::results::model::{ModelDataset, UserModel};
use crate::results::schema::DataInfo;
use crate::workloads::build::gpt_context;
use crate::workloads::{Family, WorkloadId};

/// Where a run generates synthetic data when the data directory holds no CIFAR-10.
pub const SYNTHETIC_DIR: &str = "data/synthetic-cifar10";

/// What the cells read, checked, and its descriptions for the results.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The CIFAR-10 directory handed to each cell.
    pub data_dir: PathBuf,
    /// The GPTs' text.
    pub text: TextSource,
    /// The first dataset's description.
    pub data: DataInfo,
    /// The other datasets' descriptions.
    pub more_data: Vec<DataInfo>,
}

/// Where the GPT workloads' text comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TextSource {
    /// No GPT runs.
    NotNeeded,
    /// The text file and its description.
    Found {
        /// The file.
        path: PathBuf,
        /// Its description in the results.
        info: DataInfo,
    },
    /// `--workload all` without a text file: the GPT cells are not applicable, for this reason.
    Missing(String),
}

impl TextSource {
    /// The text file the cells read, if there is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            TextSource::Found { path, .. } => Some(path),
            TextSource::Missing(_) | TextSource::NotNeeded => None,
        }
    }

    /// Why the GPT cells cannot run, when their text is missing.
    pub fn missing(&self) -> Option<&str> {
        match self {
            TextSource::Missing(reason) => Some(reason),
            TextSource::Found { .. } | TextSource::NotNeeded => None,
        }
    }
}

/// The data the workloads of `config` train on: CIFAR-10 (or synthetic data) for the ResNets and
/// the user's model's time to accuracy, the text file for the GPTs, each cut to its family's
/// settings, and the batches of the user's `model`; `note` tells the user what was substituted.
pub fn resolve_inputs(
    config: &RunConfig,
    model: Option<&UserModel>,
    note: &dyn Fn(&str),
) -> Result<Inputs, Error> {
    let (profiles, workloads, paths) = (&config.profiles, &config.workloads, &config.request.inputs);
    let mut datasets = Vec::new();
    let resnets = workloads.iter().any(|w| w.family() == Family::CifarResnet);
    // The user's model trains to its target on its file's dataset(), else on CIFAR-10.
    let model_dataset = model.filter(|_| config.model_trains_to_target()).map(|m| m.dataset.as_ref());
    let data_dir = if resnets || model_dataset.is_some_and(|d| d.is_none()) {
        let family = if resnets { Family::CifarResnet } else { Family::UserModel };
        let cifar = profiles.of(family)?;
        let (dir, info) = resolve_data(&paths.data, cifar.train_samples, cifar.test_samples, note)?;
        if let Some(images) = &paths.images {
            import::validate(images, cifar.train_samples, cifar.test_samples)
                .map_err(|e| Error::from(e).context("--images"))?;
        }
        datasets.push(info);
        dir
    } else {
        paths.data.clone()
    };
    let gpts: Vec<WorkloadId> = workloads.iter().copied().filter(|w| w.family() == Family::CharGpt).collect();
    let text = if gpts.is_empty() {
        TextSource::NotNeeded
    } else {
        let held_out = profiles.of(Family::CharGpt)?.test_samples;
        let optional = matches!(config.request.workload, None | Some(WorkloadChoice::All));
        resolve_text(&paths.text, optional, held_out, &gpts, note)?
    };
    if let TextSource::Found { info, .. } = &text {
        datasets.push(info.clone());
    }
    datasets.extend(model.map(model_batches));
    if let (Some(model), Some(Some(dataset))) = (model, model_dataset) {
        datasets.push(model_dataset_info(model, dataset, profiles.of(Family::UserModel)?));
    }
    let mut datasets = datasets.into_iter();
    let data = datasets.next().ok_or_else(|| Error::Invalid("no dataset to describe".to_owned()))?;
    Ok(Inputs { data_dir, text, data, more_data: datasets.collect() })
}

/// The batches the user's `model` trains on, as a dataset: made by its file's `batch()`, or
/// random images.
fn model_batches(model: &UserModel) -> DataInfo {
    let made = match model.image_size {
        Some(px) => format!(" (random {px} px images)"),
        None => " (from its batch())".to_owned(),
    };
    DataInfo {
        name: format!("{} batches{made}", model.name),
        path: model.spec.clone(),
        // Not the synthetic stand-in for CIFAR-10: the model's own batches, described by its name.
        synthetic: false,
        train_samples: model.batches * model.samples_per_batch,
        test_samples: 0,
        sample_unit: model.sample_unit.name().to_owned(),
    }
}

/// The data of the user's `model`'s file's `dataset()` that its time to accuracy trains and is
/// tested on: its splits cut to `profile`'s subsets.
fn model_dataset_info(model: &UserModel, dataset: &ModelDataset, profile: &Profile) -> DataInfo {
    let cut = |samples: usize, subset: Option<usize>| subset.map_or(samples, |n| n.min(samples));
    DataInfo {
        name: format!("{} dataset()", model.name),
        path: model.spec.clone(),
        synthetic: false,
        train_samples: cut(dataset.train_samples, profile.train_samples),
        test_samples: cut(dataset.test_samples, profile.test_samples),
        sample_unit: "samples".to_owned(),
    }
}

/// The text the GPT workloads `gpts` train on: `path` read and checked now (UTF-8, not binary,
/// long enough for the longest context; so that a bad file fails before anything runs),
/// described with its split sizes. A missing file is an error unless it is `optional` (the GPTs
/// are part of `--workload all`), when it makes the GPT cells not applicable.
pub fn resolve_text(
    path: &Path,
    optional: bool,
    held_out_windows: Option<usize>,
    gpts: &[WorkloadId],
    note: &dyn Fn(&str),
) -> Result<TextSource, Error> {
    if !path.is_file() {
        let reason = format!(
            "no text file at {} (run `trickbench data fetch shakespeare --out {}`, or pass --text PATH \
             with any UTF-8 text)",
            path.display(),
            path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).display()
        );
        if optional {
            note(&format!("note: {reason}; the GPT cells are not applicable"));
            return Ok(TextSource::Missing(reason));
        }
        return Err(Error::Invalid(format!("--text: {reason}")));
    }
    let flag = |e: Error| e.context("--text");
    let corpus = TextCorpus::from_file(path).map_err(flag)?;
    let context =
        gpts.iter().copied().map(gpt_context).collect::<Result<Vec<_>, _>>()?.into_iter().max().unwrap_or(1);
    corpus.check_context(context, &path.display().to_string()).map_err(flag)?;
    let windows = corpus.validation.len().saturating_sub(1) / context;
    let held_out_windows = held_out_windows.map_or(windows, |n| n.min(windows));
    let info = DataInfo {
        name: path.file_name().map_or_else(|| "text".to_owned(), |n| n.to_string_lossy().into_owned()),
        path: path.display().to_string(),
        synthetic: false,
        train_samples: corpus.train.len(),
        test_samples: held_out_windows * context,
        sample_unit: "tokens".to_owned(),
    };
    Ok(TextSource::Found { path: path.to_path_buf(), info })
}

/// The CIFAR-10 folder a comparison of `families` under `profile` reads: `data`, found (or made)
/// and checked where a ResNet is among them ([`resolve_data`]); an error naming `--text`, and
/// `instead` (what the user can pass without the GPT), where the GPT is among them and `text` is
/// not a file.
pub fn comparison_data(
    data: &Path,
    text: &Path,
    families: &[Family],
    profile: ProfileName,
    instead: &str,
    note: &dyn Fn(&str),
) -> Result<PathBuf, Error> {
    if families.contains(&Family::CharGpt) && !text.is_file() {
        return Err(Error::Invalid(format!(
            "--text {}: no such file; the GPT trains on it (`trickbench data fetch shakespeare --out \
             data/shakespeare` or `make data` writes the default), or {instead}",
            text.display()
        )));
    }
    if !families.contains(&Family::CifarResnet) {
        return Ok(data.to_path_buf());
    }
    let cifar = profile.settings(Family::CifarResnet);
    Ok(resolve_data(data, cifar.train_samples, cifar.test_samples, note)?.0)
}

/// The data directory to train on and its description: real CIFAR-10 when `dir` holds it,
/// otherwise synthetic data generated once under [`SYNTHETIC_DIR`] (said loudly through `note`).
/// Every file is checked as a cell would read it (size, labels), so that a damaged one is
/// refused, named, before any cell runs.
pub fn resolve_data(
    dir: &Path,
    train_samples: Option<usize>,
    test_samples: Option<usize>,
    note: &dyn Fn(&str),
) -> Result<(PathBuf, DataInfo), Error> {
    // A directory with some of the files is damaged, not absent: the check below names what is missing.
    let (dir, synthetic) = if cifar::has_cifar_file(dir) {
        (dir.to_path_buf(), cifar::is_synthetic_dir(dir))
    } else {
        let synthetic_dir = PathBuf::from(SYNTHETIC_DIR);
        note(&format!(
            "note: no CIFAR-10 in {} (run `trickbench data import PATH` or `trickbench data fetch cifar10 --out {}`); \
             using SYNTHETIC data from {} — every figure of this run is about synthetic images",
            dir.display(),
            dir.display(),
            synthetic_dir.display()
        ));
        if !cifar::is_cifar_dir(&synthetic_dir) {
            synth::write_synthetic(&synthetic_dir, 50_000, 10_000, 0)?;
        }
        (synthetic_dir, true)
    };
    let cifar::SplitSizes { train: train_total, test: test_total } = cifar::validate_dir(&dir)?;
    let info = DataInfo {
        name: "cifar10".to_owned(),
        path: dir.display().to_string(),
        synthetic,
        train_samples: train_samples.map_or(train_total, |n| n.min(train_total)),
        test_samples: test_samples.map_or(test_total, |n| n.min(test_total)),
        sample_unit: "images".to_owned(),
    };
    Ok((dir, info))
}
