//! The one builder for every setting, and its typed errors.

use std::fmt;
#[cfg(feature = "test-util")]
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "test-util")]
use elastic_cpu_core::{Clock, ManualClock};
use elastic_cpu_core::{ControllerConfig, MonotonicClock, SettingError, MAX_SLICE, MIN_SLICE};
use elastic_cpu_probe::ProbeConfig;

use crate::running::RunningTime;
use crate::shared::QueueClock;

/// Named sets of controller constants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Profile {
    /// The library default: the step rule of CockroachDB with steps sized so the limit settles
    /// within a few seconds, and a window short enough that the controller sees the effect of
    /// its own steps before it takes many more (see the README for the measurements).
    #[default]
    Default,
    /// CockroachDB's constants (+0.1 %/s, −0.2 %/s, 2.5 s window): slow by design, made for
    /// minutes-long backups on 8-vCPU nodes.
    Cockroach,
}

impl Profile {
    /// The controller constants of this profile.
    pub fn controller(self) -> ControllerConfig {
        match self {
            Profile::Cockroach => ControllerConfig::cockroach(),
            Profile::Default => ControllerConfig {
                delta_per_sec: 0.05,
                window: Duration::from_secs(1),
                max_boost: 8,
                ..ControllerConfig::cockroach()
            },
        }
    }
}

/// Why [`ElasticBuilder::build`] failed.
///
/// ```
/// use elastic_cpu_pacer::{BuildError, Elastic};
///
/// let Err(BuildError::Setting(e)) = Elastic::builder().min_share(2.0).build() else { panic!() };
/// assert_eq!(e.setting, "min_share");
/// assert_eq!(e.to_string(), "invalid `min_share` = 2: expected 0.01 ..= 1.0");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// A setting is out of range: it names the builder method (or the field of
    /// [`ControllerConfig`] / [`ProbeConfig`]), the value, and what it accepts.
    Setting(SettingError),
    /// The OS refused to start the governor thread.
    GovernorThread(std::io::Error),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Setting(e) => e.fmt(f),
            BuildError::GovernorThread(e) => write!(f, "cannot start the governor thread: {e}"),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Setting(e) => Some(e),
            BuildError::GovernorThread(e) => Some(e),
        }
    }
}

impl From<SettingError> for BuildError {
    fn from(e: SettingError) -> Self {
        BuildError::Setting(e)
    }
}

/// Default CPU time a grant hands out. Long slices keep few grants in flight; docs/design.md §8
/// measured 100 ms slices holding foreground p99 where 10–20 ms slices did not.
pub const DEFAULT_SLICE: Duration = Duration::from_millis(100);

/// Default poll quantum: how long one elastic poll may run before `PacedStream` or `Pacer`
/// yields back to the scheduler. A foreground task that lands behind an elastic poll waits out
/// the rest of it, so the quantum sets the foreground's typical extra wait once elastic work
/// keeps the workers busy: in the demo at a 0.6 limit, foreground p99 was ~0.9 ms with 250 µs,
/// ~0.75 ms with 100 µs and ~0.5 ms with 50 µs (docs/design.md §5). A yield costs a
/// reschedule and an I/O driver poll, a few µs.
pub const DEFAULT_QUANTUM: Duration = Duration::from_micros(50);

/// Builds an [`Elastic`](crate::Elastic): every setting, validated in [`build`](ElasticBuilder::build).
///
/// ```
/// use std::time::Duration;
/// let elastic = elastic_cpu_pacer::Elastic::builder()
///     .target_p99(Duration::from_micros(500))
///     .build()
///     .unwrap();
/// assert!(elastic.snapshot().limit > 0.0);
/// ```
#[derive(Clone, Debug)]
pub struct ElasticBuilder {
    pub(crate) controller: ControllerConfig,
    pub(crate) target_p99: Option<Duration>,
    pub(crate) delta_per_sec: Option<f64>,
    pub(crate) min_share: Option<f64>,
    pub(crate) max_share: Option<f64>,
    pub(crate) initial_share: Option<f64>,
    pub(crate) fixed_limit: Option<f64>,
    pub(crate) slice: Duration,
    pub(crate) quantum: Duration,
    pub(crate) os_yield: bool,
    pub(crate) probe: ProbeConfig,
    pub(crate) running: RunningTime,
    #[cfg(feature = "test-util")]
    pub(crate) manual: Option<ManualClock>,
    pub(crate) cpus: Option<f64>,
    pub(crate) brake: BrakeSetting,
    pub(crate) cap_concurrency: bool,
    pub(crate) throttle_signal: bool,
    pub(crate) quota_headroom: bool,
    pub(crate) io_signal: bool,
    pub(crate) run_queue_signal: bool,
}

