//! Token bucket scenarios from docs/design.md §4 on a manual clock, to the nanosecond.

use elastic_cpu_core::{rate_for, Clock, ManualClock, TokenBucket, MAX_RATE};
use std::time::Duration;

const MS: u64 = 1_000_000;

fn bucket(limit: f64, cpus: f64) -> (ManualClock, TokenBucket<ManualClock>) {
    let clock = ManualClock::new();
    let b = TokenBucket::new(clock.clone(), rate_for(limit, cpus));
    (clock, b)
}

#[test]
fn rate_is_limit_times_cpus() {
    assert_eq!(rate_for(0.25, 2.0), 500 * MS);
    assert_eq!(rate_for(0.05, 8.0), 400 * MS);
    assert_eq!(rate_for(0.75, 16.0), 12_000 * MS);
    assert_eq!(rate_for(f64::NAN, 2.0), 0);
    assert_eq!(rate_for(-1.0, 2.0), 0);
    assert_eq!(rate_for(f64::INFINITY, 2.0), MAX_RATE);
    let (_, b) = bucket(0.25, 2.0);
    assert_eq!((b.rate(), b.burst()), (500 * MS, 500 * MS));
}

#[test]
fn starts_full_and_exhausts() {
    // 0.25 of 2 CPUs: 500 ms of CPU per second, burst 500 ms.
    let (_, mut b) = bucket(0.25, 2.0);
    assert_eq!(b.balance(), 500 * MS as i64);
    for _ in 0..5 {
        assert!(b.try_take(100 * MS));
    }
    assert_eq!(b.balance(), 0);
    assert!(!b.try_take(10 * MS));
    assert!(!b.try_take(1));
    assert_eq!(b.balance(), 0);
}

#[test]
fn refills_at_rate_and_caps_at_burst() {
    let (clock, mut b) = bucket(0.25, 2.0);
    assert!(b.try_take(500 * MS));
    clock.advance(Duration::from_millis(10));
    assert_eq!(b.balance(), 5 * MS as i64);
    assert!(!b.try_take(10 * MS));
    clock.advance(Duration::from_millis(10));
    assert!(b.try_take(10 * MS));
    assert_eq!(b.balance(), 0);
    // A long idle spell refills one second's worth, no more: no burst beyond it.
    clock.advance(Duration::from_secs(3600));
    assert_eq!(b.balance(), 500 * MS as i64);
}

#[test]
fn refill_keeps_fractions() {
    // 0.01 of 1 CPU = 10 ns of CPU per µs: 1 ns of wall time adds 0.01 tokens.
    let (clock, mut b) = bucket(0.01, 1.0);
    assert!(b.try_take(10 * MS));
    assert_eq!(b.balance(), 0);
    for _ in 0..1000 {
        clock.advance(Duration::from_nanos(1));
        b.balance();
    }
    assert_eq!(b.balance(), 10); // 1000 ns × 0.01, nothing rounded away
    clock.advance(Duration::from_nanos(50));
    assert_eq!(b.balance(), 10);
    clock.advance(Duration::from_nanos(50));
    assert_eq!(b.balance(), 11);
}

#[test]
fn debt_from_unchecked_take_and_charge() {
    let (clock, mut b) = bucket(0.05, 2.0); // 100 ms/s
    assert!(b.try_take(95 * MS));
    b.take_unchecked(100 * MS); // a waiter granted a whole slice on 5 ms of balance
    assert_eq!(b.balance(), -95 * MS as i64);
    b.charge(5 * MS); // overshoot, up to the debt cap of one burst
    assert_eq!(b.balance(), -100 * MS as i64);
    assert_eq!(b.forgiven(), 0);
    b.charge(30 * MS); // beyond the cap: forgiven
    assert_eq!(b.balance(), -100 * MS as i64);
    assert_eq!(b.forgiven(), 30 * MS);
    assert!(!b.try_take(10 * MS));
    clock.advance(Duration::from_secs(1));
    assert_eq!(b.balance(), 0); // one second pays back 100 ms of debt
    clock.advance(Duration::from_millis(100));
    assert!(b.try_take(10 * MS));
    assert_eq!(b.balance(), 0);
}

