//! The client-side retry budget on a scripted clock: the hint honoured with jitter, the
//! backoff, local holds once attempts outrun acceptances, the window forgetting, bad settings.

use std::time::Duration;

use elastic_cpu_core::{Attempt, RetryBudget};
use proptest::prelude::*;

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn budget(seed: u64) -> RetryBudget {
    RetryBudget::new(2.0, 10 * S, seed).expect("valid settings")
}

#[test]
fn a_client_whose_attempts_are_accepted_is_never_held() {
    let mut b = budget(1);
    for i in 0..1000u64 {
        let now = MS * i as u32;
        assert_eq!(b.attempt(now), Attempt::Go);
        assert_eq!(b.accepted(now), Duration::ZERO);
    }
}

#[test]
fn attempts_that_outrun_acceptances_are_held_locally() {
    let mut b = budget(2);
    // A client that tries every 1 ms against a server that accepts one attempt per 10 ms:
    // with k = 2 it should send about 2 × the 100 accepted per second, holding the rest
    // (about (1000 − 2 × 100) / 1000 of its attempts) locally.
    let (mut held, mut accepted, mut n) = (0u32, 0u32, 0u32);
    let mut last_accept = None;
    for i in 0..20_000u32 {
        let now = MS * i;
        n += 1;
        match b.attempt(now) {
            Attempt::Hold(wait) => {
                held += 1;
                assert!(wait >= S / 2 && wait <= S * 3 / 2, "{wait:?}");
            }
            Attempt::Go => match last_accept {
                Some(t) if now - t < 10 * MS => {
                    b.refused(now, Some(10 * MS));
                }
                _ => {
                    last_accept = Some(now);
                    accepted += 1;
                    b.accepted(now);
                }
            },
        }
    }
    let share = f64::from(held) / f64::from(n);
    assert!((0.7..0.9).contains(&share), "held {share}");
    // Attempts are sent at random, not into the server's free slots: it still gets more
    // than half of what it can take.
    assert!(accepted >= 1_000, "{accepted} accepted in 20 s");
}

#[test]
fn the_window_forgets_old_failures() {
    let mut b = budget(3);
    for i in 0..200u32 {
        b.attempt(MS * i);
        b.failed(MS * i);
    }
    assert!(b.counts(S).0 >= 200);
    // A window later nothing is counted, so the next attempt goes.
    let later = S * 12;
    assert_eq!(b.counts(later), (0, 0));
    assert_eq!(b.attempt(later), Attempt::Go);
}

#[test]
fn a_refusal_waits_its_hint_with_jitter_and_a_silent_one_backs_off() {
    let mut b = budget(4);
    let waits: Vec<Duration> = (0..200)
        .map(|_| b.refused(Duration::ZERO, Some(400 * MS)))
        .collect();
    assert!(waits.iter().all(|w| *w >= 200 * MS && *w <= 600 * MS));
    let spread = waits
        .iter()
        .max()
        .unwrap()
        .saturating_sub(*waits.iter().min().unwrap());
    assert!(spread >= 300 * MS, "jitter spreads the crowd: {spread:?}");
    // No hint, or no answer: the backoff's cap doubles from 50 ms up to 5 s.
    let caps: Vec<Duration> = (0..12).map(|_| b.failed(Duration::ZERO)).collect();
    assert!(caps[0] <= 50 * MS);
    assert!(caps.iter().all(|w| *w <= 5 * S));
    assert!(caps[8..].iter().any(|w| *w > S), "{caps:?}");
    // An acceptance resets it.
    b.accepted(Duration::ZERO);
    assert!(b.failed(Duration::ZERO) <= 50 * MS);
}

/// The hint is the server's (a `Retry-After` read off the wire, or a gate's hint at rate zero,
/// `Duration::MAX`): however long, the wait is that hint with jitter, saturated, never a panic.
#[test]
fn a_hint_past_what_a_duration_holds_saturates() {
    let mut b = budget(6);
    for hint in [Duration::MAX, Duration::from_secs(u64::MAX / 2)] {
        for _ in 0..20 {
            let wait = b.refused(Duration::ZERO, Some(hint));
            assert!(wait >= hint / 2, "{wait:?} for {hint:?}");
        }
    }
}

#[test]
fn bad_settings_are_typed_errors() {
    for (k, window, setting) in [
        (0.5, 10 * S, "k"),
        (f64::NAN, 10 * S, "k"),
        (101.0, 10 * S, "k"),
        (2.0, MS, "window"),
        (2.0, S * 7200, "window"),
    ] {
        let e = RetryBudget::new(k, window, 0).unwrap_err();
        assert_eq!(e.setting, setting);
    }
}

proptest! {
    /// Whatever the outcomes and however the clock moves (even backwards), every wait is
    /// bounded and the held probability never exceeds 1.
    #[test]
    fn waits_stay_bounded(ops in proptest::collection::vec((0u8..4, 0u64..3_000, 0u64..20_000), 1..400)) {
        let mut b = budget(5);
        for (op, at_ms, hint_ms) in ops {
            let now = MS * at_ms as u32;
            let wait = match op {
                0 => match b.attempt(now) {
                    Attempt::Go => Duration::ZERO,
                    Attempt::Hold(w) => w,
                },
                1 => b.accepted(now),
                2 => b.refused(now, Some(MS * hint_ms as u32)),
                _ => b.failed(now),
            };
            let bound = (MS * hint_ms as u32 * 3 / 2).max(5 * S).max(S * 3 / 2);
            prop_assert!(wait <= bound, "{:?} > {:?}", wait, bound);
        }
    }
}
