//! A class of paced CPU: one queue of work that runs on CPU tokens (the `Elastic`'s own elastic
//! work, its idle pool's, a connection gate's setups), with the share that paces it, how that
//! share is decided (a controller or a fixed share) and which of the governor's rate modifiers
//! and brake apply to it. Every class is this one type; what differs between them is data
//! ([`Policy`]), and the governor's tick is a loop over them.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use elastic_cpu_core::{rate_for, SettingError, StepController, Want};

use crate::long_polls::{LongPollWatch, LongPolls};
use crate::overhead::Overhead;
use crate::record::{ClassKind, ClassRecord, PartRecord};
use crate::signal::Signal;
use crate::trace;

/// The queue of one class as the governor drives it.
pub(crate) trait ClassQueue: Send + Sync {
    /// Refill and grant waiters at the current rate; whether work waited since the last tick.
    fn tick(&self) -> bool;
    /// The token rate, in CPU nanoseconds per second.
    fn set_rate(&self, rate: u64);
    /// The token rate, without moving the balance (a part of a split share).
    fn retune(&self, rate: u64) {
        self.set_rate(rate);
    }
    /// Work waiting for a grant now.
    fn waiters(&self) -> usize {
        0
    }
    /// Grants held now.
    fn holders(&self) -> usize {
        0
    }
    /// Whether its bucket holds tokens now (work that waits then is held by something else).
    fn has_tokens(&self) -> bool {
        false
    }
    /// Fit the slice an admission asks for to `rate`, inside a CPU quota of this period.
    fn fit_slice(&self, _rate: u64, _quota_period: Option<Duration>) {}
    /// At most `cap` grants held at once.
    fn set_holder_cap(&self, cap: usize);
    /// The grants the classes that split the share hold together: `None` while they do not
    /// (see module `slots`).
    fn set_slots(&self, _count: Option<usize>) {}
    /// The longest wait since the last call (a waiter still queued counts).
    fn take_longest_wait(&self) -> Duration;
    /// Hold back every new grant while `held`, and with `braked` (the backlog brake) also ask
    /// holders to give theirs back; resume once not `held`. Without `braked` (a pause) the
    /// holders keep their grants until they settle.
    fn set_held(&self, held: bool, braked: bool);
    /// Whether something steers by the signal through this class now (elastic work running or
    /// waiting; a gate or an idle pool whenever it exists).
    fn steering(&self) -> bool;
    /// Whether work holds or waits for a grant now.
    fn busy(&self) -> bool;
    /// Running time charged to the class so far.
    fn charged(&self) -> Duration;
    /// What the governor decided for the class this tick (a gate keeps it for its snapshot).
    fn publish(&self, _record: &ClassRecord) {}
    /// Export the class's own metrics, if it has any besides the snapshot's (outside the
    /// governor's lock: an exporter may call back into the handles).
    #[cfg(feature = "metrics")]
    fn export(&self) {}
    /// The governor is gone: nothing waits for a grant that cannot come.
    fn close(&self);
    /// What the class's adapters or permits count of polls too long to cut, if they do.
    fn long_polls(&self) -> Option<&LongPolls> {
        None
    }
}

/// How a class's share is decided.
pub(crate) enum Limit {
    Controller(Box<StepController>),
    /// A static share: the controller is off.
    Fixed(f64),
}

impl Limit {
    fn step(&mut self, signal: Option<Duration>, period: Duration, had_waiters: bool) -> f64 {
        match self {
            Limit::Controller(c) => c.tick(signal, period, had_waiters),
            Limit::Fixed(share) => *share,
        }
    }

    fn set_target(&mut self, target: Duration) {
        if let Limit::Controller(c) = self {
            c.set_target(target);
        }
    }

    fn lower_to(&mut self, share: f64) {
        if let Limit::Controller(c) = self {
            c.lower_to(share);
        }
    }

