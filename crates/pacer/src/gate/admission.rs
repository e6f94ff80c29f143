//! [`Admission`]: the future [`ConnectionGate::admit`](crate::gate::ConnectionGate::admit) returns.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use elastic_cpu_core::{GateAdmit, GateTicket};

use super::permit::SetupPermit;
use super::rejected::Rejected;
use super::shared::GateShared;
use crate::grant::class_state::QueueClock;
use crate::trace;

/// One connection attempt waiting for admission: resolves to a [`SetupPermit`] or
/// [`Rejected`]. It does nothing until first polled. Dropping it cancels: a queued attempt
/// leaves the queue, and a grant it received but did not collect goes back.
#[must_use = "an admission does nothing unless awaited"]
pub struct Admission {
    gate: Arc<GateShared>,
    deadline: Duration,
    state: State,
}

enum State {
    Start,
    /// Queued, since this time on the gate's clock.
    Waiting(GateTicket<QueueClock>, Duration),
    Done,
}

impl Admission {
    pub(crate) fn new(gate: Arc<GateShared>, deadline: Duration) -> Admission {
        Admission {
            gate,
            deadline,
            state: State::Start,
        }
    }
}

impl Future for Admission {
    type Output = Result<SetupPermit, Rejected>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let outcome = match &mut this.state {
            State::Start => match this.gate.queue.admit(this.deadline, cx.waker()) {
                GateAdmit::Admitted(grant) => Ok(grant),
                GateAdmit::Rejected(r) => Err(r),
                GateAdmit::Queued(ticket) => {
                    // The queue's clock is read for the wait's event only.
                    #[cfg(feature = "tracing")]
                    let since = this.gate.queue.now();
                    #[cfg(not(feature = "tracing"))]
                    let since = Duration::ZERO;
                    this.state = State::Waiting(ticket, since);
                    return Poll::Pending;
                }
            },
            State::Waiting(ticket, since) => match ticket.poll(cx.waker()) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => {
                    #[cfg(feature = "tracing")]
                    if r.is_ok() {
                        let waited = this.gate.queue.now().saturating_sub(*since);
                        trace::admission_waited(this.gate.id, waited);
                    }
                    #[cfg(not(feature = "tracing"))]
                    let _ = since;
                    r
                }
            },
            State::Done => {
                return Poll::Ready(Err(Rejected::from_core(elastic_cpu_core::Rejection {
                    kind: elastic_cpu_core::RejectKind::Closed,
                    retry_base: Duration::ZERO,
                })))
            }
        };
        this.state = State::Done;
        Poll::Ready(match outcome {
            Ok(grant) => Ok(SetupPermit::new(this.gate.clone(), grant)),
            Err(r) => {
                let rejected = Rejected::from_core(r);
                trace::refused(this.gate.id, rejected.reason(), rejected.retry_after());
                Err(rejected)
            }
        })
    }
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Start => "start",
            State::Waiting(..) => "waiting",
            State::Done => "done",
        };
        f.debug_struct("Admission")
            .field("deadline", &self.deadline)
            .field("state", &state)
            .finish()
    }
}
