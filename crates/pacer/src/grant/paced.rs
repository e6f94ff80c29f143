//! `Paced<F>` and `PacedStream<S>`: elastic futures and streams that run on CPU tokens.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use pin_project_lite::pin_project;

use super::class_state::ClassState;
use super::nesting;
use super::quantum::{requeue_behind_woken, yield_to_scheduler, YieldPoint};
use super::running::{Mark, RunningTime, LONG_RUN};
use crate::grant::GrantState;
use elastic_cpu_core::{Clock, ThreadCpuClock};

/// A stream's run of items between two yields, on an idle pool's thread: the thread's CPU
/// clock at its start, to true up what the items were charged. Items shorter than
/// [`LONG_RUN`] are timed on the wall clock, which also counts the time the OS ran another
/// thread mid-item; on the runtime's workers that is rare, but an idle-priority thread gives
/// its core up at every wake-up of a normal one, and its items' wall time ran to twice their
/// CPU time on a busy host. Two CPU-clock reads a stretch, not one an item: a stretch runs from
/// an item after a yield to the next yield, or until its charges would spend the grant (on the
/// pool the quantum is the slice).
#[derive(Clone, Copy)]
enum ItemStretch {
    /// Not looked at since the last yield.
    Unknown,
    /// Not on an idle pool's thread, or not timed adaptively: nothing to true up.
    Off,
    /// Open since the first item began: the CPU clock then, on `thread`, and what the items
    /// were charged since.
    On {
        cpu: Duration,
        thread: std::thread::ThreadId,
        charged: Duration,
    },
}

/// The timing of one paced future or stream: each inner poll is timed and charged to its
/// grant; the poll quantum's clock runs until the task returns `Pending`.
pub(crate) struct PacedTiming {
    grant: GrantState,
    /// Running time since this task last returned `Pending` (the poll quantum's clock).
    run: Duration,
    /// When a stream yields next, by `run`.
    yield_at: YieldPoint,
    /// Set while the inner poll runs, so a panic in it is still charged.
    polling: Option<Mark>,
    /// The last poll ran at least [`LONG_RUN`]: time the next on the CPU clock.
    long: bool,
    /// The task yielded at the quantum: its next poll takes the yield's second step
    /// ([`requeue_behind_woken`]).
    requeue: bool,
    /// Adapters of the same `Elastic` inside this one pace its work (see `nesting`): it holds
    /// no grant and charges nothing, and only marks its polls as elastic.
    handed_off: bool,
    /// A stream's items since the last yield, where their wall-clock charges are trued up.
    stretch: ItemStretch,
    /// Polls until the next poll time goes to the probe (fallback probe only).
    #[cfg(not(tokio_unstable))]
    sample_in: u8,
    /// Where the adapter was made: the spawn site the outlier trap reports its long polls
    /// under when there are no task hooks (with them, the hooks report tokio's spawn site).
    #[cfg(not(tokio_unstable))]
    site: &'static std::panic::Location<'static>,
}

impl PacedTiming {
    #[track_caller]
    fn new(shared: Arc<ClassState>) -> Self {
        PacedTiming {
            yield_at: YieldPoint::new(shared.quantum),
            grant: GrantState::new(shared),
            run: Duration::ZERO,
            polling: None,
            long: false,
            requeue: false,
            handed_off: false,
            stretch: ItemStretch::Unknown,
            #[cfg(not(tokio_unstable))]
            sample_in: 0,
            #[cfg(not(tokio_unstable))]
            site: std::panic::Location::caller(),
        }
    }

    /// Ready once we hold a grant (or run unpaced); otherwise queued with `cx`'s waker.
    #[inline]
    fn poll_acquire(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.grant.poll_acquire(cx)
    }

