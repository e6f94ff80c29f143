//! The decision: one tick's readings to one tick's decisions, as one pure step.
//!
//! [`Decider`] holds the control loop's state as plain values (no clock, no atomics, no I/O):
//! the elastic group's controller and its members' parts, the idle class's and each gate's
//! controller, the quiet readings' schedule and baselines, the overhead correction, the quota's
//! headroom and the holds. [`Decider::step`] takes one tick's [`TickReadings`] and sets each
//! class's [`ClassDecision`]; the driver applies them to its queues. The pacer's governor drives
//! it from the probe and the OS; the plant drives it from a simulation, so a controller change is
//! tried in seconds.
//!
//! ```
//! use std::time::Duration;
//! use elastic_cpu_core::decide::{
//!     ClassReading, Decider, DeciderSettings, QuietWindow, SignalReading, TickReadings,
//! };
//! use elastic_cpu_core::ControllerConfig;
//!
//! struct NoQuiet;
//! impl QuietWindow for NoQuiet {
//!     fn quiet_p99(&mut self, _ticks: usize) -> Option<Duration> {
//!         Some(Duration::from_micros(200))
//!     }
//! }
//!
//! let mut d = Decider::new(DeciderSettings::new(ControllerConfig::default(), 2.0))?;
//! let busy = ClassReading { waited: true, busy: true, ..ClassReading::default() };
//! let readings = TickReadings {
//!     period: Duration::from_millis(100),
//!     intervals: 10,
//!     signal: SignalReading::default(),
//!     run_queue: None,
//!     process_cpu: None,
//!     foreground_per_sec: 0.0,
//!     classes: &[busy],
//! };
//! d.step(&readings, &mut NoQuiet);
//! assert!(d.decisions()[0].rate > 0);
//! # Ok::<(), elastic_cpu_core::SettingError>(())
//! ```

mod class;
mod decisions;
mod headroom;
mod hold;
mod overhead;
mod part;
mod quiet;
mod readings;
mod signal;
pub(crate) mod split;

use std::collections::VecDeque;
use std::time::Duration;

pub use self::class::{holder_cap, ClassKind, Limit, IDLE_TARGET_FACTOR};
use self::class::{rate, Seen};
pub use self::decisions::{ClassDecision, HoldChange};
use self::headroom::Headroom;
use self::hold::braking;
pub use self::hold::Hold;
use self::overhead::{Overhead, TickReading as OverheadReading};
pub use self::part::Part;
pub use self::quiet::{Baseline, Steered, TargetSource};
use self::quiet::{Quiet, QuietStep, FAR_SHARE};
pub use self::readings::{ClassReading, QuietWindow, QuotaLimit, TickReadings};
pub use self::signal::{
    window_delay, RunQueueWaits, SignalReading, SignalSource, Waiters, RUN_QUEUE_MIN_TIMESLICES,
};
use crate::{ControllerConfig, SettingError, StepController};

/// What a [`Decider`] is built from.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DeciderSettings {
    /// The elastic group's controller (the idle class and the gates derive theirs from it).
    pub controller: ControllerConfig,
    /// The group's share to start from.
    pub initial_share: f64,
    /// A fixed share: the group's and the idle class's controllers are off.
    pub fixed: Option<f64>,
    /// CPUs the shares are of, until [`Decider::set_host`] says otherwise.
    pub cpus: f64,
    /// The target is measured from quiet readings (else the controller's own is kept).
    pub measured_target: bool,
    /// The target before a quiet reading, with a measured target.
    pub default_target: Duration,
    /// A poll quantum: the least latency elastic work may add with a measured target.
    pub quantum: Duration,
    /// The probe's window, in ticks.
    pub intervals: usize,
    /// Hold elastic classes to the quota's headroom.
    pub quota_headroom: bool,
    /// Cap the grants held at once to what the share pays for (the group and the idle class).
    pub cap_holders: bool,
}

impl DeciderSettings {
    /// Settings with `controller`'s target measured from quiet readings, on `cpus`.
    pub fn new(controller: ControllerConfig, cpus: f64) -> DeciderSettings {
        DeciderSettings {
            initial_share: controller.min_share,
            controller,
            fixed: None,
            cpus,
            measured_target: true,
            default_target: Duration::from_millis(1),
            quantum: Duration::from_micros(500),
            intervals: 10,
            quota_headroom: true,
            cap_holders: true,
        }
    }
}

/// How a class's share is decided: a member's is its part of the group's, any other class's
/// its own limit's.
#[derive(Debug)]
enum Role {
    Member(Part),
    Solo(Limit),
}

