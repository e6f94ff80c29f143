//! Clocks: every time source is injected so the logic runs on a [`ManualClock`] in tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A monotonic time source, read as the time elapsed since an arbitrary origin.
///
/// ```
/// use elastic_cpu_core::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(clock.now(), Duration::from_millis(5));
/// ```
pub trait Clock: Send + Sync + 'static {
    /// Time since this clock's origin. Should never go backwards; users clamp when it does.
    fn now(&self) -> Duration;
}

impl<C: Clock> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> Duration {
        (**self).now()
    }
}

/// A clock that only moves when told to; clones share the same time.
///
/// ```
/// use elastic_cpu_core::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let a = ManualClock::new();
/// let b = a.clone();
/// a.set(Duration::from_secs(2));
/// b.advance(Duration::from_millis(1));
/// assert_eq!(a.now(), Duration::from_millis(2001));
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    // A plain std atomic even under loom: tests advance it from one thread, and keeping it out of
    // loom's model keeps the explored state space small.
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Move the clock forward by `by` (saturating at `u64::MAX` nanoseconds).
    pub fn advance(&self, by: Duration) {
        let by = duration_nanos(by);
        // fetch_update instead of fetch_add so a huge step saturates instead of wrapping.
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(by))
            });
    }

    /// Set the clock to `to`; may move it backwards (to test how users clamp).
    pub fn set(&self, to: Duration) {
        self.nanos.store(duration_nanos(to), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

/// The production wall clock: [`Instant`] elapsed since construction.
///
/// ```
/// use elastic_cpu_core::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock::new();
/// let a = clock.now();
/// assert!(clock.now() >= a);
/// ```
#[derive(Clone, Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// CPU time consumed by the *calling thread* (`CLOCK_THREAD_CPUTIME_ID`), the "running time"
/// source for an [`ElasticHandle`](crate::ElasticHandle): time the thread was descheduled is not
/// charged. On non-unix targets it falls back to a monotonic wall clock.
///
/// It only makes sense while the work stays on one thread: read it on the thread that runs the
/// work (for example within a single poll), never across an `.await` that may resume elsewhere.
///
/// ```
/// use elastic_cpu_core::{Clock, ThreadCpuClock};
///
/// let clock = ThreadCpuClock;
/// let a = clock.now();
/// let mut x = 0u64;
/// for i in 0..100_000u64 { x = x.wrapping_add(std::hint::black_box(i)); }
/// assert!(clock.now() >= a, "{x}");
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadCpuClock;

impl Clock for ThreadCpuClock {
    #[inline]
    fn now(&self) -> Duration {
        cpu_clocks::thread()
    }
}

/// CPU time consumed by the *whole process*, user + sys, every thread
/// (`CLOCK_PROCESS_CPUTIME_ID`): what a process pays for its work, scheduler work included.
/// `None` where there is no such clock (targets other than the unix ones with one).
///
/// ```
/// use elastic_cpu_core::ProcessCpuClock;
///
/// let a = ProcessCpuClock::now();
/// let mut x = 0u64;
/// for i in 0..100_000u64 { x = x.wrapping_add(std::hint::black_box(i)); }
/// assert!(ProcessCpuClock::now() >= a, "{x}");
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessCpuClock;

impl ProcessCpuClock {
    /// The process's CPU time so far (`None`: no process CPU clock on this target).
    pub fn now() -> Option<Duration> {
        cpu_clocks::process()
    }
}

/// The OS's CPU-time clocks, read through rustix (no unsafe code of ours): every unix target
/// rustix offers them on.
#[cfg(all(
    unix,
    not(any(
        target_os = "solaris",
        target_os = "illumos",
        target_os = "netbsd",
        target_os = "redox",
        target_os = "horizon",
        target_os = "vita"
    ))
))]
mod cpu_clocks {
    use std::time::Duration;

    use rustix::time::{clock_gettime_dynamic, ClockId, DynamicClockId};

    #[inline]
    pub(super) fn thread() -> Duration {
        read(ClockId::ThreadCPUTime)
    }

    pub(super) fn process() -> Option<Duration> {
        Some(read(ClockId::ProcessCPUTime))
    }

    /// The checked read: a kernel refusing the clock reads zero rather than panic in a poll
    /// path (users clamp a clock that goes backwards).
    #[inline]
    fn read(id: ClockId) -> Duration {
        match clock_gettime_dynamic(DynamicClockId::Known(id)) {
            Ok(ts) => Duration::new(
                ts.tv_sec.max(0) as u64,
                ts.tv_nsec.clamp(0, 999_999_999) as u32,
            ),
            Err(_) => Duration::ZERO,
        }
    }
}

/// No CPU-time clock: the thread's falls back to a monotonic wall clock, the process's is
/// unknown.
#[cfg(not(all(
    unix,
    not(any(
        target_os = "solaris",
        target_os = "illumos",
        target_os = "netbsd",
        target_os = "redox",
        target_os = "horizon",
        target_os = "vita"
    ))
)))]
mod cpu_clocks {
    use std::time::{Duration, Instant};

    pub(super) fn thread() -> Duration {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed()
    }

    pub(super) fn process() -> Option<Duration> {
        None
    }
}

/// Nanoseconds in `d`, saturating at `u64::MAX` (584 years).
#[inline]
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
