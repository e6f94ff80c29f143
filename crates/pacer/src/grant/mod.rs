//! The grant state machine that `Paced`, `PacedStream` and `Pacer` all run:
//!
//! ```text
//!          admit: tokens              settle: slice spent, brake, drop
//!   Idle ───────────────────> Held ──────────────────────────────────> Idle
//!    │                         ↑ │ ↑
//!    │ admit: queued   granted │ │ │ stretch ended: quantum spent
//!    v                         │ v │
//!   Waiting ───────────────────┘ Running ── settle: slice spent, drop ──> Idle
//!    │ queue closed               (Pacer only)
//!    v
//!   Unpaced (also once the adapter has finished)
//! ```
//!
//! While the classes of an `Elastic` split its share, a new grant also takes a slot (module
//! `slots`) before `Held` lets the adapter run; it goes back with the grant.
//!
//! A grant lives only in `Held` or `Running`, and the only way out of those two states is
//! [`GrantState::settle`], which hands the grant to [`WorkQueue::done`] with the running time
//! charged to it; dropping the machine settles. So no grant is dropped unsettled, and every
//! adapter gives back to the brake, settles a spent slice and settles on drop the same way.
//!
//! [`WorkQueue::done`]: elastic_cpu_core::WorkQueue::done

mod charged;
pub(crate) mod class_queue;
pub(crate) mod class_state;
pub(crate) mod long_polls;
mod nesting;
pub(crate) mod paced;
pub(crate) mod pacer;
pub(crate) mod quantum;
pub(crate) mod running;
mod slots;

cfg_idle_pool! {
    pub(crate) mod thread_class;
    mod unstack;
    pub(crate) use self::unstack::Unstack;
}
cfg_not_idle_pool! {
    pub(crate) mod no_idle_pool;
    pub(crate) use self::no_idle_pool as thread_class;
    pub(crate) use self::no_idle_pool::Unstack;
}

use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::{self, ThreadId};
use std::time::Duration;

use elastic_cpu_core::{Admit, Clock, ElasticHandle, Grant, ThreadCpuClock, Ticket};

use self::class_state::{ClassState, QueueClock};
use self::quantum::{may_run_on, CoreYield};
use self::running::{RunningClock, RunningTime, LONG_RUN};
use self::slots::SlotClaim;

/// The grant an adapter holds, and the running time charged to it.
pub(crate) struct GrantState {
    shared: Arc<ClassState>,
    state: State,
    /// Running time charged to the current grant (stretches and polls already finished).
    used: Duration,
    /// The held grant has yet to see whether it needs a slot.
    new_grant: bool,
    /// The slot held with the grant, or the wait for it.
    slot: Option<SlotClaim>,
}

enum State {
    /// Nothing held: admit before running.
    Idle,
    /// Queued for a grant; the ticket holds our waker.
    Waiting(Ticket<QueueClock>),
    /// A grant, partly used. `Paced` runs its polls in this state (timing each poll itself);
    /// for a `Pacer` it is paused (yielded at the quantum): the task's time in the run queue is
    /// not charged.
    Held(Grant),
    /// A `Pacer` running a stretch of its grant: until the quantum or the rest of the slice is
    /// used.
    Running(Stretch),
    /// The governor is gone (run without pacing rather than hang), or the adapter finished.
    Unpaced,
}

/// Where a [`Pacer`](crate::Pacer) is after [`GrantState::keep_running`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Within the stretch (or unpaced): go on.
    Go,
    /// The stretch just ended (the grant is paused, or settled if the slice is spent): yield.
    Ended,
    /// Not running: acquire first.
    Stopped,
}

/// A state's name, for `Debug`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Idle,
    Waiting,
    Held,
    Running,
    Unpaced,
}

impl GrantState {
    pub(crate) fn new(shared: Arc<ClassState>) -> Self {
        GrantState {
            shared,
            state: State::Idle,
            used: Duration::ZERO,
            new_grant: false,
            slot: None,
        }
    }

    #[inline]
    pub(crate) fn shared(&self) -> &ClassState {
        &self.shared
    }

