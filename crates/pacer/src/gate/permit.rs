//! [`SetupPermit`]: one admitted setup, its running time charged to the setup class.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread::{self, ThreadId};
use std::time::Duration;

use elastic_cpu_core::SetupGrant;

use super::shared::GateShared;
use crate::quantum::{requeue_behind_woken, yield_to_scheduler, YieldPoint};
use crate::running::Mark;

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
        };
        permit.start_chunk();
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

    /// CPU charged to this setup so far (up to the last `pace`).
    pub fn used(&self) -> Duration {
        self.used
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
        let took = if id == thread::current().id() {
            running
        } else {
            wall
        };
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
        if !permit.gate.is_closed() && permit.yield_at.due(permit.since_yield, quantum) {
            permit.since_yield = Duration::ZERO;
            permit.yield_at.reset(quantum);
            this.yielded = true;
            yield_to_scheduler(cx, permit.gate.os_yield.then_some(&permit.gate.os_yields));
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
