//! One paced class as the decision step holds it: what kind it is (which decides what applies to
//! it), the limit that decides its share, and what it was seen doing at the last tick.

use std::time::Duration;

use crate::{rate_for, SettingError, StepController};

use super::hold::Hold;
use super::readings::ClassReading;

/// Which kind of paced class one is. What applies to a class follows from its kind alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClassKind {
    /// The `Elastic`'s own elastic work: the first member of the elastic group, whose
    /// controller decides the share the group splits.
    Elastic,
    /// A class made with `Elastic::class`: its number among them. A member of the elastic group.
    Member(usize),
    /// Work on the `Elastic`'s idle-priority pool: a controller of its own, a looser target.
    Idle,
    /// A connection gate's setups: its number among the `Elastic`'s gates. A controller of its
    /// own on the latency itself.
    Gate(usize),
}

/// The measured target's multiple the idle class steps on: the level at which the backlog brake
/// acts ([`BRAKE_FACTOR`](super::BRAKE_FACTOR)), a foreground that really waits, not noise the
/// kernel absorbs anyway (it already keeps idle threads off a core the foreground wants).
pub const IDLE_TARGET_FACTOR: u32 = 4;

impl ClassKind {
    /// Whether it is a member of the elastic group (its share is a part of the group's).
    pub fn is_member(self) -> bool {
        matches!(self, ClassKind::Elastic | ClassKind::Member(_))
    }

    /// Whether it steps on what elastic work adds over the quiet baseline, and the quiet
    /// readings and a pause hold it back. Not a gate: it admits setups whose clients wait now,
    /// a trade the latency itself against a target judges, and a tick with setups running is
    /// just not quiet.
    pub fn measured(self) -> bool {
        !matches!(self, ClassKind::Gate(_))
    }

    /// The measured target's multiple it steps on.
    pub fn target_factor(self) -> u32 {
        match self {
            ClassKind::Idle => IDLE_TARGET_FACTOR,
            _ => 1,
        }
    }

    /// Whether the quota's headroom holds it and its rate pays for elastic work's overhead.
    /// Not a gate: setup CPU is not charged as elastic work, so the headroom reading counts it
    /// as the foreground's (capping setups by it would cap them by their own use), and the
    /// overhead is measured on charged time setups are not part of.
    pub fn elastic(self) -> bool {
        !matches!(self, ClassKind::Gate(_))
    }

    /// Whether a hold for `why` applies (`in_quota`: a CPU quota was seen).
    pub fn held_by(self, why: Hold, in_quota: bool) -> bool {
        match why {
            // The idle pool inside a quota only: on a bare host the kernel already hands the
            // cores to the foreground the moment it wants them; a quota it does not.
            Hold::Brake => self != ClassKind::Idle || in_quota,
            Hold::Quiet | Hold::Paused => self.measured(),
            Hold::Quota => self.elastic(),
        }
    }

    /// Once its time comes mostly in long polls, whether its holder cap rounds down: a setup
    /// that is a library call (a handshake, a password hash) holds its worker for all of it,
    /// so holders rounded up could take every worker at once. Elastic work's long polls move
    /// to the idle pool instead.
    pub fn whole_workers(self) -> bool {
        matches!(self, ClassKind::Gate(_))
    }
}

/// How a class's share is decided.
#[derive(Debug)]
pub enum Limit {
    /// A controller on the signal.
    Controller(Box<StepController>),
    /// A static share: the controller is off.
    Fixed(f64),
}

impl Limit {
    pub(crate) fn step(&mut self, signal: Option<Duration>, period: Duration, waited: bool) {
        if let Limit::Controller(c) = self {
            c.tick(signal, period, waited);
        }
    }

    pub(crate) fn set_target(&mut self, target: Duration) {
        if let Limit::Controller(c) = self {
            c.set_target(target);
        }
    }

    pub(crate) fn lower_to(&mut self, share: f64) {
        if let Limit::Controller(c) = self {
            c.lower_to(share);
        }
    }

