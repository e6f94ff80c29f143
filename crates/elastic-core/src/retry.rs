//! [`RetryBudget`]: the client's half of a reconnect storm. It waits what a server's refusal
//! asks (with jitter, so refused clients do not come back together), backs off after attempts
//! that got no answer, and gives up attempts locally once they exceed `k` × the accepted ones
//! over a window (client-side adaptive throttling, as Google's SRE book describes it): a client
//! whose attempts mostly fail stops adding to the server's load on its own.

use std::collections::VecDeque;
use std::time::Duration;

use crate::error::SettingError;

/// What a [`RetryBudget`] says about the next attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Make it.
    Go,
    /// Do not: attempts lately exceed `k` × accepted ones. Wait this long and ask again (the
    /// local refusal counts as an attempt, as the server's would).
    Hold(Duration),
}

/// Client-side reconnect policy with a retry budget.
///
/// Call [`attempt`](Self::attempt) before each connection attempt, then
/// [`accepted`](Self::accepted), [`refused`](Self::refused) or [`failed`](Self::failed) with
/// its outcome; each returns how long to wait before the next. Times are offsets on any
/// monotonic clock the caller picks (`Instant::elapsed` of a start point, or a manual clock
/// in tests), so the policy runs deterministically.
///
/// ```
/// use elastic_cpu_core::{Attempt, RetryBudget};
/// use std::time::Duration;
///
/// let mut budget = RetryBudget::new(2.0, Duration::from_secs(10), 7).unwrap();
/// let now = Duration::ZERO;
/// assert_eq!(budget.attempt(now), Attempt::Go);
/// // Refused with a hint of 200 ms: wait 100 ..= 300 ms (±50 % jitter).
/// let wait = budget.refused(now, Some(Duration::from_millis(200)));
/// assert!(wait >= Duration::from_millis(100) && wait <= Duration::from_millis(300));
/// // A bad setting is an error naming it.
/// assert_eq!(RetryBudget::new(0.5, Duration::from_secs(10), 7).unwrap_err().setting, "k");
/// ```
#[derive(Debug, Clone)]
pub struct RetryBudget {
    k: f64,
    window: Duration,
    /// Per slot (a tenth of the window, oldest first): its start, attempts, accepted ones.
    slots: VecDeque<(Duration, u64, u64)>,
    /// Consecutive attempts with no answer: the backoff's exponent.
    failures: u32,
    rng: u64,
}

/// Slots the window is counted in.
const SLOTS: u32 = 10;
/// Backoff after a failed attempt: 50 ms doubling to 5 s, with full jitter.
const BACKOFF_BASE: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

impl RetryBudget {
    /// A budget that holds attempts back once they exceed `k` × the accepted ones over
    /// `window` (the SRE book's `K`, 2 is its usual value; valid 1.0 ..= 100.0, window 1 s ..=
    /// 1 h); `seed` seeds the jitter.
    pub fn new(k: f64, window: Duration, seed: u64) -> Result<RetryBudget, SettingError> {
        if !(1.0..=100.0).contains(&k) {
            return Err(SettingError::new("k", k, "1.0 ..= 100.0"));
        }
        if window < Duration::from_secs(1) || window > Duration::from_secs(3600) {
            return Err(SettingError::new(
                "window",
                format!("{window:?}"),
                "1 s ..= 1 h",
            ));
        }
        Ok(RetryBudget {
            k,
            window,
            slots: VecDeque::with_capacity(SLOTS as usize + 1),
            failures: 0,
            rng: seed ^ 0x9e37_79b9_7f4a_7c15,
        })
    }

    /// Before an attempt at `now`: go, or hold it locally with probability
    /// `(attempts − k × accepted) / (attempts + 1)` over the window.
    pub fn attempt(&mut self, now: Duration) -> Attempt {
        let (attempts, accepted) = self.counts(now);
        self.count(now, 1, 0);
        let p = (attempts as f64 - self.k * accepted as f64) / (attempts as f64 + 1.0);
        if p > 0.0 && self.uniform() < p {
            // Ask again after a slot: by then more outcomes are in.
            Attempt::Hold(self.jitter(self.window / SLOTS))
        } else {
            Attempt::Go
        }
    }

    /// The attempt was accepted (set up): the next may go at once.
    pub fn accepted(&mut self, now: Duration) -> Duration {
        self.count(now, 0, 1);
        self.failures = 0;
        Duration::ZERO
    }

    /// The server refused it, with a retry-after hint or none: wait the hint ±50 %, or back off
    /// as after a failure.
    pub fn refused(&mut self, now: Duration, retry_after: Option<Duration>) -> Duration {
        let _ = now;
        match retry_after {
            Some(hint) => {
                self.failures = 0;
                self.jitter(hint)
            }
            None => self.backoff(),
        }
    }

    /// No answer in time, or the connection broke: back off exponentially, with full jitter.
    pub fn failed(&mut self, now: Duration) -> Duration {
        let _ = now;
        self.backoff()
    }

    /// Attempts and accepted ones over the window ending at `now`.
    pub fn counts(&mut self, now: Duration) -> (u64, u64) {
        self.expire(now);
        self.slots
            .iter()
            .fold((0, 0), |(a, k), &(_, da, dk)| (a + da, k + dk))
    }

    fn backoff(&mut self) -> Duration {
        let exp = self.failures.min(16);
        self.failures = self.failures.saturating_add(1);
        let cap = BACKOFF_BASE.saturating_mul(1 << exp).min(BACKOFF_MAX);
        cap.mul_f64(self.uniform())
    }

    fn expire(&mut self, now: Duration) {
        while let Some(&(start, _, _)) = self.slots.front() {
            if now.saturating_sub(start) >= self.window {
                self.slots.pop_front();
            } else {
                break;
            }
        }
    }

    fn count(&mut self, now: Duration, attempts: u64, accepted: u64) {
        self.expire(now);
        let slot = self.window / SLOTS;
        match self.slots.back_mut() {
            Some((start, a, k)) if now.saturating_sub(*start) < slot => {
                *a += attempts;
                *k += accepted;
            }
            _ => {
                self.slots.push_back((now, attempts, accepted));
                // Bounded whatever the clock does: a clock that goes back cannot grow it.
                while self.slots.len() > SLOTS as usize + 1 {
                    self.slots.pop_front();
                }
            }
        }
    }

    /// `d` × (0.5 ..= 1.5), saturating at [`Duration::MAX`] (the hint is the server's).
    fn jitter(&mut self, d: Duration) -> Duration {
        Duration::try_from_secs_f64(d.as_secs_f64() * (0.5 + self.uniform()))
            .unwrap_or(Duration::MAX)
    }

    /// Uniform in [0, 1) (splitmix64).
    fn uniform(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}
