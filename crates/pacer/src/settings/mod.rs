//! The grouped settings an [`ElasticBuilder`](crate::ElasticBuilder) takes besides the target,
//! the share bounds and the CPUs: how the share moves ([`Profile`], [`Steps`]), which readings
//! steer it ([`Inputs`]), how grants are held and timed ([`Enforcement`], [`Timing`]) and the
//! backlog brake ([`Brake`]). Each group has one setter; its `Default` is the library's default.

mod class;
mod profile;

use std::time::Duration;

pub use self::class::{ClassSettings, DEFAULT_CLASS};
pub use self::profile::{Profile, Steps};

/// Which readings steer the share besides tokio's scheduling latency, and whether the quota's
/// headroom caps it. All on by default; each reads nothing where it does not apply (no quota,
/// not Linux), and the snapshot says so.
///
/// ```
/// use elastic_cpu_pacer::settings::Inputs;
/// let elastic = elastic_cpu_pacer::Elastic::builder()
///     .inputs(Inputs::default().io_wakeup(false))
///     .build()?;
/// assert!(!elastic.snapshot().io_probe.is_on());
/// # Ok::<(), elastic_cpu_pacer::BuildError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Inputs {
    /// The I/O wake-up probe: a canary through the runtime's I/O driver (a `timerfd` expiry on
    /// Linux, a datagram elsewhere) every 2 ms while the runtime is busy (2 ms ÷ busy² while it
    /// is not, up to 20 ms; every 50 ms while nothing is paced), read by a task; its window
    /// p99 over [`IO_TARGET_FACTOR`](crate::snapshot::IO_TARGET_FACTOR) joins the signal once
    /// the window holds 100 canaries. It sees a readable socket waiting for a worker to poll
    /// the driver, which tokio's task clock cannot. Started by
    /// [`Elastic::runtime`](crate::Elastic::runtime) (which enables the runtime's I/O driver)
    /// or [`Elastic::start_io_probe`](crate::Elastic::start_io_probe).
    pub io_wakeup: bool,
    /// The OS run-queue delay of the runtime's threads: the mean wait for a CPU per timeslice of
    /// the threads serving the foreground over the window, from Linux's per-thread
    /// `schedstat` once per tick (threads in `pace_blocking` count as elastic).
    pub run_queue: bool,
    /// Inside a CPU quota, the cgroup's throttling: a tick that saw a throttled period counts as
    /// over the target for a whole window (read from `cpu.stat` once per tick). The kernel stops
    /// the whole cgroup, foreground included, for the rest of such a period, and the probes
    /// hardly see it.
    pub throttling: bool,
    /// Inside a CPU quota, hold elastic work to 90 % of what the rest of the process leaves of the
    /// quota, its CPU taken half way from its mean over the last 5 ticks to the busiest of them
    /// (feed-forward: throttling acts after a period
    /// ran out, this keeps it from running out), and, for a minute after a throttled period
    /// (always, with [`throttling`](Self::throttling) off), stop it within a period once the
    /// process has spent all but a reserve of a period's quota over the last period (the quota
    /// brake: the governor thread then reads the process's CPU time as often as that could
    /// happen, every 1 to 25 ms at the kernel's default period).
    pub quota_headroom: bool,
}

impl Default for Inputs {
    fn default() -> Self {
        Inputs {
            io_wakeup: true,
            run_queue: true,
            throttling: true,
            quota_headroom: true,
        }
    }
}

impl Inputs {
    /// Set [`io_wakeup`](Self::io_wakeup).
    pub fn io_wakeup(mut self, io_wakeup: bool) -> Self {
        self.io_wakeup = io_wakeup;
        self
    }

    /// Set [`run_queue`](Self::run_queue).
    pub fn run_queue(mut self, run_queue: bool) -> Self {
        self.run_queue = run_queue;
        self
    }

    /// Set [`throttling`](Self::throttling).
    pub fn throttling(mut self, throttling: bool) -> Self {
        self.throttling = throttling;
        self
    }

