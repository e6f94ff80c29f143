//! Applying the decision: the group's share split among its members, every class's rate and
//! holder cap, and the holds.

use super::class::rate;
use super::hold::braking;
use super::*;

impl Decider {
    /// Set every class's decision for its share on the CPUs. The quota's headroom holds the
    /// group's share, then is handed to the other elastic classes in order: each gets what the
    /// ones before it did not run in the last tick.
    pub(super) fn apply(&mut self) {
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
    pub(super) fn members(&self) -> usize {
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
}

/// `share` held to `headroom` CPUs (what the quota's headroom leaves it) on `cpus`, never below
/// `floor` (nor above `share`).
fn held_share(share: f64, cpus: f64, headroom: Option<f64>, floor: f64) -> f64 {
    match headroom {
        Some(cap) if cpus > 0.0 => share.min(cap / cpus).max(floor.min(share)),
        _ => share,
    }
}