    /// New bounds for the controller; a fixed share has none to move.
    fn set_bounds(&mut self, min: f64, max: f64) -> Result<(), SettingError> {
        match self {
            Limit::Controller(c) => c.set_bounds(min, max),
            Limit::Fixed(_) => Err(SettingError::new(
                "share",
                format!("{min} ..= {max}"),
                "a controller to bound: this `Elastic` holds a fixed share",
            )),
        }
    }

    fn share(&self) -> f64 {
        match self {
            Limit::Controller(c) => c.share(),
            Limit::Fixed(share) => *share,
        }
    }

    /// Whether the share can go no lower (a fixed one never moves).
    fn at_floor(&self) -> bool {
        match self {
            Limit::Controller(c) => c.share() <= c.config().min_share,
            Limit::Fixed(_) => true,
        }
    }
}

/// When the backlog brake holds a class back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HoldWhen {
    Always,
    #[cfg_attr(not(feature = "idle-pool"), allow(dead_code))]
    /// Only inside a CPU quota (the idle pool: on a bare host the kernel already hands the
    /// cores to the foreground the moment it wants them; a quota it does not).
    InQuota,
}

impl HoldWhen {
    fn applies(self, in_quota: bool) -> bool {
        match self {
            HoldWhen::Always => true,
            HoldWhen::InQuota => in_quota,
        }
    }
}

/// Why a class is held back; a class may be held for both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    Brake = 1,
    Quiet = 2,
    /// The quota brake: a period's quota is nearly spent.
    Quota = 4,
    /// Paused by hand (`Elastic::pause`): no new grants, holders keep theirs.
    Paused = 8,
}

/// Whether holds `held` ask holders to give their grants back: every hold but a pause.
fn braking(held: u8) -> bool {
    held & !(Hold::Paused as u8) != 0
}

/// What the governor applies to a class besides its share.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Policy {
    /// Held within the quota's headroom, after the classes before it took theirs. Off for
    /// gates: setup CPU is not charged as elastic work, so the headroom reading counts it as
    /// the foreground's, and capping setups by it would cap them by their own use.
    pub(crate) headroom: bool,
    /// The rate is divided by 1 + elastic work's measured scheduler overhead. Off for gates:
    /// the overhead is measured on elastic work's charged time, which setups are not part of.
    pub(crate) overhead: bool,
    pub(crate) brake: HoldWhen,
    /// With a measured target, the class steps on what elastic work adds over the quiet
    /// baseline, against the allowance, and the quiet readings hold it back to measure that
    /// (the idle pool too: with the foreground's clients on the same cores the kernel's idle
    /// priority does not keep its latency, and a baseline read with the pool running would
    /// hide the pool's cost). Not a gate: it admits setups whose clients wait now, a trade the
    /// latency itself against a target judges (an allowance over the quiet latency would
    /// refuse most setups a storm brings), and a tick with setups running is just not quiet.
    pub(crate) measured: bool,
    /// With a measured target, it steps on the allowance times this (the idle pool's looser
    /// target: the kernel already keeps its threads off a core the foreground wants), except on
    /// the bystanders' waits ([`steps_on`](Policy::steps_on)).
    pub(crate) target_factor: u32,
    /// At most `ceil(share × cpus)` grants at once.
    pub(crate) cap_holders: bool,
    /// Once its time comes mostly in long polls, the holder cap rounds down: at most
    /// `floor(share × cpus)` grants (at least one). A call the quantum cannot cut holds a
    /// runtime worker for all of it, so holders rounded up could take every worker at once and
    /// leave the foreground none. Off for elastic work: its long polls move to the idle pool.
    pub(crate) whole_workers: bool,
}

impl Policy {
    /// The signal this class steps on (a class with a measured target): with a looser target,
    /// the bystanders' component still counts at their allowance. Idle priority does not keep
    /// a normal-priority client's wake-ups short (on a busy core they queue and preempt), so the
    /// looser target would leave the idle class at every CPU while they wait.
    pub(crate) fn steps_on(&self, signal: &Signal) -> Option<Duration> {
        let bystanders = signal
            .bystanders
            .map(|b| b.saturating_mul(self.target_factor));
        signal.value.max(bystanders)
    }
}