#[test]
fn try_take_wants_at_most_the_burst() {
    // 0.025 of 2 CPUs: burst 50 ms, below a 100 ms slice.
    let (clock, mut b) = bucket(0.025, 2.0);
    assert_eq!(b.burst(), 50 * MS);
    assert!(b.try_take(100 * MS)); // want = min(100, 50) = 50 <= 50: takes the whole 100 ms
    assert_eq!(b.balance(), -50 * MS as i64);
    clock.advance(Duration::from_secs(1));
    assert_eq!(b.balance(), 0);
    assert!(!b.try_take(100 * MS)); // 50 > 0
    clock.advance(Duration::from_millis(999));
    assert!(!b.try_take(100 * MS)); // 50 > 49.95
    clock.advance(Duration::from_millis(1));
    assert!(b.try_take(100 * MS));
}

#[test]
fn rate_change_refills_at_old_rate_then_moves_by_burst_delta() {
    let (clock, mut b) = bucket(0.25, 2.0); // 500 ms/s, full
                                            // Full bucket, lower limit: balance drops with the burst.
    b.set_rate(100 * MS);
    assert_eq!(b.balance(), 100 * MS as i64);
    assert_eq!(b.burst(), 100 * MS);

    // Drained, then 100 ms at the old rate (10 ms), then a cut to 20 ms/s: into debt.
    assert!(b.try_take(100 * MS));
    clock.advance(Duration::from_millis(100));
    b.set_rate(20 * MS);
    // 10 − 80 = −70 ms, but debt is capped at one burst (20 ms): 50 ms are forgiven, so the
    // balance is positive again within one second of refill at the new rate.
    assert_eq!(b.balance(), -20 * MS as i64);
    assert_eq!(b.forgiven(), 50 * MS);
    // Refill is at the new rate from now on.
    clock.advance(Duration::from_millis(500));
    assert_eq!(b.balance(), -10 * MS as i64);

    // Raising the limit adds the burst increase at once.
    b.set_rate(520 * MS);
    assert_eq!(b.balance(), 490 * MS as i64);
    clock.advance(Duration::from_millis(50));
    assert_eq!(b.balance(), 516 * MS as i64);
    clock.advance(Duration::from_secs(1));
    assert_eq!(b.balance(), 520 * MS as i64);
    assert_eq!(b.forgiven(), 50 * MS);
}

#[test]
fn rate_zero_and_huge_rates() {
    let (clock, mut b) = bucket(0.0, 2.0);
    assert_eq!((b.rate(), b.balance()), (0, 0));
    clock.advance(Duration::from_secs(10));
    assert_eq!(b.balance(), 0);
    b.set_rate(u64::MAX); // clamped
    assert_eq!(b.rate(), MAX_RATE);
    assert_eq!(b.balance(), MAX_RATE as i64);
    clock.advance(Duration::from_secs(1_000_000));
    assert!(b.try_take(u64::MAX));
    b.charge(u64::MAX);
    b.charge(u64::MAX);
    // Never wraps: debt stops at one burst, the rest is forgiven (and counted, saturating).
    assert_eq!(b.balance(), -(MAX_RATE as i64));
    assert_eq!(b.forgiven(), u64::MAX);
}

#[test]
fn give_back_caps_at_burst() {
    let (_, mut b) = bucket(0.05, 2.0); // 100 ms
    assert!(b.try_take(30 * MS));
    b.give_back(20 * MS);
    assert_eq!(b.balance(), 90 * MS as i64);
    b.give_back(50 * MS);
    assert_eq!(b.balance(), 100 * MS as i64);
}

#[test]
fn clock_going_backwards_adds_nothing() {
    let (clock, mut b) = bucket(0.05, 2.0);
    clock.set(Duration::from_secs(10));
    assert!(b.try_take(100 * MS));
    clock.set(Duration::from_secs(5));
    assert_eq!(b.balance(), 0);
    clock.set(Duration::from_secs(10));
    assert_eq!(b.balance(), 0); // the time between is not credited twice
    clock.advance(Duration::from_millis(100));
    assert_eq!(b.balance(), 10 * MS as i64);
    assert_eq!(b.clock().now(), Duration::from_millis(10_100));
}
