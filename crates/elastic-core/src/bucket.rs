//! The no-burst CPU token bucket (DESIGN.md §4): tokens are CPU nanoseconds, signed (debt).

use crate::clock::{duration_nanos, Clock};

/// The largest rate a bucket holds (≈ 4.6 billion CPUs); larger rates are clamped so the signed
/// balance arithmetic can never overflow.
pub const MAX_RATE: u64 = 1 << 62;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Token rate for a `limit` (share of the CPUs) on `cpus` CPUs: `limit × cpus` CPU-seconds per
/// second, in nanoseconds. NaN and negative inputs give 0; the result saturates at [`MAX_RATE`].
///
/// ```
/// assert_eq!(elastic_core::rate_for(0.25, 2.0), 500_000_000);
/// ```
pub fn rate_for(limit: f64, cpus: f64) -> u64 {
    let r = limit * cpus * 1e9;
    if r.is_nan() || r <= 0.0 {
        0
    } else if r >= MAX_RATE as f64 {
        MAX_RATE
    } else {
        r.round() as u64
    }
}

/// A token bucket of CPU nanoseconds with `burst = rate` (one second of refill, no more). The
/// balance may go negative: overshoot and whole-slice grants are paid back by later refill.
///
/// ```
/// use elastic_core::{ManualClock, TokenBucket};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let mut b = TokenBucket::new(clock.clone(), 100_000_000); // 0.1 CPU
/// assert!(b.try_take(100_000_000)); // starts full
/// assert!(!b.try_take(10_000_000));
/// clock.advance(Duration::from_millis(100)); // refills 10 ms of CPU
/// assert!(b.try_take(10_000_000));
/// ```
#[derive(Debug)]
pub struct TokenBucket<C: Clock> {
    clock: C,
    rate: u64,
    balance: i64,
    last_refill: u64,
    /// Sub-token remainder of the last refill (in nanos × rate, below 1e9), so frequent refills
    /// at low rates do not round tokens away.
    frac: u128,
}

impl<C: Clock> TokenBucket<C> {
    /// A full bucket (balance = burst = rate) refilling at `rate_nanos_per_sec`.
    pub fn new(clock: C, rate_nanos_per_sec: u64) -> Self {
        let rate = rate_nanos_per_sec.min(MAX_RATE);
        let last_refill = duration_nanos(clock.now());
        Self {
            clock,
            rate,
            balance: rate as i64,
            last_refill,
            frac: 0,
        }
    }

    /// Add what accrued since the last refill, capped at burst. A clock that went backwards adds
    /// nothing (and the lost time is not re-credited when it comes back).
    #[inline]
    fn refill(&mut self) {
        let now = duration_nanos(self.clock.now());
        if now <= self.last_refill {
            return;
        }
        let elapsed = (now - self.last_refill) as u128;
        self.last_refill = now;
        let burst = self.burst() as i64;
        if self.balance >= burst {
            self.frac = 0;
            return;
        }
        let acc = elapsed * self.rate as u128 + self.frac;
        let add = acc / NANOS_PER_SEC;
        self.frac = acc % NANOS_PER_SEC;
        let room = (burst as i128 - self.balance as i128) as u128;
        if add >= room {
            self.balance = burst;
            self.frac = 0;
        } else {
            self.balance += add as i64;
        }
    }

    /// Change the rate: refill at the old rate first, then move the balance by the change in
    /// burst (`new_burst − old_burst`), which may push it into debt.
    pub fn set_rate(&mut self, rate_nanos_per_sec: u64) {
        self.refill();
        let new = rate_nanos_per_sec.min(MAX_RATE);
        let delta = new as i128 - self.rate as i128;
        self.balance = sat_i64(self.balance as i128 + delta);
        self.rate = new;
    }

    /// Take `n` tokens if the balance covers `want = min(n, burst)`; the whole `n` is taken, so a
    /// request larger than the burst takes a full bucket into debt rather than never succeeding.
    pub fn try_take(&mut self, n: u64) -> bool {
        self.refill();
        let want = n.min(self.burst());
        if want as i128 > self.balance as i128 {
            return false;
        }
        self.balance = sat_i64(self.balance as i128 - n as i128);
        true
    }

    /// Take `n` tokens regardless of the balance (the queue grants a waiting head its whole slice
    /// while the balance is positive).
    pub fn take_unchecked(&mut self, n: u64) {
        self.refill();
        self.balance = sat_i64(self.balance as i128 - n as i128);
    }

    /// Charge `n` tokens of overshoot after the fact.
    pub fn charge(&mut self, n: u64) {
        self.take_unchecked(n);
    }

    /// Return `n` unused tokens; the balance never exceeds the burst.
    pub fn give_back(&mut self, n: u64) {
        self.refill();
        let burst = self.burst() as i128;
        self.balance = sat_i64((self.balance as i128 + n as i128).min(burst));
    }

    /// The balance after refilling (negative = debt).
    pub fn balance(&mut self) -> i64 {
        self.refill();
        self.balance
    }

    /// Tokens (CPU nanoseconds) added per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// The most tokens the bucket holds: one second of refill.
    pub fn burst(&self) -> u64 {
        self.rate
    }

    /// The clock the bucket refills by.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

#[inline]
fn sat_i64(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}