/// One class in the decision.
#[derive(Debug)]
struct Class {
    kind: ClassKind,
    role: Role,
    /// The lowest share the quota's headroom may hold a solo class to: it always moves.
    floor: f64,
    cap_holders: bool,
    seen: Seen,
}

/// The decision's state. Classes are kept in one order, the one readings and decisions are
/// in: the elastic group's members first (the `Elastic`'s own one first), then the others in
/// the order they were added (the idle class, the gates).
#[derive(Debug)]
pub struct Decider {
    settings: DeciderSettings,
    /// The elastic group's controller, its share the members split.
    group: Limit,
    classes: Vec<Class>,
    decisions: Vec<ClassDecision>,
    quiet: Quiet,
    overhead: Overhead,
    /// `None`: the quota's headroom is off.
    headroom: Option<Headroom>,
    /// CPUs the shares are of, the quota in force, and whether a quota was seen.
    cpus: f64,
    quota: Option<QuotaLimit>,
    in_quota: bool,
    /// The target the group stepped on at the last tick, and its source.
    target: Duration,
    target_source: TargetSource,
    /// What the classes stepped on at the last tick.
    steered: Option<Steered>,
    /// Running time charged to elastic classes, summed tick by tick.
    charged: Duration,
    /// The run-queue waits of the last ticks, newest last.
    run_queue: VecDeque<RunQueueWaits>,
    /// The holds on now ([`Hold`] bits).
    holds: u8,
    paused: bool,
    closed: bool,
    steering: bool,
    /// Scratch for the split.
    wants: Vec<crate::Want>,
    parts: Vec<f64>,
}

impl Decider {
    /// A decision with the `Elastic`'s own class, a member of the elastic group.
    pub fn new(settings: DeciderSettings) -> Result<Decider, SettingError> {
        let group = match settings.fixed {
            Some(share) => Limit::Fixed(share),
            None => Limit::Controller(Box::new(StepController::with_initial_share(
                settings.controller.clone(),
                settings.initial_share,
            )?)),
        };
        let target_source = if settings.measured_target {
            TargetSource::Default
        } else {
            TargetSource::Builder
        };
        let mut d = Decider {
            quiet: Quiet::new(settings.intervals),
            headroom: settings.quota_headroom.then(Headroom::default),
            cpus: settings.cpus,
            target: settings.controller.target_p99,
            target_source,
            group,
            settings,
            classes: Vec::new(),
            decisions: Vec::new(),
            overhead: Overhead::default(),
            quota: None,
            in_quota: false,
            steered: None,
            charged: Duration::ZERO,
            run_queue: VecDeque::new(),
            holds: 0,
            paused: false,
            closed: false,
            steering: false,
            wants: Vec::new(),
            parts: Vec::new(),
        };
        let own = Part::new(DEFAULT_CLASS, 1.0, None, 0.0);
        d.add_member(ClassKind::Elastic, own);
        Ok(d)
    }

    /// Add a member of the elastic group (its part is split from the next tick on); returns
    /// its place in the class order. Its name must be unique among the live members.
    pub fn add_member(&mut self, kind: ClassKind, part: Part) -> usize {
        let at = self.members();
        let floor = self.settings.controller.min_share;
        self.insert(
            at,
            kind,
            Role::Member(part),
            floor,
            self.settings.cap_holders,
        );
        at
    }

    /// Add a class with a share of its own, decided by `limit`, never held by the quota's
    /// headroom below `floor`; returns its place in the class order (the last).
    pub fn add_solo(
        &mut self,
        kind: ClassKind,
        limit: Limit,
        floor: f64,
        cap_holders: bool,
    ) -> usize {
        let at = self.classes.len();
        self.insert(at, kind, Role::Solo(limit), floor, cap_holders);
        at
    }

    fn insert(&mut self, at: usize, kind: ClassKind, role: Role, floor: f64, cap_holders: bool) {
        let mut class = Class {
            kind,
            role,
            floor,
            cap_holders,
            seen: Seen::default(),
        };
        if !self.closed {
            for why in [Hold::Brake, Hold::Quota, Hold::Quiet, Hold::Paused] {
                let on = self.holds & why as u8 != 0;
                class.seen.hold(kind, why, on, self.in_quota);
            }
        }
        if self.target_source != TargetSource::Builder {
            class.set_target(self.target);
        }
        self.classes.insert(at, class);
        self.decisions.insert(at, ClassDecision::default());
        self.apply();
    }