/// How the builder was told to set up the backlog brake.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum BrakeSetting {
    /// At `BRAKE_FACTOR` × the target when the controller runs; off with a fixed limit.
    Default,
    /// At this foreground queue wait.
    At(Duration),
    Off,
}

/// The default brake threshold, in multiples of the controller's p99 target.
pub const BRAKE_FACTOR: u32 = 4;

impl Default for ElasticBuilder {
    fn default() -> Self {
        ElasticBuilder {
            controller: Profile::Default.controller(),
            target_p99: None,
            delta_per_sec: None,
            min_share: None,
            max_share: None,
            initial_share: None,
            fixed_limit: None,
            slice: DEFAULT_SLICE,
            quantum: DEFAULT_QUANTUM,
            os_yield: true,
            probe: ProbeConfig::default(),
            running: RunningTime::Adaptive,
            #[cfg(feature = "test-util")]
            manual: None,
            cpus: None,
            brake: BrakeSetting::Default,
            cap_concurrency: true,
            throttle_signal: true,
            quota_headroom: true,
            io_signal: true,
            run_queue_signal: true,
        }
    }
}

impl ElasticBuilder {
    /// Controller constants from a named profile (replaces earlier [`controller`](Self::controller)).
    pub fn profile(mut self, profile: Profile) -> Self {
        self.controller = profile.controller();
        self
    }

    /// All controller constants at once. The probe's tick and window follow
    /// `config.tick` / `config.window`.
    pub fn controller(mut self, config: ControllerConfig) -> Self {
        self.controller = config;
        self
    }

    /// Target p99 scheduling latency (50 µs ..= 1 s). Pick it a little above the p99 your
    /// runtime shows with no elastic work: `snapshot().sched_p99` tells.
    pub fn target_p99(mut self, target: Duration) -> Self {
        self.target_p99 = Some(target);
        self
    }

    /// Controller step of the limit per second (0.0001 ..= 1.0).
    pub fn delta_per_sec(mut self, delta: f64) -> Self {
        self.delta_per_sec = Some(delta);
        self
    }

    /// Lowest limit (the elastic share of the CPUs) the controller goes to, and its start
    /// unless [`initial_share`](Self::initial_share) says otherwise (0.01 ..= 1.0).
    pub fn min_share(mut self, limit: f64) -> Self {
        self.min_share = Some(limit);
        self
    }

    /// Highest limit the controller goes to (0.05 ..= 1.0, at least `min_share`).
    pub fn max_share(mut self, limit: f64) -> Self {
        self.max_share = Some(limit);
        self
    }

    /// Limit the controller starts from (`min_share ..= max_share`). The token bucket starts
    /// full at this limit: see [`Elastic`](crate::Elastic#tokens).
    pub fn initial_share(mut self, limit: f64) -> Self {
        self.initial_share = Some(limit);
        self
    }

    /// Turn the controller off and cap elastic work at this limit, a fixed share of the
    /// runtime's CPUs (above 0, at most 1): a static cap, still without bursts beyond the
    /// bucket's one second.
    pub fn fixed_limit(mut self, limit: f64) -> Self {
        self.fixed_limit = Some(limit);
        self
    }

    /// The backlog brake: when a foreground task is polled after waiting at least `at` in a run
    /// queue, elastic work gives back its grants at its next poll and gets none until no task
    /// has waited that long for [`DEFAULT_BRAKE_HOLD`](crate::DEFAULT_BRAKE_HOLD) (at most
    /// [`BRAKE_MAX`](crate::BRAKE_MAX) at a time). Its tokens keep accruing, so the elastic
    /// limit is deferred, not lost.
    ///
    /// Default: [`BRAKE_FACTOR`] × the p99 target while the controller runs; off with
    /// [`fixed_limit`](Self::fixed_limit) unless set here. Must be ≥ 10 µs.
    ///
    /// ```
    /// use std::time::Duration;
    /// let elastic = elastic_cpu_pacer::Elastic::builder()
    ///     .brake_at(Duration::from_millis(2))
    ///     .build()
    ///     .unwrap();
    /// assert!(!elastic.snapshot().braked);
    /// ```
    pub fn brake_at(mut self, at: Duration) -> Self {
        self.brake = BrakeSetting::At(at);
        self
    }

