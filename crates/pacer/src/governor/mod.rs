//! The governor: the control loop in one place. Once per tick it reads (the probe window, the
//! I/O canaries, the run-queue delay, the cgroup's throttling, the process's CPU time), combines
//! the readings into one signal, steps each class's share on it, applies the rate modifiers
//! (the quota's headroom, the overhead correction) in one place, and publishes one record. In
//! between, the backlog brake and, inside a quota, the quota brake. Every `quota_reread` it
//! reads the cgroup's CPU quota and the affinity mask again, and what is sized from them (the
//! CPUs, the quota's headroom and brake) follows from that tick on. It runs on its own OS
//! thread (see `thread.rs`), off the runtime it measures: a saturated runtime would delay the
//! very loop that must react to it.

mod thread;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use elastic_cpu_core::{split_share, Clock, ControllerConfig, SettingError, StepController};
use elastic_cpu_probe::{NoQuota, Probe, ProbeConfig, QuotaReading, Window};
use tokio::runtime::Handle;

pub(crate) use self::thread::spawn;
use crate::brake::{Brake, Change, BRAKE_POLL};
use crate::class::{Class, ClassQueue, Hold, HoldWhen, Limit, Part, Policy, Rates};
use crate::cpus::{choose_cpus, CpusInputs, CpusSource};
use crate::headroom::Headroom;
use crate::overhead::{Overhead, TickReading};
use crate::quiet::{Quiet, QuietStep, Steered, TargetSource, FAR_SHARE};
use crate::quota_brake::{QuotaBrake, QuotaChange};
use crate::readings::Sources;
use crate::record::{ClassKind, TickRecord};
use crate::settings::{OutlierThreshold, DEFAULT_TARGET};
use crate::shared::{QueueClock, Shared};
use crate::signal::{Signal, SignalSource, SignalStage};
use crate::snapshot::{GovernorState, ProbeSource, Snapshot};
use crate::trace;

/// How [`Elastic::end_governor`](crate::Elastic::end_governor) ends the governor thread (test
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
struct Host {
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

/// The control loop's state. It acts on the classes' queues, which it holds weakly.
pub(crate) struct Governor {
    clock: QueueClock,
    probe: Probe,
    sources: Sources,
    signal: SignalStage,
    /// The last signal read.
    last_signal: Signal,
    /// `None`: off.
    brake: Option<Brake>,
    /// `None`: the quota headroom cap is off.
    headroom: Option<Headroom>,
    /// Inside a quota, with the headroom cap on: stops elastic work before a period's quota
    /// runs out.
    quota_brake: Option<QuotaBrake>,
    overhead: Overhead,
    /// Running time charged to the classes the headroom and the overhead count, summed tick by
    /// tick (it never goes down when a class goes away).
    charged: Duration,
    cpus: f64,
    cpus_source: CpusSource,
    builder_cpus: Option<f64>,
    /// Every class, the `Elastic`'s own first, then its idle pool's, then the gates.
    classes: Vec<Class>,
    /// What the idle and gate classes derive their settings from; its bounds are the own
    /// share's as in force (they move with `set_share`).
    controller: ControllerConfig,
    #[cfg_attr(not(feature = "idle-pool"), allow(dead_code))]
    fixed: Option<f64>,
    #[cfg_attr(not(feature = "idle-pool"), allow(dead_code))]
    cap_concurrency: bool,
    #[cfg_attr(not(feature = "gate"), allow(dead_code))]
    gates_made: usize,
    /// The idle class's pacing state, while it lives.
    #[cfg(feature = "idle-pool")]
    idle: Weak<Shared>,
    /// Inside a CPU quota now (or a throttling watch set by hand, in tests).
    quota_seen: bool,
    /// The quota in force (`None`: none), the one value everything sized from it reads.
    quota: Option<QuotaNow>,
    /// What the CPUs were chosen from (`None`: no runtime attached yet, nothing to re-read).
    host: Option<Host>,
    /// How often `host` is read again.
    quota_reread: Duration,
    /// Times the quota in force changed after attach (appeared, went, or moved).
    quota_changes: u64,
    ticks: u64,
    /// Something steered by the signal in the last tick (work ran or waited, a gate or an idle
    /// pool exists): the samplers sample at the full rate only then.
    steering: bool,
    /// The builder gave no target: it is measured (`quiet.rs`), from a poll quantum up.
    auto_target: bool,
    quantum: Duration,
    /// The outlier trap's threshold, as set: it follows the target.
    outliers: OutlierThreshold,
    /// The newest outlier an event was sent for (its end, on the probe's clock).
    #[cfg(feature = "tracing")]
    outliers_traced: Duration,
    quiet: Quiet,
    /// The target the `Elastic`'s own controller stepped on at the last tick, and its source.
    target: Duration,
    target_source: TargetSource,
    /// Times the backlog brake engaged.
    brakes: u64,
    /// Classes made with `Elastic::class` so far (their numbers).
    members_made: usize,
    /// The last split's parts, in class order (kept to reuse its memory).
    parts: Vec<f64>,
    /// The governor has stopped ([`close`](Self::close)): every class is closed and none is
    /// held, classes made later included.
    closed: bool,
    /// Elastic work is paused by hand ([`set_paused`](Self::set_paused)).
    paused: bool,
}

/// The policy of the `Elastic`'s own class and of its idle pool's (`brake`: when the backlog
/// brake holds it back; `target_factor`: the measured target's multiple it steps on).
fn elastic_policy(cap_concurrency: bool, brake: HoldWhen, target_factor: u32) -> Policy {
    Policy {
        headroom: true,
        overhead: true,
        brake,
        measured: true,
        target_factor,
        cap_holders: cap_concurrency,
        whole_workers: false,
    }
}

impl Governor {
    /// The governor of `shared`, the `Elastic`'s own class.
    pub(crate) fn new(plan: Plan, shared: &Arc<Shared>) -> Result<Governor, SettingError> {
        let limit = match plan.fixed {
            Some(share) => Limit::Fixed(share),
            None => Limit::Controller(Box::new(StepController::with_initial_share(
                plan.controller.clone(),
                plan.initial_share,
            )?)),
        };
        let own: Weak<dyn ClassQueue> = Arc::downgrade(shared) as Weak<dyn ClassQueue>;
        let class = Class::new(
            ClassKind::Elastic,
            own,
            limit,
            elastic_policy(plan.cap_concurrency, HoldWhen::Always, 1),
            plan.controller.min_share,
        )
        .with_part(Part::default_class());
        let target = plan.controller.target_p99;
        let mut g = Governor {
            clock: plan.clock,
            probe: shared.probe.clone(),
            sources: plan.sources,
            signal: SignalStage::new(plan.throttling),
            last_signal: Signal::default(),
            brake: plan.brake.then(Brake::default),
            headroom: plan.quota_headroom.then(Headroom::default),
            quota_brake: None,
            overhead: Overhead::default(),
            charged: Duration::ZERO,
            cpus: plan.builder_cpus.unwrap_or(plan.default_cpus),
            cpus_source: if plan.builder_cpus.is_some() {
                CpusSource::Builder
            } else {
                CpusSource::AvailableParallelism
            },
            builder_cpus: plan.builder_cpus,
            classes: vec![class],
            controller: plan.controller,
            fixed: plan.fixed,
            cap_concurrency: plan.cap_concurrency,
            gates_made: 0,
            #[cfg(feature = "idle-pool")]
            idle: Weak::new(),
            quota_seen: false,
            quota: None,
            host: None,
            quota_reread: plan.quota_reread,
            quota_changes: 0,
            ticks: 0,
            steering: false,
            auto_target: plan.auto_target,
            quiet: Quiet::new(shared.probe.config().intervals()),
            target,
            quantum: plan.quantum,
            outliers: plan.outliers,
            #[cfg(feature = "tracing")]
            outliers_traced: Duration::ZERO,
            target_source: if plan.auto_target {
                TargetSource::Default
            } else {
                TargetSource::Builder
            },
            brakes: 0,
            members_made: 0,
            parts: Vec::new(),
            closed: false,
            paused: false,
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
            crate::readings::Availability::NotStarted
        } else {
            crate::readings::Availability::Off
        };
        s
    }

