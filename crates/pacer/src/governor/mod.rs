//! The governor: the control loop's driver. Once per tick it reads (the probe window, the I/O
//! canaries, the run-queue delay, the cgroup's throttling, the process's CPU time, each class's
//! queue), hands the readings to the decision step ([`Decider`]), applies what it decided to the
//! queues and publishes one record. Between ticks, the backlog brake and, inside a quota, the
//! quota brake (`brakes.rs`). Every `quota_reread` it reads the cgroup's CPU quota and the
//! affinity mask again (`host.rs`). It runs on its own OS thread (see `thread.rs`), off the
//! runtime it measures: a saturated runtime would delay the very loop that must react to it.

mod brakes;
mod classes;
mod control;
mod host;
pub(crate) mod link;
mod thread;

use std::time::Duration;

use elastic_cpu_core::decide::{
    Decider, DeciderSettings, QuietWindow, SignalReading, TickReadings,
};
use elastic_cpu_core::Clock;
use elastic_cpu_core::{ControllerConfig, SettingError};
use elastic_cpu_probe::Probe;

use self::classes::Links;
pub(crate) use self::control::Control;
use self::host::HostState;
pub(crate) use self::thread::spawn;
use crate::grant::class_state::{ClassState, QueueClock};
use crate::record::TickRecord;
use crate::settings::{OutlierThreshold, DEFAULT_TARGET};
use crate::signal::readings::{Availability, Sources};
use crate::signal::{Signal, SignalStage};
#[cfg(feature = "tracing")]
use crate::trace;

/// How [`Drive::end_governor`](crate::testing::Drive::end_governor) ends the governor thread (test
/// plumbing, feature `test-util`; in `testing`).
#[cfg(feature = "test-util")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GovernorEnd {
    /// The thread returns, as if its loop had ended.
    Exit,
    /// The thread panics (the panic is printed as any is).
    Panic,
}

/// What the governor is built from.
pub(crate) struct Plan {
    /// The controller settings of the `Elastic`'s own class (idle and gate classes derive
    /// theirs from it).
    pub(crate) controller: ControllerConfig,
    pub(crate) initial_share: f64,
    /// A fixed share turns every controller of the `Elastic`'s own and idle classes off.
    pub(crate) fixed: Option<f64>,
    pub(crate) brake: bool,
    pub(crate) cap_concurrency: bool,
    pub(crate) throttling: bool,
    pub(crate) quota_headroom: bool,
    pub(crate) clock: QueueClock,
    pub(crate) sources: Sources,
    /// Set by the builder: attaching a runtime leaves it alone.
    pub(crate) builder_cpus: Option<f64>,
    /// The builder gave no target: measure it.
    pub(crate) auto_target: bool,
    /// A poll quantum: the least latency elastic work may add with a measured target.
    pub(crate) quantum: Duration,
    /// The outlier trap's threshold, as set.
    pub(crate) outliers: OutlierThreshold,
    /// Until a runtime is attached.
    pub(crate) default_cpus: f64,
    /// How often the quota and the affinity mask are read again once a runtime is attached.
    pub(crate) quota_reread: Duration,
}

/// The outlier trap as the governor keeps it: its threshold as set (it follows the target)
/// and the newest outlier an event was sent for (its end, on the probe's clock).
struct Outliers {
    threshold: OutlierThreshold,
    #[cfg(feature = "tracing")]
    traced: Duration,
}

/// The control loop's driver: what it reads from, the decision step, the queues it applies
/// decisions to.
pub(crate) struct Governor {
    clock: QueueClock,
    probe: Probe,
    sources: Sources,
    signal: SignalStage,
    host: HostState,
    decider: Decider,
    classes: Links,
    outliers: Outliers,
    /// The signal as the classes stepped on it at the last tick.
    last_signal: Signal,
    ticks: u64,
    /// The governor has stopped ([`close`](Self::close)): every class is closed and none is
    /// held, classes made later included.
    closed: bool,
}

