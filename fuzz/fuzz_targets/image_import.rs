//! The ImageFolder/tar importer on an arbitrary (possibly gzip-compressed) tar archive: an error
//! or an import, and in either case nothing written outside the output directory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trickbench::data::import;

fuzz_target!(|bytes: &[u8]| {
    let dir = tempfile::tempdir().expect("temporary directory");
    let archive = dir.path().join("in.tar");
    std::fs::write(&archive, bytes).expect("archive written");
    let out = dir.path().join("out");
    let _ = import::import(&archive, &out, &mut |_| {});
    for entry in std::fs::read_dir(dir.path()).expect("listing") {
        let name = entry.expect("entry").file_name();
        assert!(name == "in.tar" || name == "out", "written outside the output directory: {name:?}");
    }
});