    /// Set [`quota_headroom`](Self::quota_headroom).
    pub fn quota_headroom(mut self, quota_headroom: bool) -> Self {
        self.quota_headroom = quota_headroom;
        self
    }

    /// Only tokio's scheduling latency steers; no quota cap.
    pub fn scheduling_only() -> Inputs {
        Inputs {
            io_wakeup: false,
            run_queue: false,
            throttling: false,
            quota_headroom: false,
        }
    }
}

/// How grants of CPU time are held and timed.
///
/// ```
/// use elastic_cpu_pacer::settings::Enforcement;
/// use std::time::Duration;
/// let elastic = elastic_cpu_pacer::Elastic::builder()
///     .enforcement(Enforcement::default().quantum(Duration::from_micros(100)))
///     .build()?;
/// # drop(elastic);
/// # Ok::<(), elastic_cpu_pacer::BuildError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Enforcement {
    /// CPU time one grant hands out (10 ms ..= 100 ms). Long slices keep few grants in flight.
    pub slice: Duration,
    /// How long one elastic poll (or one stretch of a `Pacer` loop) may run before it yields
    /// to the scheduler (10 µs ..= `slice`). A foreground task that lands behind an elastic poll
    /// waits out the rest of it, so the quantum sets the foreground's typical extra wait; a
    /// yield costs a reschedule and an I/O driver poll, a few µs.
    pub quantum: Duration,
    /// At each quantum's yield, also yield the thread's CPU to the OS (`sched_yield`), so a
    /// thread waiting for that core (a client on the same machine, a blocking thread) gets it
    /// now rather than when the kernel's time slice ends; `pace_blocking` loops then run in
    /// quantum stretches too. One system call per quantum yield.
    pub os_yield: bool,
    /// On an idle pool's threads (which skip `os_yield`: at idle priority the kernel gives the
    /// core to any thread it places there): at a quantum, when two of the runtime's workers are
    /// runnable on one CPU and none on this thread's, move one of them here (Linux: pin it to
    /// this CPU for a moment, then put its own affinity mask back). A CPU that runs
    /// idle-priority work never goes idle, so the kernel can leave a worker queued behind
    /// another for up to a time slice while this CPU runs elastic work. The look reads the
    /// workers' `/proc` `stat` files and is spaced to cost at most 1/20 of the time between
    /// looks, down to 1/160 while looks find no two on one CPU (with no more workers than
    /// CPUs). Counted in
    /// [`Snapshot::idle_unstacked`](crate::snapshot::Snapshot::idle_unstacked).
    /// Turn it off if something else sets the workers' affinity while they run.
    pub unstack_workers: bool,
    /// At most `ceil(share × cpus)` grants held at once, so elastic work never occupies more
    /// workers at a time than its share pays for. Turn it off when paced work spends much of its
    /// grant waiting on I/O: a holder waiting on I/O keeps its place.
    pub cap_concurrency: bool,
    /// How elastic polls are timed.
    pub timing: Timing,
}

impl Default for Enforcement {
    fn default() -> Self {
        Enforcement {
            slice: DEFAULT_SLICE,
            quantum: DEFAULT_QUANTUM,
            os_yield: true,
            unstack_workers: true,
            cap_concurrency: true,
            timing: Timing::Adaptive,
        }
    }
}

impl Enforcement {
    /// Set [`slice`](Self::slice).
    pub fn slice(mut self, slice: Duration) -> Self {
        self.slice = slice;
        self
    }

    /// Set [`quantum`](Self::quantum).
    pub fn quantum(mut self, quantum: Duration) -> Self {
        self.quantum = quantum;
        self
    }

    /// Set [`os_yield`](Self::os_yield).
    pub fn os_yield(mut self, os_yield: bool) -> Self {
        self.os_yield = os_yield;
        self
    }