    /// Remove the class at `at` (its work is gone).
    pub fn remove(&mut self, at: usize) {
        if at < self.classes.len() {
            self.classes.remove(at);
            self.decisions.remove(at);
        }
    }

    /// Whether a live member is called `name`.
    pub fn has_member(&self, name: &str) -> bool {
        self.classes
            .iter()
            .any(|c| matches!(&c.role, Role::Member(p) if &*p.name == name))
    }

    /// The CPUs the shares are of and the quota in force (`in_quota`: a quota was seen, or a
    /// throttling watch was set by hand), applied now.
    pub fn set_host(&mut self, cpus: f64, quota: Option<QuotaLimit>, in_quota: bool) {
        self.cpus = cpus;
        self.quota = quota;
        if self.in_quota != in_quota {
            self.in_quota = in_quota;
            // The brake's hold reaches the idle class inside a quota only.
            self.set_hold(Hold::Brake, self.holds & Hold::Brake as u8 != 0);
        }
        self.apply();
    }

    /// One tick: measure each class, take or read a quiet reading (from `quiet`), steer, step
    /// every controller, split the group's share and set each class's decision
    /// ([`decisions`](Self::decisions)). `readings.classes` is in the class order; a class
    /// without a reading is read as idle.
    pub fn step(&mut self, r: &TickReadings<'_>, quiet: &mut dyn QuietWindow) {
        self.measure(r);
        self.keep_weights();
        self.read_quiet(quiet);
        let steered = self.steer_by(&r.signal);
        // Paused, the share holds: work waits for the pause, not for the share.
        let frozen = self.quiet.holding() || self.paused;
        let idle_answers = self.classes.iter().any(|c| {
            c.kind == ClassKind::Idle
                && c.seen.active()
                && matches!(&c.role, Role::Solo(l) if !l.at_floor())
        });
        let mut steering = false;
        let mut group_waited = false;
        for class in &mut self.classes {
            steering |= class.seen.last.waited || class.seen.last.steering;
            match &mut class.role {
                Role::Member(_) => group_waited |= class.seen.last.waited,
                // A gate steps on the latency itself, held quiet readings or not.
                Role::Solo(limit) if !class.kind.measured() => {
                    limit.step(r.signal.value, r.period, class.seen.last.waited);
                }
                Role::Solo(limit) if !frozen => {
                    let on = steps_on(&steered, class.kind.target_factor());
                    limit.step(on, r.period, class.seen.last.waited);
                }
                Role::Solo(_) => {}
            }
        }
        if !frozen {
            // While the idle class answers for the bystanders, the group steps on the rest.
            let on = if idle_answers {
                steered.others
            } else {
                steps_on(&steered, 1)
            };
            self.group.step(on, r.period, group_waited);
            if steered.bystanders.is_some_and(|b| b > self.target) {
                self.idle_to_group_share();
            }
        }
        self.steering = steering;
        self.steered = Some(steered);
        self.apply();
    }

    /// Read what each class ran, the overhead correction and the quota's headroom.
    fn measure(&mut self, r: &TickReadings<'_>) {
        for (i, class) in self.classes.iter_mut().enumerate() {
            let reading = r.classes.get(i).copied().unwrap_or_default();
            let ran = class.seen.measure(&reading, r.period);
            if class.kind.elastic() {
                self.charged += ran;
            }
        }
        self.overhead.tick(OverheadReading {
            process_cpu: r.process_cpu,
            charged: self.charged,
            foreground_per_sec: r.foreground_per_sec,
            period: r.period,
        });
        if let Some(headroom) = &mut self.headroom {
            headroom.tick(
                self.quota.map(|q| q.cpus),
                r.process_cpu,
                self.charged,
                r.period,
            );
        }
        match r.run_queue {
            Some(waits) => {
                self.run_queue.push_back(waits);
                while self.run_queue.len() > r.intervals.max(1) {
                    self.run_queue.pop_front();
                }
            }
            None => self.run_queue.clear(),
        }
    }

