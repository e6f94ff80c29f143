//! The per-thread poll state: the elastic mark set by [`mark_elastic_poll`] and, with
//! `--cfg tokio_unstable`, tokio's task poll hooks that read it and record each poll.

use std::cell::Cell;

/// The poll-time clock: the TSC through `quanta` where it is usable (calibrated against the OS
/// clock once, at [`Probe::instrument`](crate::Probe::instrument)), the OS's monotonic clock
/// elsewhere. Measured in `probe_overhead`'s breakdown: two reads a poll cost ~15 ns against
/// ~38 for `std::time::Instant` on the development VM.
type Instant = quanta::Instant;

#[cfg(tokio_unstable)]
use crate::shared::{nanos, Shared};

struct PollState {
    /// Start of the current poll, set by the before-poll hook.
    #[cfg_attr(not(tokio_unstable), allow(dead_code))]
    start: Cell<Option<Instant>>,
    /// Set by [`mark_elastic_poll`] during the current poll.
    elastic: Cell<bool>,
    /// Polls left before the next one whose poll time is measured (`poll_time_every`).
    #[cfg_attr(not(tokio_unstable), allow(dead_code))]
    countdown: Cell<u32>,
}

thread_local! {
    static POLL: PollState = const {
        PollState { start: Cell::new(None), elastic: Cell::new(false), countdown: Cell::new(0) }
    };
}

/// Marks the task poll running on this thread as elastic work.
///
/// Called by elastic wrappers (the `pacer` crate's `Paced`) inside their `poll`. One
/// thread-local write; the probe's after-poll hook reads and clears it, and the before-poll hook
/// clears it, so a mark outside a task poll does not leak into the next one. Without hooks it has
/// no effect (there is no hook to read it).
///
/// ```
/// use std::future::poll_fn;
/// use std::task::Poll;
///
/// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// # rt.block_on(async {
/// // What an elastic wrapper does in each poll of the work it wraps:
/// poll_fn(|_cx| {
///     elastic_cpu_probe::mark_elastic_poll();
///     Poll::Ready(())
/// })
/// .await;
/// # });
/// ```
#[inline]
pub fn mark_elastic_poll() {
    let _ = POLL.try_with(|p| p.elastic.set(true));
}

#[cfg(tokio_unstable)]
#[inline]
pub(crate) fn before_poll(poll_time_every: u32) {
    let _ = POLL.try_with(|p| {
        p.elastic.set(false);
        let left = p.countdown.get();
        if left == 0 {
            p.countdown.set(poll_time_every - 1);
            p.start.set(Some(Instant::now()));
        } else {
            p.countdown.set(left - 1);
            p.start.set(None);
        }
    });
}

#[cfg(tokio_unstable)]
#[inline]
pub(crate) fn after_poll(shared: &std::sync::Arc<Shared>, meta: &tokio::runtime::TaskMeta<'_>) {
    let (start, elastic) = POLL
        .try_with(|p| (p.start.take(), p.elastic.replace(false)))
        .unwrap_or((None, false));
    // Only measured polls read the clock (every poll by default).
    let poll_ns = start.map(|s| nanos(Instant::now().saturating_duration_since(s)));
    shared.record(meta.schedule_latency().map(nanos), poll_ns, elastic);
}
