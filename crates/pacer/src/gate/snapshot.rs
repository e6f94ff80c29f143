//! [`GateSnapshot`]: a gate's counters at once, as plain data.

use std::time::Duration;

use elastic_cpu_core::GateStats;

/// What [`ConnectionGate::snapshot`](crate::gate::ConnectionGate::snapshot) reports.
///
/// Every attempt ends exactly once: `admitted + rejected + expired + cancelled` plus those
/// still waiting (`queue_len`) and those granted but not yet collected (`stats.pending`) is
/// `stats.attempts`.
///
/// ```
/// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
/// let gate = elastic.connection_gate(Default::default())?;
/// let s = gate.snapshot();
/// assert_eq!((s.admitted, s.rejected, s.expired, s.queue_len), (0, 0, 0, 0));
/// assert!(s.share > 0.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct GateSnapshot {
    /// Attempts that got a setup permit.
    pub admitted: u64,
    /// Attempts refused: queue full, would expire, or closed.
    pub rejected: u64,
    /// Attempts that waited past their deadlines and were dropped before their setups.
    pub expired: u64,
    /// Attempts given up by their caller (the admission future dropped) before they ended.
    pub cancelled: u64,
    /// Attempts waiting now.
    pub queue_len: usize,
    /// The setup class's share of the CPUs now, steered by the signal.
    pub share: f64,
    /// CPU charged to setups in total (measured).
    pub setup_cpu: Duration,
    /// The longest admission wait over the probe window (an attempt still waiting counts with
    /// its wait so far).
    pub longest_wait: Duration,
    /// CPU per setup assumed now: the measured average (or the first estimate).
    pub setup_cost: Duration,
    /// Setups running now: permits held, less those waiting on their clients.
    pub in_setup: usize,
    /// Setups waiting on their clients inside [`SetupPermit::run`], holding no running place.
    ///
    /// [`SetupPermit::run`]: crate::gate::SetupPermit::run
    pub waiting_on_peer: usize,
    /// Setups a [`SetupListener`](crate::gate::SetupListener) closed at their
    /// [`setup_timeout`](crate::gate::GateSettings::setup_timeout): clients that never finished.
    pub timed_out: u64,
    /// Times setups yielded their thread's CPU to the OS at a poll quantum
    /// ([`Enforcement::os_yield`](crate::settings::Enforcement::os_yield); 0 when it is off).
    pub os_yields: u64,
    /// The whole ledger, as the admission queue reports it.
    pub stats: GateStats,
}

impl GateSnapshot {
    pub(crate) fn new(
        stats: GateStats,
        share: f64,
        longest_wait: Duration,
        os_yields: u64,
        timed_out: u64,
    ) -> GateSnapshot {
        GateSnapshot {
            admitted: stats.admitted,
            rejected: stats.rejected,
            expired: stats.expired,
            cancelled: stats.cancelled,
            queue_len: stats.queue_len,
            share,
            setup_cpu: Duration::from_nanos(stats.used_nanos),
            longest_wait,
            setup_cost: Duration::from_nanos(stats.cost_nanos),
            in_setup: stats.in_setup,
            waiting_on_peer: stats.waiting_on_peer,
            timed_out,
            os_yields,
            stats,
        }
    }
}
