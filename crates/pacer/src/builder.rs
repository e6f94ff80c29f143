//! [`ElasticBuilder`]: every setting of an [`Elastic`](crate::Elastic), validated in
//! [`build`](ElasticBuilder::build), and its typed error.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "test-util")]
use elastic_cpu_core::{Clock, ManualClock};
use elastic_cpu_core::{
    ControllerConfig, MonotonicClock, SettingError, WorkQueue, MAX_SLICE, MIN_SLICE,
};
use elastic_cpu_probe::{Probe, ProbeConfig, ThreadRegistry};

use crate::governor::{self, Control, Governor, Plan};
use crate::grant::class_state::{ClassState, QueueClock};
use crate::grant::running::RunningTime;
use crate::settings::{
    Brake, Enforcement, Inputs, OutlierThreshold, Placement, Profile, Timing, DEFAULT_QUOTA_REREAD,
    DEFAULT_TARGET,
};
use crate::signal::readings::Sources;

/// The shortest and longest governor tick ([`Steps::tick`](crate::settings::Steps::tick)).
const MIN_TICK: Duration = Duration::from_millis(1);
const MAX_TICK: Duration = Duration::from_secs(3600);
/// The longest window, in ticks ([`Steps::window`](crate::settings::Steps::window)).
const MAX_WINDOW_TICKS: u32 = 1000;
/// The shortest and longest period of [`ElasticBuilder::quota_reread`].
const MIN_QUOTA_REREAD: Duration = Duration::from_millis(1);
const MAX_QUOTA_REREAD: Duration = Duration::from_secs(3600);

/// Why [`ElasticBuilder::build`] (or [`Elastic::idle_runtime`](crate::Elastic::idle_runtime)) failed.
///
/// ```
/// use elastic_cpu_pacer::{BuildError, Elastic};
///
/// let Err(BuildError::Setting(e)) = Elastic::builder().share(2.0, 2.0).build() else { panic!() };
/// assert_eq!(e.setting, "min_share");
/// assert_eq!(e.to_string(), "invalid `min_share` = 2: expected 0.01 ..= 1.0");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// A setting is out of range: it names the setting (the builder method, or the field of a
    /// settings group), the value, and what it accepts.
    Setting(SettingError),
    /// The OS refused to start the governor thread.
    GovernorThread(std::io::Error),
    /// The OS refused to start an idle pool's threads
    /// ([`Elastic::idle_runtime`](crate::Elastic::idle_runtime)).
    PoolThreads(std::io::Error),
    /// Tokio or the OS refused the runtime [`ElasticBuilder::run`] builds (its threads, its
    /// I/O driver, or the sampling probe's thread).
    Runtime(std::io::Error),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Setting(e) => e.fmt(f),
            BuildError::GovernorThread(e) => write!(f, "cannot start the governor thread: {e}"),
            BuildError::PoolThreads(e) => write!(f, "cannot start the idle pool's threads: {e}"),
            BuildError::Runtime(e) => write!(f, "cannot build the tokio runtime: {e}"),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Setting(e) => Some(e),
            BuildError::GovernorThread(e) | BuildError::PoolThreads(e) | BuildError::Runtime(e) => {
                Some(e)
            }
        }
    }
}

impl From<SettingError> for BuildError {
    fn from(e: SettingError) -> Self {
        BuildError::Setting(e)
    }
}

/// Builds an [`Elastic`](crate::Elastic): every setting, validated in [`build`](ElasticBuilder::build). Most
/// services set none, or the target and the share's bounds; the groups in
/// [`settings`](crate::settings) hold the rest.
///
/// ```
/// use std::time::Duration;
/// let elastic = elastic_cpu_pacer::Elastic::builder()
///     .target_p99(Duration::from_micros(500))
///     .share(0.05, 0.5)
///     .build()?;
/// assert!(elastic.snapshot().share > 0.0);
/// # Ok::<(), elastic_cpu_pacer::BuildError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct ElasticBuilder {
    profile: Profile,
    target_p99: Option<Duration>,
    share: Option<(f64, f64)>,
    initial_share: Option<f64>,
    fixed_share: Option<f64>,
    cpus: Option<f64>,
    quota_reread: Option<Duration>,
    brake: Brake,
    inputs: Inputs,
    enforcement: Enforcement,
    placement: Placement,
    outliers: OutlierThreshold,
    #[cfg(feature = "test-util")]
    testing: Testing,
}

