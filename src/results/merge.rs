//! Joining the shards of a sharded sweep (`run --shard i/n`) into one results file, its cells in
//! the order of the unsharded plan (the layer above recomputes the derived figures over them).

use std::collections::HashMap;
use std::path::PathBuf;

use crate::results::schema::{
    CellKey, CellResult, MergeRecord, Results, RunInfo, ShardRecord, SCHEMA_VERSION,
};

/// One shard's results and the file they were read from (named in every message).
#[derive(Debug, Clone)]
pub struct ShardResults {
    /// The results file.
    pub path: PathBuf,
    /// Its contents.
    pub results: Results,
}

/// Why shards cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// Nothing to merge.
    #[error("no results files to merge")]
    NoFiles,
    /// A file is not a shard (it was written without `--shard`).
    #[error("{}: not a shard of a sweep (it has no shard record; `trickbench run --shard I/N` writes one)", path.display())]
    NotAShard {
        /// The file.
        path: PathBuf,
    },
    /// Two files were written by different schema versions.
    #[error(
        "{} has schema version {version}, {} has {other_version}: merge shards written by one trickbench version",
        path.display(),
        other.display()
    )]
    SchemaVersion {
        /// The file that differs.
        path: PathBuf,
        /// Its schema version.
        version: u32,
        /// The file it was compared with.
        other: PathBuf,
        /// That file's schema version.
        other_version: u32,
    },
    /// Two files split the plan into different numbers of shards.
    #[error("{} is shard {}, {} is shard {}: the shard counts differ", path.display(), shard, other.display(), other_shard)]
    ShardCount {
        /// The file that differs.
        path: PathBuf,
        /// Its shard (`i/n`).
        shard: String,
        /// The file it was compared with.
        other: PathBuf,
        /// That file's shard.
        other_shard: String,
    },
    /// Two files are shards of different plans.
    #[error(
        "{} and {} are shards of different plans (fingerprints {} and {}): {differences}",
        path.display(),
        other.display(),
        short(fingerprint),
        short(other_fingerprint)
    )]
    PlanMismatch {
        /// The file that differs.
        path: PathBuf,
        /// Its plan fingerprint.
        fingerprint: String,
        /// The file it was compared with.
        other: PathBuf,
        /// That file's plan fingerprint.
        other_fingerprint: String,
        /// What differs, in words.
        differences: String,
    },
    /// The same shard was given twice.
    #[error("{} and {} are both shard {shard}", path.display(), other.display())]
    DuplicateShard {
        /// One file.
        path: PathBuf,
        /// The other.
        other: PathBuf,
        /// The shard (`i/n`).
        shard: String,
    },
    /// A cell appears in two shards (which a plan never does).
    #[error("cell {id} is in both {} and {}", path.display(), other.display())]
    ConflictingCell {
        /// The cell's id.
        id: String,
        /// One file.
        path: PathBuf,
        /// The other.
        other: PathBuf,
    },
    /// Shards are absent or unfinished and the merge was not asked to write what there is.
    #[error("the sweep is incomplete (`merge --allow-missing` writes what there is):\n  {}", missing.join("\n  "))]
    Missing {
        /// What is missing, one line each.
        missing: Vec<String>,
    },
}

impl From<MergeError> for crate::error::Error {
    fn from(error: MergeError) -> Self {
        crate::error::Error::Module(Box::new(error))
    }
}

/// The first characters of a fingerprint, enough to tell two apart.
fn short(fingerprint: &str) -> &str {
    &fingerprint[..fingerprint.len().min(12)]
}

/// The merged results, and what the merge noticed without refusing.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The results of the whole sweep (or of the shards there were, with `allow_missing`).
    pub results: Results,
    /// Warnings: what is missing (with `allow_missing`), and shards measured by different builds or
    /// on different hardware.
    pub warnings: Vec<String>,
}