    /// Set [`unstack_workers`](Self::unstack_workers).
    pub fn unstack_workers(mut self, unstack_workers: bool) -> Self {
        self.unstack_workers = unstack_workers;
        self
    }

    /// Set [`cap_concurrency`](Self::cap_concurrency).
    pub fn cap_concurrency(mut self, cap_concurrency: bool) -> Self {
        self.cap_concurrency = cap_concurrency;
        self
    }

    /// Set [`timing`](Self::timing).
    pub fn timing(mut self, timing: Timing) -> Self {
        self.timing = timing;
        self
    }
}

/// How elastic polls are timed (what is charged against grants).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Timing {
    /// Polls and stretches that follow one of 50 µs or more on the thread's CPU clock (a system
    /// call, a few hundred ns, then below 1 % of the poll), short ones on the wall clock.
    #[default]
    Adaptive,
    /// Every poll on the thread's CPU clock: exact, a system call per read.
    ThreadCpu,
    /// Every poll on the wall clock: cheapest; time the OS gives the core to another thread
    /// mid-poll is charged too.
    Wall,
}

/// The backlog brake: when a foreground task is polled after waiting at least the threshold in
/// a run queue, elastic work gives back its grants at its next poll and gets none until no task
/// has waited that long for [`DEFAULT_BRAKE_HOLD`] (at most [`BRAKE_MAX`] at a time). Its tokens
/// keep accruing, so the share is deferred, not lost.
///
/// ```
/// use elastic_cpu_pacer::settings::Brake;
/// use std::time::Duration;
/// let elastic = elastic_cpu_pacer::Elastic::builder()
///     .brake(Brake::At(Duration::from_millis(2)))
///     .build()?;
/// assert!(!elastic.snapshot().braked);
/// # Ok::<(), elastic_cpu_pacer::BuildError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Brake {
    /// At [`BRAKE_FACTOR`] × the target while the controller runs; off with a
    /// [`fixed_share`](crate::ElasticBuilder::fixed_share).
    #[default]
    Default,
    /// At this foreground run-queue wait (at least 10 µs).
    At(Duration),
    /// No brake: only the controller (or the fixed share) decides.
    Off,
}

impl Brake {
    /// The threshold, or `None` when the brake is off.
    pub(crate) fn threshold(self, target: Duration, fixed: bool) -> Option<Duration> {
        match self {
            Brake::Off => None,
            Brake::At(at) => Some(at),
            Brake::Default if fixed => None,
            Brake::Default => Some(target.saturating_mul(BRAKE_FACTOR)),
        }
    }
}

/// Which polls and waits the outlier trap keeps
/// ([`Snapshot::outliers`](crate::Snapshot::outliers)): those longer than this threshold.
///
/// ```
/// use std::time::Duration;
/// use elastic_cpu_pacer::settings::OutlierThreshold;
/// let elastic = elastic_cpu_pacer::Elastic::builder()
///     .outlier_threshold(OutlierThreshold::At(Duration::from_millis(1)))
///     .build()?;
/// assert_eq!(elastic.snapshot().outliers.threshold, Some(Duration::from_millis(1)));
/// # Ok::<(), elastic_cpu_pacer::BuildError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OutlierThreshold {
    /// The controller's target as it is now (measured, or the builder's), but at least
    /// [`OUTLIER_FLOOR`]: a measured target can be a fraction of a millisecond, and below a
    /// millisecond a busy host's preemptions stretch enough ordinary polls past it to bury a
    /// real holder (docs/results.md).
    #[default]
    Target,
    /// This duration (at least 1 µs).
    At(Duration),
    /// No trap: no poll pays more than it does without it.
    Off,
}

/// The least threshold [`OutlierThreshold::Target`] sets: a library call of a millisecond.
pub const OUTLIER_FLOOR: Duration = Duration::from_millis(1);

impl OutlierThreshold {
    /// The threshold for the controller's `target` (`None`: off).
    pub(crate) fn threshold(self, target: Duration) -> Option<Duration> {
        match self {
            OutlierThreshold::Target => Some(target.max(OUTLIER_FLOOR)),
            OutlierThreshold::At(d) => Some(d),
            OutlierThreshold::Off => None,
        }
    }
}

