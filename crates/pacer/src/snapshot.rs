//! [`Snapshot`]: everything the governor knows, at once, as plain data, and the types its
//! fields are made of.

use std::time::Duration;

pub use elastic_cpu_core::QueueSnapshot;
pub use elastic_cpu_probe::{
    site_label, CgroupVersion, Outlier, Outliers, SiteOutliers, Split, Summary, Window,
};

pub use crate::placement::PlacementReason;
pub use crate::quota::CpusSource;
use crate::record::{ClassKind, ClassRecord, TickRecord};
use crate::settings::Placement;
pub use crate::signal::readings::Availability;
pub use crate::signal::IO_TARGET_FACTOR;
pub use elastic_cpu_core::decide::SignalSource;
pub use elastic_cpu_core::decide::TargetSource;

/// What [`Elastic::snapshot`](crate::Elastic::snapshot) reports: always available, no exporter
/// needed. The `metrics` export (feature `metrics`) is fed from it.
///
/// Every duration is a [`Duration`]. The token balance may be negative (debt: polls that ran
/// past their grant, or a share that went down), so it comes as two fields, [`tokens`] and
/// [`debt`], at most one of them non-zero: the balance is `tokens − debt`
/// ([`balance_secs_f64`](Self::balance_secs_f64) gives it signed).
///
/// Once every grant is settled, the ledger balances: `acquired − returned + over_limit == used`.
///
/// ```
/// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
/// let s = elastic.snapshot();
/// // The bucket starts full: one second of tokens at the initial rate.
/// assert!(s.tokens > std::time::Duration::ZERO && s.debt.is_zero());
/// assert_eq!(s.acquired - s.returned + s.over_limit, s.used);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`tokens`]: Self::tokens
/// [`debt`]: Self::debt
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The share now: the part of the CPUs elastic work may use (0 ..= 1), as its controller
    /// (or the fixed share) decided it; the quota's headroom may hold the rate below it.
    pub share: f64,
    /// The bounds the share moves within, as in force now (the builder's
    /// [`share`](crate::ElasticBuilder::share), or the last
    /// [`Elastic::set_share`](crate::Elastic::set_share); a fixed share: it, twice).
    pub min_share: f64,
    /// See [`min_share`](Self::min_share).
    pub max_share: f64,
    /// Elastic work is paused ([`Elastic::pause`](crate::Elastic::pause)): no new grants.
    pub paused: bool,
    /// What measures the runtime's scheduling latency: tokio's task hooks (built with
    /// `--cfg tokio_unstable`, the runtime through [`Elastic::runtime`](crate::Elastic::runtime)
    /// or [`instrument`](crate::Elastic::instrument)) or the sampling probe.
    pub probe_source: ProbeSource,
    /// CPUs the token rate is computed for.
    pub cpus: f64,
    /// Where [`cpus`](Self::cpus) came from.
    pub cpus_source: CpusSource,
    /// Governor ticks so far.
    pub ticks: u64,
    /// What the controller compares [`signal_p99`](Self::signal_p99) with: the builder's
    /// target, or, measured (the default), the latency elastic work may add over the quiet
    /// baseline.
    pub target: Duration,
    /// Where [`target`](Self::target) comes from, and so what the signal is.
    pub target_source: TargetSource,
    /// The scheduling p99 without elastic work, as the quiet readings measured it: the p99 of
    /// the last quiet ticks pooled, as many as the probe window holds (`None`: none yet).
    pub quiet_p99: Option<Duration>,
    /// [`run_queue_delay`](Self::run_queue_delay) without elastic work, over the same quiet
    /// ticks: the baseline what elastic work adds to it is measured from (`None`: no reading,
    /// or too few timeslices in them).
    pub quiet_run_queue_delay: Option<Duration>,
    /// [`bystander_delay`](Self::bystander_delay) without elastic work, over the same quiet
    /// ticks (`None`: no reading, or too few timeslices in them).
    pub quiet_bystander_delay: Option<Duration>,
    /// Elastic work is held back now for a quiet reading (a few ticks every 5–20 s while it runs,
    /// with a measured target; the longer gaps while the signal is far under its target).
    pub quiet_hold: bool,
    /// p99 scheduling latency of all tasks over the probe window (`None`: no data).
    pub sched_p99: Option<Duration>,
    /// What the controller stepped on at the last tick, against [`target`](Self::target), where
    /// the scheduling p99 is [`sched_p99`](Self::sched_p99) less the window's worst tick (a
    /// host pause or a burst of one tick is the brake's). With a measured target: what elastic
    /// work adds over the quiet baseline, the largest of the scheduling p99,
    /// [`io_p99`](Self::io_p99) and
    /// [`run_queue_delay`](Self::run_queue_delay) over each one's own. With the builder's (or
    /// before the first quiet reading): the largest of the scheduling p99, `io_p99` over
    /// [`IO_TARGET_FACTOR`] and `run_queue_delay` themselves. `Duration::MAX` in a tick the
    /// cgroup was throttled; `None`: no component had data.
    pub signal_p99: Option<Duration>,
    /// Which component [`signal_p99`](Self::signal_p99) was.
    pub signal_source: SignalSource,
    /// p99 I/O wake-up latency over the probe window: a canary's *due → read by a task* (a
    /// timer expiry on Linux, a datagram elsewhere), through the runtime's I/O driver
    /// ([`Inputs::io_wakeup`](crate::settings::Inputs::io_wakeup)).
    /// `None`: no probe running (see [`io_probe`](Self::io_probe)) or no canary read yet. It
    /// joins the signal only once the window holds at least 100 canaries.
    pub io_p99: Option<Duration>,
    /// Whether the I/O wake-up probe runs, and if not, why.
    pub io_probe: Availability,
    /// The I/O probe sends its canaries at the quiet period (50 ms, not 2–20 ms): at the last
    /// tick no elastic work ran or waited and no idle class or gate steered by the signal.
    pub io_quiet: bool,
    /// The period the I/O probe's canaries come at since the last tick: the quiet period while
    /// quiet, else 2 ms on a busy runtime, stretched to 2 ms ÷ busy² on one that is not, where
    /// busy is the share of its CPUs the runtime's workers were busy over the last tick (at most
    /// 20 ms: [`IoProbeConfig::period_for`](elastic_cpu_probe::IoProbeConfig::period_for)).
    /// `None`: no probe running.
    pub io_period: Option<Duration>,
    /// Mean OS run-queue wait per timeslice of the runtime's threads that serve the foreground,
    /// over the probe window: how long a runnable worker waited for a CPU
    /// ([`Inputs::run_queue`](crate::settings::Inputs::run_queue)). `None`:
    /// unavailable (see [`run_queue`](Self::run_queue)) or fewer than 100 timeslices in the
    /// window (a mean of a few waits is noise, and does not steer).
    pub run_queue_delay: Option<Duration>,
    /// The same for the process's threads beside the runtime (up to 64 of them: a client
    /// library's, another runtime's; elastic work's threads aside), from 100 timeslices in the
    /// window. With the measured target what elastic work adds to it over its quiet reading
    /// steers too ([`SignalSource::Bystanders`]).
    pub bystander_delay: Option<Duration>,
    /// Run-queue wait of those threads over the last tick, summed, as a fraction of the tick
    /// (0.12: together they waited 12 % of the tick for a CPU).
    pub run_queue_wait: Option<f64>,
    /// The same for the threads running elastic work ([`Pacer::pace_blocking`](crate::Pacer::pace_blocking)).
    pub elastic_run_queue_wait: Option<f64>,
    /// Whether the run-queue delay is read, and if not, why (off Linux: unavailable).
    pub run_queue: Availability,
    /// p99 poll time of foreground tasks over the window.
    pub fg_poll_p99: Option<Duration>,
    /// p99 poll time of elastic polls over the window.
    pub elastic_poll_p99: Option<Duration>,
    /// CPU time in the token bucket (zero while in debt).
    pub tokens: Duration,
    /// CPU time the bucket owes (zero unless the balance is negative): later grants wait until
    /// it is paid back.
    pub debt: Duration,
    /// Elastic work waiting for a grant now.
    pub waiters: usize,
    /// Grants handed out.
    pub grants: u64,
    /// Admissions that had to wait for their grant (and finished waiting).
    pub waits: u64,
    /// Total time those admissions waited.
    pub waited: Duration,
    /// The longest any elastic work waited for a grant over the probe window; a waiter still
    /// queued counts with its wait so far. While the share is at or above its floor the head of
    /// the queue waits at most one second of refill plus a tick (debt is capped at one second
    /// of tokens; docs/design.md §4), behind the slices of the waiters ahead of it.
    pub longest_wait: Duration,
    /// CPU time granted.
    pub acquired: Duration,
    /// Granted CPU time given back unused.
    pub returned: Duration,
    /// CPU time run past grants (charged as debt).
    pub over_limit: Duration,
    /// CPU time elastic work ran, as measured (`acquired − returned + over_limit` once
    /// settled).
    pub used: Duration,
    /// The `Elastic`'s own class is held back now: by the backlog brake, the quota brake or a
    /// quiet reading ([`quiet_hold`](Self::quiet_hold)).
    pub braked: bool,
    /// Times the backlog brake engaged.
    pub brakes: u64,
    /// Time spent braked by the backlog brake (brakes that ended).
    pub braked_time: Duration,
    /// Inside a CPU quota: times the quota brake held elastic work back because the process had
    /// spent all but a reserve of a period's quota over the last period, so that the kernel
    /// would otherwise soon stop the whole cgroup, the foreground included. It is armed for a
    /// minute after a throttled period (0 without a quota, without throttling, or with
    /// [`Inputs::quota_headroom`](crate::settings::Inputs::quota_headroom) off).
    pub quota_brakes: u64,
    /// Time the quota brake held elastic work back (brakes that ended).
    pub quota_braked_time: Duration,
    /// Times elastic work yielded its thread's CPU to the OS at a poll quantum
    /// ([`Enforcement::os_yield`](crate::settings::Enforcement::os_yield); 0 when it is off).
    pub os_yields: u64,
    /// Times a thread of the idle pool moved a runtime worker queued behind another onto its own
    /// CPU ([`Enforcement::unstack_workers`](crate::settings::Enforcement::unstack_workers); 0
    /// without a pool).
    pub idle_unstacked: u64,
    /// CFS periods in which the process's cgroup ran out of its CPU quota, counted since a
    /// quota was first seen after attach (0 without a quota or with
    /// the [`throttling`](crate::settings::Inputs::throttling) input off). Each one steps the
    /// share down for a probe window.
    pub throttled_periods: u64,
    /// The CPU quota of the process's cgroup in force now, in CPUs, fractional (`None`: no limit,
    /// or no runtime attached yet). Read when a runtime is attached and again every
    /// [`ElasticBuilder::quota_reread`](crate::ElasticBuilder::quota_reread); a reading that
    /// fails (a file unreadable or garbage) keeps the last good one.
    pub quota_cpus: Option<f64>,
    /// The enforcement period of that quota.
    pub quota_period: Option<Duration>,
    /// Times the quota in force changed after the runtime was attached (appeared, went, or
    /// changed its figure): an in-place resize, a vertical autoscaler. [`cpus`](Self::cpus),
    /// the rates, the holder caps, the headroom and the quota brake follow it.
    pub quota_changes: u64,
    /// Inside a CPU quota: the CPUs elastic work may take now, every class together, which is
    /// 90 % of what the rest of the process leaves of the quota, its CPU taken half way from
    /// its mean over the last 5 ticks to the busiest of them (`None`: no quota, no reading yet, or
    /// [`Inputs::quota_headroom`](crate::settings::Inputs::quota_headroom) off). The token rate is
    /// held to it (never below the controller's floor), whatever the share.
    pub quota_headroom: Option<f64>,
    /// Elastic work's CPU overhead (scheduler work its yields cause: reschedules, wake-ups,
    /// parking), as a fraction of the running time charged, as the governor last measured it
    /// in a window without foreground load; the token rate is `share × cpus / (1 + overhead)`.
    /// 0 until measured, on a manual clock, and while foreground load keeps the windows busy.
    pub overhead: f64,
    /// The share of the idle class: work on this `Elastic`'s idle pool
    /// (`Elastic::idle_runtime`), paced by its own bucket (`None`: no pool made). Up to 1 (every
    /// CPU), steered by a target 4 × the elastic one, the cgroup's throttling and the quota's
    /// headroom; at most [`share`](Self::share) while the threads beside the runtime wait over
    /// their allowance.
    pub idle_share: Option<f64>,
    /// The idle class's queue ledger (`None`: no pool made, or every pool and its work gone).
    pub idle_queue: Option<QueueSnapshot>,
    /// Where [`Elastic::spawn`](crate::Elastic::spawn) runs elastic work:
    /// [`Runtime`](Placement::Runtime) or [`IdlePool`](Placement::IdlePool), or
    /// [`Auto`](Placement::Auto) before the first spawn decides (a pinned setting shows as
    /// itself from the start).
    pub placement: Placement,
    /// Why it goes there.
    pub placement_reason: PlacementReason,
    /// Futures [`Placement::Auto`] took back from the idle pool to the runtime because the
    /// pool's threads got no CPU for ~0.3 s (normal-priority threads kept every core busy), so a
    /// lock one holds is let go; they go back once the pool has run unstarved for 5 s.
    pub idle_returns: u64,
    /// Elastic polls (and `Pacer` iterations) on the runtime that ran past 4 quanta: a long
    /// library call (compression, hashing, a TLS handshake) between two yields holds its worker
    /// that long, whatever the share. Where they add up, run the work on the idle pool
    /// ([`Elastic::spawn`](crate::Elastic::spawn) moves it there) or cut
    /// the call into smaller pieces with a `Pacer::pace` between them.
    pub long_polls: u64,
    /// The outlier trap over the probe window: polls that ran longer than the
    /// [threshold](crate::settings::OutlierThreshold) (the controller's target by default)
    /// grouped by the spawn site of their task, most time held first, and the longest
    /// foreground waits with the sites of the polls that held their worker meanwhile. Without
    /// `tokio_unstable` only elastic polls, by the place their adapter was made.
    pub outliers: Outliers,
    /// The classes that split the elastic share, as of the last tick: `"default"` (work paced
    /// through the `Elastic` handle itself) first, then every live class made with
    /// [`Elastic::class`](crate::Elastic::class).
    pub classes: Vec<ClassSnapshot>,
    /// The whole probe window.
    pub window: Window,
    /// The whole queue ledger, as the work queue reports it (in nanoseconds).
    pub queue: QueueSnapshot,
    /// Whether the governor runs, and if not, why it stopped. Once it has stopped every class's
    /// queue and every gate is closed and no brake holds: paced work runs unpaced, gates refuse.
    pub governor: GovernorState,
    /// Governor ticks whose metrics export panicked (in the installed `metrics` recorder): each
    /// cost that tick's metrics, not the governor (a program built with `panic = "abort"`
    /// aborts there instead, as on any panic). Always 0 without feature `metrics`.
    pub recorder_panics: u64,
}

