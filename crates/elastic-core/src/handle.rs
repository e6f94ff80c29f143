//! The handle elastic work holds while it runs a grant: an amortized "is my slice spent?" check.

use std::fmt;
use std::time::Duration;

use crate::clock::{duration_nanos, Clock};
use crate::queue::Grant;

/// Successive checks closer than this (in running time) double the iterations between checks.
const CHECK_SPACING: u64 = 1_000_000;

/// With a deadline shorter than the slice, checks stay within this fraction of it apart, so
/// the deadline is overrun by at most about an eighth (the 1 ms spacing of docs/design.md §4
/// alone would let a 250 µs quantum run to 500 µs).
const DEADLINE_FRACTION: u64 = 8;

/// Tracks the running time of one [`Grant`] and answers [`over_limit`](Self::over_limit) cheaply
/// enough to call on every iteration of a tight loop.
///
/// The clock is read on the first call and then on every `interval`-th call after the previous
/// read, as CockroachDB's handle does: the interval starts at 1 and doubles each time a read
/// comes less than the spacing (1 ms of running time, less for a short deadline) after the
/// previous one; it never shrinks. While checks come fast, the clock is read at calls
/// 1, 2, 4, 8, 16, ...; once the interval stops growing at N, at every N-th call.
///
/// The running-time source `R` is injected: a wall clock ([`MonotonicClock`]) or the thread's
/// CPU time ([`ThreadCpuClock`]).
///
/// ```
/// use elastic_cpu_core::{Admit, ElasticHandle, ManualClock, WorkQueue};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let queue = WorkQueue::new(clock.clone(), 1_000_000_000);
/// let Admit::Granted(grant) = queue.admit(Duration::from_millis(10)) else { panic!() };
/// let mut handle = ElasticHandle::new(grant, clock.clone());
/// assert_eq!(handle.over_limit(), (false, -10_000_000));
/// clock.advance(Duration::from_millis(12));
/// while !handle.over_limit().0 {} // the next clock read sees the slice spent
/// let (grant, used) = handle.into_grant();
/// queue.done(grant, used); // 2 ms of overshoot charged
/// assert_eq!(queue.snapshot().over_limit_nanos, 2_000_000);
/// ```
///
/// [`MonotonicClock`]: crate::MonotonicClock
/// [`ThreadCpuClock`]: crate::ThreadCpuClock
pub struct ElasticHandle<R: Clock> {
    grant: Grant,
    running: R,
    start: Duration,
    /// Running time (nanos) at which `over_limit` turns true: the slice, or an earlier deadline.
    deadline: u64,
    /// Checks closer than this double the interval: 1 ms, or less for a short deadline.
    spacing: u64,
    /// Calls left that return the cached answer before the next clock read: `interval - 1`
    /// after a read, so the read falls on exactly the `interval`-th call.
    remaining: u64,
    /// Calls from one clock read to the next: 0 before the first read, then 1, doubling while
    /// reads are closer than `spacing`; never shrinks.
    interval: u64,
    checked_once: bool,
    /// Running time (nanos since start) at the last check.
    last_used: u64,
    cached: (bool, i64),
}

impl<R: Clock> fmt::Debug for ElasticHandle<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ElasticHandle")
            .field("allotted", &self.grant.allotted())
            .field("interval", &self.interval)
            .field("cached", &self.cached)
            .finish()
    }
}

impl<R: Clock> ElasticHandle<R> {
    /// Start running `grant` now, by `running`'s time.
    pub fn new(grant: Grant, running: R) -> Self {
        let allotted = grant.allotted();
        Self::with_deadline(grant, running, allotted)
    }

    /// Like [`new`](Self::new), but [`over_limit`](Self::over_limit) turns true once `deadline`
    /// of running time is used, if that comes before the end of the slice (a caller that
    /// yields every poll quantum and settles what it used). `diff` stays `used − allotted`.
    pub fn with_deadline(grant: Grant, running: R, deadline: Duration) -> Self {
        let start = running.now();
        let allotted = grant.allotted_nanos();
        let deadline = duration_nanos(deadline).min(allotted);
        Self {
            deadline,
            spacing: CHECK_SPACING.min(deadline / DEADLINE_FRACTION),
            grant,
            running,
            start,
            remaining: 0,
            interval: 0,
            checked_once: false,
            last_used: 0,
            cached: (false, -sat_i64(allotted)),
        }
    }

