//! The governor's classes: a [`Link`] to each class's queue, in the decision step's order, and
//! the making of new ones (members of the elastic group, the idle class, gates).

use std::sync::{Arc, Weak};
use std::time::Duration;

use elastic_cpu_core::decide::{ClassKind, ClassReading, Decider, Part};
use elastic_cpu_core::SettingError;

use super::link::Link;
use super::Governor;
use crate::grant::class_queue::ClassQueue;
use crate::grant::class_state::ClassState;
use crate::record::ClassRecord;
use crate::trace;

/// A link to each class's queue, in the decision step's class order.
pub(super) struct Links {
    links: Vec<Link>,
    /// The last tick's readings (kept to reuse their memory).
    scratch: Vec<ClassReading>,
    /// Member classes and gates made so far (their numbers).
    members_made: usize,
    #[cfg(feature = "gate")]
    gates_made: usize,
}

impl Links {
    /// The `Elastic`'s own class, the decision's first.
    pub(super) fn new(own: &Arc<ClassState>, decider: &Decider) -> Links {
        let queue: Weak<dyn ClassQueue> = Arc::downgrade(own) as Weak<dyn ClassQueue>;
        Links {
            links: vec![Link::new(ClassKind::Elastic, queue, decider.group_share())],
            scratch: Vec::new(),
            members_made: 0,
            #[cfg(feature = "gate")]
            gates_made: 0,
        }
    }

    /// Forget the classes whose queues no one holds any more, in the decision too.
    pub(super) fn drop_dead(&mut self, decider: &mut Decider) {
        for at in (0..self.links.len()).rev() {
            if !self.links[at].is_alive() {
                self.links.remove(at);
                decider.remove(at);
            }
        }
    }

    /// Grant waiters at the rates in force and read every class.
    pub(super) fn read(&mut self, intervals: usize) -> Vec<ClassReading> {
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        out.extend(self.links.iter_mut().map(|l| l.read(intervals)));
        out
    }

    /// The readings' memory, for the next tick.
    pub(super) fn give_back(&mut self, readings: Vec<ClassReading>) {
        self.scratch = readings;
    }

    /// A `tracing` event for each class whose share moved far enough since the last one.
    pub(super) fn trace_moves(&mut self, decider: &Decider) {
        let on = decider.steered().and_then(|s| s.value);
        for (link, d) in self.links.iter_mut().zip(decider.decisions()) {
            if (d.share - link.reported).abs() >= trace::SHARE_STEP {
                trace::share_moved(link.kind, link.reported, d.share, on);
                link.reported = d.share;
            }
        }
    }

    /// Apply every class's decision (inside a quota of `quota_period`), then the holds.
    pub(super) fn apply(&mut self, decider: &mut Decider, quota_period: Option<Duration>) {
        for (link, d) in self.links.iter().zip(decider.decisions()) {
            link.apply(d, quota_period);
        }
        self.sync_holds(decider);
    }

    /// Hold or release each queue whose hold changed in the decision.
    pub(super) fn sync_holds(&self, decider: &mut Decider) {
        decider.hold_changes(|change| {
            if let Some(link) = self.links.get(change.class) {
                link.hold(change);
            }
        });
    }

    /// Every class's record.
    pub(super) fn records(&self, decider: &Decider) -> Vec<ClassRecord> {
        self.links
            .iter()
            .zip(decider.decisions())
            .enumerate()
            .map(|(at, (link, d))| link.record(d, decider.part(at)))
            .collect()
    }

    /// Every queue, while it lives (for the metrics export).
    #[cfg(feature = "metrics")]
    pub(super) fn queues(&self) -> Vec<Arc<dyn ClassQueue>> {
        self.links.iter().filter_map(Link::queue).collect()
    }

    /// The governor stopped: close every queue and let go of every hold.
    pub(super) fn end(&self) {
        for link in &self.links {
            link.end();
        }
    }