    /// The token rate of the `Elastic`'s own class as set now (for the bucket it starts with).
    pub(crate) fn initial_rate(plan: &Plan) -> u64 {
        let share = plan.fixed.unwrap_or(plan.initial_share);
        elastic_cpu_core::rate_for(share, plan.builder_cpus.unwrap_or(plan.default_cpus))
    }

    /// One tick over `period`: read, combine, step every class, apply, record.
    pub(crate) fn tick(&mut self, period: Duration) -> TickRecord {
        self.reread_host();
        self.brake_step();
        self.probe.rotate();
        #[cfg(feature = "tracing")]
        self.trace_outliers();
        let window = self.probe.window();
        let intervals = self.probe.config().intervals();
        let throttled_before = self.signal.throttled_periods();
        let signal = self
            .signal
            .read(&mut self.sources, window.queue_p99_trimmed, intervals);
        if self.signal.throttled_periods() > throttled_before {
            if let Some(quota) = &mut self.quota_brake {
                quota.arm(self.clock.now());
            }
        }
        self.classes.retain(Class::is_alive);
        self.read_process(&window, period, intervals);
        self.keep_weights();
        self.read_quiet();
        let absolute = signal.value;
        let steered = self.steer_by(&signal);
        self.set_outlier_threshold();
        let mut signal = Signal {
            value: steered.value,
            source: steered.source,
            bystanders: steered.bystanders,
            others: steered.others,
            ..signal
        };
        // Paused, the share holds: work waits for the pause, not for the share.
        let frozen = self.quiet.holding() || self.paused;
        let idle_answers = self.idle_answers_for_bystanders();
        let mut steering = false;
        // Grant at the old rates first.
        for class in &mut self.classes {
            class.tick_queue();
        }
        let split_waited = self.classes.iter().any(|c| c.part.is_some() && c.waited());
        for class in &mut self.classes {
            // A gate steps on the latency itself, held quiet readings or not; while the idle
            // class answers for the bystanders, the classes splitting the share step on the rest.
            let (on, frozen) = if !class.policy.measured {
                (absolute, false)
            } else if idle_answers && class.part.is_some() {
                (signal.others, frozen)
            } else {
                (class.policy.steps_on(&signal), frozen)
            };
            let waited = if class.decides_split() {
                split_waited
            } else {
                class.waited()
            };
            steering |= class.step(on, period, frozen, waited).unwrap_or(false);
        }
        if !frozen && signal.bystanders.is_some_and(|b| b > self.target) {
            self.idle_to_own_share();
        }
        self.apply();
        // The I/O canaries matter only while something steers by the signal; otherwise each
        // one mostly wakes a parked worker, so they slow to the quiet period.
        SignalStage::set_io_quiet(&mut self.sources, !steering, &mut signal.reading);
        self.steering = steering;
        self.last_signal = signal;
        self.ticks += 1;
        let classes = self
            .classes
            .iter_mut()
            .map(|c| c.record(intervals))
            .collect();
        self.record_with(classes)
    }