    /// Cap the grants held at once at the CPUs the current limit pays for, rounded up
    /// (`ceil(limit × cpus)`): at a 0.4 limit of 2 CPUs, one elastic task runs at a time, and
    /// the other worker is never taken by elastic work. Default on; it cut the demo's
    /// foreground p99 by about a fifth at the same elastic throughput. Turn it off when paced
    /// work spends much of its grant waiting on I/O: a holder waiting on I/O keeps its place.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().cap_concurrency(false).build().unwrap();
    /// # drop(elastic);
    /// ```
    pub fn cap_concurrency(mut self, on: bool) -> Self {
        self.cap_concurrency = on;
        self
    }

    /// Whether the cgroup's CPU throttling steers the limit too (default: on). Inside a CPU quota
    /// the kernel stops the whole cgroup, foreground included, for the rest of each period whose
    /// quota is spent, and the probe hardly sees it. With this on, the governor reads the
    /// cgroup's `cpu.stat` once per tick (once a runtime with a quota is attached) and counts a
    /// tick that saw a throttled period as over the target for a whole probe window, as if the
    /// foreground had waited that long. Without a quota it reads nothing. A fixed limit ignores
    /// it. [`Snapshot::throttled_periods`](crate::Snapshot::throttled_periods) counts them.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().throttle_signal(false).build().unwrap();
    /// assert_eq!(elastic.snapshot().throttled_periods, 0);
    /// ```
    pub fn throttle_signal(mut self, on: bool) -> Self {
        self.throttle_signal = on;
        self
    }

    /// Inside a CPU quota, hold elastic work to 90 % of what the rest of the process leaves of
    /// the quota (on by default; no effect without a quota). Each tick the governor takes the
    /// process's CPU time less the running time charged to elastic work; the busiest of the
    /// last 5 ticks stands for the foreground. The throttle signal
    /// ([`throttle_signal`](Self::throttle_signal)) acts after a throttled period; this cap
    /// keeps the period from running out. [`Snapshot::quota_headroom`](crate::Snapshot::quota_headroom)
    /// shows it.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().quota_headroom(false).build().unwrap();
    /// assert_eq!(elastic.snapshot().quota_headroom, None);
    /// ```
    pub fn quota_headroom(mut self, on: bool) -> Self {
        self.quota_headroom = on;
        self
    }

    /// No backlog brake: only the controller (or the fixed limit) sets the limit.
    pub fn no_brake(mut self) -> Self {
        self.brake = BrakeSetting::Off;
        self
    }

    /// The brake's threshold, or `None` when it is off.
    pub(crate) fn resolved_brake(&self, controller: &ControllerConfig) -> Option<Duration> {
        match self.brake {
            BrakeSetting::Off => None,
            BrakeSetting::At(at) => Some(at),
            BrakeSetting::Default if self.fixed_limit.is_some() => None,
            BrakeSetting::Default => Some(controller.target_p99.saturating_mul(BRAKE_FACTOR)),
        }
    }

    /// CPU time one grant hands out (10 ms ..= 100 ms).
    pub fn slice(mut self, slice: Duration) -> Self {
        self.slice = slice;
        self
    }

    /// How long one elastic poll (or one run of a `Pacer` loop) may go on before it yields back
    /// to the scheduler (10 µs ..= the slice).
    pub fn quantum(mut self, quantum: Duration) -> Self {
        self.quantum = quantum;
        self
    }

    /// Whether elastic work, at each poll quantum's yield, also yields its thread's CPU to the
    /// OS (`sched_yield` on Linux, [`std::thread::yield_now`]). On by default.
    ///
    /// The quantum hands the worker to the runtime's other tasks; the OS yield hands the core
    /// to other threads waiting for it (a client or another service on the same cores, a
    /// blocking thread, the probes' threads), which would otherwise wait until the kernel's
    /// time slice ends: up to a few milliseconds. It costs one system call per quantum yield
    /// (docs/design.md §5, "Yielding to the OS", has the measurements). `pace_blocking` loops
    /// yield at every quantum too when this is on.
    ///
    /// ```
    /// let elastic = elastic_cpu_pacer::Elastic::builder().os_yield(false).build().unwrap();
    /// # drop(elastic);
    /// ```
    pub fn os_yield(mut self, on: bool) -> Self {
        self.os_yield = on;
        self
    }

    /// Histogram bounds and precision of the probe. Its tick and window are taken from the
    /// controller settings.
    pub fn probe(mut self, config: ProbeConfig) -> Self {
        self.probe = config;
        self
    }

    /// Time every elastic poll with the thread's CPU clock (exact, but a system call per read,
    /// a few hundred ns). By default only polls and stretches of 50 µs or more are (their cost
    /// is then below 1 %), short ones use the wall clock.
    pub fn thread_cpu_time(mut self) -> Self {
        self.running = RunningTime::ThreadCpu;
        self
    }

