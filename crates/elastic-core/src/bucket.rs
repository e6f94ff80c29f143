//! The no-burst CPU token bucket (docs/design.md §4): tokens are CPU nanoseconds, signed (debt).

use crate::clock::{duration_nanos, Clock};

/// The largest rate a bucket holds (≈ 4.6 billion CPUs); larger rates are clamped so the signed
/// balance arithmetic can never overflow.
pub const MAX_RATE: u64 = 1 << 62;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Token rate for a `share` of the CPUs on `cpus` CPUs: `share × cpus` CPU-seconds per
/// second, in nanoseconds. NaN and negative inputs give 0; the result saturates at [`MAX_RATE`].
///
/// ```
/// assert_eq!(elastic_cpu_core::rate_for(0.25, 2.0), 500_000_000);
/// ```
pub fn rate_for(share: f64, cpus: f64) -> u64 {
    let r = share * cpus * 1e9;
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
/// Debt is capped at one burst too (the balance never goes below `−rate`), so from any state the
/// balance is positive again within one second of refill: the bound on how long the head of
/// the work queue can wait for tokens (docs/design.md §4). Debt beyond the cap is forgiven and
/// counted ([`forgiven`](Self::forgiven)); CockroachDB bounds debt the same way by resetting
/// the elastic bucket periodically.
///
/// ```
/// use elastic_cpu_core::{ManualClock, TokenBucket};
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
    core: Core,
}

impl<C: Clock> TokenBucket<C> {
    /// A full bucket (balance = burst = rate) refilling at `rate_nanos_per_sec`.
    pub fn new(clock: C, rate_nanos_per_sec: u64) -> Self {
        let core = Core::new(rate_nanos_per_sec, nanos(&clock));
        Self { clock, core }
    }

    /// Change the rate: refill at the old rate first, then move the balance by the change in
    /// burst (`new_burst − old_burst`), which may push it into debt.
    pub fn set_rate(&mut self, rate_nanos_per_sec: u64) {
        self.core.set_rate(rate_nanos_per_sec, nanos(&self.clock));
    }

    /// Change the rate without moving the balance: a raise adds no tokens, a cut trims the
    /// balance to the new burst. For a rate that is one part of a share split among several
    /// buckets each tick: moving the balance by every change of part would hand a bucket a burst
    /// each time another one goes idle. Debt stays (capped at the new burst while the rate is
    /// above zero), so an overrun stays charged to the bucket that ran it.
    ///
    /// ```
    /// use elastic_cpu_core::{ManualClock, TokenBucket};
    ///
    /// let mut b = TokenBucket::new(ManualClock::new(), 100_000_000); // full: 0.1 s of tokens
    /// assert!(b.try_take(100_000_000));
    /// b.retune(400_000_000);
    /// assert_eq!(b.balance(), 0); // a raise adds nothing
    /// b.charge(50_000_000);
    /// b.retune(0);
    /// assert_eq!(b.balance(), -50_000_000); // idle at rate 0, the debt is still owed
    /// ```
    pub fn retune(&mut self, rate_nanos_per_sec: u64) {
        self.core.retune(rate_nanos_per_sec, nanos(&self.clock));
    }

    /// Take `n` tokens if the balance covers `want = min(n, burst)`; the whole `n` is taken, so a
    /// request larger than the burst takes a full bucket into debt rather than never succeeding.
    pub fn try_take(&mut self, n: u64) -> bool {
        self.core.try_take(n, nanos(&self.clock))
    }

    /// Take `n` tokens regardless of the balance (the queue grants a waiting head its whole slice
    /// while the balance is positive).
    pub fn take_unchecked(&mut self, n: u64) {
        self.core.take_unchecked(n, nanos(&self.clock));
    }

    /// Charge `n` tokens of overshoot after the fact.
    pub fn charge(&mut self, n: u64) {
        self.core.take_unchecked(n, nanos(&self.clock));
    }

    /// Return `n` unused tokens; the balance never exceeds the burst.
    pub fn give_back(&mut self, n: u64) {
        self.core.give_back(n);
    }

    /// The balance after refilling (negative = debt).
    pub fn balance(&mut self) -> i64 {
        self.core.balance(nanos(&self.clock))
    }

    /// Tokens (CPU nanoseconds) added per second.
    pub fn rate(&self) -> u64 {
        self.core.rate
    }

    /// The most tokens the bucket holds: one second of refill.
    pub fn burst(&self) -> u64 {
        self.core.rate
    }

