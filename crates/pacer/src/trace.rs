//! `tracing` events (feature `tracing`) for what a person debugging latency asks about: an
//! admission that waited, a refused or expired connection attempt, a backlog brake, a CPU quota
//! that changed, a class's share moving, a poll or wait far past the outlier trap's threshold.
//! Nothing per grant or per `pace()`: these are the rare paths. Without the feature every
//! function here is empty and inlined away.
//!
//! Events go to the target `elastic_cpu` at `DEBUG`. A share is reported only once it moved by
//! [`SHARE_STEP`] from the last report, so a steady controller is silent.

use std::time::Duration;

use crate::record::ClassKind;

/// A class's share is reported once it moved this far from the last report.
pub(crate) const SHARE_STEP: f64 = 0.05;

/// An outlier gets an event of its own from this many times the trap's threshold (the trap
/// itself records from 1×; an event for each would be a flood).
#[cfg(feature = "tracing")]
pub(crate) const OUTLIER_EVENT_FACTOR: u32 = 4;

/// A poll that held its worker, or a foreground wait, `FACTOR` × past the trap's threshold.
#[cfg(feature = "tracing")]
pub(crate) fn outlier(what: &'static str, o: &elastic_cpu_probe::Outlier) {
    tracing::debug!(
        target: "elastic_cpu",
        what,
        spawned_at = %elastic_cpu_probe::site_label(o.site),
        kind = if o.elastic { "elastic" } else { "foreground" },
        task = o.task,
        duration_us = o.duration.as_micros() as u64,
        "outlier"
    );
}

#[cfg(feature = "tracing")]
fn class_name(kind: ClassKind) -> String {
    match kind {
        ClassKind::Elastic => "elastic".to_string(),
        ClassKind::Idle => "idle".to_string(),
        ClassKind::Gate(id) => format!("gate-{id}"),
        ClassKind::Member(id) => format!("class-{id}"),
    }
}

/// A connection attempt was admitted after waiting `waited` in gate `gate`'s queue (only with
/// the feature: the wait is timed for this event alone).
#[cfg(all(feature = "gate", feature = "tracing"))]
#[inline]
pub(crate) fn admission_waited(gate: usize, waited: Duration) {
    tracing::debug!(
        target: "elastic_cpu",
        class = %class_name(ClassKind::Gate(gate)),
        waited_us = waited.as_micros() as u64,
        "connection setup admitted after waiting"
    );
}

cfg_gate! {
    /// A connection attempt was refused (or dropped after waiting past its deadline).
    #[inline]
    pub(crate) fn refused(gate: usize, reason: impl std::fmt::Debug, retry_after: Duration) {
        #[cfg(feature = "tracing")]
        tracing::debug!(
            target: "elastic_cpu",
            class = %class_name(ClassKind::Gate(gate)),
            reason = ?reason,
            retry_after_ms = retry_after.as_millis() as u64,
            "connection attempt refused"
        );
        #[cfg(not(feature = "tracing"))]
        let _ = (gate, reason, retry_after);
    }
}

/// The backlog brake engaged: a foreground task waited past the alarm threshold.
#[inline]
pub(crate) fn brake_engaged() {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "elastic_cpu",
        why = "a foreground task queued past the backlog alarm",
        "backlog brake engaged: elastic work holds off"
    );
}

/// The backlog brake released after `lasted`: the backlog drained, or the brake hit its
/// longest (`spent`) and elastic work resumes regardless.
#[inline]
pub(crate) fn brake_released(lasted: Duration, spent: bool) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "elastic_cpu",
        lasted_us = lasted.as_micros() as u64,
        why = if spent { "longest brake reached" } else { "backlog drained" },
        "backlog brake released"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (lasted, spent);
}

/// The quota brake engaged: the process spent nearly a period's CPU quota in the last period.
#[inline]
pub(crate) fn quota_brake_engaged() {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "elastic_cpu",
        why = "the last period's spending reached the quota less its reserve",
        "quota brake engaged: elastic work holds off"
    );
}

/// The quota brake released after `lasted`: the last period's spending fell back under the line.
#[inline]
pub(crate) fn quota_brake_released(lasted: Duration) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "elastic_cpu",
        lasted_us = lasted.as_micros() as u64,
        "quota brake released"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = lasted;
}

/// The cgroup's CPU quota changed at run time: now `quota` CPUs (`None`: no limit), and the
/// rates are sized for `cpus`.
#[inline]
pub(crate) fn quota_changed(quota: Option<f64>, cpus: f64) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "elastic_cpu",
        quota = quota.map_or_else(|| "none".to_string(), |q| q.to_string()),
        cpus,
        "CPU quota changed"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (quota, cpus);
}

/// A class's share moved from `from` to `to` on `signal` (the latency it stepped on, if any).
#[inline]
pub(crate) fn share_moved(kind: ClassKind, from: f64, to: f64, signal: Option<Duration>) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        target: "elastic_cpu",
        class = %class_name(kind),
        from,
        to,
        signal_us = signal.map(|s| s.as_micros().min(u64::MAX as u128) as u64),
        "share moved"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (kind, from, to, signal);
}
