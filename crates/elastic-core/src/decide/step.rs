//! The step: one tick's readings measured, the quiet readings taken, the signal steered, every
//! controller stepped; and the classes added and removed.

use std::time::Duration;

use super::class::Seen;
use super::quiet::{QuietStep, FAR_SHARE};
use super::*;

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
            brakes: Brakes::new(settings.backlog_brake),
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

    /// The host as the driver read it at `now` (the CPUs the shares are of, the quota in force,
    /// whether a quota was seen), applied now, the quota brake sized for it; returns what that
    /// did to the quota brake (a quota gone releases it).
    pub fn set_host(&mut self, host: &HostReading, now: Duration) -> QuotaChange {
        self.cpus = host.cpus;
        let new_quota = self.quota != host.quota;
        self.quota = host.quota;
        if self.in_quota != host.in_quota {
            self.in_quota = host.in_quota;
            // The brake's hold reaches the idle class inside a quota only.
            self.set_hold(Hold::Brake, self.holds & Hold::Brake as u8 != 0);
        }
        let change = if new_quota {
            self.size_quota_brake(host, now)
        } else {
            QuotaChange::Keep
        };
        self.apply();
        change
    }

    /// One tick: measure each class, take or read a quiet reading (from `quiet`), steer, step
    /// every controller, split the group's share and set each class's decision
    /// ([`decisions`](Self::decisions)). `readings.classes` is in the class order; a class
    /// without a reading is read as idle.
    pub fn step(&mut self, r: &TickReadings<'_>, quiet: &mut dyn QuietWindow) {
        self.note_throttling(r.now, r.throttled_periods);
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
}

impl Class {
    /// The measured target is `target` now: this class's too, if it steps on it.
    fn set_target(&mut self, target: Duration) {
        if let (true, Role::Solo(limit)) = (self.kind.measured(), &mut self.role) {
            limit.set_target(target.saturating_mul(self.kind.target_factor()));
        }
    }
}
