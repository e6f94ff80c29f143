//! Canaries from the kernel's timer: a `timerfd` that expires every period, read by a task on
//! the runtime through its I/O driver ([`IoCanary::Timer`](super::IoCanary::Timer), Linux).
//!
//! Why not a writer thread: on an idle runtime each canary then wakes two threads (the writer
//! from its timed park, a worker from the driver's poll), and each wake-up of a halted vCPU costs
//! tens of µs of CPU. The timer's expiry is raised in the kernel's timer interrupt and needs no
//! thread of ours: one wake-up a canary, the worker's.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rustix::time::{
    clock_gettime, timerfd_create, timerfd_settime, ClockId, Itimerspec, TimerfdClockId,
    TimerfdFlags, TimerfdTimerFlags, Timespec,
};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use super::{IoProbeError, IoShared};
use crate::shared::nanos;

/// The timer and the schedule its expiries are on.
pub(super) struct Timer {
    fd: Arc<OwnedFd>,
    /// Locked around every read of the expiry count and every re-arm, so that a count is always
    /// taken against the schedule that produced it (re-arming resets the count).
    schedule: Mutex<Schedule>,
}

/// When expiry `i` of the current arming was due: `first_ns + i × period_ns` on the monotonic
/// clock.
#[derive(Clone, Copy, Debug)]
struct Schedule {
    first_ns: u64,
    period_ns: u64,
    /// Expiries of this arming already read.
    seen: u64,
}

/// Starts the timer at `period` and the reader task on the runtime.
pub(super) fn start(
    handle: &Handle,
    shared: &Arc<IoShared>,
    period: Duration,
) -> Result<(Arc<Timer>, JoinHandle<()>), IoProbeError> {
    let fd = timerfd_create(
        TimerfdClockId::Monotonic,
        TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
    )
    .map_err(|e| IoProbeError::Socket(e.into()))?;
    let fd = Arc::new(fd);
    let registered = super::register(handle, || register_fd(fd.clone()))?;
    let timer = Arc::new(Timer {
        fd,
        schedule: Mutex::new(Schedule {
            first_ns: 0,
            period_ns: 0,
            seen: 0,
        }),
    });
    timer.arm(period, shared).map_err(IoProbeError::Socket)?;
    let reader = handle.spawn(read_expiries(registered, timer.clone(), shared.clone()));
    Ok((timer, reader))
}

impl Timer {
    /// (Re-)arms the timer: the first expiry one `period` from now, then every `period`.
    /// Expiries not read yet are recorded first (re-arming resets their count): they are the
    /// canaries of a reader held up, the ones the window must not lose.
    pub(super) fn arm(&self, period: Duration, shared: &IoShared) -> io::Result<()> {
        let mut schedule = self.lock();
        match self.take_locked(&mut schedule, shared) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        let period_ns = nanos(period).max(1);
        let first_ns = monotonic_ns().saturating_add(period_ns);
        self.settime(first_ns, period)?;
        *schedule = Schedule {
            first_ns,
            period_ns,
            seen: 0,
        };
        Ok(())
    }

    /// Stops the timer (no more expiries, no more interrupts).
    fn disarm(&self) {
        let _schedule = self.lock();
        let _ = self.settime(0, Duration::ZERO);
    }

    fn settime(&self, first_ns: u64, period: Duration) -> io::Result<()> {
        let spec = Itimerspec {
            it_interval: timespec(period),
            it_value: timespec(Duration::from_nanos(first_ns)),
        };
        timerfd_settime(&*self.fd, TimerfdTimerFlags::ABSTIME, &spec)?;
        Ok(())
    }

    /// Reads the expiries since the last read and records each one's age now (`WouldBlock`
    /// when there are none).
    fn take(&self, shared: &IoShared) -> io::Result<()> {
        self.take_locked(&mut self.lock(), shared)
    }

    fn take_locked(&self, schedule: &mut Schedule, shared: &IoShared) -> io::Result<()> {
        if schedule.period_ns == 0 {
            // Not armed yet.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut count = [0u8; 8];
        let n = rustix::io::read(&*self.fd, &mut count)?;
        if n != count.len() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let expired = u64::from_ne_bytes(count);
        let now = monotonic_ns();
        // After a long stall only the newest expiries are recorded: older ones would fall out of
        // the window anyway, and recording them would be a burst of work on the worker.
        let recorded = expired.min(shared.max_backlog);
        let Schedule {
            first_ns,
            period_ns,
            seen,
        } = *schedule;
        for i in (seen + expired - recorded)..(seen + expired) {
            let due = first_ns.saturating_add(i.saturating_mul(period_ns));
            shared.record(now.saturating_sub(due));
        }
        shared.sent.fetch_add(expired, Ordering::Relaxed);
        shared
            .skipped
            .fetch_add(expired - recorded, Ordering::Relaxed);
        schedule.seen = seen + expired;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Disarms the timer when the reader ends (aborted, or dropped with its runtime): nobody reads
/// the expiries any more.
struct DisarmOnDrop(Arc<Timer>);

impl Drop for DisarmOnDrop {
    fn drop(&mut self) {
        self.0.disarm();
    }
}

/// The reader task: waits for the driver to report the timer readable and records the ages of
/// the expiries.
async fn read_expiries(fd: AsyncFd<Arc<OwnedFd>>, timer: Arc<Timer>, shared: Arc<IoShared>) {
    let timer = DisarmOnDrop(timer);
    loop {
        let Ok(mut ready) = fd.readable().await else {
            return;
        };
        match timer.0.take(&shared) {
            // A read takes every expiry so far, so the timer is not readable again until the
            // next one: clearing now saves the second `read` that would find it empty. An
            // expiry the driver reported since this wait began keeps its readiness (the clear
            // is tied to the event this guard holds).
            Ok(()) => ready.clear_ready(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready.clear_ready(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The timer failed: nothing more to read.
            Err(_) => return,
        }
    }
}

/// `fd` registered with the current runtime's I/O driver, for reading.
#[allow(unsafe_code)]
fn register_fd(fd: Arc<OwnedFd>) -> io::Result<AsyncFd<Arc<OwnedFd>>> {
    // SAFETY: the `AsyncFd` owns a clone of the `Arc`, so the descriptor stays open and the
    // same (an `OwnedFd` never changes its descriptor) for as long as the `AsyncFd` lives.
    let registered = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) };
    registered.map_err(io::Error::from)
}

/// Now on the monotonic clock (the timer's), in ns.
fn monotonic_ns() -> u64 {
    let t = clock_gettime(ClockId::Monotonic);
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}

fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}