    /// Keep weights among the members that have work waiting ([`Part::keep_weights`]). Not
    /// while a hold is on them: they ran nothing because they were held.
    fn keep_weights(&mut self) {
        let members = || self.classes.iter().filter(|c| c.kind.is_member());
        if members().any(|c| c.seen.held != 0) {
            return;
        }
        let cpus = self.cpus;
        // The two least uses per weight of members the CPUs hold back: each is held to the
        // least of the others'.
        let (mut least, mut second) = (f64::INFINITY, f64::INFINITY);
        for class in &mut self.classes {
            let Role::Member(part) = &mut class.role else {
                continue;
            };
            part.smooth_use(&class.seen, cpus);
            if let Some(per_weight) = part.held_back_per_weight(&class.seen) {
                if per_weight < least {
                    second = least;
                    least = per_weight;
                } else {
                    second = second.min(per_weight);
                }
            }
        }
        for class in &mut self.classes {
            let Role::Member(part) = &mut class.role else {
                continue;
            };
            let others = match part.held_back_per_weight(&class.seen) {
                Some(own) if own == least => second,
                _ => least,
            };
            part.keep_weights(class.seen.last.waited, others.is_finite().then_some(others));
        }
    }

    /// The quiet readings: hold elastic work back for one, or read the ticks it was held for
    /// (or that had no elastic work in them) and release it.
    fn read_quiet(&mut self, quiet: &mut dyn QuietWindow) {
        // Only a measured target needs readings bought with held work; ticks without elastic
        // work are read anyway.
        let holdable =
            self.settings.measured_target && self.classes.iter().any(|c| c.kind.measured());
        // A tick with setups or elastic work in it is not quiet, held or not.
        let ran = self.classes.iter().any(|c| c.seen.active());
        let last = self.steered.and_then(|s| s.value);
        let far = last.is_some_and(|v| v <= self.target.mul_f64(FAR_SHARE));
        match self.quiet.tick(ran, holdable, far) {
            QuietStep::Run => {}
            QuietStep::Hold => self.set_hold(Hold::Quiet, true),
            QuietStep::Read(n) => {
                let sched = quiet.quiet_p99(n);
                let skip = self.run_queue.len().saturating_sub(n);
                self.quiet.record(sched, self.run_queue.iter().skip(skip));
                self.set_hold(Hold::Quiet, false);
            }
        }
    }

    /// What the controllers step on. With a measured target: what elastic work adds over the
    /// quiet baseline, once there is one; the controllers' targets follow the allowance.
    fn steer_by(&mut self, signal: &SignalReading) -> Steered {
        let mut steered = Steered {
            value: signal.value,
            source: signal.source,
            target: self.target,
            bystanders: None,
            others: signal.value,
        };
        if !self.settings.measured_target {
            return steered;
        }
        let baseline = self.quiet.baseline();
        (steered, self.target_source) = if baseline.is_known() {
            (
                baseline.steer(signal, self.settings.quantum),
                TargetSource::Measured,
            )
        } else {
            let default = Steered {
                target: self.settings.default_target,
                ..steered
            };
            (default, TargetSource::Default)
        };
        self.target = steered.target;
        self.group.set_target(steered.target);
        for class in &mut self.classes {
            class.set_target(steered.target);
        }
        if signal.throttled {
            steered.value = Some(Duration::MAX);
            steered.others = steered.value;
            steered.source = SignalSource::Throttled;
        }
        steered
    }

    /// The threads beside the runtime wait longer than their allowance: the idle class takes
    /// no more than the group's share, which stepped down on them. Its own controller steps
    /// down on them too, but from every CPU at one step a tick; this brings it down in one.
    /// Only while a member's work runs or waits: without, the group's share sits where it
    /// decayed to, no reading of what the bystanders bear, and a burst of their waits (a host
    /// pause) would cut the pool to it.
    fn idle_to_group_share(&mut self) {
        if !self
            .classes
            .iter()
            .any(|c| c.kind.is_member() && c.seen.active())
        {
            return;
        }
        let group = self.group.share();
        for class in &mut self.classes {
            if let (ClassKind::Idle, Role::Solo(limit)) = (class.kind, &mut class.role) {
                limit.lower_to(group);
            }
        }
    }