    /// Whether the idle class answers for the bystanders' waits this tick: it has work and is
    /// above its floor. Then the classes that split the elastic share step on the other
    /// components alone: a normal-priority thread beside the runtime waits behind the pool's
    /// wake-ups more than behind busy workers (which keep the pool off the cores), so lowering
    /// the elastic share first would hand the cores to the pool and lengthen the waits it
    /// answers. Once the idle class is at its floor, every class steps on them.
    fn idle_answers_for_bystanders(&self) -> bool {
        self.classes
            .iter()
            .any(|c| c.kind == ClassKind::Idle && c.active() && !c.at_floor())
    }

    /// The threads beside the runtime wait longer than their allowance: the idle class takes
    /// no more than the own class's share, which stepped down on them. Its own controller steps
    /// down on them too (`Policy::steps_on`), but from every CPU at one step a tick; the cap
    /// brings it down in one. Only while work the own class's share decides for (its own, the
    /// classes that split it) runs or waits: without, the share sits where it decayed to, no
    /// reading of what the bystanders bear, and a burst of their waits (a host pause) would
    /// cut the pool to it.
    fn idle_to_own_share(&mut self) {
        if !self.classes.iter().any(|c| c.part.is_some() && c.active()) {
            return;
        }
        let own = self.classes[0].share();
        for class in &mut self.classes {
            if class.kind == ClassKind::Idle {
                class.lower_to(own);
            }
        }
    }

    /// The quiet readings: hold elastic work back for one, or read the intervals it was held
    /// for (or that had no elastic work in them) and release it.
    fn read_quiet(&mut self) {
        // Only a measured target needs readings bought with held work; ticks without elastic
        // work are read anyway.
        let holdable = self.auto_target && self.classes.iter().any(|c| c.holdable());
        // A tick with setups or elastic work in it is not quiet, held or not.
        let ran = self.classes.iter().any(Class::active);
        // The last tick's signal against its target, both in units of the scheduling allowance.
        let far = (self.last_signal.value).is_some_and(|v| v <= self.target.mul_f64(FAR_SHARE));
        match self.quiet.tick(ran, holdable, far) {
            QuietStep::Run => {}
            QuietStep::Hold => self.hold_all(Hold::Quiet, true),
            QuietStep::Read(n) => {
                self.probe.mark_quiet(n);
                let sched = self.probe.quiet_window().queue_p99_trimmed;
                self.quiet.record(sched, self.signal.recent_run_queue(n));
                self.hold_all(Hold::Quiet, false);
            }
        }
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
        let mut newest = self.outliers_traced;
        for (what, o) in polls.chain(waits) {
            if o.at > self.outliers_traced && o.duration >= at_least {
                trace::outlier(what, o);
                newest = newest.max(o.at);
            }
        }
        self.outliers_traced = newest;
    }

    /// The outlier trap's threshold for the target now.
    fn set_outlier_threshold(&self) {
        let threshold = self.outliers.threshold(self.target);
        if self.probe.outlier_threshold() != threshold {
            self.probe.set_outlier_threshold(threshold);
        }
    }

    /// The signal the controllers step on, which component it is, and the bystanders' component
    /// alone. With a measured target: what elastic work adds over the quiet baseline, once there
    /// is one; the controllers' targets follow the allowance.
    fn steer_by(&mut self, signal: &Signal) -> Steered {
        let mut steered = Steered {
            value: signal.value,
            source: signal.source,
            target: self.target,
            bystanders: None,
            others: signal.others,
        };
        if !self.auto_target {
            return steered;
        }
        let baseline = self.quiet.baseline();
        (steered, self.target_source) = if baseline.is_known() {
            (
                baseline.steer(&signal.reading, self.quantum),
                TargetSource::Measured,
            )
        } else {
            let default = Steered {
                target: DEFAULT_TARGET,
                ..steered
            };
            (default, TargetSource::Default)
        };
        self.target = steered.target;
        for class in &mut self.classes {
            class.set_target(steered.target);
        }
        if signal.reading.throttled {
            steered.value = Some(Duration::MAX);
            steered.others = steered.value;
            steered.source = SignalSource::Throttled;
        }
        steered
    }

    /// What elastic work ran since the last tick and what the process spent: the overhead
    /// correction and the quota's headroom.
    fn read_process(&mut self, window: &Window, period: Duration, intervals: usize) {
        for class in &mut self.classes {
            let ran = class.measure(period, intervals);
            if class.policy.headroom || class.policy.overhead {
                self.charged += ran;
            }
        }
        let process_cpu = self.sources.process.cpu_time();
        let window_secs = window.intervals.max(1) as f64 * period.as_secs_f64();
        self.overhead.tick(TickReading {
            process_cpu,
            charged: self.charged,
            foreground_per_sec: window.queue_latency.foreground.count as f64 / window_secs,
            period,
        });
        let quota = self.quota_cpus();
        if let Some(headroom) = &mut self.headroom {
            headroom.tick(quota, process_cpu, self.charged, period);
        }
    }

