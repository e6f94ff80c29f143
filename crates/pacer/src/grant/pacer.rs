//! `Pacer`: pacing for one long loop of elastic work.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Duration;

use elastic_cpu_probe::{current_tid, ThreadRegistration, ThreadRole};

use super::class_state::ClassState;
use super::quantum::{requeue_behind_woken, yield_to_scheduler};
use crate::grant::{GrantState, Phase, Step};

/// Paces one loop of elastic work: call [`pace`](Pacer::pace) every iteration.
///
/// Inside a grant, `pace()` costs a counter decrement: the running time is read only every
/// so many iterations (the interval doubles while checks come less than 1 ms of running time
/// apart), never per iteration. When the poll quantum is spent it yields to the scheduler
/// (unless another worker of the runtime is parked and nothing is queued for it: then it runs
/// on, up to 400 µs between yields); when the slice is spent it settles it and waits for a new
/// grant. Dropping the pacer settles what it holds: drop it when its loop ends, as until then
/// it holds its grant and a place under the holder cap (another is lent to work in line once
/// a tick passes in which no holder ran).
///
/// Running time is the thread's CPU time over each stretch between yields (the wall time if the
/// stretch moved threads or timing is set to the wall clock), so an `.await` on other things
/// inside the loop may count as used.
///
/// ```
/// let elastic = elastic_cpu_pacer::Elastic::builder().build().unwrap();
/// let rt = elastic.runtime(tokio::runtime::Builder::new_current_thread()).build().unwrap();
/// let mut pacer = elastic.pacer();
/// let sum = rt.block_on(async move {
///     let mut sum = 0u64;
///     for row in 0..10_000u64 {
///         pacer.pace().await;
///         sum += row;
///     }
///     sum
/// });
/// assert_eq!(sum, 49_995_000);
/// ```
pub struct Pacer {
    grant: GrantState,
    /// The thread `pace_blocking` last ran on, registered as elastic for the run-queue signal
    /// (its waits for a CPU are elastic work's, not the foreground's).
    thread: Option<ThreadRegistration>,
    /// `pace_blocking`'s waker: it unparks the thread it was made on (kept, so that a loop
    /// ending a stretch every quantum does not allocate one each time).
    parker: Option<(thread::ThreadId, Waker)>,
    /// It yielded at the quantum: its next poll back takes the yield's second step (kept
    /// here, not in `Pace`, so that the per-iteration future stays one pointer).
    requeue: bool,
}

impl Pacer {
    pub(crate) fn new(shared: Arc<ClassState>) -> Self {
        Pacer {
            grant: GrantState::new(shared),
            thread: None,
            parker: None,
            requeue: false,
        }
    }

    /// Wait, if needed, until this loop may run another iteration.
    #[inline]
    pub fn pace(&mut self) -> Pace<'_> {
        Pace { pacer: self }
    }

    /// [`pace`](Self::pace) for loops on `spawn_blocking` or plain threads: blocks the thread
    /// while it waits for a grant. Never call it on a runtime worker. With
    /// [`os_yield`](crate::settings::Enforcement::os_yield) (the default) the thread yields its CPU to
    /// the OS once per poll quantum of running time, so threads waiting for that core get it.
    pub fn pace_blocking(&mut self) {
        let step = self.grant.keep_running();
        if step == Step::Go {
            return;
        }
        self.note_thread();
        // Off the runtime no task waits behind us, but other threads may wait for the core:
        // with `os_yield` a stretch is a quantum and ends in a yield of the core (on an idle
        // pool: a look at the runtime's workers), as on a worker; without, it is the
        // whole slice (the OS preempts us when it will).
        let shared = self.grant.shared();
        let core = shared.core_yield();
        let stretch = if core.gives() {
            shared.quantum
        } else {
            shared.slice
        };
        if step == Step::Ended {
            core.give();
        }
        let waker = self.parker();
        let mut cx = Context::from_waker(&waker);
        while self.acquire(&mut cx, stretch).is_pending() {
            thread::park();
        }
    }

    /// A waker that unparks the calling thread.
    fn parker(&mut self) -> Waker {
        let me = thread::current();
        match &self.parker {
            Some((id, waker)) if *id == me.id() => waker.clone(),
            _ => {
                let id = me.id();
                let waker = Waker::from(Arc::new(ThreadWaker(me)));
                self.parker = Some((id, waker.clone()));
                waker
            }
        }
    }

    /// Registers the calling thread as elastic (once per thread: a cached thread id compared).
    fn note_thread(&mut self) {
        let Ok(tid) = current_tid() else {
            return;
        };
        if self.thread.as_ref().is_some_and(|t| t.tid() == tid) {
            return;
        }
        // Put the old thread's role back before registering this one.
        self.thread = None;
        self.thread = self
            .grant
            .shared()
            .threads
            .register_current(ThreadRole::Elastic)
            .ok();
    }

    /// True once the governor has shut down and this pacer no longer waits for grants.
    pub fn is_unpaced(&self) -> bool {
        self.grant.phase() == Phase::Unpaced
    }

    /// Hold a grant again (resume a paused one, admit, or wait), running at most `stretch`.
    fn acquire(&mut self, cx: &mut Context<'_>, stretch: Duration) -> Poll<()> {
        if self.grant.poll_acquire(cx).is_pending() {
            return Poll::Pending;
        }
        self.grant.start_stretch(stretch);
        Poll::Ready(())
    }
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.grant.phase() {
            Phase::Idle => "idle",
            Phase::Waiting => "waiting",
            Phase::Running => "running",
            Phase::Held => "paused",
            Phase::Unpaced => "unpaced",
        };
        f.debug_struct("Pacer").field("state", &state).finish()
    }
}

/// The future returned by [`Pacer::pace`].
#[must_use = "pace() does nothing unless awaited"]
#[derive(Debug)]
pub struct Pace<'a> {
    pacer: &'a mut Pacer,
}

impl Future for Pace<'_> {
    type Output = ();

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let pacer = &mut *self.get_mut().pacer;
        match pacer.grant.keep_running() {
            Step::Go => Poll::Ready(()),
            step => pacer.poll_stretch_end(step, cx),
        }
    }
}

impl Pacer {
    /// [`Pace::poll`] past its fast path, out of line so that the per-iteration path stays a
    /// decrement and a branch in the caller's loop.
    #[inline(never)]
    fn poll_stretch_end(&mut self, step: Step, cx: &mut Context<'_>) -> Poll<()> {
        if let Step::Ended = step {
            // Quantum (or slice) spent: yield, so the foreground tasks queued behind this
            // worker (and the I/O driver) run. The grant is paused meanwhile, so time spent
            // waiting in the run queue is never charged as running time.
            yield_to_scheduler(cx, self.grant.shared().core_yield());
            self.requeue = true;
            return Poll::Pending;
        }
        // Back from the yield (the grant is paused): its second step.
        if std::mem::take(&mut self.requeue) && requeue_behind_woken(cx) {
            return Poll::Pending;
        }
        let quantum = self.grant.shared().quantum;
        self.acquire(cx, quantum)
    }
}

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}