    /// Time elastic polls with the wall clock only (cheapest; the time the OS runs another
    /// thread on the core mid-poll is charged too).
    pub fn wall_time(mut self) -> Self {
        self.running = RunningTime::Wall;
        self
    }

    /// Measure elastic polls with this clock (tests; feature `test-util`). With the
    /// [`manual`](Self::manual) clock, a poll that advances it is charged exactly that much.
    #[cfg(feature = "test-util")]
    pub fn running_clock(mut self, clock: impl Clock) -> Self {
        self.running = RunningTime::Custom(Arc::new(clock));
        self
    }

    /// Drive the work queue and the brake from `clock` and start no governor thread: the test
    /// calls [`Elastic::tick`](crate::Elastic::tick) by hand. Deterministic tests of waiting
    /// and wake-up use this (feature `test-util`).
    ///
    /// ```
    /// use elastic_cpu_pacer::{Elastic, ManualClock};
    /// let clock = ManualClock::new();
    /// let elastic = Elastic::builder().manual(clock.clone()).build()?;
    /// clock.advance(std::time::Duration::from_millis(100));
    /// elastic.tick();
    /// assert_eq!(elastic.snapshot().ticks, 1);
    /// # Ok::<(), elastic_cpu_pacer::BuildError>(())
    /// ```
    #[cfg(feature = "test-util")]
    pub fn manual(mut self, clock: ManualClock) -> Self {
        self.manual = Some(clock);
        self
    }

    /// The CPUs the bucket's rate is computed for; overrides everything else
    /// ([`CpusSource::Builder`](crate::CpusSource::Builder)). By default the runtime built
    /// through [`Elastic::runtime`](crate::Elastic::runtime) (or passed to
    /// [`Elastic::attach`](crate::Elastic::attach)) sets the least of its worker threads, the
    /// cgroup CPU quota (fractional: 1.5 stays 1.5) and the CPUs in the process's affinity mask
    /// (see [`CpusSource`](crate::CpusSource)).
    pub fn cpus(mut self, cpus: f64) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// The clock the work queue runs on: the [`manual`](Self::manual) one if given (then no
    /// governor thread runs).
    pub(crate) fn queue_clock(&self) -> QueueClock {
        #[cfg(feature = "test-util")]
        if let Some(c) = &self.manual {
            return QueueClock::Manual(c.clone());
        }
        QueueClock::Monotonic(MonotonicClock::new())
    }

    /// The resolved controller configuration (profile plus the single-setting overrides).
    pub(crate) fn resolved_controller(&self) -> ControllerConfig {
        let mut c = self.controller.clone();
        if let Some(t) = self.target_p99 {
            c.target_p99 = t;
        }
        if let Some(d) = self.delta_per_sec {
            c.delta_per_sec = d;
        }
        if let Some(m) = self.min_share {
            c.min_share = m;
        }
        if let Some(m) = self.max_share {
            c.max_share = m;
        }
        c
    }

    pub(crate) fn validate(&self) -> Result<ControllerConfig, BuildError> {
        let controller = self.resolved_controller();
        controller.validate()?;
        let setting = |setting, value: String, expected| {
            Err(BuildError::Setting(SettingError::new(
                setting, value, expected,
            )))
        };
        if let Some(l) = self.initial_share {
            if !(l >= controller.min_share && l <= controller.max_share) {
                return setting("initial_share", l.to_string(), "min_share ..= max_share");
            }
        }
        if let Some(l) = self.fixed_limit {
            if !(l > 0.0 && l <= 1.0) {
                return setting("fixed_limit", l.to_string(), "above 0.0, at most 1.0");
            }
        }
        if self.slice < MIN_SLICE || self.slice > MAX_SLICE {
            return setting("slice", format!("{:?}", self.slice), "10 ms ..= 100 ms");
        }
        if self.quantum < Duration::from_micros(10) || self.quantum > self.slice {
            return setting("quantum", format!("{:?}", self.quantum), "10 µs ..= slice");
        }
        if let BrakeSetting::At(at) = self.brake {
            if at < Duration::from_micros(10) {
                return setting("brake_at", format!("{at:?}"), "at least 10 µs");
            }
        }
        if let Some(c) = self.cpus {
            if !(c > 0.0 && c <= 65536.0) {
                return setting("cpus", c.to_string(), "above 0.0, at most 65536.0");
            }
        }
        Ok(controller)
    }
}