    /// Run one inner poll, timed and attributed to elastic work.
    #[inline]
    fn run<R>(&mut self, poll: impl FnOnce() -> R) -> R {
        elastic_cpu_probe::mark_elastic_poll();
        if self.handed_off {
            return poll();
        }
        let mark = self.grant.shared().running.mark(self.long);
        self.polling = Some(mark);
        let outer = nesting::enter(self.grant.shared().root());
        let out = poll();
        let inner_paces = nesting::leave(outer);
        self.polling = None;
        let (took, wall) = self.grant.shared().running.since(mark);
        self.long = wall >= LONG_RUN;
        if inner_paces {
            // Adapters inside charged their own work: settle for good and leave it to them.
            self.handed_off = true;
            self.grant.finish();
            return out;
        }
        let shared = self.grant.shared();
        let cpu = shared.running.is_running_time(mark).then_some(took);
        shared.note_run(wall, cpu);
        #[cfg(not(tokio_unstable))]
        self.report(took, wall);
        self.account(took);
        out
    }

    /// Without hooks the probe learns elastic poll times only from here: one poll in 16 goes
    /// to the histograms (plenty for a p99, and it keeps the probe's lock off most polls), and
    /// every poll to the outlier trap, under the site where the adapter was made.
    #[cfg(not(tokio_unstable))]
    #[inline]
    fn report(&mut self, took: Duration, wall: Duration) {
        let probe = &self.grant.shared().probe;
        if self.sample_in == 0 {
            self.sample_in = 15;
            probe.record_poll_from(self.site, None, Some(took), true);
        } else {
            self.sample_in -= 1;
            probe.trap_poll(self.site, wall, true);
        }
    }

    #[inline]
    fn account(&mut self, took: Duration) {
        self.run += took;
        let mut charge = took;
        if let ItemStretch::On { charged, .. } = &mut self.stretch {
            *charged += took;
            // On the idle pool the quantum is the slice: a stretch mostly ends with its grant
            // spent, so it is trued up before the grant settles. What it was charged beyond
            // its CPU time comes off this item first (not charged yet), then off the grant.
            if self.grant.spends(took) {
                let over = self.close_stretch();
                let off_item = over.min(took);
                charge -= off_item;
                self.grant.refund(over - off_item);
            }
        }
        // Settles the grant once its slice is spent: a new one is taken before the next poll.
        self.grant.charge(charge);
    }

    /// The poll quantum is spent and no one lets it run on: time to yield even with tokens left.
    #[inline]
    fn quantum_spent(&mut self) -> bool {
        let shared = self.grant.shared();
        self.yield_at
            .due(self.run, shared.quantum, shared.core_yield())
    }

    /// The task is about to return `Pending`: it yields, so the quantum starts over.
    #[inline]
    fn yielded(&mut self) {
        self.run = Duration::ZERO;
        self.yield_at.reset(self.grant.shared().quantum);
        self.true_up();
    }

    /// The adapter is finished: settle for good.
    fn finish(&mut self) {
        self.true_up();
        self.grant.finish();
    }

    /// A stream is about to produce an item: on an idle pool's thread, open the stretch the
    /// items up to the next yield are trued up in (looked at once a stretch).
    #[inline]
    fn open_stretch(&mut self) {
        if !matches!(self.stretch, ItemStretch::Unknown) || self.handed_off {
            return;
        }
        let shared = self.grant.shared();
        self.stretch = if matches!(shared.running, RunningTime::Adaptive)
            && super::thread_class::on_idle_pool()
        {
            ItemStretch::On {
                cpu: ThreadCpuClock.now(),
                thread: std::thread::current().id(),
                charged: Duration::ZERO,
            }
        } else {
            ItemStretch::Off
        };
    }

    /// Close the stretch: what its items were charged beyond the CPU time it took (nothing if
    /// it moved threads, whose CPU clocks do not compare).
    fn close_stretch(&mut self) -> Duration {
        match std::mem::replace(&mut self.stretch, ItemStretch::Unknown) {
            ItemStretch::On {
                cpu,
                thread,
                charged,
            } if thread == std::thread::current().id() => {
                charged.saturating_sub(ThreadCpuClock.now().saturating_sub(cpu))
            }
            _ => Duration::ZERO,
        }
    }