    /// Link a class the decision placed at `at`.
    fn insert(&mut self, at: usize, link: Link, closed: bool) {
        if closed {
            // Made after the governor stopped: closed at once, like the others.
            link.end();
        }
        self.links.insert(at, link);
    }
}

impl Governor {
    /// A new class of `root`'s elastic work, its part of the share split with the others from
    /// the next tick on. Fails on a bad setting or a name another class has.
    pub(super) fn add_member(
        &mut self,
        root: &Arc<ClassState>,
        settings: &crate::settings::ClassSettings,
    ) -> Result<Arc<ClassState>, SettingError> {
        settings.validate()?;
        if self.decider.has_member(settings.name()) {
            return Err(SettingError::new(
                "ClassSettings::name",
                format!("{:?}", settings.name()),
                "a name no other live class of this `Elastic` has",
            ));
        }
        // No tokens until the split gives it a part: it starts empty, not with a burst.
        let queue = elastic_cpu_core::WorkQueue::new(self.clock.clone(), 0);
        let shared = Arc::new(ClassState::member_class(root, queue));
        let weak: Weak<dyn ClassQueue> = Arc::downgrade(&shared) as Weak<dyn ClassQueue>;
        let kind = ClassKind::Member(self.classes.members_made);
        self.classes.members_made += 1;
        let part = Part::new(
            settings.name(),
            settings.weight_of(),
            settings.cap_of(),
            settings.floor_of(),
        );
        let at = self.decider.add_member(kind, part);
        self.classes
            .insert(at, Link::new(kind, weak, 0.0), self.closed);
        self.apply();
        Ok(shared)
    }

    cfg_idle_pool! {
        /// A new idle class of `parent` (the `Control` hands out the one made before while it
        /// lives).
        pub(super) fn idle_class(
            &mut self,
            parent: &Arc<ClassState>,
        ) -> Result<Arc<ClassState>, SettingError> {
            let start = crate::idle::IdleStart {
                elastic_share: self.decider.group_share(),
                fixed: self.decider.fixed(),
                quota: self.decider.in_quota(),
            };
            let rate = self.decider.elastic_rate(start.initial_share());
            let queue = elastic_cpu_core::WorkQueue::new(self.clock.clone(), rate);
            let controller = self.decider.controller();
            let (shared, limit) = crate::idle::create(parent, queue, controller, start)?;
            let queue: Weak<dyn ClassQueue> = Arc::downgrade(&shared) as Weak<dyn ClassQueue>;
            let share = limit.share();
            let floor = self.decider.controller().min_share;
            let cap_holders = self.decider.cap_holders();
            let at = self
                .decider
                .add_solo(ClassKind::Idle, limit, floor, cap_holders);
            self.classes
                .insert(at, Link::new(ClassKind::Idle, queue, share), self.closed);
            self.apply();
            Ok(shared)
        }
    }

    cfg_gate! {
        /// A new connection gate, steered from now on with the other classes.
        pub(super) fn add_gate(
            &mut self,
            shared: &ClassState,
            settings: &crate::gate::GateSettings,
        ) -> Result<Arc<crate::gate::shared::GateShared>, SettingError> {
            let id = self.classes.gates_made;
            let (gate, limit, floor, cap_holders) = crate::gate::class::create(
                settings,
                crate::gate::class::GateParts {
                    controller: self.decider.controller(),
                    clock: self.clock.clone(),
                    running: shared.running.clone(),
                    quantum: shared.quantum,
                    os_yield: shared.os_yield,
                    cpus: self.decider.cpus(),
                    id,
                },
            )?;
            self.classes.gates_made += 1;
            let queue: Weak<dyn ClassQueue> = Arc::downgrade(&gate) as Weak<dyn ClassQueue>;
            let kind = ClassKind::Gate(id);
            let share = limit.share();
            let at = self.decider.add_solo(kind, limit, floor, cap_holders);
            self.classes
                .insert(at, Link::new(kind, queue, share), self.closed);
            self.apply();
            Ok(gate)
        }
    }
}