impl Governor {
    /// The governor of `shared`, the `Elastic`'s own class.
    pub(crate) fn new(
        plan: Plan,
        shared: &std::sync::Arc<ClassState>,
    ) -> Result<Governor, SettingError> {
        let host = HostState::new(&plan);
        let mut settings = DeciderSettings::new(plan.controller, host.cpus);
        settings.initial_share = plan.initial_share;
        settings.fixed = plan.fixed;
        settings.measured_target = plan.auto_target;
        settings.default_target = DEFAULT_TARGET;
        settings.quantum = plan.quantum;
        settings.intervals = shared.probe.config().intervals();
        settings.quota_headroom = plan.quota_headroom;
        settings.cap_holders = plan.cap_concurrency;
        settings.backlog_brake = plan.brake;
        let decider = Decider::new(settings)?;
        let mut g = Governor {
            clock: plan.clock,
            probe: shared.probe.clone(),
            signal: SignalStage::new(plan.throttling),
            last_signal: Signal::default(),
            classes: Links::new(shared, &decider),
            decider,
            host,
            sources: plan.sources,
            outliers: Outliers {
                threshold: plan.outliers,
                #[cfg(feature = "tracing")]
                traced: Duration::ZERO,
            },
            ticks: 0,
            closed: false,
        };
        g.last_signal = g.idle_signal();
        g.set_outlier_threshold();
        g.apply();
        Ok(g)
    }

    /// The signal before the first tick: each component's availability, no data.
    fn idle_signal(&self) -> Signal {
        let mut s = Signal::default();
        s.reading.io = self.sources.io.availability();
        s.reading.run_queue = if self.sources.run_queue.is_some() {
            Availability::NotStarted
        } else {
            Availability::Off
        };
        s
    }

    /// The token rate of the `Elastic`'s own class as set now (for the bucket it starts with).
    pub(crate) fn initial_rate(plan: &Plan) -> u64 {
        let share = plan.fixed.unwrap_or(plan.initial_share);
        elastic_cpu_core::rate_for(share, plan.builder_cpus.unwrap_or(plan.default_cpus))
    }

    /// One tick over `period`: read, decide, apply, record.
    pub(crate) fn tick(&mut self, period: Duration) -> TickRecord {
        self.reread_host();
        self.brake_step();
        self.probe.rotate();
        #[cfg(feature = "tracing")]
        self.trace_outliers();
        let window = self.probe.window();
        let intervals = self.probe.config().intervals();
        let signal = self
            .signal
            .read(&mut self.sources, window.queue_p99_trimmed, intervals);
        self.classes.drop_dead(&mut self.decider);
        let classes = self.classes.read(intervals);
        let window_secs = window.intervals.max(1) as f64 * period.as_secs_f64();
        let readings = TickReadings {
            now: self.clock.now(),
            period,
            intervals,
            signal: SignalReading {
                value: signal.value,
                source: signal.source,
                sched_p99: signal.reading.sched_p99,
                run_queue_delay: signal.reading.run_queue_delay,
                bystander_delay: signal.reading.bystander_delay,
                throttled: signal.reading.throttled,
            },
            run_queue: self.signal.recent_run_queue(1).next().copied(),
            throttled_periods: self.signal.throttled_periods(),
            process_cpu: self.sources.process.cpu_time(),
            foreground_per_sec: window.queue_latency.foreground.count as f64 / window_secs,
            classes: &classes,
        };
        self.decider.step(&readings, &mut ProbeQuiet(&self.probe));
        self.classes.give_back(classes);
        self.set_outlier_threshold();
        self.classes.trace_moves(&self.decider);
        self.apply();
        let steering = self.decider.steering();
        let mut signal = match self.decider.steered() {
            Some(steered) => Signal {
                value: steered.value,
                source: steered.source,
                bystanders: steered.bystanders,
                others: steered.others,
                ..signal
            },
            None => signal,
        };
        // The I/O canaries matter only while something steers by the signal; otherwise each
        // one mostly wakes a parked worker, so they slow to the quiet period.
        SignalStage::set_io_quiet(&mut self.sources, !steering, &mut signal.reading);
        self.last_signal = signal;
        self.ticks += 1;
        self.record()
    }