    /// Close the stretch and give back what its items were charged beyond its CPU time.
    fn true_up(&mut self) {
        let over = self.close_stretch();
        self.grant.refund(over);
    }
}

impl Drop for PacedTiming {
    fn drop(&mut self) {
        if let Some(mark) = self.polling.take() {
            // The inner poll panicked: charge what it ran (the grant settles when dropped).
            let took = self.grant.shared().running.since(mark).0;
            self.grant.charge(took);
        }
        self.true_up();
    }
}

pin_project! {
    /// A future that runs as elastic work: every poll holds CPU tokens, waits for a grant
    /// (as `Pending`, never blocking a worker) when none are left, and is measured and
    /// charged. Made by [`PacedExt::paced`].
    ///
    /// Tokio never preempts a poll: a future that does a long stretch of CPU work without
    /// returning `Pending` can only be cut at its own poll boundaries. Such code should call
    /// [`Pacer::pace`](crate::Pacer::pace) in its loop instead.
    ///
    /// While it waits on something else (I/O, another task) it keeps its grant and its place
    /// under the holder cap; another place is lent to work in line once a tick passes in which
    /// no holder ran. Dropping it at any point settles the grant it holds: tokens are conserved.
    #[must_use = "futures do nothing unless polled"]
    pub struct Paced<F> {
        #[pin]
        inner: F,
        slot: PacedTiming,
    }
}

impl<F> Paced<F> {
    #[track_caller]
    pub(crate) fn new(inner: F, shared: Arc<ClassState>) -> Self {
        Paced {
            inner,
            slot: PacedTiming::new(shared),
        }
    }

    cfg_idle_pool! {
        /// The future, unpaced: the grant it held is settled.
        pub(crate) fn into_inner(self) -> F {
            self.inner
        }
    }
}

impl<F: Future> Future for Paced<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let slot = this.slot;
        if slot.poll_acquire(cx).is_pending() {
            return Poll::Pending;
        }
        let mut inner = this.inner;
        match slot.run(|| inner.as_mut().poll(cx)) {
            Poll::Ready(out) => {
                slot.finish();
                Poll::Ready(out)
            }
            Poll::Pending => {
                slot.yielded();
                Poll::Pending
            }
        }
    }
}

pin_project! {
    /// A stream whose items are produced as elastic work (see [`Paced`]). Between items, once
    /// the poll quantum is spent, it yields to the scheduler even with tokens left, so a
    /// consumer looping over a ready stream does not hold a worker for a whole slice. While
    /// another worker of the runtime is parked and nothing is queued for it, the yield waits,
    /// up to 400 µs of running time since the last one (that worker already holds the I/O
    /// driver and takes queued work). Made by [`PacedStreamExt::paced`].
    #[must_use = "streams do nothing unless polled"]
    pub struct PacedStream<S> {
        #[pin]
        inner: S,
        slot: PacedTiming,
    }
}

impl<S> PacedStream<S> {
    #[track_caller]
    pub(crate) fn new(inner: S, shared: Arc<ClassState>) -> Self {
        PacedStream {
            inner,
            slot: PacedTiming::new(shared),
        }
    }
}

impl<S: Stream> Stream for PacedStream<S> {
    type Item = S::Item;

    #[inline]
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = self.project();
        let slot = this.slot;
        if std::mem::take(&mut slot.requeue) && requeue_behind_woken(cx) {
            return Poll::Pending;
        }
        if slot.quantum_spent() {
            slot.yielded();
            slot.requeue = true;
            yield_to_scheduler(cx, slot.grant.shared().core_yield());
            return Poll::Pending;
        }
        if slot.poll_acquire(cx).is_pending() {
            slot.yielded();
            return Poll::Pending;
        }
        slot.open_stretch();
        let mut inner = this.inner;
        match slot.run(|| inner.as_mut().poll_next(cx)) {
            Poll::Ready(Some(item)) => Poll::Ready(Some(item)),
            Poll::Ready(None) => {
                slot.finish();
                Poll::Ready(None)
            }
            Poll::Pending => {
                slot.yielded();
                Poll::Pending
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}
