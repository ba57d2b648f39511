//! Upgrading results files of older schema versions to the current one, as parsed JSON, before
//! they are read into [`crate::results::schema::Results`].
//!
//! Version 1 files could lack fields added while version 1 was current; version 2 files have
//! every field that is not optional but predate paired measurement; version 3 files record each
//! comparison's design. An upgrade fills in what an older file lacks with the value that was
//! meant when it was written, so the schema itself carries no defaults for old files. Optional
//! fields (`Option`) that are absent read as `None` in any version.

use serde_json::{json, Map, Value};

/// Upgrades `file`, a results file of schema `version`, to the current schema in place.
pub fn upgrade(file: &mut Value, version: u64) {
    if version < 2 {
        from_v1(file);
    }
    if version < 3 {
        from_v2(file);
    }
}

/// What a version 2 file lacks: it predates pairing, so every cell ran in processes of its own
/// and every comparison and noise floor is of the process design.
fn from_v2(file: &mut Value) {
    let Some(top) = file.as_object_mut() else { return };
    let protocol = top.get_mut("run").and_then(|run| run.get_mut("protocol")).and_then(Value::as_object_mut);
    if let Some(protocol) = protocol {
        fill(protocol, "pairing", json!("processes"));
    }
    for field in ["comparisons", "noise_floors"] {
        for entry in objects(top.get_mut(field)) {
            fill(entry, "design", json!("processes"));
        }
    }
}

/// What a version 1 file may lack, and the value meant when it was written.
fn from_v1(file: &mut Value) {
    let Some(top) = file.as_object_mut() else { return };
    fill(top, "time_to_accuracy", json!([]));
    fill(top, "noise_floors", json!([]));
    if let Some(run) = top.get_mut("run").and_then(Value::as_object_mut) {
        fill(run, "profile_settings", json!({}));
        if let Some(protocol) = run.get_mut("protocol").and_then(Value::as_object_mut) {
            fill(protocol, "time_to_accuracy_seeds", json!(1));
        }
        // The sample unit was recorded when the GPT, which counts tokens, arrived.
        if let Some(data) = run.get_mut("data").and_then(Value::as_object_mut) {
            fill(data, "sample_unit", json!("images"));
        }
    }
    for cell in objects(top.get_mut("cells")) {
        from_v1_cell(cell);
    }
}

/// What a version 1 cell may lack: the outlier count, the energy method (energy was sampled
/// board power before the counter was used), and `reference_for`, which replaced
/// `"debug_apis_on": true` on the reference cell of `debug-off`.
fn from_v1_cell(cell: &mut Map<String, Value>) {
    if let Some(throughput) = cell.get_mut("throughput").and_then(Value::as_object_mut) {
        fill(throughput, "outlier_windows", json!(0));
    }
    if let Some(energy) = cell.get_mut("energy").and_then(Value::as_object_mut) {
        fill(energy, "method", json!("sampled-power"));
    }
    for process in objects(cell.get_mut("processes")) {
        if let Some(energy) = process.get_mut("energy").and_then(Value::as_object_mut) {
            fill(energy, "method", json!("sampled-power"));
        }
    }
    if let Some(key) = cell.get_mut("key").and_then(Value::as_object_mut) {
        if key.remove("debug_apis_on") == Some(Value::Bool(true)) {
            fill(key, "reference_for", json!("debug-off"));
        }
    }
}

/// Sets `name` to `value` where the object lacks it.
fn fill(object: &mut Map<String, Value>, name: &str, value: Value) {
    object.entry(name).or_insert(value);
}

/// The objects of an array field (none when it is absent or not an array).
fn objects(array: Option<&mut Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    array.and_then(Value::as_array_mut).into_iter().flatten().filter_map(Value::as_object_mut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_1_file_gains_what_it_lacks_and_keeps_what_it_has() {
        let mut file = json!({
            "schema_version": 1,
            "run": {"protocol": {"rounds": 3}, "data": {"name": "cifar10"}},
            "cells": [
                {"key": {"debug_apis_on": true}, "throughput": {"windows": 4},
                 "energy": {"joules": 1.0}, "processes": [{"energy": {"method": "counter"}}]},
                {"key": {"debug_apis_on": false, "reference_for": "amp"}}
            ]
        });
        upgrade(&mut file, 1);
        assert_eq!(file["time_to_accuracy"], json!([]));
        assert_eq!(file["noise_floors"], json!([]));
        assert_eq!(file["run"]["profile_settings"], json!({}));
        assert_eq!(
            file["run"]["protocol"],
            json!({"rounds": 3, "time_to_accuracy_seeds": 1, "pairing": "processes"})
        );
        assert_eq!(file["run"]["data"]["sample_unit"], json!("images"));
        let cells = &file["cells"];
        assert_eq!(cells[0]["key"], json!({"reference_for": "debug-off"}));
        assert_eq!(cells[0]["throughput"]["outlier_windows"], json!(0));
        assert_eq!(cells[0]["energy"]["method"], json!("sampled-power"));
        assert_eq!(cells[0]["processes"][0]["energy"]["method"], json!("counter"));
        assert_eq!(cells[1]["key"], json!({"reference_for": "amp"}));
    }

    #[test]
    fn a_version_2_file_reads_as_the_process_design() {
        let mut file = json!({
            "schema_version": 2,
            "run": {"protocol": {"rounds": 5}},
            "comparisons": [{"speedup": 1.2}, {"speedup": 0.9, "design": "paired"}],
            "noise_floors": [{"half_width": 0.2}]
        });
        upgrade(&mut file, 2);
        assert_eq!(file["run"]["protocol"], json!({"rounds": 5, "pairing": "processes"}));
        assert_eq!(file["comparisons"][0]["design"], json!("processes"));
        assert_eq!(file["comparisons"][1]["design"], json!("paired"), "what a file has stays");
        assert_eq!(file["noise_floors"][0]["design"], json!("processes"));
    }

    #[test]
    fn a_current_file_is_left_as_it_is() {
        let file = json!({"schema_version": 3, "run": {"protocol": {}}, "cells": [{"key": {}}]});
        let mut upgraded = file.clone();
        upgrade(&mut upgraded, 3);
        assert_eq!(upgraded, file);
    }
}
