//! Plan requests of runs on this machine's CPU.

use trickbench::bench::plan::PlanRequest;
use trickbench::bench::profile::ProfileName;
use trickbench::device::DeviceSpec;
use trickbench::hardware::Hardware;
use trickbench::tricks::Trick;
use trickbench::workloads::WorkloadId;

/// The request for `workloads` with `tricks` on the CPU, every workload at `profile`'s sizes for
/// the family of the first (see [`PlanRequest::new`]).
pub fn cpu_request(profile: ProfileName, workloads: &[WorkloadId], tricks: &[Trick]) -> PlanRequest {
    let settings = profile.settings(workloads[0].family());
    PlanRequest::new(workloads.to_vec(), tricks.to_vec(), Hardware::probe(DeviceSpec::Cpu), &settings)
}
