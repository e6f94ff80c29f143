//! What the decision step holds, read by its driver (for its record and snapshot).

use std::time::Duration;

use super::class::rate;
use super::*;

impl Decider {
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
