//! What a run leaves behind: one record per tick, one summary per phase.

use std::time::Duration;

/// One tick as it happened, for traces and settle times.
#[derive(Debug, Clone, PartialEq)]
pub struct PlantTick {
    /// The plant's time at the tick.
    pub now: Duration,
    /// The process's CPU time in the tick.
    pub process_cpu: Duration,
    /// The neighbour's CPU time in the tick.
    pub neighbour_cpu: Duration,
    /// The foreground's CPU time in the tick.
    pub foreground_cpu: Duration,
    /// Each class's CPU time in the tick.
    pub class_cpu: Vec<Duration>,
    /// Each class's token rate after the tick's commands (CPU nanoseconds per second).
    pub class_rate: Vec<u64>,
    /// The foreground's scheduling-latency p99 over the probe's window, as observed.
    pub sched_p99: Option<Duration>,
    /// Some period was throttled in the tick.
    pub throttled: bool,
}

impl PlantTick {
    /// The CPUs all classes used in the tick, on average, for a tick of `tick`.
    pub fn elastic_cpus(&self, tick: Duration) -> f64 {
        let total: Duration = self.class_cpu.iter().sum();
        total.as_secs_f64() / tick.as_secs_f64()
    }
}

/// One phase of a run, summed up. CPU figures are CPUs on average over the phase.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseSummary {
    /// The phase's name.
    pub name: String,
    /// How long it ran.
    pub length: Duration,
    /// Foreground arrivals in the phase.
    pub arrivals: u64,
    /// The foreground's scheduling-latency p99 over the phase (`None`: no poll started).
    pub sched_p99: Option<Duration>,
    /// The foreground's response-time p99 (arrival to end of its poll).
    pub response_p99: Option<Duration>,
    /// The foreground's CPU.
    pub foreground_cpu: f64,
    /// Each class's CPU.
    pub class_cpu: Vec<f64>,
    /// All classes' CPU.
    pub elastic_cpu: f64,
    /// What the process may use: the CPUs, or the quota when lower.
    pub capacity: f64,
    /// The spare: capacity − foreground CPU.
    pub spare: f64,
    /// The elastic CPU as a fraction of the spare (0 when there is no spare).
    pub harvest: f64,
    /// The process's CPU (foreground, elastic, both in the runtime and the pool).
    pub process_cpu: f64,
    /// The neighbour's CPU.
    pub neighbour_cpu: f64,
    /// Quota periods throttled in the phase.
    pub throttled_periods: u64,
}

impl PhaseSummary {
    /// The foreground's scheduling p99 over `baseline`'s (the same phase without elastic work);
    /// `None` without a p99 on either side.
    pub fn p99_over(&self, baseline: &PhaseSummary) -> Option<f64> {
        let (p, b) = (self.sched_p99?, baseline.sched_p99?);
        Some(p.as_secs_f64() / b.as_secs_f64())
    }
}