/// A class's part of the elastic share: the `Elastic`'s own class and every class made with
/// `Elastic::class` have one, and the governor splits the share the own class's controller
/// decides among them by weight (see `elastic_cpu_core::split_share`).
pub(crate) struct Part {
    pub(crate) name: Arc<str>,
    pub(crate) weight: f64,
    pub(crate) cap: Option<f64>,
    pub(crate) floor: f64,
    /// What the last split gave it.
    pub(crate) entitled: f64,
    /// The share the controller decided (held to the quota's headroom): its holder cap. A
    /// class's part bounds its CPU through its rate; the grants it may hold at once are the
    /// whole share's, since a holder shares its worker with the other classes' and rarely runs
    /// the whole time.
    pub(crate) total: f64,
    /// The most its rate pays for to keep weights with the other classes that have work
    /// waiting (see [`Class::keep_weights`]); infinite when nothing holds it.
    pub(crate) fair_cap: f64,
    /// What it ran per tick as a share of the CPUs, an exponential mean (`USE_SMOOTHING`).
    pub(crate) used_mean: f64,
    /// How often the CPUs held it back (`Class::bound_elsewhere`), as a mean of 0 or 1 a tick.
    pub(crate) held_back_mean: f64,
}

/// What a class that ran but never waited may take next tick, over what it ran: room to
/// grow, so it is never held to what it happened to use.
const DEMAND_ROOM: f64 = 1.5;
/// ...and at least this share more.
const DEMAND_MIN: f64 = 0.01;

impl Part {
    /// The `Elastic`'s own class's part.
    pub(crate) fn default_class() -> Part {
        Part {
            name: Arc::from(crate::settings::DEFAULT_CLASS),
            weight: 1.0,
            cap: None,
            floor: 0.0,
            entitled: 0.0,
            total: 0.0,
            fair_cap: f64::INFINITY,
            used_mean: 0.0,
            held_back_mean: 0.0,
        }
    }

    /// Of `settings`.
    pub(crate) fn new(settings: &crate::settings::ClassSettings) -> Part {
        Part {
            name: Arc::from(settings.name()),
            weight: settings.weight_of(),
            cap: settings.cap_of(),
            floor: settings.floor_of(),
            entitled: 0.0,
            total: 0.0,
            fair_cap: f64::INFINITY,
            used_mean: 0.0,
            held_back_mean: 0.0,
        }
    }

    /// The share its rate pays for: its entitlement, held to what keeps weights.
    pub(crate) fn rate_share(&self) -> f64 {
        self.entitled.min(self.fair_cap)
    }
}

/// The weight of each new tick in a part's means (about 10 ticks: a grant's slice is often
/// spent in one burst).
const USE_SMOOTHING: f64 = 0.1;
/// How far over the least use per weight of the held-back classes another class may run
/// ([`Class::keep_weights`]): room for the noise in the means.
const FAIR_SLACK: f64 = 0.05;
/// A class that waited with tokens in its bucket and used less than this part of its share
/// was held back by the CPUs (or its holder cap), not by its tokens.
const HELD_BACK_USED: f64 = 0.95;

/// What every class's rate depends on this tick.
pub(crate) struct Rates<'a> {
    pub(crate) cpus: f64,
    /// The CPU quota's period, inside one.
    pub(crate) quota_period: Option<Duration>,
    /// Corrects the rate of classes with `Policy::overhead`.
    pub(crate) overhead: &'a Overhead,
}