    /// Set every class's rate and holder cap for its share on the CPUs. The quota's headroom
    /// holds the split share's total, then is handed to the other classes in order: each gets
    /// what the ones before it did not run in the last tick.
    fn apply(&mut self) {
        let total = self.headroom_cap();
        self.split(total);
        let rates = Rates {
            cpus: self.cpus,
            quota_period: self.quota.as_ref().map(|q| q.period),
            overhead: &self.overhead,
        };
        // The classes that split the share come first: the headroom held their total.
        let mut taken: f64 = self
            .classes
            .iter()
            .filter(|c| c.part.is_some())
            .map(Class::used_cpus)
            .sum();
        for class in &mut self.classes {
            if class.part.is_some() {
                class.apply(&rates, None);
                continue;
            }
            class.apply(&rates, total.map(|cap| (cap - taken).max(0.0)));
            if class.policy.headroom {
                taken += class.used_cpus();
            }
        }
    }

    /// Keep weights among the classes that split the share and have work waiting
    /// (`Class::keep_weights`). Not while the quiet readings or the brake hold them: they ran
    /// nothing because they were held.
    fn keep_weights(&mut self) {
        if self.classes.iter().any(|c| c.part.is_some() && c.is_held()) {
            return;
        }
        let cpus = self.cpus;
        // The two least uses per weight of classes the CPUs hold back: each class is held to
        // the least of the others'.
        let (mut least, mut second) = (f64::INFINITY, f64::INFINITY);
        for class in &mut self.classes {
            class.smooth_use(cpus);
            if let Some(per_weight) = class.held_back_per_weight() {
                if per_weight < least {
                    second = least;
                    least = per_weight;
                } else {
                    second = second.min(per_weight);
                }
            }
        }
        for class in &mut self.classes {
            let others = match class.held_back_per_weight() {
                Some(own) if own == least => second,
                _ => least,
            };
            class.keep_weights(others.is_finite().then_some(others));
        }
    }

    /// Split the `Elastic`'s share (held to the quota's `headroom` CPUs) among the classes with
    /// a part: by weight among those with work, within caps, floors kept. Alone, the own class
    /// gets all of it, as if nothing were split.
    fn split(&mut self, headroom: Option<f64>) {
        let Some(own) = self.classes.iter().find(|c| c.decides_split()) else {
            return;
        };
        let share = own.held_share(self.cpus, headroom);
        let wants: Vec<_> = self
            .classes
            .iter()
            .filter_map(|c| c.want(self.cpus))
            .collect();
        split_share(share, &wants, &mut self.parts);
        let retune = wants.len() > 1;
        let parts = self.classes.iter_mut().filter_map(|c| {
            c.retune = retune;
            c.part.as_mut()
        });
        for (part, entitled) in parts.zip(&self.parts) {
            part.entitled = *entitled;
            part.total = share;
        }
    }

    /// The record of the state now (between ticks: no new waits are read).
    pub(crate) fn record(&self) -> TickRecord {
        self.record_with(self.classes.iter().map(Class::snapshot).collect())
    }

    fn record_with(&self, classes: Vec<crate::record::ClassRecord>) -> TickRecord {
        TickRecord {
            ticks: self.ticks,
            cpus: self.cpus,
            cpus_source: self.cpus_source,
            signal: self.last_signal.clone(),
            throttled_periods: self.signal.throttled_periods(),
            quota_cpus: self.quota_cpus(),
            quota_period: self.quota.as_ref().map(|q| q.period),
            quota_changes: self.quota_changes,
            quota_headroom: self.headroom_cap(),
            overhead: self.overhead.overhead(),
            braked_time: self.brake.as_ref().map_or(Duration::ZERO, Brake::total),
            brakes: self.brakes,
            quota_braked_time: self
                .quota_brake
                .as_ref()
                .map_or(Duration::ZERO, QuotaBrake::total),
            quota_brakes: self.quota_brake.as_ref().map_or(0, QuotaBrake::brakes),
            target: self.target,
            target_source: self.target_source,
            quiet: self.quiet.baseline(),
            quiet_hold: self.quiet.holding(),
            share_bounds: match self.fixed {
                Some(share) => (share, share),
                None => (self.controller.min_share, self.controller.max_share),
            },
            paused: self.paused,
            classes,
        }
    }

    /// Engage or release the backlog brake and the quota brake on every class each applies
    /// to. Returns when the governor thread should look again before its next tick: every
    /// `BRAKE_POLL` while the backlog brake is on, when the quota brake asks while it is armed.
    /// Runs on the governor thread (each tick and each wake-up), never on a worker.
    pub(crate) fn brake_step(&mut self) -> Option<Duration> {
        let now = self.clock.now();
        if let Some(brake) = &mut self.brake {
            let change = brake.step(now, &self.probe);
            let on = brake.is_on();
            match change {
                Change::Keep => {}
                Change::Engage => trace::brake_engaged(),
                Change::Release { lasted, spent } => trace::brake_released(lasted, spent),
            }
            if change != Change::Keep {
                self.brakes += u64::from(on);
                self.hold_all(Hold::Brake, on);
            }
        }
        if let Some(quota) = self.quota_brake.as_mut().filter(|_| self.quota.is_some()) {
            let change = quota.step(now, self.sources.process.cpu_time());
            match change {
                QuotaChange::Keep => {}
                QuotaChange::Engage => trace::quota_brake_engaged(),
                QuotaChange::Release { lasted } => trace::quota_brake_released(lasted),
            }
            if change != QuotaChange::Keep {
                let on = quota.is_on();
                self.hold_all(Hold::Quota, on);
            }
        }
        self.recheck()
    }

