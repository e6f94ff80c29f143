//! The share split against its rules, for any mix of weights, caps, floors and busy or idle
//! classes.

use elastic_cpu_core::{split_share, Want};
use proptest::prelude::*;

fn want() -> impl Strategy<Value = Want> {
    (
        0.1f64..10.0,
        prop_oneof![Just(f64::INFINITY), 0.01f64..1.0],
        prop_oneof![Just(0.0), 0.0f64..0.3],
        any::<bool>(),
        prop_oneof![Just(f64::INFINITY), 0.0f64..1.0],
    )
        .prop_map(|(weight, cap, floor, active, demand)| Want {
            weight,
            cap,
            floor: floor.min(cap),
            active,
            demand,
        })
}

proptest! {
    #[test]
    fn parts_keep_caps_and_the_total_and_starve_no_one(
        total in 0.01f64..1.0,
        wants in prop::collection::vec(want(), 1..12),
    ) {
        let mut out = Vec::new();
        split_share(total, &wants, &mut out);
        prop_assert_eq!(out.len(), wants.len());
        let sum: f64 = out.iter().sum();
        prop_assert!(sum <= total + 1e-9, "{} > {}", sum, total);
        let any_active = wants.iter().any(|w| w.active);
        for (w, p) in wants.iter().zip(&out) {
            prop_assert!(*p >= 0.0 && *p <= w.cap + 1e-9, "part {} over cap {}", p, w.cap);
            if any_active && !w.active {
                prop_assert_eq!(*p, 0.0);
            }
            // A class with work gets something: nobody starves while the total is above zero.
            if w.active && w.demand > 0.0 {
                prop_assert!(*p > 0.0, "{:?} got nothing of {}", w, total);
            }
        }
        // Work-conserving: the total goes out unless every class that could take it is capped.
        let takers = wants.iter().filter(|w| !any_active || w.active);
        let room: f64 = takers.map(|w| w.cap).sum();
        if room > total + 1e-9 {
            prop_assert!((sum - total).abs() < 1e-6, "{} of {} went out", sum, total);
        }
    }

    #[test]
    fn busy_uncapped_classes_share_by_weight(
        total in 0.01f64..1.0,
        weights in prop::collection::vec(0.1f64..10.0, 1..12),
    ) {
        let wants: Vec<Want> =
            weights.iter().map(|&w| Want::waiting(w, f64::INFINITY, 0.0)).collect();
        let mut out = Vec::new();
        split_share(total, &wants, &mut out);
        let sum: f64 = weights.iter().sum();
        for (w, p) in weights.iter().zip(&out) {
            let fair = total * w / sum;
            prop_assert!((p - fair).abs() <= 1e-6 * total.max(1.0), "{} vs {}", p, fair);
        }
    }

    #[test]
    fn floors_are_kept_when_they_fit(
        total in 0.5f64..1.0,
        wants in prop::collection::vec(want(), 1..6),
    ) {
        let floors: f64 = wants.iter().filter(|w| w.active).map(|w| w.floor.min(w.demand)).sum();
        prop_assume!(floors <= total * elastic_cpu_core::FLOORS_AT_MOST);
        let mut out = Vec::new();
        split_share(total, &wants, &mut out);
        for (w, p) in wants.iter().zip(&out) {
            if w.active {
                prop_assert!(*p + 1e-9 >= w.floor.min(w.demand), "{:?} got {}", w, p);
            }
        }
    }
}

/// An infinite floor is a bad figure like a NaN: no panic, and the split stays within the
/// total (here the class without a cap or a finite demand takes what it would without one).
#[test]
fn an_infinite_floor_does_not_panic() {
    let inf = f64::INFINITY;
    let mut out = Vec::new();
    split_share(0.5, &[Want::waiting(1.0, inf, inf)], &mut out);
    assert!((out[0] - 0.5).abs() < 1e-9, "{out:?}");
    let wants = [Want::waiting(1.0, inf, inf), Want::waiting(1.0, inf, 0.1)];
    split_share(0.6, &wants, &mut out);
    let sum: f64 = out.iter().sum();
    assert!(out.iter().all(|p| p.is_finite() && *p >= 0.0), "{out:?}");
    assert!((sum - 0.6).abs() < 1e-9, "{out:?}");
}