    /// Set every class's decision for its share on the CPUs. The quota's headroom holds the
    /// group's share, then is handed to the other elastic classes in order: each gets what the
    /// ones before it did not run in the last tick.
    fn apply(&mut self) {
        let cpus = self.cpus;
        let headroom = self.headroom_cpus();
        let group_share = held_share(self.group.share(), cpus, headroom, self.floor_of_group());
        self.split(group_share);
        let retune = self.wants.len() > 1;
        let mut taken: f64 = self
            .classes
            .iter()
            .filter(|c| c.kind.is_member())
            .map(|c| c.seen.used_cpus)
            .sum();
        for (class, out) in self.classes.iter_mut().zip(&mut self.decisions) {
            let overhead = class.kind.elastic().then_some(&self.overhead);
            let (share, applied, cap_share, member_retune) = match &class.role {
                Role::Member(part) => {
                    let share = if class.kind == ClassKind::Elastic {
                        self.group.share()
                    } else {
                        0.0
                    };
                    let cap_share = if retune {
                        part.total
                    } else {
                        part.rate_share()
                    };
                    (share, part.rate_share(), cap_share, retune)
                }
                Role::Solo(limit) => {
                    let left = headroom
                        .filter(|_| class.kind.elastic())
                        .map(|cap| (cap - taken).max(0.0));
                    let applied = held_share(limit.share(), cpus, left, class.floor);
                    if class.kind.elastic() {
                        taken += class.seen.used_cpus;
                    }
                    (limit.share(), applied, applied, false)
                }
            };
            out.share = share;
            out.applied = applied;
            out.rate = rate(applied, cpus, overhead);
            out.retune = member_retune;
            out.holder_cap = None;
            out.slots = None;
            if class.cap_holders {
                let whole = class.kind.whole_workers() && class.seen.last.long_polls;
                let cap = holder_cap(cap_share, cpus, whole).max(class.seen.lent_place());
                class.seen.held_in_tick = class.seen.held != 0;
                out.holder_cap = Some(cap);
                // Split among members, together they hold what one class would.
                if class.kind == ClassKind::Elastic {
                    out.slots = Some(retune.then_some(cap));
                }
            }
        }
    }

    /// Split the group's `share` among the members: by weight among those with work, within
    /// caps, floors kept. Alone, the own member gets all of it, as if nothing were split.
    fn split(&mut self, share: f64) {
        let cpus = self.cpus;
        self.wants.clear();
        for class in &self.classes {
            if let Role::Member(part) = &class.role {
                self.wants.push(part.want(&class.seen, cpus));
            }
        }
        crate::split_share(share, &self.wants, &mut self.parts);
        let parts = self.classes.iter_mut().filter_map(|c| match &mut c.role {
            Role::Member(part) => Some(part),
            Role::Solo(_) => None,
        });
        for (part, entitled) in parts.zip(&self.parts) {
            part.entitled = *entitled;
            part.total = share;
        }
    }

    /// Members of the elastic group: the first classes in the order.
    fn members(&self) -> usize {
        self.classes.iter().filter(|c| c.kind.is_member()).count()
    }

    /// The lowest share the quota's headroom may hold the group to (a fixed share too):
    /// elastic work always moves.
    fn floor_of_group(&self) -> f64 {
        self.settings.controller.min_share
    }

    /// Hold every class it applies to back for `why`, or let go of that hold. The changes
    /// reach the queues through [`hold_changes`](Self::hold_changes).
    pub fn set_hold(&mut self, why: Hold, on: bool) {
        if on {
            self.holds |= why as u8;
        } else {
            self.holds &= !(why as u8);
        }
        if self.closed {
            // Nothing holds a closed class: no release could come.
            return;
        }
        for class in &mut self.classes {
            class.seen.hold(class.kind, why, on, self.in_quota);
        }
    }

    /// Each class whose hold changed since the last call, as its queue is to be held now.
    pub fn hold_changes(&mut self, mut f: impl FnMut(HoldChange)) {
        for (i, class) in self.classes.iter_mut().enumerate() {
            let now = (class.seen.held != 0, braking(class.seen.held));
            if now != class.seen.told {
                class.seen.told = now;
                f(HoldChange {
                    class: i,
                    held: now.0,
                    braking: now.1,
                });
            }
        }
    }

    /// Pause elastic work or resume it (a gate's setups are the foreground's: never paused).
    pub fn set_paused(&mut self, on: bool) {
        self.paused = on;
        self.set_hold(Hold::Paused, on);
    }

    /// New bounds for the group's share (an error changes nothing), applied now. Classes made
    /// from now on take their floor from them too.
    pub fn set_share(&mut self, min: f64, max: f64) -> Result<(), SettingError> {
        self.group.set_bounds(min, max)?;
        self.settings.controller.min_share = min;
        self.settings.controller.max_share = max;
        self.apply();
        Ok(())
    }

    /// The driver stops: every hold lets go, and none applies from now on.
    pub fn close(&mut self) {
        self.closed = true;
        for class in &mut self.classes {
            class.seen.held = 0;
        }
    }

    /// Each class's decision, in the class order.
    pub fn decisions(&self) -> &[ClassDecision] {
        &self.decisions
    }

