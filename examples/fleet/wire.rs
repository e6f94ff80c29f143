//! What the parent and a node say to each other: the parent writes one command a line on the
//! node's stdin, the node answers with one JSON object a line on its stdout.

use serde::{Deserialize, Serialize};

/// A command from the parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Report a [`Sample`] now.
    Sample,
    /// Start the paced scan.
    ScanOn,
    /// Stop the paced scan.
    ScanOff,
    /// Leave the cgroup and exit.
    Quit,
}

impl Command {
    /// The command's line (without the newline).
    pub fn line(self) -> &'static str {
        match self {
            Command::Sample => "sample",
            Command::ScanOn => "scan on",
            Command::ScanOff => "scan off",
            Command::Quit => "quit",
        }
    }

    /// The command a line holds (None: not one).
    pub fn parse(line: &str) -> Option<Command> {
        [
            Command::Sample,
            Command::ScanOn,
            Command::ScanOff,
            Command::Quit,
        ]
        .into_iter()
        .find(|c| c.line() == line.trim())
    }
}

/// A node's first line: where its service listens and which cgroup it runs in, or why it could
/// not start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// The service's address (`127.0.0.1:port`).
    pub addr: Option<String>,
    /// The node's cgroup directory.
    pub cgroup: Option<String>,
    /// `v1` or `v2`.
    pub cgroup_version: Option<String>,
    /// The CPUs the library computes its rate for, and where it took them from.
    pub lib_cpus: Option<f64>,
    pub lib_cpus_source: Option<String>,
    /// The CPUs the node may run on once pinned (its affinity mask; None: unknown).
    #[serde(default)]
    pub cpus_allowed: Option<Vec<usize>>,
    /// Rows the scan encodes per CPU-second, measured before the quota bound.
    pub rows_per_cpu_s: Option<f64>,
    /// Why the node could not start (it exits with 2 when the cgroup could not be made).
    pub error: Option<String>,
}

/// A node's answer to [`Command::Sample`]: counters since the node started (the parent takes
/// differences) and the limit's mean since the last sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The node process's CPU time, seconds.
    pub cpu_s: f64,
    /// CPU time elastic work ran, as the library measured it (`Snapshot::used`), seconds.
    pub elastic_s: f64,
    /// The controller's share, mean of the 100 ms readings since the last sample.
    pub share: f64,
    /// The share as the bucket applies it: held to the quota's headroom, as a share of the
    /// library's CPUs (mean since the last sample).
    pub limit: f64,
    /// The library's CPUs.
    pub lib_cpus: f64,
    /// The cgroup's `cpu.stat`: periods with runnable tasks and periods throttled.
    pub periods: u64,
    pub throttled: u64,
    /// Throttled periods the library counted (`Snapshot::throttled_periods`).
    pub lib_throttled: u64,
    /// The library's queue ledger, seconds of CPU: granted, run past grants, and debt forgiven
    /// beyond the one-second cap.
    pub acquired_s: f64,
    pub over_limit_s: f64,
    pub forgiven_s: f64,
    /// Time the quota brake held elastic work back (`Snapshot::quota_braked_time`), seconds.
    pub quota_braked_s: f64,
    /// The token rate now, CPUs.
    pub rate_cpus: f64,
    /// Rows the scan encoded.
    pub rows: u64,
    /// What the controller stepped on last, and its target, µs (None: no data).
    pub signal_us: Option<f64>,
    pub target_us: f64,
    /// Which signal component that was.
    pub source: String,
    /// Where the scan runs and why (`Snapshot::placement`, `placement_reason`).
    #[serde(default)]
    pub placement: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip_and_junk_is_none() {
        for c in [
            Command::Sample,
            Command::ScanOn,
            Command::ScanOff,
            Command::Quit,
        ] {
            assert_eq!(Command::parse(&format!("{}\n", c.line())), Some(c));
        }
        assert_eq!(Command::parse("scan"), None);
        assert_eq!(Command::parse(""), None);
    }

    #[test]
    fn a_sample_round_trips_through_json() {
        let s = Sample {
            cpu_s: 1.5,
            elastic_s: 0.25,
            share: 0.4,
            limit: 0.3,
            lib_cpus: 0.5,
            periods: 10,
            throttled: 1,
            lib_throttled: 1,
            acquired_s: 0.5,
            over_limit_s: 0.25,
            forgiven_s: 0.125,
            quota_braked_s: 0.0625,
            rate_cpus: 0.03,
            rows: 99,
            signal_us: None,
            target_us: 120.0,
            source: "sched".into(),
            placement: "IdlePool (more workers than CPUs)".into(),
        };
        let line = serde_json::to_string(&s).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Sample>(&line).unwrap(), s);
    }
}
