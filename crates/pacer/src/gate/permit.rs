//! [`SetupPermit`]: one admitted setup, its running time charged to the setup class, and the
//! futures it hands out: [`SetupPace`] between chunks, [`SetupRun`] for a setup that is a future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::{self, ThreadId};
use std::time::Duration;

use elastic_cpu_core::SetupGrant;
use pin_project_lite::pin_project;

use super::shared::GateShared;
use crate::grant::long_polls::{is_long, LONG_POLL_MAX};
use crate::grant::quantum::{requeue_behind_woken, yield_to_scheduler, CoreYield, YieldPoint};
use crate::grant::running::Mark;
use crate::grant::thread_class::on_idle_pool;

/// An admitted connection setup. Run the setup's CPU work under it, calling
/// [`pace`](Self::pace) between chunks; drop it when the setup is done (or failed): that
/// settles the CPU it used against the tokens taken at admission, losing none.
///
/// Running time is measured from admission (or the last `pace`) to the next `pace` or the
/// drop, on the thread's CPU clock when that stays on one thread, else the wall clock (as for
/// [`Pacer`](crate::Pacer)); time spent suspended in `pace` is not charged. A setup that
/// runs past the estimate taken at admission is charged the overrun at its next `pace`, so
/// later admissions see the debt at once. A setup that has started is never held back: its
/// client is waiting for it, and stopping it would waste what it already spent.
///
/// Drop it as soon as the setup is done, before serving the connection: a permit kept longer
/// holds one of the places setups run in and is charged its waits (wrong costs for the
/// estimate later admissions use); one dropped before the setup charges the setup nothing.
/// A setup that waits on its client (a handshake's round trips) should run under
/// [`run`](Self::run), which gives the place up while the setup waits: a permit held by hand
/// keeps its place, so a client that never answers holds it until the permit is dropped.
pub struct SetupPermit {
    gate: Arc<GateShared>,
    grant: Option<SetupGrant>,
    used: Duration,
    /// Running time since the permit last yielded.
    since_yield: Duration,
    /// When it yields next, by `since_yield`.
    yield_at: YieldPoint,
    /// Where the current chunk started.
    mark: Option<(Mark, ThreadId)>,
    /// When it was admitted: its first chunk's mark (time in flight is measured from here).
    admitted: Option<Mark>,
}

impl SetupPermit {
    pub(crate) fn new(gate: Arc<GateShared>, grant: SetupGrant) -> SetupPermit {
        let yield_at = YieldPoint::new(gate.quantum);
        let mut permit = SetupPermit {
            gate,
            grant: Some(grant),
            used: Duration::ZERO,
            since_yield: Duration::ZERO,
            yield_at,
            mark: None,
            admitted: None,
        };
        permit.start_chunk();
        permit.admitted = permit.mark.map(|(mark, _)| mark);
        permit
    }

    /// Between chunks of setup work: charges the chunk, and once a poll quantum of running
    /// time has passed since the last yield, yields to the scheduler once so established
    /// traffic runs. Returns at once when the gate's governor is gone.
    pub fn pace(&mut self) -> SetupPace<'_> {
        SetupPace {
            permit: self,
            yielded: false,
            requeued: false,
        }
    }

    /// Run a setup that is a future (a TLS handshake, an authentication exchange) under this
    /// permit, charging each of its polls to the setup class; the permit settles when the
    /// setup is done. Whenever the setup returns `Pending` (it waits on its client, or on I/O)
    /// the permit gives up its place among the setups that may run at once, and takes it back
    /// when the setup is polled again: a client that stalls holds no place an honest client's
    /// setup could run in ([`GateSettings::max_in_flight`] bounds how many may wait).
    ///
    /// It has no time limit of its own: wrap it in
    /// `tokio::time::timeout(gate.setup_timeout(), permit.run(setup))`, as
    /// [`SetupListener`](crate::gate::SetupListener) does.
    ///
    /// [`GateSettings::max_in_flight`]: crate::gate::GateSettings::max_in_flight
    ///
    /// Pacing cannot cut a poll: a library call that runs for milliseconds without yielding
    /// (a key exchange, a password hash) holds its worker for all of it. What the gate bounds
    /// is how many such setups run at once (its holder cap) and, through the bucket, how much
    /// setup CPU runs per second; the poll quantum applies only where the setup itself yields
    /// (use [`pace`](Self::pace) between chunks of a loop you write).
    ///
    /// ```no_run
    /// use elastic_cpu_pacer::gate::ConnectionGate;
    /// use std::time::Duration;
    ///
    /// # async fn handshake() -> std::io::Result<()> { Ok(()) }
    /// # async fn serve(gate: ConnectionGate) -> std::io::Result<()> {
    /// let permit = gate.admit(Duration::from_millis(250)).await.expect("admitted");
    /// // With tokio-rustls: `permit.run(acceptor.accept(stream)).await?`
    /// permit.run(handshake()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn run<F: Future>(self, setup: F) -> SetupRun<F> {
        SetupRun::new(self, setup)
    }

    /// CPU charged to this setup so far (up to the last `pace`, or the last poll of a
    /// [`run`](Self::run)).
    pub fn used(&self) -> Duration {
        self.used
    }

    /// A poll of a [`run`](Self::run) starts: what ran on this thread since admission and was
    /// not charged yet is charged, and a new chunk starts. Time since an admission on another
    /// thread is not: it was the wait for this task to be polled, not the setup running.
    pub(crate) fn start_poll(&mut self) {
        if let Some(grant) = &mut self.grant {
            self.gate.queue.resume_setup(grant);
        }
        if self
            .mark
            .is_some_and(|(_, id)| id == thread::current().id())
        {
            self.end_chunk();
        }
        self.start_chunk();
    }

    /// A poll of a [`run`](Self::run) ended: charge it. Time until the next poll is waiting,
    /// not running: nothing is measured until then. `pending`: the setup waits (on its client,
    /// most often), so it gives up its place until its next poll.
    pub(crate) fn end_poll(&mut self, pending: bool) {
        self.end_chunk();
        if pending {
            if let Some(grant) = &mut self.grant {
                self.gate.queue.wait_on_peer(grant);
            }
        }
    }

    fn start_chunk(&mut self) {
        self.mark = Some((self.gate.running.mark(true), thread::current().id()));
    }

    /// Add the chunk since the mark to `used`; charge any overrun now.
    fn end_chunk(&mut self) {
        let Some((mark, id)) = self.mark.take() else {
            return;
        };
        let (running, wall) = self.gate.running.since(mark);
        // The CPU clock of another thread says nothing about ours.
        let same_thread = id == thread::current().id();
        let took = if same_thread { running } else { wall };
        // Off the pool: a thread-local read, then for most chunks one comparison. A long chunk on
        // an idle-pool thread holds no runtime worker (the OS cuts it), so it is not counted;
        // there a chunk's end is where the pool's thread may look at the runtime's workers (its
        // class from the thread-local, one clock read, a look only when one is due).
        if on_idle_pool() {
            crate::grant::thread_class::unstack_at_quantum(self.gate.quantum);
        } else if is_long(wall, self.gate.quantum) {
            let exact = same_thread && self.gate.running.is_running_time(mark);
            self.gate.long_polls.note(
                wall,
                exact.then_some(running),
                self.gate.quantum,
                LONG_POLL_MAX,
            );
        }
        self.used += took;
        self.since_yield += took;
        if let Some(grant) = &mut self.grant {
            if self.used > grant.allotted() {
                let over = self.used - grant.allotted();
                self.gate.queue.charge(grant, over);
            }
        }
    }
}

