//! The host the shares are sized for: the CPUs (chosen from the runtime's workers, the CPU
//! quota, the affinity mask and the available parallelism) and the quota in force, read at
//! attach and again every `quota_reread`. What is sized from them (the rates, the quota's
//! headroom and brake, the throttling watch) follows from that tick on.

use std::path::PathBuf;
use std::time::Duration;

use elastic_cpu_core::decide::{HostReading, QuotaLimit};
use elastic_cpu_core::Clock;
use elastic_cpu_probe::{NoQuota, QuotaReading};

use super::{Governor, Plan};
use crate::quota::{choose_cpus, CpusInputs, CpusSource};
use crate::trace;

/// The CPU quota in force: what the headroom cap, the quota brake and the grants' fit to a
/// period are sized from.
#[derive(Clone, Debug, PartialEq)]
struct QuotaNow {
    /// CPUs it allows, fractional.
    cpus: f64,
    /// The enforcement period.
    period: Duration,
    /// The cgroup whose limit it is: its throttling is watched.
    dir: PathBuf,
}

impl QuotaNow {
    /// The quota of a reading (`None`: no limit, or none could be read).
    fn of(reading: &QuotaReading) -> Option<QuotaNow> {
        match reading {
            QuotaReading::Limited(q) => Some(QuotaNow {
                cpus: q.cpus,
                period: q.period,
                dir: q.cgroup_dir.clone(),
            }),
            QuotaReading::NoQuota(_) => None,
        }
    }
}

/// What the CPUs are chosen from, as last read: at attach, then every `quota_reread`.
struct LastRead {
    /// The attached runtime's worker threads.
    workers: usize,
    /// The quota reading: after attach, the last one that said either way (a limit, or none
    /// on the cgroup and its ancestors); a reading that failed (a file unreadable or garbage,
    /// the hierarchy gone) keeps it.
    quota: QuotaReading,
    /// CPUs in the affinity mask, and `available_parallelism`, as last known.
    affinity: Option<usize>,
    available: Option<usize>,
    /// When they were read (the queue clock).
    read_at: Duration,
}

/// The host as the governor knows it.
pub(super) struct HostState {
    pub(super) cpus: f64,
    pub(super) cpus_source: CpusSource,
    builder_cpus: Option<f64>,
    /// The quota in force (`None`: none), the one value everything sized from it reads.
    quota: Option<QuotaNow>,
    /// Inside a CPU quota now (or a throttling watch set by hand, in tests).
    quota_seen: bool,
    /// What the CPUs were chosen from (`None`: no runtime attached yet, nothing to re-read).
    reading: Option<LastRead>,
    quota_reread: Duration,
    /// Times the quota in force changed after attach (appeared, went, or moved).
    pub(super) quota_changes: u64,
}

impl HostState {
    pub(super) fn new(plan: &Plan) -> HostState {
        HostState {
            cpus: plan.builder_cpus.unwrap_or(plan.default_cpus),
            cpus_source: if plan.builder_cpus.is_some() {
                CpusSource::Builder
            } else {
                CpusSource::AvailableParallelism
            },
            builder_cpus: plan.builder_cpus,
            quota: None,
            quota_seen: false,
            reading: None,
            quota_reread: plan.quota_reread,
            quota_changes: 0,
        }
    }

    /// CPUs the quota in force allows (`None`: none).
    pub(super) fn quota_cpus(&self) -> Option<f64> {
        self.quota.as_ref().map(|q| q.cpus)
    }

    /// The quota's period (`None`: no quota).
    pub(super) fn quota_period(&self) -> Option<Duration> {
        self.quota.as_ref().map(|q| q.period)
    }

    fn limit(&self) -> Option<QuotaLimit> {
        self.quota.as_ref().map(|q| QuotaLimit {
            cpus: q.cpus,
            period: q.period,
        })
    }
}

impl Governor {
    /// A runtime of `workers` threads is attached: read the quota and the CPUs now, and from
    /// now on every `quota_reread`.
    pub(super) fn attach(&mut self, workers: usize) {
        let now = self.clock.now();
        self.read_host(workers, now);
    }