    /// Ready once a grant is held (or running, or unpaced); otherwise queued with `cx`'s
    /// waker. A held grant goes back first if the backlog brake is on: the adapter then waits
    /// in line for the next one.
    #[inline]
    pub(crate) fn poll_acquire(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match &mut self.state {
                State::Held(_) if self.shared.braked() => self.settle(),
                State::Held(_) if self.new_grant => {
                    if !self.poll_slot(cx) {
                        return Poll::Pending;
                    }
                    self.new_grant = false;
                }
                State::Held(_) | State::Running(_) | State::Unpaced => return Poll::Ready(()),
                State::Idle => {
                    // On an idle pool's thread, work paced by its `Elastic` is idle work, for good
                    // (module `thread_class`). Checked at each admission until then: a future
                    // `Elastic::spawn` moves to the pool carries the adapters it drives.
                    if !self.shared.is_idle() {
                        if let Some(idle) = self::thread_class::class_for(&self.shared) {
                            self.shared = idle;
                        }
                    }
                    // Paced work of the same `Elastic` around this adapter hands pacing over.
                    nesting::take_over(self.shared.root());
                    self.state = match self.shared.queue.admit(self.shared.asks()) {
                        Admit::Granted(g) => State::Held(g),
                        Admit::Queued(t) => State::Waiting(t),
                    };
                    self.used = Duration::ZERO;
                    self.new_grant = true;
                }
                State::Waiting(ticket) => match ticket.poll_grant(cx.waker()) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(g)) => self.state = State::Held(g),
                    Poll::Ready(Err(_closed)) => self.state = State::Unpaced,
                },
            }
        }
    }

    /// A slot for the new grant, if the classes take them now: true once it has one (or needs
    /// none); false while it waits, with `cx`'s waker in line.
    fn poll_slot(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(slots) = self.shared.slots.as_deref() else {
            return true;
        };
        loop {
            match &mut self.slot {
                Some(SlotClaim::Held(_)) => return true,
                Some(SlotClaim::Waiting(acquire)) => match acquire.as_mut().poll(cx) {
                    Poll::Ready(Ok(permit)) => self.slot = Some(SlotClaim::Held(permit)),
                    // Closed when the governor stopped: the grant runs without.
                    Poll::Ready(Err(_)) => {
                        self.slot = None;
                        return true;
                    }
                    Poll::Pending => return false,
                },
                None if slots.on() => self.slot = Some(slots.take()),
                None => return true,
            }
        }
    }

    /// Charge `took` of running time to the held grant; settle it once the slice is spent (the
    /// adapter takes a new grant before it runs again).
    #[inline]
    pub(crate) fn charge(&mut self, took: Duration) {
        self.used += took;
        self.shared.charged.add(took);
        if let State::Held(g) = &self.state {
            if self.used >= g.allotted() {
                self.settle();
            }
        }
    }

    /// Whether charging `took` spends the held grant (it would settle).
    #[inline]
    pub(crate) fn spends(&self, took: Duration) -> bool {
        matches!(&self.state, State::Held(g) if self.used + took >= g.allotted())
    }

    /// Take back up to `over` of what was charged to the held grant (a stretch's wall-clock
    /// charges found to exceed its CPU time). If the grant settled meanwhile the next one
    /// gets it back: the bucket sees the same total. Nothing once idle.
    pub(crate) fn refund(&mut self, over: Duration) {
        if let State::Held(_) = self.state {
            let back = over.min(self.used);
            if back.is_zero() {
                return;
            }
            self.used -= back;
            self.shared.charged.sub(back);
        }
    }

    /// The one way out of `Held` and `Running`: give back what the grant did not use, or charge
    /// what it overran. Any other state is left as it is.
    pub(crate) fn settle(&mut self) {
        let grant = match mem::replace(&mut self.state, State::Idle) {
            State::Held(grant) => grant,
            State::Running(stretch) => {
                let (grant, used, _, _) = stretch.end();
                self.used += used;
                self.shared.charged.add(used);
                grant
            }
            other => {
                self.state = other;
                return;
            }
        };
        self.shared.queue.done(grant, mem::take(&mut self.used));
        self.slot = None;
        self.new_grant = false;
    }

    /// Settle for good: the adapter is finished. A finished future or stream polled again must
    /// not take a new grant it would hold until dropped.
    pub(crate) fn finish(&mut self) {
        self.settle();
        self.state = State::Unpaced;
    }

    /// `Pacer`: run a stretch of the held grant, at most `stretch` of running time (and never
    /// past the slice).
    pub(crate) fn start_stretch(&mut self, stretch: Duration) {
        if let State::Held(g) = &self.state {
            let room = g.allotted().saturating_sub(self.used);
            if let State::Held(grant) = mem::replace(&mut self.state, State::Idle) {
                self.state = State::Running(Stretch::start(
                    grant,
                    &self.shared.running,
                    stretch.min(room),
                    room,
                ));
            }
        }
    }

    /// `Pacer`, every iteration: go on within the stretch (a counter decrement, a clock read
    /// now and then); at its end, run on for another quantum if no one wants the worker (see
    /// `quantum`), else pause the grant (or settle it if the slice is spent).
    #[inline]
    pub(crate) fn keep_running(&mut self) -> Step {
        if let State::Running(stretch) = &mut self.state {
            if !stretch.handle.over_limit().0 {
                return Step::Go;
            }
        }
        self.stretch_checked()
    }

    /// [`keep_running`](Self::keep_running) past its fast path, out of line so that the
    /// per-iteration path stays a decrement and a branch in the caller's loop.
    #[inline(never)]
    fn stretch_checked(&mut self) -> Step {
        match &mut self.state {
            State::Running(stretch) => {
                if !self.shared.braked()
                    && stretch.run_on(self.shared.quantum, self.shared.core_yield())
                {
                    return Step::Go;
                }
                self.end_stretch();
                Step::Ended
            }
            State::Unpaced => Step::Go,
            _ => Step::Stopped,
        }
    }

    /// `Running` → `Held`, charging what the stretch ran.
    fn end_stretch(&mut self) {
        if let State::Running(_) = &self.state {
            if let State::Running(stretch) = mem::replace(&mut self.state, State::Idle) {
                let (grant, used, overrun, cpu_overrun) = stretch.end();
                // An iteration that overran the stretch by quanta held its worker that long.
                self.shared.note_run(overrun, cpu_overrun);
                self.state = State::Held(grant);
                self.charge(used);
            }
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        match self.state {
            State::Idle => Phase::Idle,
            State::Waiting(_) => Phase::Waiting,
            State::Held(_) => Phase::Held,
            State::Running(_) => Phase::Running,
            State::Unpaced => Phase::Unpaced,
        }
    }
}

