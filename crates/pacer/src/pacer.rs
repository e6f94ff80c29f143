//! `Pacer`: pacing for one long loop of elastic work.

use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread, ThreadId};

use std::time::Duration;

use elastic_cpu_core::{Admit, Clock, ElasticHandle, Grant, ThreadCpuClock, Ticket};

use crate::paced::yield_to_scheduler;
use crate::running::{RunningClock, RunningTime, LONG_RUN};
use crate::shared::{QueueClock, Shared};

enum State {
    Idle,
    Waiting(Ticket<QueueClock>),
    /// Running a stretch of the grant: until the quantum or the rest of the slice is used.
    Running(ElasticHandle<RunningClock>),
    /// Yielded at the quantum with part of the grant left; its running time is not charged
    /// while the task waits in the run queue.
    Paused(Grant),
    Unpaced,
}

/// Paces one loop of elastic work: call [`pace`](Pacer::pace) every iteration.
///
/// Inside a grant, `pace()` costs a counter decrement: the running time is read only every
/// so many iterations (the interval doubles while checks come less than 1 ms of running time
/// apart), never per iteration. When the poll quantum is spent it yields to the scheduler;
/// when the slice is spent it settles it and waits for a new grant. Dropping the pacer settles
/// what it holds.
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
    shared: Arc<Shared>,
    state: State,
    /// Running time charged to the current grant by the stretches already finished.
    used: Duration,
    /// Thread CPU time and thread at the start of the running stretch (adaptive timing): the
    /// stretch is charged its CPU time if it ends on the same thread.
    stretch_cpu: Option<(Duration, ThreadId)>,
}

impl Pacer {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Pacer {
            shared,
            state: State::Idle,
            used: Duration::ZERO,
            stretch_cpu: None,
        }
    }

    /// Wait, if needed, until this loop may run another iteration.
    #[inline]
    pub fn pace(&mut self) -> Pace<'_> {
        Pace { pacer: self }
    }

    /// [`pace`](Self::pace) for loops on `spawn_blocking` or plain threads: blocks the thread
    /// while it waits for a grant. Never call it on a runtime worker.
    pub fn pace_blocking(&mut self) {
        if self.fast_path() {
            return;
        }
        // Off the runtime the OS preempts us: no need to yield at the quantum, only to
        // settle the slice, which the slow path has done.
        let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
        let mut cx = Context::from_waker(&waker);
        while self.acquire(&mut cx, self.shared.slice).is_pending() {
            thread::park();
        }
    }

    /// True once the governor has shut down and this pacer no longer waits for grants.
    pub fn is_unpaced(&self) -> bool {
        matches!(self.state, State::Unpaced)
    }

    /// Within the stretch: go on. Otherwise end the stretch (pausing the grant, or settling it
    /// when the slice is spent) and say no.
    #[inline]
    fn fast_path(&mut self) -> bool {
        match &mut self.state {
            State::Running(h) => {
                if !h.over_limit().0 {
                    return true;
                }
                self.end_stretch();
                false
            }
            State::Unpaced => true,
            _ => false,
        }
    }

    /// Hold a grant again (resume a paused one, admit, or wait), running at most `stretch`.
    fn acquire(&mut self, cx: &mut Context<'_>, stretch: Duration) -> Poll<()> {
        loop {
            match mem::replace(&mut self.state, State::Idle) {
                s @ (State::Running(_) | State::Unpaced) => {
                    self.state = s;
                    return Poll::Ready(());
                }
                State::Paused(g) if self.shared.braked() => {
                    // The backlog brake: give the grant back, wait in line for the next one.
                    self.shared.queue.done(g, mem::take(&mut self.used));
                }
                State::Paused(g) => self.state = self.running(g, stretch),
                State::Idle => {
                    self.used = Duration::ZERO;
                    self.state = match self.shared.queue.admit(self.shared.slice) {
                        Admit::Granted(g) => self.running(g, stretch),
                        Admit::Queued(t) => State::Waiting(t),
                    }
                }
                State::Waiting(mut t) => match t.poll_grant(cx.waker()) {
                    Poll::Pending => {
                        self.state = State::Waiting(t);
                        return Poll::Pending;
                    }
                    Poll::Ready(Ok(g)) => self.state = self.running(g, stretch),
                    Poll::Ready(Err(_closed)) => self.state = State::Unpaced,
                },
            }
        }
    }

    fn running(&mut self, grant: Grant, stretch: Duration) -> State {
        let stretch = stretch.min(grant.allotted().saturating_sub(self.used));
        self.stretch_cpu = (matches!(self.shared.running, RunningTime::Adaptive)
            && stretch >= LONG_RUN)
            .then(|| (ThreadCpuClock.now(), thread::current().id()));
        State::Running(ElasticHandle::with_deadline(
            grant,
            self.shared.running.clock(),
            stretch,
        ))
    }

    /// The stretch is over: pause the grant, or settle it if the slice is spent.
    fn end_stretch(&mut self) {
        // Only a running stretch ends here: taking any other state out would drop a paused
        // grant (or a ticket) on the floor.
        if !matches!(self.state, State::Running(_)) {
            return;
        }
        if let State::Running(h) = mem::replace(&mut self.state, State::Idle) {
            let (grant, wall) = h.into_grant();
            let used = match self.stretch_cpu.take() {
                Some((start, id)) if id == thread::current().id() => {
                    ThreadCpuClock.now().saturating_sub(start)
                }
                // An await inside the loop moved us to another thread: its CPU clock says
                // nothing about ours, fall back to the wall clock.
                _ => wall,
            };
            self.used += used;
            if self.used >= grant.allotted() {
                self.shared.queue.done(grant, mem::take(&mut self.used));
            } else {
                self.state = State::Paused(grant);
            }
        }
    }

    fn settle(&mut self) {
        self.end_stretch();
        if let State::Paused(grant) = mem::replace(&mut self.state, State::Idle) {
            self.shared.queue.done(grant, mem::take(&mut self.used));
        }
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        self.settle();
    }
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Idle => "idle",
            State::Waiting(_) => "waiting",
            State::Running(_) => "running",
            State::Paused(_) => "paused",
            State::Unpaced => "unpaced",
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
        match &pacer.state {
            State::Running(_) | State::Unpaced => {
                if pacer.fast_path() {
                    return Poll::Ready(());
                }
                // Quantum (or slice) spent: yield once, so the foreground tasks queued behind
                // this worker (and the I/O driver) run. The grant is paused meanwhile, so time
                // spent waiting in the run queue is never charged as running time.
                yield_to_scheduler(cx);
                Poll::Pending
            }
            State::Idle | State::Waiting(_) | State::Paused(_) => {
                let quantum = pacer.shared.quantum;
                pacer.acquire(cx, quantum)
            }
        }
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
