//! A member's part of the elastic group's share: its weight, cap and floor, what the last
//! split gave it, and the means that keep weights among members the CPUs hold back.

use std::sync::Arc;

use super::class::Seen;
use super::split::Want;

/// What a member that ran but never waited may take next tick, over what it ran: room to
/// grow, so it is never held to what it happened to use.
const DEMAND_ROOM: f64 = 1.5;
/// ...and at least this share more.
const DEMAND_MIN: f64 = 0.01;
/// The weight of each new tick in a part's means (about 10 ticks: a grant's slice is often
/// spent in one burst).
const USE_SMOOTHING: f64 = 0.1;
/// How far over the least use per weight of the held-back members another may run
/// ([`Part::keep_weights`]): room for the noise in the means.
const FAIR_SLACK: f64 = 0.05;
/// A member that waited with tokens in its bucket and used less than this part of its share
/// was held back by the CPUs (or its holder cap), not by its tokens.
const HELD_BACK_USED: f64 = 0.95;

/// A member's part of the elastic share.
#[derive(Clone, Debug)]
pub struct Part {
    /// Its name (unique among the group's live members).
    pub name: Arc<str>,
    /// Relative weight (above zero).
    pub weight: f64,
    /// A share of the CPUs it never exceeds.
    pub cap: Option<f64>,
    /// A share it gets while it has work, as far as the total allows.
    pub floor: f64,
    /// What the last split gave it.
    pub(crate) entitled: f64,
    /// The group's share as the controller decided it (held to the quota's headroom): its
    /// holder cap while the share is split. A member's part bounds its CPU through its rate;
    /// the grants it may hold at once are the whole share's, since a holder shares its worker
    /// with the other members' and rarely runs the whole time.
    pub(crate) total: f64,
    /// The most its rate pays for to keep weights with the members that have work waiting;
    /// infinite when nothing holds it.
    pub(crate) fair_cap: f64,
    /// What it ran per tick as a share of the CPUs, an exponential mean.
    pub(crate) used_mean: f64,
    /// How often the CPUs held it back, as a mean of 0 or 1 a tick.
    pub(crate) held_back_mean: f64,
}

impl Part {
    /// A part of `weight`, within `cap`, at least `floor` while it has work.
    pub fn new(name: &str, weight: f64, cap: Option<f64>, floor: f64) -> Part {
        Part {
            name: Arc::from(name),
            weight,
            cap,
            floor,
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

    /// What it asks of the split, given what it was `seen` doing on `cpus`.
    pub(crate) fn want(&self, seen: &Seen, cpus: f64) -> Want {
        let waited = seen.last.waited;
        let demand = if waited || cpus <= 0.0 {
            f64::INFINITY
        } else {
            seen.used_cpus / cpus * DEMAND_ROOM + DEMAND_MIN
        };
        Want {
            weight: self.weight,
            cap: self.cap.unwrap_or(f64::INFINITY),
            floor: self.floor,
            active: waited || seen.last.busy || seen.used_cpus > 0.0,
            demand,
        }
    }

    /// Fold the last tick into the means: what it ran, and whether the CPUs held it back (it
    /// waited with tokens to spare and ran under [`HELD_BACK_USED`] of its part).
    pub(crate) fn smooth_use(&mut self, seen: &Seen, cpus: f64) {
        let used = seen.used_share(cpus);
        let held_back =
            seen.last.waited && used < HELD_BACK_USED * self.rate_share() && seen.last.has_tokens;
        self.used_mean += USE_SMOOTHING * (used - self.used_mean);
        let held = f64::from(u8::from(held_back));
        self.held_back_mean += USE_SMOOTHING * (held - self.held_back_mean);
    }

    /// Its mean use per weight, if the other members are to keep weights with it: it has work
    /// waiting, ran in the last tick (a member that stopped holds no one back) and the CPUs
    /// held it back in most recent ticks.
    pub(crate) fn held_back_per_weight(&self, seen: &Seen) -> Option<f64> {
        let running = seen.last.waited && seen.used_cpus > 0.0;
        (running && self.held_back_mean > 0.5 && self.weight > 0.0)
            .then(|| self.used_mean / self.weight)
    }

    /// Keep weights with the members the CPUs hold back. Such a member's tasks wait for a
    /// worker, not for tokens, so it leaves part of its part unused, and the members its
    /// tokens bound take what it leaves, whatever the weights. So a member with work waiting
    /// runs at most its weight times `least` (the least mean use per weight of the held-back
    /// others) and [`FAIR_SLACK`] more, never less than its floor; what that frees goes to the
    /// held-back tasks, whose use then rises and lifts the bound. `None`: no bound.
    pub(crate) fn keep_weights(&mut self, waited: bool, least: Option<f64>) {
        self.fair_cap = match least {
            Some(least) if waited => (self.weight * least * (1.0 + FAIR_SLACK)).max(self.floor),
            _ => f64::INFINITY,
        };
    }

    /// What the last split gave it.
    pub fn entitled(&self) -> f64 {
        self.entitled
    }
}
