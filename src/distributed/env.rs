//! The torchrun environment contract: which rank this process is, how many there are, and where
//! they meet. `trickbench launch`, torchrun and a Slurm script around `srun` all set the same
//! variables.

use std::time::Duration;

use crate::error::Error;

/// This process's rank, 0 ≤ RANK < WORLD_SIZE.
pub const RANK: &str = "RANK";
/// The number of processes.
pub const WORLD_SIZE: &str = "WORLD_SIZE";
/// This process's rank on its machine: the CUDA device it drives.
pub const LOCAL_RANK: &str = "LOCAL_RANK";
/// The host rank 0 runs on (it hosts the rendezvous store).
pub const MASTER_ADDR: &str = "MASTER_ADDR";
/// The TCP port of the rendezvous store on MASTER_ADDR.
pub const MASTER_PORT: &str = "MASTER_PORT";
/// Seconds any rendezvous or collective may wait before failing (trickbench's own; optional).
pub const TIMEOUT_S: &str = "TRICKBENCH_DIST_TIMEOUT_S";

/// The variables of the contract that must all be set together.
pub const REQUIRED: [&str; 5] = [RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT];

/// How long a rendezvous or collective waits when [`TIMEOUT_S`] is not set: long enough for a
/// slow NCCL start, short enough that a dead peer ends the run within a minute.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where this process stands in a data-parallel world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistEnv {
    /// This process's rank.
    pub rank: usize,
    /// The number of processes.
    pub world_size: usize,
    /// This process's rank on its machine (its CUDA device).
    pub local_rank: usize,
    /// The host of the rendezvous store (rank 0's).
    pub master_addr: String,
    /// The port of the rendezvous store.
    pub master_port: u16,
    /// The longest any rendezvous or collective waits.
    pub timeout: Duration,
}

impl DistEnv {
    /// Reads the contract from the process environment: `None` when none of its variables is set
    /// (a single process), an error naming the variable when one is missing or invalid.
    pub fn from_env() -> Result<Option<Self>, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the contract through `get` (a variable's value, if set).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, Error> {
        if REQUIRED.iter().all(|name| get(name).is_none()) {
            return Ok(None);
        }
        let value = |name: &str| {
            get(name).ok_or_else(|| {
                Error::Invalid(format!(
                    "{name} is not set; data-parallel processes need all of {} (trickbench launch, \
                     torchrun or your srun script sets them)",
                    REQUIRED.join(", ")
                ))
            })
        };
        let number = |name: &str| -> Result<usize, Error> {
            let text = value(name)?;
            text.trim()
                .parse()
                .map_err(|_| Error::Invalid(format!("{name}='{text}' is not a non-negative integer")))
        };
        let world_size = number(WORLD_SIZE)?;
        if world_size == 0 {
            return Err(Error::Invalid(format!("{WORLD_SIZE}='0': a world needs at least one process")));
        }
        let rank = number(RANK)?;
        if rank >= world_size {
            return Err(Error::Invalid(format!(
                "{RANK}='{rank}' is not below {WORLD_SIZE}='{world_size}' (ranks are 0 to {})",
                world_size - 1
            )));
        }
        let local_rank = number(LOCAL_RANK)?;
        let master_addr = value(MASTER_ADDR)?.trim().to_owned();
        if master_addr.is_empty() {
            return Err(Error::Invalid(format!(
                "{MASTER_ADDR} is empty; give rank 0's host name or address"
            )));
        }
        let port_text = value(MASTER_PORT)?;
        let master_port = port_text.trim().parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| {
            Error::Invalid(format!("{MASTER_PORT}='{port_text}' is not a TCP port (1 to 65535)"))
        })?;
        let timeout = match get(TIMEOUT_S) {
            None => DEFAULT_TIMEOUT,
            Some(text) => text
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| {
                    Error::Invalid(format!("{TIMEOUT_S}='{text}' is not a positive number of seconds"))
                })?,
        };
        Ok(Some(Self { rank, world_size, local_rank, master_addr, master_port, timeout }))
    }

    /// The contract's variables for rank `rank` of `world_size` on one machine meeting at
    /// `master_addr:master_port` (what `trickbench launch` sets).
    pub fn local_vars(
        rank: usize,
        world_size: usize,
        master_addr: &str,
        master_port: u16,
    ) -> Vec<(&'static str, String)> {
        vec![
            (RANK, rank.to_string()),
            (WORLD_SIZE, world_size.to_string()),
            (LOCAL_RANK, rank.to_string()),
            (MASTER_ADDR, master_addr.to_owned()),
            (MASTER_PORT, master_port.to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Option<DistEnv>, Error> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        DistEnv::from_lookup(|name| map.get(name).cloned())
    }

    const GOOD: [(&str, &str); 5] = [
        (RANK, "1"),
        (WORLD_SIZE, "2"),
        (LOCAL_RANK, "1"),
        (MASTER_ADDR, "127.0.0.1"),
        (MASTER_PORT, "29500"),
    ];

    fn with(name: &str, value: Option<&str>) -> Vec<(&'static str, String)> {
        let mut vars: Vec<(&'static str, String)> =
            GOOD.iter().filter(|(k, _)| *k != name).map(|(k, v)| (*k, v.to_string())).collect();
        if let Some(v) = value {
            let key = REQUIRED.into_iter().chain([TIMEOUT_S]).find(|k| *k == name).unwrap();
            vars.push((key, v.to_owned()));
        }
        vars
    }

    fn error(name: &str, value: Option<&str>) -> String {
        let vars = with(name, value);
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        read(&pairs).unwrap_err().to_string()
    }

    #[test]
    fn no_variables_is_a_single_process() {
        assert_eq!(read(&[]).unwrap(), None);
    }

    #[test]
    fn a_full_contract_is_read() {
        let env = read(&GOOD).unwrap().unwrap();
        assert_eq!((env.rank, env.world_size, env.local_rank, env.master_port), (1, 2, 1, 29500));
        assert_eq!((env.master_addr.as_str(), env.timeout), ("127.0.0.1", DEFAULT_TIMEOUT));
        let vars = DistEnv::local_vars(1, 2, "127.0.0.1", 29500);
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(read(&pairs).unwrap().unwrap(), env);
    }

    #[test]
    fn bad_or_missing_variables_are_named_with_their_value() {
        assert!(error(RANK, None).starts_with("RANK is not set"));
        assert_eq!(error(RANK, Some("2")), "RANK='2' is not below WORLD_SIZE='2' (ranks are 0 to 1)");
        assert_eq!(error(RANK, Some("one")), "RANK='one' is not a non-negative integer");
        assert!(error(WORLD_SIZE, Some("0")).starts_with("WORLD_SIZE='0'"));
        assert!(error(MASTER_PORT, Some("70000")).starts_with("MASTER_PORT='70000' is not a TCP port"));
        assert!(error(MASTER_PORT, Some("0")).starts_with("MASTER_PORT='0'"));
        assert!(error(MASTER_ADDR, Some(" ")).starts_with("MASTER_ADDR is empty"));
        assert!(error(LOCAL_RANK, None).starts_with("LOCAL_RANK is not set"));
        assert!(error(TIMEOUT_S, Some("-1")).starts_with("TRICKBENCH_DIST_TIMEOUT_S='-1'"));
    }

    #[test]
    fn the_timeout_can_be_shortened() {
        let vars = with(TIMEOUT_S, Some("2.5"));
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(read(&pairs).unwrap().unwrap().timeout, Duration::from_millis(2500));
    }
}
