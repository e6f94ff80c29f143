//! Running time: how long elastic work ran, as charged against its grants.
//!
//! The tokens stand for CPU time. Reading the thread's CPU clock costs a system call (a few
//! hundred ns), the wall clock (vDSO) tens of ns: [`RunningTime::Adaptive`] reads the CPU clock
//! only around polls and stretches long enough to make that cost negligible.

use std::fmt;
#[cfg(feature = "test-util")]
use std::sync::Arc;
use std::time::{Duration, Instant};

use elastic_cpu_core::{Clock, ThreadCpuClock};

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
    /// Injected (tests, feature `test-util`).
    #[cfg(feature = "test-util")]
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
            #[cfg(feature = "test-util")]
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
    #[cfg(feature = "test-util")]
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
            #[cfg(feature = "test-util")]
            RunningTime::Custom(c) => Mark::Custom(c.now()),
        }
    }

    /// Whether a time measured from `mark` is running time: the thread's CPU clock, an injected
    /// clock, or the wall clock where it was chosen as the running-time clock. `Adaptive`'s wall
    /// marks (short polls) may include time the OS ran another thread.
    #[inline]
    pub(crate) fn is_running_time(&self, mark: Mark) -> bool {
        match mark {
            Mark::Wall(_) => matches!(self, RunningTime::Wall),
            _ => true,
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
            #[cfg(feature = "test-util")]
            Mark::Custom(d) => {
                let d = match self {
                    RunningTime::Custom(c) => c.now().saturating_sub(d),
                    _ => Duration::ZERO,
                };
                (d, d)
            }
        }
    }

    cfg_gate! {
        /// Wall time since `mark` (the injected clock's, under test), on any thread: no CPU-clock
        /// read.
        pub(crate) fn wall_since(&self, mark: Mark) -> Duration {
            match mark {
                Mark::Wall(t) | Mark::Cpu(_, t) => t.elapsed(),
                #[cfg(feature = "test-util")]
                Mark::Custom(_) => self.since(mark).1,
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
            #[cfg(feature = "test-util")]
            RunningTime::Custom(c) => c.now(),
        }
    }
}
