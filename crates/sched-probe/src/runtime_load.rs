//! How busy a runtime's workers were between two readings, from tokio's stable worker metrics
//! (what the I/O probe paces its canaries by).

use std::time::{Duration, Instant};

use tokio::runtime::{Handle, RuntimeMetrics};

/// Reads the share of a runtime's CPUs its workers spent busy since the last reading.
#[derive(Debug)]
pub(crate) struct RuntimeLoad {
    metrics: RuntimeMetrics,
    /// The CPUs the workers can be busy on: fewer of the two of workers and the process's CPUs.
    cpus: f64,
    last: Option<(Instant, Duration)>,
}

impl RuntimeLoad {
    pub(crate) fn new(handle: &Handle) -> RuntimeLoad {
        let metrics = handle.metrics();
        let machine = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpus = metrics.num_workers().clamp(1, machine) as f64;
        RuntimeLoad {
            metrics,
            cpus,
            last: None,
        }
    }

    /// The workers' busy time since the last call over the wall time since then and the CPUs,
    /// 0.0 ..= 1.0. `None` at the first call, and where tokio has no busy metric (targets
    /// without 64-bit atomics).
    pub(crate) fn busy(&mut self) -> Option<f64> {
        let now = Instant::now();
        let busy = self.total_busy()?;
        let last = self.last.replace((now, busy));
        let (then, busy_then) = last?;
        let wall = now.saturating_duration_since(then).as_secs_f64();
        (wall > 0.0).then(|| {
            let spent = busy.saturating_sub(busy_then).as_secs_f64();
            (spent / wall / self.cpus).clamp(0.0, 1.0)
        })
    }

    #[cfg(target_has_atomic = "64")]
    fn total_busy(&self) -> Option<Duration> {
        let workers = self.metrics.num_workers();
        Some(
            (0..workers)
                .map(|w| self.metrics.worker_total_busy_duration(w))
                .sum(),
        )
    }

    #[cfg(not(target_has_atomic = "64"))]
    fn total_busy(&self) -> Option<Duration> {
        None
    }
}
