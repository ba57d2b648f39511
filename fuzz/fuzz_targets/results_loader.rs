//! The results loader on arbitrary bytes: an error, or results that survive a round trip.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use trickbench::results::store;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(results) = store::parse(bytes, Path::new("results.json")) {
        let json = serde_json::to_vec(&results).expect("loaded results serialise");
        let again = store::parse(&json, Path::new("again.json")).expect("written results load");
        assert!(again == results, "a loaded file changes when written and loaded again");
    }
});