    /// When the governor thread should look at the brakes again before its next tick.
    fn recheck(&self) -> Option<Duration> {
        let now = self.clock.now();
        let check = self
            .quota_brake
            .as_ref()
            .filter(|_| self.quota.is_some())
            .and_then(|q| q.next_check(now));
        if self.braked() {
            Some(check.map_or(BRAKE_POLL, |c| c.min(BRAKE_POLL)))
        } else {
            check
        }
    }

    /// Hold every class back for `why` (those it applies to), or let go of that hold.
    fn hold_all(&mut self, why: Hold, on: bool) {
        if self.closed {
            // Nothing holds a closed class: no release could come.
            return;
        }
        for class in &mut self.classes {
            class.hold(why, on, self.quota_seen);
        }
    }

    /// Whether either brake holds elastic work now.
    fn holding(&self) -> bool {
        self.braked() || self.quota_braked()
    }

    /// Whether the quota brake is on.
    fn quota_braked(&self) -> bool {
        self.quota_brake.as_ref().is_some_and(QuotaBrake::is_on)
    }

    /// Whether the backlog brake is on.
    fn braked(&self) -> bool {
        self.brake.as_ref().is_some_and(Brake::is_on)
    }

    /// New bounds for the `Elastic`'s own share (validated as the builder's `share`; an error
    /// changes nothing), applied now: the share moves into them, the rates follow. Classes made
    /// from now on take their floor from them too.
    fn set_share(&mut self, min: f64, max: f64) -> Result<(), SettingError> {
        let own = self
            .classes
            .iter_mut()
            .find(|c| c.kind == ClassKind::Elastic)
            .ok_or_else(|| SettingError::new("share", "", "a live `Elastic`"))?;
        own.set_bounds(min, max)?;
        self.controller.min_share = min;
        self.controller.max_share = max;
        self.apply();
        Ok(())
    }

    /// Pause elastic work (no new grants; holders keep theirs until they settle; waiters stay
    /// in line) or resume it. Gates are not paused: their setups are the foreground's.
    fn set_paused(&mut self, on: bool) {
        self.paused = on;
        self.hold_all(Hold::Paused, on);
    }

    /// Add a class at `at`, held if a brake or the quiet readings hold the others.
    #[cfg_attr(not(any(feature = "gate", feature = "idle-pool")), allow(dead_code))]
    fn add(&mut self, mut class: Class, at: usize) {
        if self.closed {
            // Made after the governor stopped: closed at once, like the others.
            class.end();
        } else {
            class.hold(Hold::Brake, self.braked(), self.quota_seen);
            class.hold(Hold::Quota, self.quota_braked(), self.quota_seen);
            class.hold(Hold::Quiet, self.quiet.holding(), self.quota_seen);
            class.hold(Hold::Paused, self.paused, self.quota_seen);
        }
        if self.target_source != TargetSource::Builder {
            class.set_target(self.target);
        }
        let mut rest = std::mem::take(&mut self.classes);
        let tail = rest.split_off(at.min(rest.len()));
        rest.push(class);
        rest.extend(tail);
        self.classes = rest;
        self.apply();
    }

    /// A runtime of `workers` threads is attached: read the quota and the CPUs now, and from
    /// now on every `quota_reread`.
    fn attach(&mut self, workers: usize) {
        let now = self.clock.now();
        self.read_host(workers, now);
    }

    /// Read the quota and the CPUs again if `quota_reread` has passed since the last reading
    /// (once a runtime is attached). On the governor thread, at a tick: never on a worker.
    fn reread_host(&mut self) {
        let now = self.clock.now();
        let Some(host) = &self.host else {
            return;
        };
        if now.saturating_sub(host.read_at) >= self.quota_reread {
            self.read_host(host.workers, now);
        }
    }

