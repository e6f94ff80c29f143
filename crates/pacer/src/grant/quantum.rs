//! The poll quantum's yield: whether a task that has run its quantum must hand its worker back
//! now, and the yield itself.
//!
//! The quantum exists for the foreground tasks queued behind a worker that elastic work holds,
//! and for I/O the driver has not polled yet. Neither needs the yield while another worker of
//! the runtime is parked: that worker sits in the I/O driver (a parked worker takes it when no
//! one holds it), and a task pushed to the global queue or stolen-from local queue wakes it. Then
//! the yield only costs: the worker finds nothing else to run, turns to searching, and on
//! leaving that state wakes the parked worker, which searches, finds nothing and parks again
//! (a futex round trip per quantum; bench `quantum_cost` measures it). So
//! while some other worker is parked and the global queue is empty, a spent quantum runs on for
//! one more quantum, up to [`RUN_ON_LIMIT`] since the task last returned `Pending`. The limit
//! bounds what the check cannot see: a task the elastic task itself woke waits in its worker's
//! LIFO slot, which no other worker may steal.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Context;
use std::time::Duration;

use super::Unstack;

/// Longest run between yields while the quantum's yields are skipped (8 default quanta).
pub(crate) const RUN_ON_LIMIT: Duration = Duration::from_micros(400);

/// Whether a task that has run its quantum may run on until `run_after` of running time since
/// it last returned `Pending`: only up to [`RUN_ON_LIMIT`], and only while no one else wants a
/// worker (see [`worker_wanted`]).
#[inline]
pub(crate) fn may_run_on(run_after: Duration) -> bool {
    run_after <= RUN_ON_LIMIT && !worker_wanted()
}

/// Whether the runtime the caller runs on may need the caller's worker: true unless another of
/// its workers is parked and its global queue is empty (with `tokio_unstable`, also the
/// caller's local queue). Off a runtime, or where tokio cannot say (no 64-bit atomics), true.
/// A current-thread runtime has no other worker: always true there.
///
/// Stable tokio metrics only: a worker's park/unpark count is odd while it is parked, and is
/// published as it parks and as soon as it wakes.
pub(crate) fn worker_wanted() -> bool {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return true;
    };
    let metrics = handle.metrics();
    if metrics.global_queue_depth() > 0 {
        return true;
    }
    let me = tokio::runtime::worker_index();
    #[cfg(tokio_unstable)]
    if me.is_some_and(|w| metrics.worker_local_queue_depth(w) > 0) {
        return true;
    }
    !other_worker_parked(&metrics, me)
}

#[cfg(target_has_atomic = "64")]
fn other_worker_parked(metrics: &tokio::runtime::RuntimeMetrics, me: Option<usize>) -> bool {
    (0..metrics.num_workers())
        .any(|w| Some(w) != me && metrics.worker_park_unpark_count(w) % 2 == 1)
}

#[cfg(not(target_has_atomic = "64"))]
fn other_worker_parked(_: &tokio::runtime::RuntimeMetrics, _: Option<usize>) -> bool {
    false
}

/// When a task that yields at the poll quantum yields next, by its running time since it last
/// returned `Pending`: at the quantum, or one quantum later each time [`may_run_on`] allows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct YieldPoint {
    at: Duration,
}

impl YieldPoint {
    pub(crate) fn new(quantum: Duration) -> Self {
        YieldPoint { at: quantum }
    }

    /// Whether the task, having run `run` since it last returned `Pending`, must yield now.
    /// False while `run` is short of the yield point, or when the point moved on (a quantum
    /// past `run`).
    ///
    /// At a quantum where it runs on, `core` does what applies ([`CoreYield::run_on`]).
    #[inline]
    pub(crate) fn due(&mut self, run: Duration, quantum: Duration, core: CoreYield<'_>) -> bool {
        if run < self.at {
            return false;
        }
        let next = run + quantum;
        if may_run_on(next) {
            self.at = next;
            core.run_on();
            return false;
        }
        true
    }

    /// The task returned `Pending`: the next yield point is one quantum on.
    #[inline]
    pub(crate) fn reset(&mut self, quantum: Duration) {
        self.at = quantum;
    }
}