/// One class, as the governor holds it. Dropping it (the governor is gone) closes its queue.
pub(crate) struct Class {
    pub(crate) kind: ClassKind,
    queue: Weak<dyn ClassQueue>,
    limit: Limit,
    pub(crate) policy: Policy,
    /// The lowest share the quota's headroom may cap the class to: elastic work always moves.
    floor: f64,
    /// The share as applied last (after the headroom).
    applied: f64,
    /// The longest wait in each tick of the window, newest last.
    waits: VecDeque<Duration>,
    /// Running time charged, as read at the last tick, and CPUs it ran in that tick.
    charged: Duration,
    used_cpus: f64,
    /// Work waited for a grant in the last tick.
    waited: bool,
    /// Why it is held back now ([`Hold`] bits).
    held: u8,
    /// Held at some point since the last [`apply`](Self::apply): nothing running then says
    /// nothing about the holders.
    held_in_tick: bool,
    /// Whether its time came mostly in long polls (for classes that count them).
    long_watch: LongPollWatch,
    /// The share last reported to `tracing`.
    reported: f64,
    /// Its part of the elastic share, for the classes that split it.
    pub(crate) part: Option<Part>,
    /// The rate moves without moving the balance (set while the share is split among more
    /// than one class: the parts move every tick).
    pub(crate) retune: bool,
}

impl Class {
    pub(crate) fn new(
        kind: ClassKind,
        queue: Weak<dyn ClassQueue>,
        limit: Limit,
        policy: Policy,
        floor: f64,
    ) -> Class {
        let charged = queue.upgrade().map_or(Duration::ZERO, |q| q.charged());
        let share = limit.share();
        Class {
            kind,
            applied: share,
            queue,
            limit,
            policy,
            floor,
            waits: VecDeque::new(),
            charged,
            used_cpus: 0.0,
            waited: false,
            held: 0,
            held_in_tick: false,
            long_watch: LongPollWatch::new(),
            reported: share,
            part: None,
            retune: false,
        }
    }

    /// The class with a part of the elastic share.
    pub(crate) fn with_part(mut self, part: Part) -> Class {
        self.part = Some(part);
        self
    }

    /// What it asks of the split this tick (see [`Want`]), read after
    /// [`measure`](Self::measure) and the queue's tick.
    pub(crate) fn want(&self, cpus: f64) -> Option<Want> {
        let part = self.part.as_ref()?;
        let busy = self.queue().is_some_and(|q| q.busy());
        let demand = if self.waited {
            f64::INFINITY
        } else if cpus > 0.0 {
            self.used_cpus / cpus * DEMAND_ROOM + DEMAND_MIN
        } else {
            f64::INFINITY
        };
        Some(Want {
            weight: part.weight,
            cap: part.cap.unwrap_or(f64::INFINITY),
            floor: part.floor,
            active: self.waited || busy || self.used_cpus > 0.0,
            demand,
        })
    }

    /// The class's queue, while any handle, adapter or permit holds it.
    pub(crate) fn queue(&self) -> Option<std::sync::Arc<dyn ClassQueue>> {
        self.queue.upgrade()
    }

    /// The share its limit decided last (before the headroom).
    #[cfg_attr(not(feature = "idle-pool"), allow(dead_code))]
    pub(crate) fn share(&self) -> f64 {
        self.limit.share()
    }

    /// Whether its share can go no lower: at its controller's floor, or fixed.
    pub(crate) fn at_floor(&self) -> bool {
        self.limit.at_floor()
    }

    /// Lower a controlled share to at most `share` (a fixed one holds).
    pub(crate) fn lower_to(&mut self, share: f64) {
        self.limit.lower_to(share);
    }

    /// CPUs the class ran in the last tick.
    pub(crate) fn used_cpus(&self) -> f64 {
        self.used_cpus
    }

    /// What it ran in the last tick as a share of `cpus` (0 without CPUs).
    pub(crate) fn used_share(&self, cpus: f64) -> f64 {
        if cpus > 0.0 {
            self.used_cpus / cpus
        } else {
            0.0
        }
    }

    /// Read what the class was charged since the last tick (and how much of it came in long
    /// polls, over a window of `intervals` ticks); returns it.
    pub(crate) fn measure(&mut self, period: Duration, intervals: usize) -> Duration {
        let Some(queue) = self.queue() else {
            return Duration::ZERO;
        };
        let now = queue.charged();
        let ran = now.saturating_sub(self.charged);
        self.charged = now;
        if let Some(polls) = queue.long_polls() {
            self.long_watch.tick(polls, ran, intervals);
        }
        let secs = period.as_secs_f64();
        self.used_cpus = if secs > 0.0 {
            ran.as_secs_f64() / secs
        } else {
            0.0
        };
        ran
    }