/// Where [`Elastic::spawn`](crate::Elastic::spawn) and
/// [`Elastic::spawn_blocking`](crate::Elastic::spawn_blocking) run elastic work.
///
/// The two places protect the foreground differently. On the runtime, the token bucket bounds
/// elastic work's total CPU and the poll quantum how long a foreground task waits behind one
/// elastic poll, but a call that runs for milliseconds without returning (compression,
/// hashing, a TLS handshake) holds its worker that long, whatever the share. On the idle pool,
/// threads at the OS's idle priority (`SCHED_IDLE`), the kernel takes the core from elastic work
/// the moment a foreground thread wants it, a long call included; but inside a CPU quota idle
/// threads spend the quota like any other, and there the pool's own bucket (the idle class)
/// and the quota's headroom are what hold the total.
///
/// **Priority inversion.** Work on the idle pool that holds a lock the foreground needs (a
/// mutex, a page latch, a pool slot) gets no core while the foreground keeps the cores busy, so
/// the foreground waits for the lock as long as it keeps them busy. Pin [`Runtime`](Self::Runtime)
/// for elastic work that shares locks with the foreground, that must progress on a saturated
/// machine (on the runtime it keeps at least the floor of the share), or where lowering a
/// thread's priority is not allowed.
///
/// **Lifetime** is the same in both places: spawned work runs to its end, also once the last
/// `Elastic` handle is dropped (the pool then ends once its tasks have);
/// [`Elastic::shutdown`](crate::Elastic::shutdown) cancels what is left on the pool.
///
/// ```
/// use elastic_cpu_pacer::settings::Placement;
/// let elastic = elastic_cpu_pacer::Elastic::builder().placement(Placement::Runtime).build()?;
/// # drop(elastic);
/// # Ok::<(), elastic_cpu_pacer::BuildError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Placement {
    /// Where the OS grants idle priority (`SCHED_IDLE`): the runtime while elastic polls are
    /// short, the idle pool once they run mostly long, or from the first spawn when the runtime
    /// has more workers than CPUs; blocking work the pool's blocking threads at once. Elsewhere
    /// the runtime.
    /// Said, with the reason, in [`Snapshot::placement`](crate::Snapshot::placement).
    #[default]
    Auto,
    /// The runtime `spawn` is called from.
    Runtime,
    /// The `Elastic`'s idle pool (feature `idle-pool`; without it, the runtime).
    IdlePool,
}

/// The default brake threshold, in multiples of the controller's target.
pub use elastic_cpu_core::decide::BRAKE_FACTOR;
/// Quiet time (no foreground task over the threshold) after which the brake releases; the
/// longest one brake lasts (after a brake that hit it, the brake stays off four times as long,
/// so a sustained overload, the controller's job, cannot starve elastic work below its floor).
pub use elastic_cpu_core::decide::{BRAKE_MAX, DEFAULT_BRAKE_HOLD};

/// How often the governor reads the CPU quota and the affinity mask again when the builder is
/// given no period ([`quota_reread`](crate::ElasticBuilder::quota_reread)).
pub const DEFAULT_QUOTA_REREAD: Duration = Duration::from_secs(1);

/// The controller's target when the builder is given none
/// ([`target_p99`](crate::ElasticBuilder::target_p99)): CockroachDB's default.
pub const DEFAULT_TARGET: Duration = Duration::from_millis(1);

/// Default CPU time a grant hands out.
pub const DEFAULT_SLICE: Duration = Duration::from_millis(100);

/// Default poll quantum. A foreground task that lands behind an elastic poll waits out the rest
/// of it, so the quantum bounds the foreground's typical extra wait once elastic work keeps the
/// workers busy; shorter quanta cost more yields.
pub const DEFAULT_QUANTUM: Duration = Duration::from_micros(50);