    /// Each class's kind, in the class order.
    pub fn kinds(&self) -> impl ExactSizeIterator<Item = ClassKind> + '_ {
        self.classes.iter().map(|c| c.kind)
    }

    /// The member at `at`'s part (`None`: not a member).
    pub fn part(&self, at: usize) -> Option<&Part> {
        match &self.classes.get(at)?.role {
            Role::Member(part) => Some(part),
            Role::Solo(_) => None,
        }
    }

    /// Whether a hold is on the class at `at` now.
    pub fn is_held(&self, at: usize) -> bool {
        self.classes.get(at).is_some_and(|c| c.seen.held != 0)
    }

    /// The group's share as its controller decided it last.
    pub fn group_share(&self) -> f64 {
        self.group.share()
    }

    /// The controller settings the group steps with (its bounds as in force).
    pub fn controller(&self) -> &ControllerConfig {
        &self.settings.controller
    }

    /// The fixed share, if the controllers are off.
    pub fn fixed(&self) -> Option<f64> {
        self.settings.fixed
    }

    /// Whether the group's and the idle class's grants are capped to what their share pays for.
    pub fn cap_holders(&self) -> bool {
        self.settings.cap_holders
    }

    /// CPUs the shares are of.
    pub fn cpus(&self) -> f64 {
        self.cpus
    }

    /// Whether a quota was seen.
    pub fn in_quota(&self) -> bool {
        self.in_quota
    }

    /// Elastic work's measured overhead, as a fraction of the running time charged.
    pub fn overhead(&self) -> f64 {
        self.overhead.overhead()
    }

    /// The token rate of an elastic class at `share` of the CPUs, its overhead paid.
    pub fn elastic_rate(&self, share: f64) -> u64 {
        rate(share, self.cpus, Some(&self.overhead))
    }

    /// Whether the quota's headroom holds elastic classes (a builder setting).
    pub fn headroom_on(&self) -> bool {
        self.headroom.is_some()
    }

    /// CPUs the quota's headroom leaves elastic work now (`None`: no quota, no reading, off).
    pub fn headroom_cpus(&self) -> Option<f64> {
        let quota = self.quota.map(|q| q.cpus);
        self.headroom.as_ref().and_then(|h| h.cap_cpus(quota))
    }

    /// The target the group stepped on last, and where it came from.
    pub fn target(&self) -> (Duration, TargetSource) {
        (self.target, self.target_source)
    }

    /// What the classes stepped on at the last tick (`None`: no tick yet).
    pub fn steered(&self) -> Option<Steered> {
        self.steered
    }

    /// The quiet readings' baselines.
    pub fn baseline(&self) -> Baseline {
        self.quiet.baseline()
    }

    /// Whether elastic work is held for a quiet reading now.
    pub fn quiet_hold(&self) -> bool {
        self.quiet.holding()
    }

    /// Whether work waited or something steered through a class at the last tick.
    pub fn steering(&self) -> bool {
        self.steering
    }

    /// Whether elastic work is paused by hand.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// The group's share bounds as in force (a fixed share: both it).
    pub fn share_bounds(&self) -> (f64, f64) {
        match self.settings.fixed {
            Some(share) => (share, share),
            None => (
                self.settings.controller.min_share,
                self.settings.controller.max_share,
            ),
        }
    }
}

/// The name of the `Elastic`'s own member.
pub const DEFAULT_CLASS: &str = "default";

impl Class {
    /// The measured target is `target` now: this class's too, if it steps on it.
    fn set_target(&mut self, target: Duration) {
        if let (true, Role::Solo(limit)) = (self.kind.measured(), &mut self.role) {
            limit.set_target(target.saturating_mul(self.kind.target_factor()));
        }
    }
}

/// The signal a class with a measured target steps on: with a looser target (`factor`), the
/// bystanders' component still counts at their allowance. Idle priority does not keep a
/// normal-priority client's wake-ups short (on a busy core they queue and preempt), so the
/// looser target would leave the idle class at every CPU while they wait.
pub fn steps_on(steered: &Steered, factor: u32) -> Option<Duration> {
    let bystanders = steered.bystanders.map(|b| b.saturating_mul(factor));
    steered.value.max(bystanders)
}

/// `share` held to `headroom` CPUs (what the quota's headroom leaves it) on `cpus`, never below
/// `floor` (nor above `share`).
fn held_share(share: f64, cpus: f64, headroom: Option<f64>, floor: f64) -> f64 {
    match headroom {
        Some(cap) if cpus > 0.0 => share.min(cap / cpus).max(floor.min(share)),
        _ => share,
    }
}
