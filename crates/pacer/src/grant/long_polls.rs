//! Elastic polls too long for the poll quantum to cut, and whether elastic work's time comes
//! mostly in them.
//!
//! Tokio never preempts a poll: a library call of a millisecond inside an elastic future holds
//! its worker that long whatever the share, and a foreground task queued behind it waits that
//! long. The bucket can only space such polls out; on a bare host the kernel can cut them, if
//! they run on threads at idle priority. So where [`Placement::Auto`](crate::settings::Placement)
//! may choose, elastic work starts on the runtime and moves to the idle pool once most of its
//! time comes in long polls.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// An elastic poll longer than this many quanta is a long poll: the quantum cannot cut it.
pub(crate) const LONG_POLL_QUANTA: u32 = 4;

/// The share of elastic work's running time in long polls, over a window, from which its time
/// comes *mostly* in them.
pub(crate) const MOSTLY: f64 = 0.5;

/// The least running time a window needs before its share of long polls counts: below it a
/// few polls a machine pause stretched would decide.
pub(crate) const MIN_RUN: Duration = Duration::from_millis(20);

cfg_gate! {
    /// A setup's long poll counts up to this much (a poll a machine pause stretched counts no
    /// more).
    pub(crate) const LONG_POLL_MAX: Duration = Duration::from_millis(100);
}

/// Whether a poll that ran `wall` is a long one at `quantum`.
#[inline]
pub(crate) fn is_long(wall: Duration, quantum: Duration) -> bool {
    wall > quantum * LONG_POLL_QUANTA
}

/// What the adapters of one class count, and the governor's verdict (shared by both).
#[derive(Debug, Default)]
pub(crate) struct LongPolls {
    /// Polls whose wall time passed four quanta: a worker held that long.
    count: AtomicU64,
    /// Nanoseconds run in polls whose *running* time passed four quanta, each counted up to
    /// one slice: a long call, not a poll the OS preempted (on a runtime with more workers than
    /// cores that is most long wall times) or a machine pause.
    nanos: AtomicU64,
    /// Set by the governor, never cleared: elastic work's time came mostly in long polls.
    mostly: AtomicBool,
}

impl LongPolls {
    /// Count a poll that ran `wall`, if it ran past [`LONG_POLL_QUANTA`] × `quantum`, and its
    /// running time `cpu` (where measured exactly: the thread's CPU clock), if that did,
    /// counting it up to `slice`.
    #[inline]
    pub(crate) fn note(
        &self,
        wall: Duration,
        cpu: Option<Duration>,
        quantum: Duration,
        slice: Duration,
    ) {
        if is_long(wall, quantum) {
            let long = quantum * LONG_POLL_QUANTA;
            self.count.fetch_add(1, Ordering::Relaxed);
            if let Some(cpu) = cpu.filter(|cpu| *cpu > long) {
                let nanos = u64::try_from(cpu.min(slice).as_nanos()).unwrap_or(u64::MAX);
                self.nanos.fetch_add(nanos, Ordering::Relaxed);
            }
        }
    }

    /// Long polls so far.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Time run in long polls so far.
    fn time(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    /// Whether elastic work's time came mostly in long polls (then it stays so).
    #[inline]
    pub(crate) fn mostly(&self) -> bool {
        self.mostly.load(Ordering::Relaxed)
    }
}

/// The governor's window over one class's long polls.
#[derive(Debug)]
pub(crate) struct LongPollWatch {
    /// Per tick: time in long polls, time run.
    ticks: VecDeque<(Duration, Duration)>,
    seen: Duration,
}

impl LongPollWatch {
    pub(crate) fn new() -> LongPollWatch {
        LongPollWatch {
            ticks: VecDeque::new(),
            seen: Duration::ZERO,
        }
    }

    /// One tick in which the class ran `ran` (charged CPU time), over a window of `intervals`
    /// ticks: marks `polls` once most of the window's running time came in long polls.
    pub(crate) fn tick(&mut self, polls: &LongPolls, ran: Duration, intervals: usize) {
        let now = polls.time();
        let long = now.saturating_sub(self.seen);
        self.seen = now;
        self.ticks.push_back((long, ran));
        while self.ticks.len() > intervals.max(1) {
            self.ticks.pop_front();
        }
        let (long, ran) = self
            .ticks
            .iter()
            .fold((Duration::ZERO, Duration::ZERO), |(l, r), &(dl, dr)| {
                (l + dl, r + dr)
            });
        if ran >= MIN_RUN && long.as_secs_f64() >= MOSTLY * ran.as_secs_f64() {
            polls.mostly.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: Duration = Duration::from_micros(50);
    const SLICE: Duration = Duration::from_millis(100);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn only_polls_past_four_quanta_count_each_up_to_a_slice() {
        let p = LongPolls::default();
        p.note(Q * LONG_POLL_QUANTA, Some(Q * LONG_POLL_QUANTA), Q, SLICE);
        assert_eq!((p.count(), p.time()), (0, Duration::ZERO));
        p.note(ms(1), Some(ms(1)), Q, SLICE);
        p.note(ms(900), Some(ms(900)), Q, SLICE);
        assert_eq!((p.count(), p.time()), (2, ms(101)));
    }

    #[test]
    fn a_preempted_poll_holds_a_worker_but_is_no_long_call() {
        let p = LongPolls::default();
        // 4 ms of wall time, 20 µs of running time: the OS ran another thread meanwhile.
        p.note(ms(4), Some(Duration::from_micros(20)), Q, SLICE);
        // Wall time only (the clock that would tell was not read): counted, not timed.
        p.note(ms(4), None, Q, SLICE);
        assert_eq!((p.count(), p.time()), (2, Duration::ZERO));
    }

    #[test]
    fn mostly_long_once_half_the_window_ran_in_long_polls_and_it_stays() {
        let p = LongPolls::default();
        let mut w = LongPollWatch::new();
        // Short polls only: 40 ms a tick.
        for _ in 0..20 {
            w.tick(&p, ms(40), 10);
        }
        assert!(!p.mostly());
        // A third of the time in 1 ms calls: not yet.
        for _ in 0..10 {
            for _ in 0..13 {
                p.note(ms(1), Some(ms(1)), Q, SLICE);
            }
            w.tick(&p, ms(40), 10);
        }
        assert!(!p.mostly());
        // Then most of it.
        for _ in 0..5 {
            for _ in 0..35 {
                p.note(ms(1), Some(ms(1)), Q, SLICE);
            }
            w.tick(&p, ms(40), 10);
        }
        assert!(p.mostly());
        for _ in 0..20 {
            w.tick(&p, ms(40), 10);
        }
        assert!(p.mostly(), "it stays");
    }

    #[test]
    fn too_little_running_time_decides_nothing() {
        let p = LongPolls::default();
        let mut w = LongPollWatch::new();
        // One poll a pause stretched, in a window that ran 5 ms.
        p.note(ms(50), Some(ms(50)), Q, SLICE);
        w.tick(&p, ms(5), 10);
        assert!(!p.mostly());
    }
}