    /// Read the quota, the affinity mask and the available parallelism at `now` (after
    /// attach, a reading that fails keeps the last good one), choose the CPUs from them and
    /// the `workers`, and size everything for them: the rates and holder caps (unless the
    /// builder fixed the CPUs), and, when the quota changed, the quota's headroom and brake
    /// and the throttling watch.
    fn read_host(&mut self, workers: usize, now: Duration) {
        let last = self.host.take();
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
            builder: self.builder_cpus,
            workers,
            quota: &quota,
            affinity,
            available,
        });
        if self.builder_cpus.is_none() {
            self.cpus = cpus;
            self.cpus_source = source;
        }
        // Against the last reading, not the quota in force: that may have been set by hand.
        let before = last.as_ref().and_then(|h| QuotaNow::of(&h.quota));
        let after = QuotaNow::of(&quota);
        if before != after {
            if last.is_some() {
                self.quota_changes += 1;
                trace::quota_changed(after.as_ref().map(|q| q.cpus), self.cpus);
            }
            match after {
                Some(q) => self.watch_quota(q.dir, q.cpus, q.period),
                None => self.leave_quota(),
            }
        }
        self.host = Some(Host {
            workers,
            quota,
            affinity,
            available,
            read_at: now,
        });
        self.apply();
    }

    /// A quota of `cpus` per `period` applies in the cgroup in `dir`: watch its throttling and
    /// cap elastic work within it from now on (each if on), the quota brake sized for it.
    fn watch_quota(&mut self, dir: PathBuf, cpus: f64, period: Duration) {
        self.quota_seen = true;
        if self.quota.as_ref().is_none_or(|q| q.dir != dir) {
            self.signal.watch_throttling(&self.sources, dir.clone());
        }
        self.quota = Some(QuotaNow { cpus, period, dir });
        if self.headroom.is_some() {
            let process = &self.sources.process;
            let parallelism = process
                .affinity()
                .or_else(|| process.available_parallelism())
                .unwrap_or(1);
            match &mut self.quota_brake {
                // The readings only give quotas it can meter; one given by hand that it cannot
                // leaves it as it was.
                Some(brake) => {
                    brake.resize(cpus, period, parallelism);
                }
                None => {
                    // Without the throttling input nothing would arm it: armed always.
                    let always_armed = !self.signal.watches_throttling();
                    self.quota_brake = QuotaBrake::new(cpus, period, parallelism, always_armed);
                }
            }
        }
        // The brake's hold reaches the classes held by it inside a quota only.
        self.hold_all(Hold::Brake, self.braked());
    }

    /// The quota is gone: the headroom cap lifts, the quota brake lets go (it keeps its counts
    /// for the snapshot), the grants no longer fit a period.
    fn leave_quota(&mut self) {
        self.quota = None;
        self.quota_seen = false;
        let now = self.clock.now();
        if let Some(lasted) = self.quota_brake.as_mut().and_then(|b| b.release(now)) {
            trace::quota_brake_released(lasted);
            self.hold_all(Hold::Quota, false);
        }
    }

    /// CPUs the quota in force allows (`None`: none).
    fn quota_cpus(&self) -> Option<f64> {
        self.quota.as_ref().map(|q| q.cpus)
    }

    /// CPUs the quota's headroom leaves elastic work now (`None`: no quota, no reading, off).
    fn headroom_cap(&self) -> Option<f64> {
        let quota = self.quota_cpus();
        self.headroom.as_ref().and_then(|h| h.cap_cpus(quota))
    }

    /// The idle class of `parent`: the one made before while it lives, else a new one.
    #[cfg(feature = "idle-pool")]
    fn idle_class(&mut self, parent: &Arc<Shared>) -> Result<Arc<Shared>, SettingError> {
        if let Some(shared) = self.idle.upgrade() {
            return Ok(shared);
        }
        let start = crate::idle::IdleStart {
            elastic_share: self.classes[0].share(),
            fixed: self.fixed,
            quota: self.quota_seen,
        };
        let rate = self
            .overhead
            .apply(elastic_cpu_core::rate_for(start.initial_share(), self.cpus));
        let queue = elastic_cpu_core::WorkQueue::new(self.clock.clone(), rate);
        let (shared, limit) = crate::idle::create(parent, queue, &self.controller, start)?;
        self.idle = Arc::downgrade(&shared);
        let queue: Weak<dyn ClassQueue> = Arc::downgrade(&shared) as Weak<dyn ClassQueue>;
        let class = Class::new(
            ClassKind::Idle,
            queue,
            limit,
            elastic_policy(
                self.cap_concurrency,
                HoldWhen::InQuota,
                crate::idle::IDLE_TARGET_FACTOR,
            ),
            self.controller.min_share,
        );
        self.add(class, 1);
        Ok(shared)
    }

    /// A new connection gate, steered from now on with the other classes.
    #[cfg(feature = "gate")]
    fn add_gate(
        &mut self,
        shared: &Shared,
        settings: &crate::gate::GateSettings,
    ) -> Result<Arc<crate::gate::shared::GateShared>, SettingError> {
        let id = self.gates_made;
        let (gate, limit, policy, floor) = crate::gate::class::create(
            settings,
            crate::gate::class::GateParts {
                controller: &self.controller,
                clock: self.clock.clone(),
                running: shared.running.clone(),
                quantum: shared.quantum,
                os_yield: shared.os_yield,
                cpus: self.cpus,
                id,
            },
        )?;
        self.gates_made += 1;
        let queue: Weak<dyn ClassQueue> = Arc::downgrade(&gate) as Weak<dyn ClassQueue>;
        let at = self.classes.len();
        self.add(
            Class::new(ClassKind::Gate(id), queue, limit, policy, floor),
            at,
        );
        Ok(gate)
    }

    /// A new class of `root`'s elastic work, its part of the share split with the others from
    /// the next tick on. Fails on a bad setting or a name another class has.
    fn add_member(
        &mut self,
        root: &Arc<Shared>,
        settings: &crate::settings::ClassSettings,
    ) -> Result<Arc<Shared>, SettingError> {
        settings.validate()?;
        let taken = self
            .classes
            .iter()
            .filter_map(|c| c.part.as_ref())
            .any(|p| &*p.name == settings.name());
        if taken {
            return Err(SettingError::new(
                "ClassSettings::name",
                format!("{:?}", settings.name()),
                "a name no other live class of this `Elastic` has",
            ));
        }
        // No tokens until the split gives it a part: it starts empty, not with a burst.
        let queue = elastic_cpu_core::WorkQueue::new(self.clock.clone(), 0);
        let shared = Arc::new(Shared::member_class(root, queue));
        let weak: Weak<dyn ClassQueue> = Arc::downgrade(&shared) as Weak<dyn ClassQueue>;
        let class = Class::new(
            ClassKind::Member(self.members_made),
            weak,
            Limit::Fixed(0.0),
            elastic_policy(self.cap_concurrency, HoldWhen::Always, 1),
            self.controller.min_share,
        )
        .with_part(Part::new(settings));
        self.members_made += 1;
        let at = self.classes.len();
        self.add(class, at);
        Ok(shared)
    }

    /// The governor stops (shut down, or its thread ended): close every class and let go of
    /// every hold, so each waiter ends (granted before, or `Closed`) and no brake stays on,
    /// then stop the I/O probe. Classes made later are closed as they are made.
    fn close(&mut self) {
        self.closed = true;
        for class in &mut self.classes {
            class.end();
        }
        self.sources.io.stop();
        self.last_signal.reading.io = self.sources.io.availability();
    }
}

