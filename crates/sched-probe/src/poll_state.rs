//! What each thread keeps about the task poll it runs: the elastic mark set by
//! [`mark_elastic_poll`], the poll-time sampling state, and the slot it records into (read and
//! written by the hooks in `hooks`).

use std::cell::Cell;

/// The poll-time clock: the TSC through `quanta` where it is usable (calibrated against the OS
/// clock once, at [`Probe::instrument`](crate::Probe::instrument)), the OS's monotonic clock
/// elsewhere: cheaper to read than `std::time::Instant` (bench `probe_overhead` breaks the
/// cost down).
pub(crate) type Instant = quanta::Instant;

pub(crate) struct PollState {
    /// Start of the current poll, set by the before-poll hook.
    #[cfg_attr(not(tokio_unstable), allow(dead_code))]
    pub(crate) start: Cell<Option<Instant>>,
    /// Set by [`mark_elastic_poll`] during the current poll.
    pub(crate) elastic: Cell<bool>,
    /// Polls left before the next one whose poll time is measured (`poll_time_every`).
    #[cfg_attr(not(tokio_unstable), allow(dead_code))]
    pub(crate) countdown: Cell<u32>,
    /// The current poll is the one in `poll_time_every` whose time goes to the histograms.
    #[cfg_attr(not(tokio_unstable), allow(dead_code))]
    pub(crate) sampled: Cell<bool>,
    /// Until then every poll on this thread is timed, for the outlier trap: set when this
    /// thread saw an outlier, so a holder that comes back is caught whole.
    #[cfg_attr(not(tokio_unstable), allow(dead_code))]
    pub(crate) alert_until: Cell<Option<Instant>>,
    /// The worker slot this thread owns, as (probe id, slot index); id 0 = none cached. Saves
    /// the after-poll hook tokio's worker-index lookup, the thread token and the owner check
    /// (one thread-local access per hook instead of three).
    #[cfg_attr(not(tokio_unstable), allow(dead_code))]
    pub(crate) owned: Cell<(u64, usize)>,
}

thread_local! {
    pub(crate) static POLL: PollState = const {
        PollState {
            start: Cell::new(None),
            elastic: Cell::new(false),
            countdown: Cell::new(0),
            sampled: Cell::new(false),
            alert_until: Cell::new(None),
            owned: Cell::new((0, 0)),
        }
    };
}

/// Drops the cached slot (the thread is giving its slots up as it exits).
pub(crate) fn forget_owned_slot() {
    let _ = POLL.try_with(|p| p.owned.set((0, 0)));
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
