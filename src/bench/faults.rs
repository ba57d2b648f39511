//! The faults the fault tests inject into cell processes, chosen by the `TRICKBENCH_FAULT`
//! environment variable: a comma-separated list of `KIND@CELL_ID` (or a bare `KIND` for every
//! cell), where KIND is `segv` (dies of SIGSEGV), `abort` (SIGABRT), `hang` (sleeps until the
//! cell timeout or an interrupt stops it), `oom` (allocates 64 MiB tensors through libtorch until
//! an allocation fails; refused unless `run --memory-limit-mib` capped the process), `error`
//! (fails the cell with an error message, as a cell whose input is bad does) or `not-applicable`
//! (ends the cell as not applicable, as a cell whose forced attention backend has no kernel
//! does). Each strikes when the process begins to build the cell's side ([`inject_into_side`]):
//! the first four end the whole process there (the runner learns from the process's last
//! announcement which cell's side it died in); the last two fail that side alone, which in a
//! multi-arm process drops out while the others go on (a process of that one cell ends with
//! status 1 or 4). Only the hidden `cell` command reads it; it is not part of the user-facing
//! interface.

use std::time::Duration;

use crate::error::Error;

/// The environment variable that injects faults into cell processes (tests only).
pub const FAULT_VARIABLE: &str = "TRICKBENCH_FAULT";

/// Bytes of each tensor the `oom` fault allocates.
const OOM_CHUNK_BYTES: i64 = 64 << 20;

/// Fails the way [`FAULT_VARIABLE`] asks for cell `id`, as its process begins to build the cell's
/// side, or returns when it is unset or names no fault for it.
pub fn inject_into_side(id: &str) -> Result<(), Error> {
    match std::env::var(FAULT_VARIABLE) {
        Ok(faults) => inject(&faults, id),
        Err(_) => Ok(()),
    }
}

/// The fault `faults` names for cell `id`, if any.
fn fault_for<'a>(faults: &'a str, id: &str) -> Option<&'a str> {
    faults.split(',').map(str::trim).filter(|fault| !fault.is_empty()).find_map(|fault| {
        match fault.split_once('@') {
            Some((kind, cell)) => (cell == id).then_some(kind),
            None => Some(fault),
        }
    })
}

/// Fails the way `faults` asks for cell `id`, or returns when it names no fault for it.
fn inject(faults: &str, id: &str) -> Result<(), Error> {
    let Some(kind) = fault_for(faults, id) else { return Ok(()) };
    eprintln!("{FAULT_VARIABLE}: injecting fault '{kind}' into cell {id}");
    // Status 1, as a cell that fails on its own ends.
    let refuse = |message: String| Err(Error::Process(format!("{FAULT_VARIABLE}: {message}")));
    match kind {
        // The default action first: Rust's runtime handles SIGSEGV to report stack overflows.
        // SAFETY: resetting a signal's disposition and sending it to this process touch no memory.
        "segv" => unsafe {
            libc::signal(libc::SIGSEGV, libc::SIG_DFL);
            libc::raise(libc::SIGSEGV);
        },
        "abort" => std::process::abort(),
        "hang" => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
        "oom" => exhaust_memory()?,
        "error" => return refuse(format!("the injected error of cell {id}")),
        "not-applicable" => {
            return Err(Error::not_applicable(&format!("{FAULT_VARIABLE}: cell {id} has no kernel here")))
        }
        other => {
            return refuse(format!(
                "unknown fault '{other}' (valid: segv, abort, hang, oom, error, not-applicable)"
            ))
        }
    }
    refuse(format!("fault '{kind}' did not end the process"))
}

/// Allocates libtorch tensors until the allocator fails, which returns its error. Only under a
/// finite data-segment limit: without one this would take the whole machine's memory.
fn exhaust_memory() -> Result<(), Error> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_DATA, &mut limit) } == 0;
    if !known || limit.rlim_cur == libc::RLIM_INFINITY {
        return Err(Error::Process(format!(
            "{FAULT_VARIABLE}=oom needs a memory cap (run --memory-limit-mib)"
        )));
    }
    let mut held = Vec::new();
    loop {
        held.push(tch::Tensor::f_ones([OOM_CHUNK_BYTES], (tch::Kind::Uint8, tch::Device::Cpu))?);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_is_chosen_for_its_cell_or_for_every_cell() {
        let faults = "segv@resnet8/amp/b128/s0/train, error@resnet8/baseline/b128/s0/train";
        assert_eq!(fault_for(faults, "resnet8/amp/b128/s0/train"), Some("segv"));
        assert_eq!(fault_for(faults, "resnet8/baseline/b128/s0/train"), Some("error"));
        assert_eq!(fault_for(faults, "resnet8/amp/b64/s0/train"), None);
        assert_eq!(fault_for("hang", "any/cell"), Some("hang"));
        assert_eq!(fault_for("", "any/cell"), None);
    }

    #[test]
    fn an_error_fault_and_an_unknown_one_end_with_their_messages() {
        let error = inject("error@a/b", "a/b").unwrap_err().to_string();
        assert_eq!(error, "TRICKBENCH_FAULT: the injected error of cell a/b");
        let unknown = inject("melt", "a/b").unwrap_err().to_string();
        assert!(unknown.contains("unknown fault 'melt'"), "{unknown}");
        assert!(inject("error@other", "a/b").is_ok());
        let not_applicable = inject("not-applicable@a/b", "a/b").unwrap_err();
        assert!(matches!(not_applicable, Error::NotApplicable(_)), "{not_applicable}");
        assert_eq!(
            not_applicable.to_string(),
            "not applicable: TRICKBENCH_FAULT: cell a/b has no kernel here"
        );
    }
}