    /// Read the quota and the CPUs again if `quota_reread` has passed since the last reading
    /// (once a runtime is attached). On the governor thread, at a tick: never on a worker.
    pub(super) fn reread_host(&mut self) {
        let now = self.clock.now();
        let Some(host) = &self.host.reading else {
            return;
        };
        if now.saturating_sub(host.read_at) >= self.host.quota_reread {
            self.read_host(host.workers, now);
        }
    }

    /// Read the quota, the affinity mask and the available parallelism at `now` (after
    /// attach, a reading that fails keeps the last good one), choose the CPUs from them and
    /// the `workers`, and size everything for them: the rates and holder caps (unless the
    /// builder fixed the CPUs), and, when the quota changed, the quota's headroom and brake
    /// and the throttling watch.
    fn read_host(&mut self, workers: usize, now: Duration) {
        let last = self.host.reading.take();
        let mut quota = self.sources.cgroup.quota();
        let says = matches!(
            quota,
            QuotaReading::Limited(_) | QuotaReading::NoQuota(NoQuota::Unlimited { .. })
        );
        if let (false, Some(last)) = (says, &last) {
            quota = last.quota.clone();
        }
        let process = &self.sources.process;
        let affinity = process
            .affinity()
            .or_else(|| last.as_ref().and_then(|h| h.affinity));
        let available = process
            .available_parallelism()
            .or_else(|| last.as_ref().and_then(|h| h.available));
        let (cpus, source) = choose_cpus(&CpusInputs {
            builder: self.host.builder_cpus,
            workers,
            quota: &quota,
            affinity,
            available,
        });
        if self.host.builder_cpus.is_none() {
            self.host.cpus = cpus;
            self.host.cpus_source = source;
        }
        // Against the last reading, not the quota in force: that may have been set by hand.
        let before = last.as_ref().and_then(|h| QuotaNow::of(&h.quota));
        let after = QuotaNow::of(&quota);
        if before != after {
            if last.is_some() {
                self.host.quota_changes += 1;
                trace::quota_changed(after.as_ref().map(|q| q.cpus), self.host.cpus);
            }
            match after {
                Some(q) => self.watch_quota(q.dir, q.cpus, q.period),
                None => self.leave_quota(),
            }
        }
        self.host.reading = Some(LastRead {
            workers,
            quota,
            affinity,
            available,
            read_at: now,
        });
        self.set_host();
    }

    /// Hand the CPUs and the quota in force to the decision step (which sizes the quota brake
    /// for a new quota) and apply what follows.
    fn set_host(&mut self) {
        let process = &self.sources.process;
        let host = HostReading {
            cpus: self.host.cpus,
            quota: self.host.limit(),
            in_quota: self.host.quota_seen,
            parallelism: process
                .affinity()
                .or_else(|| process.available_parallelism())
                .unwrap_or(1),
            // Without the throttling input nothing would arm the quota brake: armed always.
            throttling: self.signal.watches_throttling(),
        };
        let change = self.decider.set_host(&host, self.clock.now());
        super::brakes::trace_quota(change);
        self.apply();
    }

    /// A quota of `cpus` per `period` applies in the cgroup in `dir`: watch its throttling and
    /// cap elastic work within it from now on (each if on), the quota brake sized for it.
    pub(super) fn watch_quota(&mut self, dir: PathBuf, cpus: f64, period: Duration) {
        self.host.quota_seen = true;
        if self.host.quota.as_ref().is_none_or(|q| q.dir != dir) {
            self.signal.watch_throttling(&self.sources, dir.clone());
        }
        self.host.quota = Some(QuotaNow { cpus, period, dir });
        self.set_host();
    }

    /// The quota is gone: the headroom cap lifts, the quota brake lets go (it keeps its counts
    /// for the snapshot), the grants no longer fit a period.
    fn leave_quota(&mut self) {
        self.host.quota = None;
        self.host.quota_seen = false;
        self.set_host();
    }

    /// Watch the cgroup in `dir` for throttling only (tests: a quota seen without its figure).
    #[cfg(feature = "test-util")]
    pub(super) fn watch_throttling(&mut self, dir: PathBuf) {
        self.host.quota_seen = true;
        self.signal.watch_throttling(&self.sources, dir);
        self.set_host();
    }
}