    /// Grant waiters at the old rate; notes whether work waited since the last tick.
    pub(crate) fn tick_queue(&mut self) {
        if let Some(queue) = self.queue() {
            self.waited = queue.tick();
        }
    }

    /// Whether work waited for a grant in the last tick.
    pub(crate) fn waited(&self) -> bool {
        self.waited
    }

    /// Step the share on `signal` unless `frozen` (a quiet reading is under way), after
    /// [`tick_queue`](Self::tick_queue); `waited` is whether the work it decides for waited (the
    /// own class decides for every class that splits the share). Returns whether work waited or
    /// the class steers, or `None` once its queue is gone.
    pub(crate) fn step(
        &mut self,
        signal: Option<Duration>,
        period: Duration,
        frozen: bool,
        waited: bool,
    ) -> Option<bool> {
        let queue = self.queue()?;
        if !frozen {
            let to = self.limit.step(signal, period, waited);
            if (to - self.reported).abs() >= trace::SHARE_STEP {
                trace::share_moved(self.kind, self.reported, to, signal);
                self.reported = to;
            }
        }
        Some(self.waited || queue.steering())
    }

    /// The measured target is `target` now: this class's too, if it steps on the measured
    /// signal.
    pub(crate) fn set_target(&mut self, target: Duration) {
        if self.policy.measured {
            let target = target.saturating_mul(self.policy.target_factor);
            self.limit.set_target(target);
        }
    }

    /// Whether the class's work ran, waited or held a grant since the last tick (read after
    /// [`measure`](Self::measure), before [`step`](Self::step)).
    pub(crate) fn active(&self) -> bool {
        self.used_cpus > 0.0 || self.waited || self.queue().is_some_and(|q| q.busy())
    }

    /// Whether quiet readings hold this class back: a class that steps on the measured signal
    /// is held to measure it.
    pub(crate) fn holdable(&self) -> bool {
        self.policy.measured
    }

    /// Apply the share: the rate and holder cap for `rates`, held to `headroom_cpus` (what the
    /// quota's headroom leaves this class) where the policy says so. A class with a part
    /// applies its part: the headroom held the split's total already.
    pub(crate) fn apply(&mut self, rates: &Rates<'_>, headroom_cpus: Option<f64>) {
        let Some(queue) = self.queue() else {
            return;
        };
        self.applied = match &self.part {
            Some(part) => part.rate_share(),
            None => self.held_share(rates.cpus, headroom_cpus),
        };
        let rate = rate_for(self.applied, rates.cpus);
        let rate = if self.policy.overhead {
            rates.overhead.apply(rate)
        } else {
            rate
        };
        if self.retune {
            queue.retune(rate);
        } else {
            queue.set_rate(rate);
        }
        queue.fit_slice(rate, rates.quota_period);
        if self.policy.cap_holders {
            let whole =
                self.policy.whole_workers && queue.long_polls().is_some_and(LongPolls::mostly);
            let share = match &self.part {
                Some(part) if self.retune => part.total,
                _ => self.applied,
            };
            let cap = holder_cap(share, rates.cpus, whole).max(self.lent_place(&*queue));
            self.held_in_tick = self.held != 0;
            queue.set_holder_cap(cap);
            // Split among classes, together they hold what one class would.
            if self.decides_split() {
                queue.set_slots(self.retune.then_some(cap));
            }
        }
    }

    /// The holder cap that lets one more grant out when the holders ran nothing over a whole
    /// tick while work waited for a place, not held back: they wait on something else (I/O, a
    /// lock, a `Pacer` kept past its loop), and work in line would otherwise wait for them,
    /// for ever if they never come back. 0 when the holders ran, nothing waited, or a hold (a
    /// brake, a quiet reading) was on in the tick: that is why nothing ran, and lending then
    /// would put one holder more than the cap on the CPUs after every hold.
    fn lent_place(&self, queue: &dyn ClassQueue) -> usize {
        // `held_in_tick` covers a hold on now: `hold` sets it, and `apply` keeps it while held.
        if !self.waited || self.used_cpus > 0.0 || self.held_in_tick {
            return 0;
        }
        queue.holders().saturating_add(1)
    }

