//! State shared by the handle, the paced adapters and the governor.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use elastic_cpu_core::{Clock, ManualClock, MonotonicClock, ThreadCpuClock, WorkQueue};
use elastic_cpu_probe::Probe;

/// The clock the queue and bucket run on: the monotonic clock in production, a
/// [`ManualClock`] in deterministic tests.
#[derive(Clone)]
pub(crate) enum QueueClock {
    Monotonic(MonotonicClock),
    Manual(ManualClock),
}

impl Clock for QueueClock {
    #[inline]
    fn now(&self) -> Duration {
        match self {
            QueueClock::Monotonic(c) => c.now(),
            QueueClock::Manual(c) => c.now(),
        }
    }
}

pub(crate) type Queue = WorkQueue<QueueClock>;

/// How elastic work's running time is measured.
#[derive(Clone)]
pub(crate) enum RunningTime {
    /// The default: the thread's CPU clock for stretches long enough to make its cost (a system
    /// call, a few hundred ns) negligible, the wall clock (vDSO, tens of ns) for short ones.
    /// CPU time is what the tokens stand for, and the wall clock would also charge the time the
    /// OS gave the core to another thread (another worker, when workers outnumber cores).
    Adaptive,
    /// `Instant` around each poll: cheap, includes time the OS took the CPU away.
    Wall,
    /// The thread's CPU clock on every poll: exact, one system call per read.
    ThreadCpu,
    /// Injected (tests).
    Custom(Arc<dyn Clock>),
}

/// Polls and stretches at least this long (by the previous one) are timed on the CPU clock.
pub(crate) const LONG_RUN: Duration = Duration::from_micros(50);

impl fmt::Debug for RunningTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunningTime::Adaptive => "Adaptive",
            RunningTime::Wall => "Wall",
            RunningTime::ThreadCpu => "ThreadCpu",
            RunningTime::Custom(_) => "Custom",
        })
    }
}

/// A point on the running-time clock.
#[derive(Clone, Copy)]
pub(crate) enum Mark {
    Wall(Instant),
    /// CPU clock, with the wall clock beside it: whether the next poll is worth the CPU clock
    /// depends on how long this one took, not on how much CPU it got.
    Cpu(Duration, Instant),
    Custom(Duration),
}

impl RunningTime {
    /// Start timing a poll; `long` says the previous one was long (worth the CPU clock).
    #[inline]
    pub(crate) fn mark(&self, long: bool) -> Mark {
        match self {
            RunningTime::Adaptive if long => Mark::Cpu(ThreadCpuClock.now(), Instant::now()),
            RunningTime::Adaptive | RunningTime::Wall => Mark::Wall(Instant::now()),
            RunningTime::ThreadCpu => Mark::Cpu(ThreadCpuClock.now(), Instant::now()),
            RunningTime::Custom(c) => Mark::Custom(c.now()),
        }
    }

    /// `(running, wall)` time since `mark` (on the same thread); zero if a clock went
    /// backwards. `running` is what is charged, `wall` says whether the poll was long.
    #[inline]
    pub(crate) fn since(&self, mark: Mark) -> (Duration, Duration) {
        match mark {
            Mark::Wall(t) => {
                let d = t.elapsed();
                (d, d)
            }
            Mark::Cpu(c, t) => (ThreadCpuClock.now().saturating_sub(c), t.elapsed()),
            Mark::Custom(d) => {
                let d = match self {
                    RunningTime::Custom(c) => c.now().saturating_sub(d),
                    _ => Duration::ZERO,
                };
                (d, d)
            }
        }
    }

    /// A [`Clock`] for [`elastic_cpu_core::ElasticHandle`]'s amortized checks: the wall clock
    /// unless the thread CPU clock or a custom clock was asked for.
    pub(crate) fn clock(&self) -> RunningClock {
        RunningClock(self.clone(), Instant::now())
    }
}

/// [`RunningTime`] as a [`Clock`].
#[derive(Clone)]
pub(crate) struct RunningClock(RunningTime, Instant);

impl Clock for RunningClock {
    #[inline]
    fn now(&self) -> Duration {
        match &self.0 {
            RunningTime::Adaptive | RunningTime::Wall => self.1.elapsed(),
            RunningTime::ThreadCpu => ThreadCpuClock.now(),
            RunningTime::Custom(c) => c.now(),
        }
    }
}

/// An `f64` in an `AtomicU64`, for values the governor publishes.
#[derive(Default)]
pub(crate) struct AtomicF64(AtomicU64);

impl AtomicF64 {
    pub(crate) fn new(v: f64) -> Self {
        AtomicF64(AtomicU64::new(v.to_bits()))
    }
    pub(crate) fn load(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
    pub(crate) fn store(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed)
    }
}

/// Everything a paced adapter needs; one per [`crate::Elastic`].
pub(crate) struct Shared {
    pub(crate) queue: Arc<Queue>,
    /// The queue's clock (the brake times itself on it).
    pub(crate) clock: QueueClock,
    /// The backlog brake (`None`: off).
    pub(crate) brake: Option<Mutex<crate::brake::Brake>>,
    /// The brake is on: holders give back their grants at their next poll.
    pub(crate) braked: AtomicBool,
    /// Grants at a time are capped at the CPUs the limit pays for.
    pub(crate) cap_concurrency: bool,
    pub(crate) probe: Probe,
    pub(crate) slice: Duration,
    pub(crate) quantum: Duration,
    pub(crate) running: RunningTime,
    /// Current elastic share (published by the governor).
    pub(crate) limit: AtomicF64,
    /// CPUs the rate is computed for.
    pub(crate) cpus: AtomicF64,
    /// Set once a runtime built through us told its worker count (or `cpus` was given).
    pub(crate) cpus_fixed: AtomicBool,
    pub(crate) ticks: AtomicU64,
    pub(crate) governor: Mutex<crate::governor::GovernorState>,
    pub(crate) governor_thread: Mutex<Option<std::thread::Thread>>,
    /// Fallback probes started by `attach` (without `tokio_unstable`); stop on drop.
    pub(crate) samplers: Mutex<Vec<elastic_cpu_probe::Sampler>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Wake the governor so it notices at once that nobody needs it any more.
        if let Ok(mut t) = self.governor_thread.lock() {
            if let Some(t) = t.take() {
                t.unpark();
            }
        }
    }
}
