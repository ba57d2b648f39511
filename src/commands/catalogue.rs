//! `trickbench list` and `trickbench env`.

use anyhow::{Context, Result};

use trickbench::device::DeviceSpec;
use trickbench::environment::write_environment;
use trickbench::hardware::Hardware;
use trickbench::tricks::catalogue::write_catalogue;

use crate::cli::ListArgs;

/// Prints the trick catalogue with applicability on the chosen device.
pub fn list(args: &ListArgs) -> Result<()> {
    let device = args.device.resolve().context("--device")?;
    write_catalogue(&mut std::io::stdout().lock(), device, &Hardware::probe(device))
        .context("writing to stdout")
}

/// Prints the system record a run would store, and what a GPU user needs to know of this build
/// and machine.
pub fn env() -> Result<()> {
    let device = DeviceSpec::Auto.resolve()?;
    write_environment(&mut std::io::stdout().lock(), device).context("writing to stdout")
}