/// The governor as its thread and the `Elastic` handles share it: behind a lock, with the
/// record it published last readable without it, so a snapshot never waits for a tick.
pub(crate) struct Control {
    governor: Mutex<Governor>,
    record: Mutex<Arc<TickRecord>>,
    /// The idle class, for snapshots (read without the governor's lock).
    #[cfg(feature = "idle-pool")]
    idle: Mutex<Weak<Shared>>,
    /// The governor thread, until it is joined.
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Set by [`shutdown`](Self::shutdown): the thread ends at its next wake-up.
    stop: AtomicBool,
    /// [`GovernorState`] as a number: `Running` until the governor stops, then why.
    state: AtomicU8,
    /// Ticks whose metrics export panicked.
    recorder_panics: AtomicU64,
    /// A fault the governor thread is to end with at its next wake-up (test plumbing).
    #[cfg(feature = "test-util")]
    fault: Mutex<Option<GovernorEnd>>,
}

/// [`GovernorState`] to and from the number [`Control::state`] holds.
fn state_code(state: GovernorState) -> u8 {
    match state {
        GovernorState::Running => 0,
        GovernorState::ShutDown => 1,
        GovernorState::Exited => 2,
        GovernorState::Panicked => 3,
    }
}

fn state_of(code: u8) -> GovernorState {
    match code {
        0 => GovernorState::Running,
        1 => GovernorState::ShutDown,
        2 => GovernorState::Exited,
        _ => GovernorState::Panicked,
    }
}

impl Control {
    pub(crate) fn new(governor: Governor) -> Control {
        let record = Arc::new(governor.record());
        Control {
            governor: Mutex::new(governor),
            record: Mutex::new(record),
            #[cfg(feature = "idle-pool")]
            idle: Mutex::new(Weak::new()),
            thread: Mutex::new(None),
            stop: AtomicBool::new(false),
            state: AtomicU8::new(state_code(GovernorState::Running)),
            recorder_panics: AtomicU64::new(0),
            #[cfg(feature = "test-util")]
            fault: Mutex::new(None),
        }
    }