impl Drop for GrantState {
    fn drop(&mut self) {
        // A queued ticket cancels itself when dropped (returning a grant it already received).
        self.settle();
    }
}

/// One stretch of a `Pacer`'s grant: the amortized over-limit check, and where the thread's
/// CPU clock stood at its start.
struct Stretch {
    handle: ElasticHandle<RunningClock>,
    /// Thread CPU time and thread at the start (adaptive timing, long stretches): the stretch
    /// is charged its CPU time if it ends on the same thread.
    cpu: Option<(Duration, ThreadId)>,
    /// The handle's clock measures running time (not `Adaptive`'s wall clock, which may
    /// include time the OS ran another thread).
    exact: bool,
    /// What was left of the grant at the start: how far the deadline may move on.
    room: Duration,
}

impl Stretch {
    fn start(grant: Grant, running: &RunningTime, stretch: Duration, room: Duration) -> Stretch {
        let cpu = (matches!(running, RunningTime::Adaptive) && stretch >= LONG_RUN)
            .then(|| (ThreadCpuClock.now(), thread::current().id()));
        Stretch {
            handle: ElasticHandle::with_deadline(grant, running.clock(), stretch),
            cpu,
            exact: !matches!(running, RunningTime::Adaptive),
            room,
        }
    }

    /// The deadline is reached: move it one `quantum` on (never past the grant) if the task
    /// may run on without yielding. The stretch started at the task's last yield, so its
    /// deadline is the running time since then. Where it runs on, `core` does what applies
    /// ([`CoreYield::run_on`]).
    #[inline]
    fn run_on(&mut self, quantum: Duration, core: CoreYield<'_>) -> bool {
        let at = self.handle.deadline();
        if at >= self.room {
            return false; // the slice is spent: settle
        }
        let next = (at + quantum).min(self.room);
        if !may_run_on(next) {
            return false;
        }
        self.handle.set_deadline(next);
        core.run_on();
        true
    }

    /// The grant, the running time the stretch used, how far it ran past its deadline, and
    /// how far in running time where that was measured exactly.
    fn end(self) -> (Grant, Duration, Duration, Option<Duration>) {
        let deadline = self.handle.deadline();
        let (grant, wall) = self.handle.into_grant();
        let (used, exact) = match self.cpu {
            Some((start, id)) if id == thread::current().id() => {
                (ThreadCpuClock.now().saturating_sub(start), true)
            }
            // An await inside the loop moved us to another thread: its CPU clock says nothing
            // about ours, fall back to the wall clock.
            _ => (wall, self.exact),
        };
        let over = wall.saturating_sub(deadline);
        (
            grant,
            used,
            over,
            exact.then(|| used.saturating_sub(deadline)),
        )
    }
}
