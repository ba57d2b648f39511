//! The CIFAR-10 binary reader on arbitrary bytes: an error or a split whose sizes agree.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use trickbench::data::cifar::{self, IMAGE_BYTES, RECORD_BYTES};

fuzz_target!(|bytes: &[u8]| {
    if let Ok(split) = cifar::parse(bytes, Path::new("fuzz.bin")) {
        assert_eq!(split.len() * RECORD_BYTES, bytes.len());
        assert_eq!(split.images.len(), split.len() * IMAGE_BYTES);
        assert!(split.labels.iter().all(|&label| usize::from(label) < cifar::CLASSES.len()));
    }
});