    /// `(over, diff)`: whether the running time reached the allotted slice, and
    /// `used − allotted` in nanoseconds, as of the last clock read. The clock is read on every
    /// [`check_interval`](Self::check_interval)-th call (see the type docs); in between, the
    /// cached answer is returned.
    #[inline]
    pub fn over_limit(&mut self) -> (bool, i64) {
        if self.remaining > 0 {
            self.remaining -= 1;
            return self.cached;
        }
        self.check()
    }

    #[inline(never)]
    fn check(&mut self) -> (bool, i64) {
        let used = self.used_nanos();
        let allotted = self.grant.allotted_nanos();
        if !self.checked_once {
            self.checked_once = true;
            self.interval = 1;
        } else if used.saturating_sub(self.last_used) < self.spacing {
            self.interval = self.interval.saturating_mul(2);
        }
        self.last_used = used;
        // This call is the first of the next `interval` calls: `interval - 1` cached answers,
        // then the next read.
        self.remaining = self.interval - 1;
        self.cached = (
            used >= self.deadline,
            sat_i64(used as i128 - allotted as i128),
        );
        self.cached
    }

    #[inline]
    fn used_nanos(&self) -> u64 {
        // A clock that went backwards reads as no time used, never as an underflow.
        duration_nanos(self.running.now().saturating_sub(self.start))
    }

    /// Running time since the handle was created (one clock read; zero if the clock went
    /// backwards).
    pub fn used(&self) -> Duration {
        Duration::from_nanos(self.used_nanos())
    }

    /// Running time at which [`over_limit`](Self::over_limit) turns true: the deadline given
    /// to [`with_deadline`](Self::with_deadline) (or [`set_deadline`](Self::set_deadline)),
    /// never past the slice.
    pub fn deadline(&self) -> Duration {
        Duration::from_nanos(self.deadline)
    }

    /// Move the deadline to `deadline` of running time (clamped to the slice), e.g. further on
    /// for a caller that reached it and chose to run on rather than yield. The check interval
    /// learned so far is kept (no burst of clock reads); the cached answer is re-judged against
    /// the new deadline, so the next call reports over the limit only if the last clock read
    /// already was past it.
    ///
    /// ```
    /// use elastic_cpu_core::{Admit, ElasticHandle, ManualClock, WorkQueue};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let queue = WorkQueue::new(clock.clone(), 1_000_000_000);
    /// let Admit::Granted(grant) = queue.admit(Duration::from_millis(10)) else { panic!() };
    /// let mut handle = ElasticHandle::with_deadline(grant, clock.clone(), Duration::from_millis(1));
    /// clock.advance(Duration::from_millis(1));
    /// assert!(handle.over_limit().0); // the deadline is reached...
    /// handle.set_deadline(handle.deadline() + Duration::from_millis(1));
    /// assert!(!handle.over_limit().0); // ...and moved one more millisecond on
    /// handle.set_deadline(Duration::from_secs(1));
    /// assert_eq!(handle.deadline(), Duration::from_millis(10)); // never past the slice
    /// ```
    pub fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = duration_nanos(deadline).min(self.grant.allotted_nanos());
        self.cached.0 = self.checked_once && self.last_used >= self.deadline;
    }

    /// The slice this handle runs.
    pub fn allotted(&self) -> Duration {
        self.grant.allotted()
    }

    /// Calls from one clock read to the next now: the clock is read again on the
    /// `check_interval()`-th call after the last read (0 before the first check).
    pub fn check_interval(&self) -> u64 {
        self.interval
    }

    /// Finish: the grant and the running time used, for [`WorkQueue::done`].
    ///
    /// [`WorkQueue::done`]: crate::WorkQueue::done
    pub fn into_grant(self) -> (Grant, Duration) {
        let used = self.used();
        (self.grant, used)
    }
}

#[inline]
fn sat_i64(v: impl Into<i128>) -> i64 {
    v.into().clamp(i64::MIN as i128, i64::MAX as i128) as i64
}
