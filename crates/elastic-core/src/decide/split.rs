//! Splitting one share among classes by weight: work-conserving (only classes with work get a
//! part, and a part a class cannot use goes to the others), each held within its cap, each
//! active one given at least its floor.
//!
//! The split is a weighted max-min fair allocation: find the level `λ` at which
//! `Σ clamp(λ × weight, low, high) = total`, where `low` is the floor and `high` the least of
//! the cap and what the class can use. It runs once per governor tick, off every hot path.

/// What one class asks of a [`split_share`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Want {
    /// Relative weight (above zero).
    pub weight: f64,
    /// A share of the CPUs it never exceeds (`f64::INFINITY`: none).
    pub cap: f64,
    /// A share it gets while it has work, as far as the total allows.
    pub floor: f64,
    /// It has work: it waited for tokens, holds a grant, or ran since the last split.
    pub active: bool,
    /// The most it can use now: `f64::INFINITY` when it waited for tokens (it would use
    /// more), else a little over what it ran.
    pub demand: f64,
}

impl Want {
    /// An active class that waited for tokens: it takes whatever its weight and cap give it.
    pub fn waiting(weight: f64, cap: f64, floor: f64) -> Want {
        Want {
            weight,
            cap,
            floor,
            active: true,
            demand: f64::INFINITY,
        }
    }
}

/// The most of a split's total the floors together take.
pub const FLOORS_AT_MOST: f64 = 0.5;

/// The parts of `total` for `wants`, in order, written to `out`.
///
/// - Only active classes get a part. If none is active every class gets its weighted part, so
///   work that arrives first finds a rate.
/// - First each active class gets its weighted part of `total`, within its floor and the least
///   of its cap and its demand. What is left (every active class held by its demand or its
///   cap) goes, by weight again, to the active classes below their caps.
/// - Floors that add up to more than half of `total` are scaled down to half
///   ([`FLOORS_AT_MOST`]): the total bounds them, and a class without a floor still gets a part.
///
/// The parts sum to at most `total`, and to `total` exactly unless every active class is held
/// at its cap. Bad figures (a weight that is not above zero, a NaN, an infinite floor with no
/// finite cap or demand) count as weight zero, no cap or no floor; they never panic.
///
/// ```
/// use elastic_cpu_core::{split_share, Want};
///
/// let mut parts = Vec::new();
/// // Weights 3 : 1 : 1, the third capped at 0.1 of the CPUs.
/// let wants = [
///     Want::waiting(3.0, f64::INFINITY, 0.0),
///     Want::waiting(1.0, f64::INFINITY, 0.0),
///     Want::waiting(1.0, 0.1, 0.0),
/// ];
/// split_share(0.8, &wants, &mut parts);
/// assert!((parts[0] - 0.525).abs() < 1e-9 && (parts[1] - 0.175).abs() < 1e-9);
/// assert!((parts[2] - 0.1).abs() < 1e-9);
/// ```
pub fn split_share(total: f64, wants: &[Want], out: &mut Vec<f64>) {
    out.clear();
    out.resize(wants.len(), 0.0);
    let total = if total.is_finite() {
        total.max(0.0)
    } else {
        0.0
    };
    let any_active = wants.iter().any(|w| w.active);
    let weight = |w: &Want| {
        if w.weight.is_finite() && w.weight > 0.0 {
            w.weight
        } else {
            0.0
        }
    };
    let cap = |w: &Want| if w.cap >= 0.0 { w.cap } else { f64::INFINITY };
    let takes = |w: &Want| (!any_active || w.active) && weight(w) > 0.0;
    // The first round: within floor and the least of cap and demand.
    let high = |w: &Want| {
        let demand = if w.demand >= 0.0 {
            w.demand
        } else {
            f64::INFINITY
        };
        if any_active {
            cap(w).min(demand)
        } else {
            cap(w)
        }
    };
    let low = |w: &Want| {
        // An infinite floor that neither cap nor demand bounds is a bad figure: no floor.
        if any_active && w.floor > 0.0 && w.floor.min(high(w)).is_finite() {
            w.floor.min(high(w))
        } else {
            0.0
        }
    };
    let mut bounds: Vec<(f64, f64, f64)> = wants
        .iter()
        .map(|w| {
            if takes(w) {
                (weight(w), low(w), high(w))
            } else {
                (0.0, 0.0, 0.0)
            }
        })
        .collect();
    // Floors take at most half the total, so a class without one still gets a part.
    let floors: f64 = bounds.iter().map(|b| b.1).sum();
    if floors > total * FLOORS_AT_MOST {
        let scale = total * FLOORS_AT_MOST / floors;
        for b in &mut bounds {
            b.1 *= scale;
        }
    }
    fill(total, &bounds, out);
    // The second round: what the demands left, to whoever is below its cap.
    let left = total - out.iter().sum::<f64>();
    if left > total * 1e-9 && any_active {
        let room: Vec<(f64, f64, f64)> = wants
            .iter()
            .zip(out.iter())
            .map(|(w, &got)| {
                if takes(w) {
                    (weight(w), 0.0, (cap(w) - got).max(0.0))
                } else {
                    (0.0, 0.0, 0.0)
                }
            })
            .collect();
        let mut more = Vec::with_capacity(room.len());
        more.resize(room.len(), 0.0);
        fill(left, &room, &mut more);
        for (o, m) in out.iter_mut().zip(more) {
            *o += m;
        }
    }
}