/// The test plumbing a builder was given (feature `test-util`).
#[cfg(feature = "test-util")]
#[derive(Clone, Default)]
struct Testing {
    manual: Option<ManualClock>,
    running_clock: Option<Arc<dyn Clock>>,
    script: Option<crate::testing::Script>,
}

#[cfg(feature = "test-util")]
impl fmt::Debug for Testing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Testing")
            .field("manual", &self.manual.is_some())
            .field("running_clock", &self.running_clock.is_some())
            .field("script", &self.script.is_some())
            .finish()
    }
}

impl ElasticBuilder {
    /// How fast the share moves (default [`Profile::Default`]).
    pub fn profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
    }

    /// The target p99 of the signal (scheduling latency, the I/O wake-up over
    /// [`IO_TARGET_FACTOR`](crate::snapshot::IO_TARGET_FACTOR), the run-queue delay): above it
    /// the share steps down, below it (with work waiting) up. Valid 50 µs ..= 1 s. By default
    /// there is none: the governor measures the latency without elastic work and steps on what
    /// elastic work adds to it ([`TargetSource::Measured`](crate::snapshot::TargetSource)), and
    /// the backlog brake is at 4 × [`DEFAULT_TARGET`] (4 ms). A fixed target suits a runtime
    /// whose latency without elastic work you know (`snapshot().sched_p99` tells).
    pub fn target_p99(mut self, target: Duration) -> Self {
        self.target_p99 = Some(target);
        self
    }

    /// Bounds of the share, the part of the CPUs elastic work may use, that the controller
    /// moves within. Default 0.05 ..= 0.75; valid: min 0.01 ..= 1.0, max 0.05 ..= 1.0, min ≤ max.
    pub fn share(mut self, min: f64, max: f64) -> Self {
        self.share = Some((min, max));
        self
    }

    /// The share the controller starts at (within the bounds; default the lower bound). The
    /// token bucket starts full at it: see [`Elastic`](crate::Elastic#tokens).
    pub fn initial_share(mut self, share: f64) -> Self {
        self.initial_share = Some(share);
        self
    }

    /// Turn the controller off and hold elastic work at this share of the CPUs (above 0, at
    /// most 1): a static cap, still without bursts beyond the bucket's one second. The backlog
    /// brake is then off unless set with [`brake`](Self::brake).
    pub fn fixed_share(mut self, share: f64) -> Self {
        self.fixed_share = Some(share);
        self
    }

    /// The CPUs the rates are computed for (above 0, at most 65536); overrides what a runtime
    /// gives when attached: the least of its workers, the cgroup CPU quota (fractional: 1.5
    /// stays 1.5) and the CPUs in the affinity mask (see
    /// [`CpusSource`](crate::snapshot::CpusSource)).
    pub fn cpus(mut self, cpus: f64) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// How often the governor reads the cgroup CPU quota (v2 `cpu.max`, v1
    /// `cpu.cfs_quota_us` / `cpu.cfs_period_us`) and the affinity mask again once a runtime is
    /// attached (default [`DEFAULT_QUOTA_REREAD`](crate::settings::DEFAULT_QUOTA_REREAD), 1 s;
    /// valid 1 ms ..= 1 h). It reads at the first tick at or after each period, on the
    /// governor thread; the CPUs
    /// ([`Snapshot::cpus`](crate::Snapshot::cpus)), the rates and holder caps, the quota's
    /// headroom and the quota brake follow a change from that tick on, so within the period
    /// and a tick of an in-place pod resize or a vertical autoscaler's change. A reading that
    /// fails (a file unreadable or garbage) keeps the last good one.
    ///
    /// Why 1 s: a reading opens a few small files (well under a millisecond), so once a second
    /// costs under 0.1 % of a CPU, and a quota cut is seen within about 10 default ticks. Until then the
    /// throttling input already steps the share down on the periods the smaller quota cuts
    /// short; a quota raised goes unused for at most the period.
    ///
    /// ```
    /// use std::time::Duration;
    /// let elastic = elastic_cpu_pacer::Elastic::builder()
    ///     .quota_reread(Duration::from_secs(5))
    ///     .build()?;
    /// # drop(elastic);
    /// let bad = elastic_cpu_pacer::Elastic::builder().quota_reread(Duration::ZERO).build();
    /// assert!(bad.is_err());
    /// # Ok::<(), elastic_cpu_pacer::BuildError>(())
    /// ```
    pub fn quota_reread(mut self, period: Duration) -> Self {
        self.quota_reread = Some(period);
        self
    }

    /// The backlog brake (default [`Brake::Default`]: 4 × the target while the controller runs).
    pub fn brake(mut self, brake: Brake) -> Self {
        self.brake = brake;
        self
    }

    /// Which readings steer the share besides the scheduling latency (default: all).
    pub fn inputs(mut self, inputs: Inputs) -> Self {
        self.inputs = inputs;
        self
    }

    /// How grants are held and timed: slice, quantum, OS yield, concurrency cap, timing.
    pub fn enforcement(mut self, enforcement: Enforcement) -> Self {
        self.enforcement = enforcement;
        self
    }

    /// Where [`Elastic::spawn`](crate::Elastic::spawn) runs elastic work (default
    /// [`Placement::Auto`]: the runtime; the idle-priority pool once its polls run long).
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// Which polls and foreground waits the outlier trap keeps
    /// ([`Snapshot::outliers`](crate::Snapshot::outliers)): default
    /// [`OutlierThreshold::Target`], the controller's target (at least 1 ms).
    pub fn outlier_threshold(mut self, threshold: OutlierThreshold) -> Self {
        self.outliers = threshold;
        self
    }

    /// Drive the work queue and the brake from `clock` and start no governor thread: the test
    /// calls [`Drive::tick`](crate::testing::Drive::tick) by hand (feature `test-util`). Without a
    /// [`script`](Self::script) nothing besides the probe the test drives is read: no I/O
    /// probe, run-queue delay or process CPU time (the CPUs and the cgroup still are).
    ///
    /// ```
    /// use elastic_cpu_pacer::{testing::{Drive, ManualClock}, Elastic};
    /// let clock = ManualClock::new();
    /// let elastic = Elastic::builder().manual(clock.clone()).build()?;
    /// clock.advance(std::time::Duration::from_millis(100));
    /// elastic.tick();
    /// assert_eq!(elastic.snapshot().ticks, 1);
    /// # Ok::<(), elastic_cpu_pacer::BuildError>(())
    /// ```
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn manual(mut self, clock: ManualClock) -> Self {
        self.testing.manual = Some(clock);
        self
    }

    /// Time elastic polls with `clock` instead of the [`Timing`] (tests; feature `test-util`).
    /// With the [`manual`](Self::manual) clock, a poll that advances it is charged exactly that
    /// much.
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn running_clock(mut self, clock: impl Clock) -> Self {
        self.testing.running_clock = Some(Arc::new(clock));
        self
    }

    /// Read every input from `script` (the I/O wake-up window, the run-queue delay, the quota
    /// and its throttling, the process's CPU time and CPUs) instead of the OS and the runtime
    /// (feature `test-util`): with [`manual`](Self::manual), the whole control loop runs
    /// deterministically. The [`inputs`](Self::inputs) settings still apply.
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn script(mut self, script: crate::testing::Script) -> Self {
        self.testing.script = Some(script);
        self
    }

    /// The controller's settings: the profile's steps with the target and the bounds; every one
    /// checked.
    fn controller(&self) -> Result<ControllerConfig, SettingError> {
        let defaults = ControllerConfig::cockroach();
        let (min, max) = self
            .share
            .unwrap_or((defaults.min_share, defaults.max_share));
        let config =
            self.profile
                .steps()
                .controller(self.target_p99.unwrap_or(DEFAULT_TARGET), min, max);
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<ControllerConfig, SettingError> {
        let controller = self.controller()?;
        let refuse =
            |setting, value: String, expected| Err(SettingError::new(setting, value, expected));
        if let Some(s) = self.initial_share {
            if !(s >= controller.min_share && s <= controller.max_share) {
                return refuse("initial_share", s.to_string(), "min_share ..= max_share");
            }
        }
        if let Some(s) = self.fixed_share {
            if !(s > 0.0 && s <= 1.0) {
                return refuse("fixed_share", s.to_string(), "above 0.0, at most 1.0");
            }
        }
        // The governor thread wakes every tick: a tick of microseconds spends a core on it, and
        // the window is kept as one histogram set per tick.
        if !(MIN_TICK..=MAX_TICK).contains(&controller.tick) {
            return refuse("tick", format!("{:?}", controller.tick), "1 ms ..= 1 h");
        }
        if controller.window > controller.tick.saturating_mul(MAX_WINDOW_TICKS) {
            return refuse(
                "window",
                format!("{:?}", controller.window),
                "tick ..= 1000 ticks",
            );
        }
        let e = &self.enforcement;
        if e.slice < MIN_SLICE || e.slice > MAX_SLICE {
            return refuse("slice", format!("{:?}", e.slice), "10 ms ..= 100 ms");
        }
        if e.quantum < Duration::from_micros(10) || e.quantum > e.slice {
            return refuse("quantum", format!("{:?}", e.quantum), "10 µs ..= slice");
        }
        if let Brake::At(at) = self.brake {
            if at < Duration::from_micros(10) {
                return refuse("brake", format!("{at:?}"), "at least 10 µs");
            }
        }
        if let OutlierThreshold::At(at) = self.outliers {
            if at < Duration::from_micros(1) {
                return refuse("outlier_threshold", format!("{at:?}"), "at least 1 µs");
            }
        }
        if let Some(c) = self.cpus {
            if !(c > 0.0 && c <= 65536.0) {
                return refuse("cpus", c.to_string(), "above 0.0, at most 65536.0");
            }
        }
        if let Some(p) = self.quota_reread {
            if !(MIN_QUOTA_REREAD..=MAX_QUOTA_REREAD).contains(&p) {
                return refuse("quota_reread", format!("{p:?}"), "1 ms ..= 1 h");
            }
        }
        Ok(controller)
    }

    /// The clock the queues run on: the [`manual`](Self::manual) one if given.
    fn queue_clock(&self) -> QueueClock {
        #[cfg(feature = "test-util")]
        if let Some(c) = &self.testing.manual {
            return QueueClock::Manual(c.clone());
        }
        QueueClock::Monotonic(MonotonicClock::new())
    }

    fn running_time(&self) -> RunningTime {
        #[cfg(feature = "test-util")]
        if let Some(c) = &self.testing.running_clock {
            return RunningTime::Custom(c.clone());
        }
        match self.enforcement.timing {
            Timing::Adaptive => RunningTime::Adaptive,
            Timing::ThreadCpu => RunningTime::ThreadCpu,
            Timing::Wall => RunningTime::Wall,
        }
    }

    /// The readers: the OS and the runtime (`threads`: the runtime's, for the run-queue delay),
    /// a script, or (a manual clock) next to nothing.
    fn sources(&self, threads: &ThreadRegistry) -> Sources {
        #[cfg(feature = "test-util")]
        if let Some(script) = &self.testing.script {
            return script.sources(self.inputs.io_wakeup, self.inputs.run_queue);
        }
        #[cfg(feature = "test-util")]
        if self.testing.manual.is_some() {
            return Sources::manual();
        }
        Sources::os(self.inputs.io_wakeup, self.inputs.run_queue, threads)
    }

    /// Validate every setting and start the governor: what an [`Elastic`](crate::Elastic) is
    /// made of.
    pub(crate) fn start(self) -> Result<(Arc<ClassState>, Arc<Control>, Placement), BuildError> {
        let controller = self.validate()?;
        let brake = self
            .brake
            .threshold(controller.target_p99, self.fixed_share.is_some());
        let probe = Probe::new(ProbeConfig {
            tick: controller.tick,
            window: controller.window,
            alarm_at: brake,
            ..ProbeConfig::default()
        })?;
        let clock = self.queue_clock();
        let manual = clock.is_manual();
        let threads = ThreadRegistry::new();
        let plan = Plan {
            initial_share: self.initial_share.unwrap_or(controller.min_share),
            controller,
            fixed: self.fixed_share,
            brake: brake.is_some(),
            cap_concurrency: self.enforcement.cap_concurrency,
            throttling: self.inputs.throttling,
            quota_headroom: self.inputs.quota_headroom,
            clock: clock.clone(),
            sources: self.sources(&threads),
            builder_cpus: self.cpus,
            // A fixed share steps on nothing: its own class needs no target.
            auto_target: self.target_p99.is_none() && self.fixed_share.is_none(),
            quantum: self.enforcement.quantum,
            outliers: self.outliers,
            default_cpus: std::thread::available_parallelism()
                .map(|n| n.get() as f64)
                .unwrap_or(1.0),
            quota_reread: self.quota_reread.unwrap_or(DEFAULT_QUOTA_REREAD),
        };
        let shared = Arc::new(ClassState::new(
            WorkQueue::new(clock, Governor::initial_rate(&plan)),
            self.enforcement,
            self.running_time(),
            probe,
            threads,
        ));
        let tick = plan.controller.tick;
        let control = Arc::new(Control::new(Governor::new(plan, &shared)?));
        if !manual {
            governor::spawn(&shared, &control, tick).map_err(BuildError::GovernorThread)?;
        }
        Ok((shared, control, self.placement))
    }
}