    /// Its limit's share held to `headroom_cpus` (what the quota's headroom leaves it) where
    /// the policy says so, never below its floor: what a class without a part applies, and the
    /// share the split divides.
    pub(crate) fn held_share(&self, cpus: f64, headroom_cpus: Option<f64>) -> f64 {
        let share = self.limit.share();
        match headroom_cpus.filter(|_| self.policy.headroom) {
            Some(cap) if cpus > 0.0 => share.min(cap / cpus).max(self.floor.min(share)),
            _ => share,
        }
    }

    /// Whether this class's controller decides the share the parts split.
    pub(crate) fn decides_split(&self) -> bool {
        self.kind == ClassKind::Elastic
    }

    /// Close the tick: note the longest wait over a window of `intervals` ticks and publish.
    pub(crate) fn record(&mut self, intervals: usize) -> ClassRecord {
        let queue = self.queue();
        if let Some(queue) = &queue {
            self.waits.push_back(queue.take_longest_wait());
            while self.waits.len() > intervals.max(1) {
                self.waits.pop_front();
            }
        }
        let record = self.snapshot();
        if let Some(queue) = queue {
            queue.publish(&record);
        }
        record
    }

    /// What the class looks like now.
    pub(crate) fn snapshot(&self) -> ClassRecord {
        let queue = self.queue();
        ClassRecord {
            kind: self.kind,
            share: self.limit.share(),
            applied: self.applied,
            longest_wait: self.waits.iter().copied().max().unwrap_or_default(),
            part: self.part.as_ref().map(|p| PartRecord {
                name: p.name.clone(),
                weight: p.weight,
                cap: p.cap,
                floor: p.floor,
                charged: self.charged,
                waiters: queue.as_ref().map_or(0, |q| q.waiters()),
            }),
        }
    }

    /// Hold the class back for `why`, or release that hold (`in_quota`: a CPU quota was
    /// seen). Its queue pauses while any hold applies, and resumes when none does.
    pub(crate) fn hold(&mut self, why: Hold, on: bool, in_quota: bool) {
        let applies = match why {
            Hold::Brake => self.policy.brake.applies(in_quota),
            Hold::Quiet => self.policy.measured,
            Hold::Quota => self.policy.headroom,
            // Elastic work, not a gate's setups (those are the foreground's connections).
            Hold::Paused => self.policy.measured,
        };
        let was = self.held;
        if on && applies {
            self.held |= why as u8;
            self.held_in_tick = true;
        } else if !on {
            self.held &= !(why as u8);
        }
        if (was == 0) != (self.held == 0) || braking(was) != braking(self.held) {
            if let Some(q) = self.queue() {
                q.set_held(self.held != 0, braking(self.held));
            }
        }
    }

    /// The governor has stopped: let go of every hold and close the queue, so nothing waits
    /// for a grant (or a release) that cannot come.
    pub(crate) fn end(&mut self) {
        self.held = 0;
        if let Some(q) = self.queue() {
            q.close();
            q.set_held(false, false);
        }
    }

    /// Whether its work waited in the last tick with tokens to spare and ran under
    /// [`HELD_BACK_USED`] of its part: held by the CPUs (or its holder cap), not by its bucket.
    fn bound_elsewhere(&self, cpus: f64) -> bool {
        let Some(part) = &self.part else {
            return false;
        };
        self.waited
            && self.used_share(cpus) < HELD_BACK_USED * part.rate_share()
            && self.queue().is_some_and(|q| q.has_tokens())
    }