/// `Σ clamp(λ × weight, low, high) = total` for `(weight, low, high)` in `bounds`, solved for
/// `λ` by bisection; the parts go to `out`.
fn fill(total: f64, bounds: &[(f64, f64, f64)], out: &mut [f64]) {
    let lows: f64 = bounds.iter().map(|b| b.1).sum();
    if lows >= total {
        // Floors alone reach the total: scale them down to fit.
        let scale = if lows > 0.0 { total / lows } else { 0.0 };
        for (o, b) in out.iter_mut().zip(bounds) {
            *o = b.1 * scale;
        }
        return;
    }
    let highs: f64 = bounds.iter().map(|b| b.2).sum();
    if highs <= total {
        for (o, b) in out.iter_mut().zip(bounds) {
            *o = b.2;
        }
        return;
    }
    let at = |level: f64, b: &(f64, f64, f64)| (level * b.0).clamp(b.1, b.1.max(b.2));
    let sum = |level: f64| bounds.iter().map(|b| at(level, b)).sum::<f64>();
    // A level high enough that every part reaches its high or the total.
    let mut hi = bounds
        .iter()
        .filter(|b| b.0 > 0.0)
        .map(|b| b.2.min(total).max(b.1) / b.0)
        .fold(0.0_f64, f64::max);
    let mut lo = 0.0;
    if sum(hi) < total {
        // Every part with weight is at its high; nothing more can go out.
        hi *= 2.0;
    }
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if sum(mid) < total {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    for (o, b) in out.iter_mut().zip(bounds) {
        *o = at(lo, b);
    }
    // Bisection leaves the sum a hair under the total: hand the rest to the parts with room.
    let short = total - out.iter().sum::<f64>();
    let room_of = |b: &(f64, f64, f64), o: f64| {
        if b.0 > 0.0 {
            (b.2 - o).clamp(0.0, short.max(0.0))
        } else {
            0.0
        }
    };
    let room: f64 = bounds
        .iter()
        .zip(out.iter())
        .map(|(b, o)| room_of(b, *o))
        .sum();
    if short > 0.0 && room > 0.0 {
        for (o, b) in out.iter_mut().zip(bounds) {
            *o += short * room_of(b, *o) / room;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: f64 = f64::INFINITY;

    fn idle(weight: f64, cap: f64) -> Want {
        Want {
            weight,
            cap,
            floor: 0.0,
            active: false,
            demand: 0.0,
        }
    }

    fn split(total: f64, wants: &[Want]) -> Vec<f64> {
        let mut out = Vec::new();
        split_share(total, wants, &mut out);
        out
    }

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-9, "{a:?} != {b:?}");
        }
    }

    #[test]
    fn one_class_takes_the_whole_share_whatever_it_ran() {
        let used_little = Want {
            demand: 0.05,
            ..Want::waiting(1.0, NONE, 0.0)
        };
        close(&split(0.6, &[used_little]), &[0.6]);
        close(&split(0.6, &[idle(1.0, NONE)]), &[0.6]);
    }

    #[test]
    fn an_idle_class_gives_its_part_to_the_busy_ones() {
        let w = [
            idle(3.0, NONE),
            Want::waiting(1.0, NONE, 0.0),
            Want::waiting(1.0, NONE, 0.0),
        ];
        close(&split(1.0, &w), &[0.0, 0.5, 0.5]);
    }

    #[test]
    fn with_nobody_busy_everyone_gets_its_weighted_part() {
        close(&split(1.0, &[idle(3.0, NONE), idle(1.0, 0.1)]), &[0.9, 0.1]);
    }

    #[test]
    fn a_cap_holds_and_its_excess_goes_to_the_rest() {
        let w = [Want::waiting(1.0, NONE, 0.0), Want::waiting(1.0, 0.1, 0.0)];
        close(&split(0.8, &w), &[0.7, 0.1]);
        // Everyone capped: the rest stays unspent.
        let w = [Want::waiting(1.0, 0.2, 0.0), Want::waiting(1.0, 0.1, 0.0)];
        close(&split(0.8, &w), &[0.2, 0.1]);
    }

    #[test]
    fn a_floor_is_kept_and_floors_past_the_total_are_scaled() {
        let w = [Want::waiting(9.0, NONE, 0.0), Want::waiting(1.0, NONE, 0.3)];
        close(&split(1.0, &w), &[0.7, 0.3]);
        let w = [
            Want::waiting(1.0, NONE, 0.4),
            Want::waiting(1.0, NONE, 0.4),
            Want::waiting(2.0, NONE, 0.0),
        ];
        // Floors of 0.8 in a total of 0.4 take half of it; the third class still gets its part.
        close(&split(0.4, &w), &[0.1, 0.1, 0.2]);
    }

    #[test]
    fn what_a_class_cannot_use_goes_to_one_that_waits() {
        let light = Want {
            demand: 0.1,
            ..Want::waiting(1.0, NONE, 0.0)
        };
        close(
            &split(0.8, &[light, Want::waiting(1.0, NONE, 0.0)]),
            &[0.1, 0.7],
        );
        // Both light: the rest is shared by weight above their demands.
        close(&split(0.8, &[light, light]), &[0.4, 0.4]);
    }

    #[test]
    fn bad_figures_do_not_panic() {
        let w = [
            Want::waiting(f64::NAN, NONE, 0.0),
            Want::waiting(0.0, f64::NAN, f64::NAN),
            Want::waiting(1.0, -1.0, 0.0),
        ];
        let out = split(f64::NAN, &w);
        assert!(out.iter().all(|x| *x == 0.0));
        let out = split(0.5, &w);
        close(&out, &[0.0, 0.0, 0.5]);
        assert!(split(0.5, &[]).is_empty());
    }
}