    /// New bounds for the controller; a fixed share has none to move.
    pub(crate) fn set_bounds(&mut self, min: f64, max: f64) -> Result<(), SettingError> {
        match self {
            Limit::Controller(c) => c.set_bounds(min, max),
            Limit::Fixed(_) => Err(SettingError::new(
                "share",
                format!("{min} ..= {max}"),
                "a controller to bound: this `Elastic` holds a fixed share",
            )),
        }
    }

    /// The share it decided last.
    pub fn share(&self) -> f64 {
        match self {
            Limit::Controller(c) => c.share(),
            Limit::Fixed(share) => *share,
        }
    }

    /// Whether the share can go no lower (a fixed one never moves).
    pub(crate) fn at_floor(&self) -> bool {
        match self {
            Limit::Controller(c) => c.share() <= c.config().min_share,
            Limit::Fixed(_) => true,
        }
    }
}

/// What the step saw of a class at the last tick, and the holds on it.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Running time charged, as read at the last tick, and CPUs it ran in that tick.
    pub(crate) charged: Duration,
    pub(crate) used_cpus: f64,
    /// The last reading.
    pub(crate) last: ClassReading,
    /// Why it is held back now ([`Hold`] bits).
    pub(crate) held: u8,
    /// Held at some point since the last apply: nothing running then says nothing about the
    /// holders.
    pub(crate) held_in_tick: bool,
    /// The hold last handed to the queue: (held, braking).
    pub(crate) told: (bool, bool),
}

impl Seen {
    /// Read one tick of `r` over `period`; returns what it ran.
    pub(crate) fn measure(&mut self, r: &ClassReading, period: Duration) -> Duration {
        let ran = r.charged.saturating_sub(self.charged);
        self.charged = r.charged;
        let secs = period.as_secs_f64();
        self.used_cpus = if secs > 0.0 {
            ran.as_secs_f64() / secs
        } else {
            0.0
        };
        self.last = *r;
        ran
    }

    /// Whether its work ran, waited or held a grant in the last tick.
    pub(crate) fn active(&self) -> bool {
        self.used_cpus > 0.0 || self.last.waited || self.last.busy
    }

    /// What it ran in the last tick as a share of `cpus` (0 without CPUs).
    pub(crate) fn used_share(&self, cpus: f64) -> f64 {
        if cpus > 0.0 {
            self.used_cpus / cpus
        } else {
            0.0
        }
    }

    /// Hold it for `why` if that applies to `kind`, or release that hold.
    pub(crate) fn hold(&mut self, kind: ClassKind, why: Hold, on: bool, in_quota: bool) {
        if on && kind.held_by(why, in_quota) {
            self.held |= why as u8;
            self.held_in_tick = true;
        } else if !on {
            self.held &= !(why as u8);
        }
    }

    /// The holder cap that lets one more grant out when the holders ran nothing over a whole
    /// tick while work waited for a place, not held back: they wait on something else (I/O, a
    /// lock, a pacer kept past its loop), and work in line would otherwise wait for them, for
    /// ever if they never come back. 0 when the holders ran, nothing waited, or a hold was on
    /// in the tick: that is why nothing ran, and lending then would put one holder more than
    /// the cap on the CPUs after every hold.
    pub(crate) fn lent_place(&self) -> usize {
        if !self.last.waited || self.used_cpus > 0.0 || self.held_in_tick {
            return 0;
        }
        self.last.holders.saturating_add(1)
    }
}

/// The CPUs `share` of `cpus` pays for, rounded up (or down, for `whole` workers), at least 1:
/// the most grants a class needs at once to use its share.
pub fn holder_cap(share: f64, cpus: f64, whole: bool) -> usize {
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

/// The token rate for `share` of `cpus`, less `overhead` where it applies.
pub(crate) fn rate(share: f64, cpus: f64, overhead: Option<&super::overhead::Overhead>) -> u64 {
    let rate = rate_for(share, cpus);
    overhead.map_or(rate, |o| o.apply(rate))
}