/// What a quantum's yield does with the thread's CPU, besides handing the worker back to tokio.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CoreYield<'a> {
    /// Nothing: the OS takes the CPU when it will.
    Keep,
    /// Yield it to the OS ([`os_yield`]), counted here: a thread waiting for this core gets it
    /// now rather than when the kernel's time slice ends.
    Os(&'a AtomicU64),
    /// On an idle pool: hand it to a runtime worker queued behind another, if there is one.
    Unstack(&'a Unstack, Duration),
}

impl CoreYield<'_> {
    /// Do it.
    #[inline]
    pub(crate) fn give(self) {
        match self {
            CoreYield::Keep => {}
            CoreYield::Os(count) => os_yield(count),
            CoreYield::Unstack(unstack, quantum) => {
                unstack.at_quantum(quantum);
            }
        }
    }

    /// Whether it does anything.
    pub(crate) fn gives(self) -> bool {
        !matches!(self, CoreYield::Keep)
    }

    /// At a quantum where the task runs on instead of yielding: what still applies (moving a
    /// worker here needs no yield; an OS yield would cost the run-on its point).
    #[inline]
    pub(crate) fn run_on(self) {
        if let CoreYield::Unstack(unstack, quantum) = self {
            unstack.at_quantum(quantum);
        }
    }
}

/// Return `Pending` the way `tokio::task::yield_now` does: the waker is deferred until the
/// worker has run its other ready tasks and polled the I/O driver (what that poll wakes runs
/// first only with the second step, [`requeue_behind_woken`]). Outside a runtime it wakes at
/// once. First `core` says what happens to the thread's CPU (docs/design.md §5, "Yielding to
/// the OS").
#[inline]
pub(crate) fn yield_to_scheduler(cx: &mut Context<'_>, core: CoreYield<'_>) {
    core.give();
    let mut y = std::pin::pin!(tokio::task::yield_now());
    let _ = y.as_mut().poll(cx);
}

/// The second step of a quantum's yield, at the task's first poll after its deferred wake-up:
/// defer once more, without running (the caller returns `Pending`). Returns whether it did.
///
/// Why: a multi-thread worker wakes its deferred tasks right after its non-blocking poll of the
/// I/O driver, on the worker, so the task lands in the LIFO slot, which runs next. The tasks
/// that same driver poll woke (a reader whose socket became readable) are pushed out of the slot
/// to the back of the queue and would wait out the elastic task's whole next poll. Deferring
/// again lets the worker run them first; the task comes back at its next driver poll, and it
/// never sits in a queue another worker steals from (a plain self-wake would put it there, and
/// tasks migrating between workers left a core idle: docs/design.md §5). Only on a multi-thread
/// worker (a current-thread runtime queues a deferred wake-up behind what its driver woke) and,
/// where tokio can tell (`tokio_unstable`), only when the worker's local queue holds a task.
#[cold]
#[inline(never)]
pub(crate) fn requeue_behind_woken(cx: &mut Context<'_>) -> bool {
    if !tasks_queued_behind() {
        return false;
    }
    yield_to_scheduler(cx, CoreYield::Keep);
    true
}

/// Whether the caller runs on a worker of a multi-thread runtime and, with `tokio_unstable`, its
/// local queue holds a task (without it tokio cannot say: assume one does).
#[inline]
fn tasks_queued_behind() -> bool {
    let Some(me) = tokio::runtime::worker_index() else {
        return false;
    };
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return false;
    };
    if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return false;
    }
    #[cfg(tokio_unstable)]
    return handle.metrics().worker_local_queue_depth(me) > 0;
    #[cfg(not(tokio_unstable))]
    {
        let _ = me; // only the local queue's depth needs the worker's index
        true
    }
}

/// Yield the thread's CPU to the OS ([`std::thread::yield_now`]: `sched_yield` on Linux) and
/// count it.
#[inline]
pub(crate) fn os_yield(count: &AtomicU64) {
    std::thread::yield_now();
    count.fetch_add(1, Ordering::Relaxed);
}