/// Merges the shards of one sweep. Refuses files that are not shards, of different schema versions,
/// shard counts or plans, the same shard twice, and a cell in two files, each naming the files.
/// Absent shards and shards that did not finish are refused too unless `allow_missing`, when they
/// become warnings (and are recorded in [`MergeRecord::missing`]). Cells keep the order of the
/// unsharded plan. The derived figures (comparisons, noise floors, time-to-accuracy summaries) are
/// left empty, for the caller to recompute over all cells (`analysis::refresh_derived`).
pub fn merge(mut shards: Vec<ShardResults>, allow_missing: bool) -> Result<Merged, MergeError> {
    let records: Vec<ShardRecord> = shards
        .iter()
        .map(|s| s.results.run.shard.clone().ok_or_else(|| MergeError::NotAShard { path: s.path.clone() }))
        .collect::<Result<_, _>>()?;
    let mut order: Vec<usize> = (0..shards.len()).collect();
    order.sort_by_key(|&i| records[i].index);
    let first = order.first().copied().ok_or(MergeError::NoFiles)?;
    for &i in &order[1..] {
        check_same_sweep(&shards[first], &records[first], &shards[i], &records[i])?;
    }
    for pair in order.windows(2) {
        if records[pair[0]].index == records[pair[1]].index {
            return Err(MergeError::DuplicateShard {
                path: shards[pair[0]].path.clone(),
                other: shards[pair[1]].path.clone(),
                shard: records[pair[1]].shard().to_string(),
            });
        }
    }
    let mut owner: HashMap<&CellKey, usize> = HashMap::new();
    for &i in &order {
        for cell in &shards[i].results.cells {
            if let Some(&j) = owner.get(&cell.key) {
                return Err(MergeError::ConflictingCell {
                    id: cell.id().to_string(),
                    path: shards[j].path.clone(),
                    other: shards[i].path.clone(),
                });
            }
            owner.insert(&cell.key, i);
        }
    }
    let plan = &records[first];
    let missing = missing(plan, &order.iter().map(|&i| (&records[i], &shards[i])).collect::<Vec<_>>());
    if !missing.is_empty() && !allow_missing {
        return Err(MergeError::Missing { missing });
    }
    let mut warnings = missing.clone();
    warnings.extend(differences_in_provenance(&order.iter().map(|&i| &shards[i]).collect::<Vec<_>>()));

    let cells =
        cells_in_plan_order(plan, &order.iter().map(|&i| &shards[i].results.cells).collect::<Vec<_>>());
    let merged_record = MergeRecord {
        shard_count: plan.count,
        fingerprint: plan.fingerprint.clone(),
        shards: order.iter().map(|&i| records[i].index).collect(),
        files: order.iter().map(|&i| shards[i].path.display().to_string()).collect(),
        missing,
    };
    let runs: Vec<&RunInfo> = order.iter().map(|&i| &shards[i].results.run).collect();
    let started_at = runs.iter().map(|r| r.started_at.clone()).min().unwrap_or_default();
    let finished_at = runs
        .iter()
        .map(|r| r.finished_at.clone())
        .collect::<Option<Vec<_>>>()
        .and_then(|f| f.into_iter().max());
    let base = shards.swap_remove(first).results;
    let run = RunInfo { started_at, finished_at, shard: None, merged: Some(merged_record), ..base.run };
    let results = Results {
        schema_version: SCHEMA_VERSION,
        comparisons: Vec::new(),
        time_to_accuracy: Vec::new(),
        noise_floors: Vec::new(),
        speedrun: base.speedrun,
        factorial: Vec::new(),
        run,
        system: base.system,
        cells,
    };
    Ok(Merged { results, warnings })
}