    /// Whether something steered by the signal at the last tick (the samplers sample at the
    /// full rate only then).
    pub(crate) fn steering(&self) -> bool {
        self.decider.steering()
    }

    /// Apply every class's decision and the holds that changed.
    fn apply(&mut self) {
        let quota_period = self.host.quota_period();
        self.classes.apply(&mut self.decider, quota_period);
    }

    /// An event for each outlier of the last tick past `OUTLIER_EVENT_FACTOR` × the trap's
    /// threshold (only while someone listens: the report allocates).
    #[cfg(feature = "tracing")]
    fn trace_outliers(&mut self) {
        if !tracing::enabled!(target: "elastic_cpu", tracing::Level::DEBUG) {
            return;
        }
        let Some(threshold) = self.probe.outlier_threshold() else {
            return;
        };
        let at_least = threshold.saturating_mul(trace::OUTLIER_EVENT_FACTOR);
        let report = self.probe.outliers();
        let polls = report.slowest_polls.iter().map(|o| ("poll", o));
        let waits = report.longest_waits.iter().map(|o| ("wait", o));
        let mut newest = self.outliers.traced;
        for (what, o) in polls.chain(waits) {
            if o.at > self.outliers.traced && o.duration >= at_least {
                trace::outlier(what, o);
                newest = newest.max(o.at);
            }
        }
        self.outliers.traced = newest;
    }

    /// The outlier trap's threshold for the target now.
    fn set_outlier_threshold(&self) {
        let threshold = self.outliers.threshold.threshold(self.decider.target().0);
        if self.probe.outlier_threshold() != threshold {
            self.probe.set_outlier_threshold(threshold);
        }
    }

    /// The record of the state now.
    pub(crate) fn record(&self) -> TickRecord {
        let (target, target_source) = self.decider.target();
        TickRecord {
            ticks: self.ticks,
            cpus: self.decider.cpus(),
            cpus_source: self.host.cpus_source,
            signal: self.last_signal.clone(),
            throttled_periods: self.signal.throttled_periods(),
            quota_cpus: self.host.quota_cpus(),
            quota_period: self.host.quota_period(),
            quota_changes: self.host.quota_changes,
            quota_headroom: self.decider.headroom_cpus(),
            overhead: self.decider.overhead(),
            braked_time: self.decider.backlog_brakes().0,
            brakes: self.decider.backlog_brakes().1,
            quota_braked_time: self.decider.quota_brakes().0,
            quota_brakes: self.decider.quota_brakes().1,
            target,
            target_source,
            quiet: self.decider.baseline(),
            quiet_hold: self.decider.quiet_hold(),
            share_bounds: self.decider.share_bounds(),
            paused: self.decider.paused(),
            classes: self.classes.records(&self.decider),
        }
    }

    /// New bounds for the `Elastic`'s own share (validated as the builder's `share`; an error
    /// changes nothing), applied now: the share moves into them, the rates follow. Classes made
    /// from now on take their floor from them too.
    fn set_share(&mut self, min: f64, max: f64) -> Result<(), SettingError> {
        self.decider.set_share(min, max)?;
        self.apply();
        Ok(())
    }

    /// Pause elastic work (no new grants; holders keep theirs until they settle; waiters stay
    /// in line) or resume it. Gates are not paused: their setups are the foreground's.
    fn set_paused(&mut self, on: bool) {
        self.decider.set_paused(on);
        self.apply();
    }

    /// The governor stops (shut down, or its thread ended): close every class and let go of
    /// every hold, so each waiter ends (granted before, or `Closed`) and no brake stays on,
    /// then stop the I/O probe. Classes made later are closed as they are made.
    fn close(&mut self) {
        self.closed = true;
        self.decider.close();
        self.classes.end();
        self.sources.io.stop();
        self.last_signal.reading.io = self.sources.io.availability();
    }
}

/// The probe's quiet window, as the decision step asks for it.
struct ProbeQuiet<'a>(&'a Probe);

impl QuietWindow for ProbeQuiet<'_> {
    fn quiet_p99(&mut self, ticks: usize) -> Option<Duration> {
        self.0.mark_quiet(ticks);
        self.0.quiet_window().queue_p99_trimmed
    }
}