    /// Lock the governor; a panic in an earlier tick leaves its state usable.
    fn lock(&self) -> MutexGuard<'_, Governor> {
        self.governor.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, record: TickRecord) {
        *self.record.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(record);
    }

    /// Run `f` on the governor, then publish its record (outside the lock).
    fn change<T>(&self, f: impl FnOnce(&mut Governor) -> T) -> T {
        let mut g = self.lock();
        let out = f(&mut g);
        let record = g.record();
        drop(g);
        self.publish(record);
        out
    }

    /// The record published last.
    pub(crate) fn record(&self) -> Arc<TickRecord> {
        self.record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One governor tick, then the metrics export (outside the lock: an exporter may call back
    /// into the handle).
    pub(crate) fn tick(&self, shared: &Shared, period: Duration) {
        let mut g = self.lock();
        let record = g.tick(period);
        let steering = g.steering;
        #[cfg(feature = "metrics")]
        let queues: Vec<_> = g.classes.iter().filter_map(Class::queue).collect();
        drop(g);
        // Like the I/O canaries, the sampler's tasks matter only while something steers.
        shared.set_samplers_quiet(!steering);
        self.publish(record);
        #[cfg(feature = "metrics")]
        {
            let snapshot = self.snapshot(shared, shared.probe.window());
            self.export(|| {
                crate::metrics::emit(&snapshot);
                for queue in &queues {
                    queue.export();
                }
            });
        }
    }

    /// Run `f`, which calls the application's `metrics` recorder: a panic there costs this
    /// export, not the governor, and is counted ([`Snapshot::recorder_panics`]). Unwind safe
    /// enough: `f` reads a snapshot and the queues' counters, each under its own short lock,
    /// and holds none of them while it calls the recorder. A program built with
    /// `panic = "abort"` aborts there, as on any panic.
    #[cfg(feature = "metrics")]
    fn export(&self, f: impl FnOnce()) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
            self.recorder_panics.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether the governor still steers, and if not, why it stopped.
    pub(crate) fn state(&self) -> GovernorState {
        state_of(self.state.load(Ordering::Acquire))
    }

    /// The governor has stopped, for `why` (the first reason stays): close every class (each
    /// waiter ends, no brake holds from now on, classes made later are closed as they are
    /// made), then say so (the snapshot's state, so one that says it has stopped finds
    /// everything closed; `elastic_cpu_governor_up` at 0). Runs on the governor thread as it
    /// ends, a panic's unwinding included, and at [`shutdown`](Self::shutdown).
    pub(crate) fn end(&self, why: GovernorState) {
        self.change(Governor::close);
        let _ = self.state.compare_exchange(
            state_code(GovernorState::Running),
            state_code(why),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        #[cfg(feature = "metrics")]
        self.export(crate::metrics::governor_down);
    }

    /// Make the governor thread end at its next wake-up, after that wake-up's tick or brake
    /// step (test plumbing: `Elastic::end_governor`).
    #[cfg(feature = "test-util")]
    pub(crate) fn inject(&self, end: GovernorEnd) {
        *self.fault.lock().unwrap_or_else(|p| p.into_inner()) = Some(end);
    }

    /// The fault injected for the thread to end with, if any.
    #[cfg(feature = "test-util")]
    pub(crate) fn fault(&self) -> Option<GovernorEnd> {
        *self.fault.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Governor::brake_step`]: returns when to look again before the next tick.
    pub(crate) fn brake_step(&self) -> Option<Duration> {
        let mut g = self.lock();
        let was = g.holding();
        let recheck = g.brake_step();
        if was != g.holding() {
            let record = g.record();
            drop(g);
            self.publish(record);
        }
        recheck
    }

    /// [`Governor::recheck`].
    pub(crate) fn recheck(&self) -> Option<Duration> {
        self.lock().recheck()
    }

    /// A runtime of `workers` threads is attached: size the rates for the CPUs it gives
    /// (unless the builder fixed them) and, with a quota, watch it; re-read both every
    /// `quota_reread` from now on.
    pub(crate) fn attach(&self, workers: usize) {
        let quota = self.change(|g| {
            g.attach(workers);
            g.quota.is_some()
        });
        if quota {
            // The quota brake may want its first reading before the next tick.
            let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(handle) = thread.as_ref() {
                handle.thread().unpark();
            }
        }
    }

    /// Driven by hand: no governor thread, the test drives the probe.
    pub(crate) fn is_manual(&self) -> bool {
        self.lock().clock.is_manual()
    }

    /// Whether the I/O wake-up input is on.
    pub(crate) fn io_input(&self) -> bool {
        self.lock().sources.io.availability() != crate::readings::Availability::Off
    }

    /// Treat the cgroup in `dir` as the process's, with a quota of `cpus`.
    #[cfg(feature = "test-util")]
    pub(crate) fn watch_quota(&self, dir: PathBuf, cpus: f64, period: Duration) {
        self.lock().watch_quota(dir, cpus, period);
    }

    /// Watch the cgroup in `dir` for throttling only.
    #[cfg(feature = "test-util")]
    pub(crate) fn watch_throttling(&self, dir: PathBuf) {
        let mut g = self.lock();
        g.quota_seen = true;
        let Governor {
            signal, sources, ..
        } = &mut *g;
        signal.watch_throttling(sources, dir);
    }

    /// Start the I/O wake-up probe on `handle`'s runtime.
    pub(crate) fn start_io_probe(
        &self,
        handle: &Handle,
        probe: &ProbeConfig,
    ) -> Result<(), elastic_cpu_probe::IoProbeError> {
        self.change(|g| {
            let started = g.sources.io.start(handle, probe);
            g.last_signal.reading.io = g.sources.io.availability();
            started
        })
    }

    /// [`Governor::idle_class`].
    #[cfg(feature = "idle-pool")]
    pub(crate) fn idle_class(&self, parent: &Arc<Shared>) -> Result<Arc<Shared>, SettingError> {
        self.change(|g| {
            let class = g.idle_class(parent)?;
            *self.idle.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(&class);
            Ok(class)
        })
    }

    /// [`Governor::add_gate`].
    #[cfg(feature = "gate")]
    pub(crate) fn add_gate(
        &self,
        shared: &Shared,
        settings: &crate::gate::GateSettings,
    ) -> Result<Arc<crate::gate::shared::GateShared>, SettingError> {
        self.change(|g| g.add_gate(shared, settings))
    }

    /// [`Governor::set_share`].
    pub(crate) fn set_share(&self, min: f64, max: f64) -> Result<(), SettingError> {
        self.change(|g| g.set_share(min, max))
    }

    /// [`Governor::set_paused`].
    pub(crate) fn set_paused(&self, on: bool) {
        self.change(|g| g.set_paused(on));
    }

    /// [`Governor::add_member`].
    pub(crate) fn add_member(
        &self,
        root: &Arc<Shared>,
        settings: &crate::settings::ClassSettings,
    ) -> Result<Arc<Shared>, SettingError> {
        self.change(|g| g.add_member(root, settings))
    }

    /// Everything at once: the record, the probe `window`, the queue ledgers.
    pub(crate) fn snapshot(&self, shared: &Shared, window: Window) -> Snapshot {
        #[cfg(feature = "idle-pool")]
        let idle = (self.idle.lock().unwrap_or_else(|p| p.into_inner())).upgrade();
        #[cfg(feature = "idle-pool")]
        let (idle_queue, idle_unstacked) = idle.map_or((None, 0), |class| {
            let moved = class.unstack.as_ref().map_or(0, |u| u.moved());
            (Some(class.queue.snapshot()), moved)
        });
        #[cfg(not(feature = "idle-pool"))]
        let (idle_queue, idle_unstacked) = (None, 0);
        let mut s = Snapshot::new(
            &self.record(),
            window,
            shared.queue.snapshot(),
            idle_queue,
            shared.braked(),
            shared.os_yields.load(Ordering::Relaxed),
            shared.long_polls.count(),
        );
        s.outliers = shared.probe.outliers();
        s.probe_source = if shared.probe.has_hooks() {
            ProbeSource::TaskHooks
        } else if shared.has_sampler() {
            ProbeSource::Sampler
        } else {
            ProbeSource::None
        };
        s.idle_unstacked = idle_unstacked;
        s.governor = self.state();
        s.recorder_panics = self.recorder_panics.load(Ordering::Relaxed);
        s
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Stop the governor thread and join it, close every class, stop the I/O probe.
    pub(crate) fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            // An exporter called from the governor's own tick cannot join itself.
            if t.thread().id() != std::thread::current().id() {
                t.thread().unpark();
                let _ = t.join();
            }
        }
        self.end(GovernorState::ShutDown);
    }
}