    /// Fold the last tick into its part's means: what it ran, and whether the CPUs held it
    /// back ([`bound_elsewhere`](Self::bound_elsewhere)).
    pub(crate) fn smooth_use(&mut self, cpus: f64) {
        let used = self.used_share(cpus);
        let held_back = self.bound_elsewhere(cpus);
        if let Some(part) = self.part.as_mut() {
            part.used_mean += USE_SMOOTHING * (used - part.used_mean);
            let held = f64::from(u8::from(held_back));
            part.held_back_mean += USE_SMOOTHING * (held - part.held_back_mean);
        }
    }

    /// Its mean use per weight, if the other classes are to keep weights with it: it has work
    /// waiting, ran in the last tick (a class that stopped holds no one back) and the CPUs held
    /// it back in most recent ticks.
    pub(crate) fn held_back_per_weight(&self) -> Option<f64> {
        let part = self.part.as_ref()?;
        let running = self.waited && self.used_cpus > 0.0;
        (running && part.held_back_mean > 0.5 && part.weight > 0.0)
            .then(|| part.used_mean / part.weight)
    }

    /// Keep weights with the classes the CPUs hold back. Such a class's tasks wait for a
    /// worker, not for tokens, so it leaves part of its part unused, and the classes its
    /// tokens bound take what it leaves, whatever the weights. So a class with work waiting
    /// runs at most its weight times `least` (the least mean use per weight of the held-back
    /// others) and [`FAIR_SLACK`] more, but never less than its floor; what that frees goes to
    /// the held-back tasks, whose use then rises and lifts the bound. `None` (no other class
    /// held back): no bound.
    pub(crate) fn keep_weights(&mut self, least: Option<f64>) {
        let waited = self.waited;
        let Some(part) = self.part.as_mut() else {
            return;
        };
        part.fair_cap = match least {
            Some(least) if waited => (part.weight * least * (1.0 + FAIR_SLACK)).max(part.floor),
            _ => f64::INFINITY,
        };
    }

    /// Move its controller's bounds (the floor the headroom keeps moves with the lower one).
    pub(crate) fn set_bounds(&mut self, min: f64, max: f64) -> Result<(), SettingError> {
        self.limit.set_bounds(min, max)?;
        self.floor = min;
        Ok(())
    }

    /// Whether the quiet readings or the brake hold it back now.
    pub(crate) fn is_held(&self) -> bool {
        self.held != 0
    }

    /// Whether its queue is still held by anyone.
    pub(crate) fn is_alive(&self) -> bool {
        self.queue.strong_count() > 0
    }
}

impl Drop for Class {
    fn drop(&mut self) {
        if let Some(queue) = self.queue() {
            queue.close();
        }
    }
}

/// The CPUs `share` of `cpus` pays for, rounded up (or down, for `whole` workers), at least 1:
/// the most grants a class needs at once to use its share.
pub(crate) fn holder_cap(share: f64, cpus: f64, whole: bool) -> usize {
    let c = if whole {
        // A hair under a whole CPU still pays for it (a share of 0.9999 on one CPU).
        (share * cpus + 1e-6).floor()
    } else {
        (share * cpus).ceil()
    };
    if c.is_finite() && c >= 1.0 {
        c.min(usize::MAX as f64) as usize
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_looser_target_counts_the_bystanders_at_their_allowance() {
        let policy = |target_factor| Policy {
            headroom: true,
            overhead: true,
            brake: HoldWhen::Always,
            measured: true,
            target_factor,
            cap_holders: true,
            whole_workers: false,
        };
        let us = |n| Some(Duration::from_micros(n));
        let signal = Signal {
            value: us(60),
            bystanders: us(50),
            ..Signal::default()
        };
        // The own class (factor 1): the larger component, as it is.
        assert_eq!(policy(1).steps_on(&signal), us(60));
        // The idle class (factor 4): the bystanders count 4 ×, so against its 4 × target they
        // are over where the other components would need 4 × as much.
        assert_eq!(policy(4).steps_on(&signal), us(200));
        let none = Signal {
            bystanders: None,
            ..signal
        };
        assert_eq!(policy(4).steps_on(&none), us(60));
    }
}