    /// Debt forgiven so far: CPU nanoseconds charged beyond the one-second debt cap.
    ///
    /// ```
    /// use elastic_cpu_core::{ManualClock, TokenBucket};
    ///
    /// let mut b = TokenBucket::new(ManualClock::new(), 100_000_000); // 0.1 CPU, full
    /// b.charge(350_000_000); // a poll ran 350 ms past its grant
    /// assert_eq!(b.balance(), -100_000_000); // one second of refill, no more
    /// assert_eq!(b.forgiven(), 150_000_000);
    /// ```
    pub fn forgiven(&self) -> u64 {
        self.core.forgiven
    }

    /// The clock the bucket refills by.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

#[inline]
fn nanos<C: Clock>(clock: &C) -> u64 {
    duration_nanos(clock.now())
}

/// The bucket's arithmetic, with the time passed in: the work queue reads its clock before
/// taking its lock, so a slow clock read never lengthens the critical section.
#[derive(Debug)]
pub(crate) struct Core {
    rate: u64,
    balance: i64,
    last_refill: u64,
    /// Sub-token remainder of the last refill (in nanos × rate, below 1e9), so frequent refills
    /// at low rates do not round tokens away.
    frac: u128,
    /// Debt forgiven by the cap, in total.
    pub(crate) forgiven: u64,
}

impl Core {
    pub(crate) fn new(rate_nanos_per_sec: u64, now: u64) -> Self {
        let rate = rate_nanos_per_sec.min(MAX_RATE);
        Self {
            rate,
            balance: rate as i64,
            last_refill: now,
            frac: 0,
            forgiven: 0,
        }
    }

    /// Add what accrued since the last refill, capped at burst. A time before the last refill
    /// (a clock that went backwards, or a racing caller's earlier reading) adds nothing.
    #[inline]
    fn refill(&mut self, now: u64) {
        if now <= self.last_refill {
            return;
        }
        let elapsed = (now - self.last_refill) as u128;
        self.last_refill = now;
        let burst = self.rate as i64;
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

    pub(crate) fn set_rate(&mut self, rate_nanos_per_sec: u64, now: u64) {
        self.refill(now);
        let new = rate_nanos_per_sec.min(MAX_RATE);
        let delta = new as i128 - self.rate as i128;
        self.rate = new;
        self.set_balance(self.balance as i128 + delta);
    }

    pub(crate) fn retune(&mut self, rate_nanos_per_sec: u64, now: u64) {
        self.refill(now);
        self.rate = rate_nanos_per_sec.min(MAX_RATE);
        let balance = (self.balance as i128).min(self.rate as i128);
        if self.rate == 0 {
            // No refill to pay debt back from: keep it owed until the rate is up again.
            self.balance = sat_i64(balance);
        } else {
            self.set_balance(balance);
        }
    }

    /// Set the balance, capping debt at one burst: what lies beyond is forgiven (and counted).
    #[inline]
    fn set_balance(&mut self, balance: i128) {
        let floor = -(self.rate as i128);
        if balance < floor {
            let forgiven = u64::try_from(floor - balance).unwrap_or(u64::MAX);
            self.forgiven = self.forgiven.saturating_add(forgiven);
            self.balance = sat_i64(floor);
        } else {
            self.balance = sat_i64(balance);
        }
    }

    #[inline]
    pub(crate) fn try_take(&mut self, n: u64, now: u64) -> bool {
        self.refill(now);
        let want = n.min(self.rate);
        if want as i128 > self.balance as i128 {
            return false;
        }
        self.set_balance(self.balance as i128 - n as i128);
        true
    }

    pub(crate) fn take_unchecked(&mut self, n: u64, now: u64) {
        self.refill(now);
        self.set_balance(self.balance as i128 - n as i128);
    }

    /// No refill needed first: adding `n` then refilling `r`, both capped at the burst, gives
    /// `min(balance + n + r, burst)` in either order. So a return needs no clock read.
    #[inline]
    pub(crate) fn give_back(&mut self, n: u64) {
        let burst = self.rate as i128;
        self.balance = sat_i64((self.balance as i128 + n as i128).min(burst));
    }

    /// Hand out the whole balance if it is not negative (to the work queue's fast path, which
    /// gives it back through [`give_back`](Self::give_back) before the next refill), else
    /// nothing: the balance is then 0 or the debt it was.
    pub(crate) fn lend_all(&mut self) -> u64 {
        let lent = self.balance.max(0);
        self.balance -= lent;
        lent as u64
    }

    pub(crate) fn balance(&mut self, now: u64) -> i64 {
        self.refill(now);
        self.balance
    }

    pub(crate) fn rate(&self) -> u64 {
        self.rate
    }
}

#[inline]
fn sat_i64(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}