impl Drop for SetupPermit {
    fn drop(&mut self) {
        self.end_chunk();
        if let Some(grant) = self.grant.take() {
            let in_flight = self
                .admitted
                .map_or(Duration::ZERO, |m| self.gate.running.wall_since(m));
            self.gate
                .flight
                .record(in_flight, self.used, on_idle_pool());
            self.gate.queue.done(grant, self.used);
        }
    }
}

impl fmt::Debug for SetupPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetupPermit")
            .field("used", &self.used)
            .field("allotted", &self.grant.as_ref().map(SetupGrant::allotted))
            .finish()
    }
}

/// The future [`SetupPermit::pace`] returns.
#[must_use = "pace() does nothing unless awaited"]
#[derive(Debug)]
pub struct SetupPace<'a> {
    permit: &'a mut SetupPermit,
    yielded: bool,
    /// The yield's second step is taken.
    requeued: bool,
}

impl Future for SetupPace<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let permit = &mut *this.permit;
        if this.yielded {
            if !std::mem::replace(&mut this.requeued, true) && requeue_behind_woken(cx) {
                return Poll::Pending;
            }
            // Back from the yield: the next chunk starts now.
            if permit.mark.is_none() {
                permit.start_chunk();
            }
            return Poll::Ready(());
        }
        permit.end_chunk();
        let quantum = permit.gate.quantum;
        if !permit.gate.is_closed()
            && permit
                .yield_at
                .due(permit.since_yield, quantum, CoreYield::Keep)
        {
            permit.since_yield = Duration::ZERO;
            permit.yield_at.reset(quantum);
            this.yielded = true;
            let core = if permit.gate.os_yield {
                CoreYield::Os(&permit.gate.os_yields)
            } else {
                CoreYield::Keep
            };
            yield_to_scheduler(cx, core);
            return Poll::Pending;
        }
        permit.start_chunk();
        Poll::Ready(())
    }
}

impl Drop for SetupPace<'_> {
    fn drop(&mut self) {
        // Dropped while yielded: the permit's next chunk starts now, so nothing is lost.
        if self.permit.mark.is_none() {
            self.permit.start_chunk();
        }
    }
}

pin_project! {
    /// The future [`SetupPermit::run`] returns: the setup future's output, once it is done.
    ///
    /// Every poll of the setup is charged to the setup class as it ends (on the thread's CPU
    /// clock), so the gate's bucket sees the setup's real cost, long library calls included,
    /// and an overrun becomes debt at once. Time the setup spends waiting (for the peer, for
    /// I/O) is not charged. The permit is dropped, settling the grant, when the setup
    /// finishes or this future is dropped.
    #[must_use = "a setup run does nothing unless awaited"]
    pub struct SetupRun<F> {
        // Dropped first: the setup is settled before the setup future (and the connection it
        // holds) is dropped, so a peer that sees its connection end sees the gate settled.
        permit: Option<SetupPermit>,
        #[pin]
        setup: F,
    }
}

impl<F> SetupRun<F> {
    pub(crate) fn new(permit: SetupPermit, setup: F) -> SetupRun<F> {
        SetupRun {
            setup,
            permit: Some(permit),
        }
    }
}

impl<F: Future> Future for SetupRun<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let Some(permit) = this.permit.as_mut() else {
            // Polled after it completed: the setup future decides what that means.
            return this.setup.poll(cx);
        };
        permit.start_poll();
        let out = this.setup.poll(cx);
        permit.end_poll(out.is_pending());
        if out.is_ready() {
            // Settle now, not when the caller gets round to dropping this future.
            *this.permit = None;
        }
        out
    }
}

impl<F> fmt::Debug for SetupRun<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetupRun")
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}