/// Refuses `other` unless it is a shard of the same sweep as `first`: same schema version, shard
/// count and plan fingerprint (saying what differs when the fingerprints do).
fn check_same_sweep(
    first: &ShardResults,
    first_record: &ShardRecord,
    other: &ShardResults,
    record: &ShardRecord,
) -> Result<(), MergeError> {
    if other.results.schema_version != first.results.schema_version {
        return Err(MergeError::SchemaVersion {
            path: other.path.clone(),
            version: other.results.schema_version,
            other: first.path.clone(),
            other_version: first.results.schema_version,
        });
    }
    if record.count != first_record.count {
        return Err(MergeError::ShardCount {
            path: other.path.clone(),
            shard: record.shard().to_string(),
            other: first.path.clone(),
            other_shard: first_record.shard().to_string(),
        });
    }
    if record.fingerprint != first_record.fingerprint {
        let (a, b) = (&first.results.run, &other.results.run);
        let mut differences = Vec::new();
        let mut differ = |what: &str, x: String, y: String| {
            if x != y {
                differences.push(format!("{what} {x} vs {y}"));
            }
        };
        differ("profile", a.profile.to_string(), b.profile.to_string());
        differ("design", a.design.to_string(), b.design.to_string());
        differ("device", a.device.to_string(), b.device.to_string());
        differ("protocol", format!("{:?}", a.protocol), format!("{:?}", b.protocol));
        let settings = |r: &RunInfo| format!("{:?}", r.profile_settings.families);
        differ("settings", settings(a), settings(b));
        let data = |r: &RunInfo| {
            r.datasets()
                .map(|d| {
                    let kind = if d.synthetic { "synthetic " } else { "" };
                    format!("{kind}{} ({} / {} {})", d.name, d.train_samples, d.test_samples, d.sample_unit)
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        differ("data", data(a), data(b));
        let cells = |r: &ShardRecord| format!("{} cells in {} units", r.cells.len(), r.units.len());
        differ("plan", cells(first_record), cells(record));
        if differences.is_empty() {
            differences.push("the planned cells differ (workloads, tricks, batch sizes or seeds)".to_owned());
        }
        return Err(MergeError::PlanMismatch {
            path: other.path.clone(),
            fingerprint: record.fingerprint.clone(),
            other: first.path.clone(),
            other_fingerprint: first_record.fingerprint.clone(),
            differences: differences.join("; "),
        });
    }
    Ok(())
}

/// What is missing from a sweep, one line each: every absent shard with its units and the known
/// cells it would have measured, and every shard that did not finish with the known cells it has
/// not measured yet.
fn missing(plan: &ShardRecord, present: &[(&ShardRecord, &ShardResults)]) -> Vec<String> {
    let unmeasured = |index: usize, cells: &[CellResult]| -> Vec<&str> {
        plan.cells
            .iter()
            .filter(|c| !c.not_applicable && plan.unit_in_shard(c.unit, index))
            .filter(|c| !cells.iter().any(|have| have.id() == c.id))
            .map(|c| c.id.as_str())
            .collect()
    };
    let mut lines = Vec::new();
    for index in 0..plan.count {
        let shard = format!("{index}/{}", plan.count);
        match present.iter().find(|(r, _)| r.index == index) {
            None => {
                let units = plan.units_of(index);
                let mut line = format!("shard {shard} is missing (units: {})", list_or_none(&units));
                let cells = unmeasured(index, &[]);
                if !cells.is_empty() {
                    line.push_str(&format!("; its cells: {}", cells.join(", ")));
                }
                lines.push(line);
            }
            Some((_, shard_results)) if shard_results.results.run.finished_at.is_none() => {
                let mut line = format!(
                    "shard {shard} ({}) did not finish (rerun it with --resume)",
                    shard_results.path.display()
                );
                let cells = unmeasured(index, &shard_results.results.cells);
                if !cells.is_empty() {
                    line.push_str(&format!("; not measured: {}", cells.join(", ")));
                }
                lines.push(line);
            }
            Some(_) => {}
        }
    }
    lines
}

/// `items` joined with commas, or "none".
fn list_or_none(items: &[&str]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

/// Warnings when shards were measured by different builds or on different hardware: each unit's
/// comparisons are made on one machine, but comparisons between units of different shards (a
/// time-to-accuracy configuration against its reference) assume identical machines.
fn differences_in_provenance(shards: &[&ShardResults]) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut check = |what: &str, value: &dyn Fn(&Results) -> String| {
        let mut seen: Vec<(String, Vec<String>)> = Vec::new();
        for shard in shards {
            let v = value(&shard.results);
            let file = shard.path.display().to_string();
            match seen.iter_mut().find(|(x, _)| *x == v) {
                Some((_, files)) => files.push(file),
                None => seen.push((v, vec![file])),
            }
        }
        if seen.len() > 1 {
            let groups: Vec<String> =
                seen.iter().map(|(v, files)| format!("{v} ({})", files.join(", "))).collect();
            warnings.push(format!("the shards differ in {what}: {}", groups.join("; ")));
        }
    };
    check("git commit", &|r| r.run.git_commit.clone().unwrap_or_else(|| "unknown".to_owned()));
    check("CPU", &|r| r.system.cpu_model.clone().unwrap_or_else(|| "unknown".to_owned()));
    check("GPU", &|r| r.system.gpu.as_ref().map_or_else(|| "none".to_owned(), |g| g.name.clone()));
    check("libtorch", &|r| r.system.libtorch_version.clone());
    warnings
}

/// The cells of every shard in the order of the unsharded plan: known cells by their position in
/// the plan; a cell planned later (a probe, a stacked cell, a probed batch) right after the known
/// cell before it in its shard's file, or before the next one when it comes first.
fn cells_in_plan_order(plan: &ShardRecord, shards: &[&Vec<CellResult>]) -> Vec<CellResult> {
    let position: HashMap<&str, usize> =
        plan.cells.iter().enumerate().map(|(i, c)| (c.id.as_str(), i)).collect();
    let mut keyed: Vec<((usize, u8, usize, usize), CellResult)> = Vec::new();
    for (shard, cells) in shards.iter().enumerate() {
        let known: Vec<Option<usize>> =
            cells.iter().map(|c| position.get(c.id().as_str()).copied()).collect();
        for (i, cell) in cells.iter().enumerate() {
            let key = match known[i] {
                Some(p) => (p, 1, 0, 0),
                None => match known[..i].iter().rev().flatten().next() {
                    Some(&before) => (before, 2, shard, i),
                    None => (known[i..].iter().flatten().next().copied().unwrap_or(usize::MAX), 0, shard, i),
                },
            };
            keyed.push((key, cell.clone()));
        }
    }
    keyed.sort_by_key(|(key, _)| *key);
    keyed.into_iter().map(|(_, cell)| cell).collect()
}