/// Whether the governor runs ([`Snapshot::governor`]). It never restarts: once it has stopped,
/// every queue and gate of its `Elastic` is closed (waiters end, paced work runs unpaced, gates
/// refuse, `RejectReason::Closed`) and no brake holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GovernorState {
    /// It steers: its thread ticks (or, on a manual clock, the test ticks it).
    #[default]
    Running,
    /// [`Elastic::shutdown`](crate::Elastic::shutdown) stopped it.
    ShutDown,
    /// Its thread ended without a shutdown (a test's fault injection; otherwise it ends only
    /// once no handle is left to see it).
    Exited,
    /// Its thread panicked.
    Panicked,
}

impl GovernorState {
    /// Whether the governor still steers.
    ///
    /// ```
    /// use elastic_cpu_pacer::snapshot::GovernorState;
    /// let elastic = elastic_cpu_pacer::Elastic::builder().build()?;
    /// assert!(elastic.snapshot().governor.is_running());
    /// elastic.shutdown();
    /// assert_eq!(elastic.snapshot().governor, GovernorState::ShutDown);
    /// # Ok::<(), elastic_cpu_pacer::BuildError>(())
    /// ```
    pub fn is_running(self) -> bool {
        self == GovernorState::Running
    }
}

impl Snapshot {
    pub(crate) fn new(
        record: &TickRecord,
        window: Window,
        queue: QueueSnapshot,
        idle_queue: Option<QueueSnapshot>,
        braked: bool,
        os_yields: u64,
        long_polls: u64,
    ) -> Snapshot {
        let own = record.class(ClassKind::Elastic);
        let reading = &record.signal.reading;
        let balance = Duration::from_nanos(queue.balance_nanos.unsigned_abs());
        let (tokens, debt) = if queue.balance_nanos >= 0 {
            (balance, Duration::ZERO)
        } else {
            (Duration::ZERO, balance)
        };
        Snapshot {
            share: own.map_or(0.0, |c| c.share),
            min_share: record.share_bounds.0,
            max_share: record.share_bounds.1,
            paused: record.paused,
            probe_source: ProbeSource::None,
            cpus: record.cpus,
            cpus_source: record.cpus_source,
            ticks: record.ticks,
            target: record.target,
            target_source: record.target_source,
            quiet_p99: record.quiet.sched,
            quiet_run_queue_delay: record.quiet.run_queue,
            quiet_bystander_delay: record.quiet.bystanders,
            quiet_hold: record.quiet_hold,
            sched_p99: window.queue_latency.all.p99,
            signal_p99: record.signal.value,
            signal_source: record.signal.source,
            io_p99: reading.io_p99,
            io_probe: reading.io.clone(),
            io_quiet: reading.io_quiet,
            io_period: reading.io_period,
            run_queue_delay: reading.run_queue_delay,
            bystander_delay: reading.bystander_delay,
            run_queue_wait: reading.run_queue_wait,
            elastic_run_queue_wait: reading.elastic_run_queue_wait,
            run_queue: reading.run_queue.clone(),
            fg_poll_p99: window.poll_time.foreground.p99,
            elastic_poll_p99: window.poll_time.elastic.p99,
            tokens,
            debt,
            waiters: queue.waiters,
            grants: queue.grants,
            waits: queue.waits,
            waited: Duration::from_nanos(queue.wait_nanos),
            longest_wait: own.map_or(Duration::ZERO, |c| c.longest_wait),
            acquired: Duration::from_nanos(queue.acquired_nanos),
            returned: Duration::from_nanos(queue.returned_nanos),
            over_limit: Duration::from_nanos(queue.over_limit_nanos),
            used: Duration::from_nanos(queue.used_nanos),
            braked,
            brakes: record.brakes,
            braked_time: record.braked_time,
            quota_brakes: record.quota_brakes,
            quota_braked_time: record.quota_braked_time,
            os_yields,
            idle_unstacked: 0,
            throttled_periods: record.throttled_periods,
            quota_cpus: record.quota_cpus,
            quota_period: record.quota_period,
            quota_changes: record.quota_changes,
            quota_headroom: record.quota_headroom,
            overhead: record.overhead,
            idle_share: record.class(ClassKind::Idle).map(|c| c.share),
            idle_queue,
            placement: Placement::Auto,
            placement_reason: PlacementReason::Undecided,
            idle_returns: 0,
            long_polls,
            outliers: Outliers::default(),
            classes: record
                .classes
                .iter()
                .filter_map(ClassSnapshot::of)
                .collect(),
            window,
            queue,
            governor: GovernorState::Running,
            recorder_panics: 0,
        }
    }

