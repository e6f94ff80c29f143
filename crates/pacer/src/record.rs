//! What the governor decided at a tick, as one immutable value: the snapshot and the metrics
//! read it, nothing copies it field by field.

use std::time::Duration;

use crate::quota::CpusSource;
use crate::signal::Signal;
pub(crate) use elastic_cpu_core::decide::ClassKind;
use elastic_cpu_core::decide::{Baseline, TargetSource};

/// A class's part of the elastic share at a tick.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PartRecord {
    pub(crate) name: std::sync::Arc<str>,
    pub(crate) weight: f64,
    pub(crate) cap: Option<f64>,
    pub(crate) floor: f64,
    /// Running time charged to it so far.
    pub(crate) charged: Duration,
    /// Work waiting for a grant.
    pub(crate) waiters: usize,
}

/// One class at a tick.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ClassRecord {
    pub(crate) kind: ClassKind,
    /// The share its controller (or fixed share) decided.
    pub(crate) share: f64,
    /// The share its rate was set for, after the quota's headroom.
    pub(crate) applied: f64,
    /// The longest wait for a grant over the window (a waiter still queued counts).
    pub(crate) longest_wait: Duration,
    /// Its part of the elastic share, for the classes that split it.
    pub(crate) part: Option<PartRecord>,
}

/// Everything the governor decided at one tick.
#[derive(Clone, Debug, Default)]
pub(crate) struct TickRecord {
    /// Ticks so far.
    pub(crate) ticks: u64,
    /// CPUs the rates are computed for, and where the figure came from.
    pub(crate) cpus: f64,
    pub(crate) cpus_source: CpusSource,
    /// What the controllers stepped on.
    pub(crate) signal: Signal,
    /// Throttled CFS periods since the watch started.
    pub(crate) throttled_periods: u64,
    /// The CPU quota in force (CPUs, period; `None`: none), and times it changed after attach.
    pub(crate) quota_cpus: Option<f64>,
    pub(crate) quota_period: Option<Duration>,
    pub(crate) quota_changes: u64,
    /// CPUs the quota's headroom leaves elastic work (`None`: no quota, no reading, or off).
    pub(crate) quota_headroom: Option<f64>,
    /// Elastic work's measured overhead, as a fraction of its charged running time.
    pub(crate) overhead: f64,
    /// Time spent braked, brakes that ended, and times the brake engaged.
    pub(crate) braked_time: Duration,
    pub(crate) brakes: u64,
    /// Time the quota brake held elastic work back (brakes that ended), and times it engaged.
    pub(crate) quota_braked_time: Duration,
    pub(crate) quota_brakes: u64,
    /// The target the `Elastic`'s own controller steps on, and where it comes from.
    pub(crate) target: Duration,
    pub(crate) target_source: TargetSource,
    /// The signal's components without elastic work (a measured target's baselines).
    pub(crate) quiet: Baseline,
    /// Elastic work is held back for a quiet reading now.
    pub(crate) quiet_hold: bool,
    /// The bounds of the `Elastic`'s own share as in force now (a fixed share: it, twice).
    pub(crate) share_bounds: (f64, f64),
    /// Elastic work is paused by hand.
    pub(crate) paused: bool,
    /// Every class, the `Elastic`'s own first.
    pub(crate) classes: Vec<ClassRecord>,
}

impl TickRecord {
    /// The class of `kind`, if there is one.
    pub(crate) fn class(&self, kind: ClassKind) -> Option<&ClassRecord> {
        self.classes.iter().find(|c| c.kind == kind)
    }
}