    /// The token balance in CPU-seconds, negative while in debt: `tokens − debt`.
    ///
    /// ```
    /// let s = elastic_cpu_pacer::Snapshot::default();
    /// assert_eq!(s.balance_secs_f64(), 0.0);
    /// ```
    pub fn balance_secs_f64(&self) -> f64 {
        self.tokens.as_secs_f64() - self.debt.as_secs_f64()
    }
}

/// What measures the runtime's scheduling latency ([`Snapshot::probe_source`]).
///
/// ```
/// use elastic_cpu_pacer::{snapshot::ProbeSource, Elastic};
/// let elastic = Elastic::builder().build()?;
/// assert_eq!(elastic.snapshot().probe_source, ProbeSource::None);
/// let rt = elastic.runtime(tokio::runtime::Builder::new_current_thread()).build()?;
/// // `TaskHooks` where the library was built with `--cfg tokio_unstable`, else `Sampler`.
/// assert_ne!(elastic.snapshot().probe_source, ProbeSource::None);
/// # drop(rt);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProbeSource {
    /// Nothing yet: no runtime attached (or a manual clock, where the test records polls).
    #[default]
    None,
    /// tokio's task hooks: every poll timed, exactly.
    TaskHooks,
    /// The sampling probe: probe tasks timed at the back of the workers' run queues (without
    /// `tokio_unstable`, or a runtime attached with [`Elastic::attach`](crate::Elastic::attach)
    /// that was not built with the hooks).
    Sampler,
}

/// One class of elastic work in a [`Snapshot`] (see [`Elastic::class`](crate::Elastic::class)).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ClassSnapshot {
    /// Its name: the `class` label of its metrics.
    pub name: std::sync::Arc<str>,
    /// Its weight, cap and floor, as set.
    pub weight: f64,
    /// A share of the CPUs it never exceeds.
    pub cap: Option<f64>,
    /// A share it gets while it has work, within the elastic share.
    pub floor: f64,
    /// Its part of the elastic share now: what it is entitled to (0 while it has no work and
    /// others do).
    pub share: f64,
    /// CPU time charged to its work since it was made.
    pub cpu: Duration,
    /// Its work waiting for a grant.
    pub waiters: usize,
    /// The longest its work waited for a grant over the probe window.
    pub longest_wait: Duration,
}

impl ClassSnapshot {
    fn of(record: &ClassRecord) -> Option<ClassSnapshot> {
        let part = record.part.as_ref()?;
        Some(ClassSnapshot {
            name: part.name.clone(),
            weight: part.weight,
            cap: part.cap,
            floor: part.floor,
            share: record.applied,
            cpu: part.charged,
            waiters: part.waiters,
            longest_wait: record.longest_wait,
        })
    }
}
