//! Decide: the step controller, the no-burst CPU token bucket, the work queue and the handle of
//! elastic CPU admission control (docs/design.md §4, after CockroachDB's elastic CPU limiter).
//!
//! No tokio, no threads, no sleeping: every clock is injected ([`Clock`]), so every behaviour is
//! testable to the nanosecond on a [`ManualClock`].
//!
//! ```
//! use elastic_cpu_core::{
//!     rate_for, Admit, ControllerConfig, ElasticHandle, ManualClock, StepController, WorkQueue,
//! };
//! use std::task::{Poll, Waker};
//! use std::time::Duration;
//!
//! let clock = ManualClock::new();
//! let mut controller = StepController::new(ControllerConfig::default()).unwrap();
//! let cpus = 2.0;
//! // 0.05 × 2 CPUs = 100 ms of CPU per second, and a full bucket to start.
//! let queue = WorkQueue::new(clock.clone(), rate_for(controller.share(), cpus));
//!
//! // Elastic work takes a 100 ms slice: granted at once.
//! let Admit::Granted(grant) = queue.admit(Duration::from_millis(100)) else { unreachable!() };
//! let mut handle = ElasticHandle::new(grant, clock.clone());
//! clock.advance(Duration::from_millis(100));
//! while !handle.over_limit().0 {}
//!
//! // A second request waits: the bucket is empty.
//! let Admit::Queued(mut ticket) = queue.admit(Duration::from_millis(100)) else { unreachable!() };
//! assert!(ticket.poll_grant(Waker::noop()).is_pending());
//!
//! // Settle the first slice; the governor ticks: healthy latency and work waiting, so the
//! // share steps up, and refilled tokens go to the waiter.
//! let (grant, used) = handle.into_grant();
//! queue.done(grant, used);
//! clock.advance(Duration::from_millis(100));
//! let had_waiters = queue.tick();
//! let share = controller.tick(Some(Duration::from_micros(300)), Duration::from_millis(100), had_waiters);
//! queue.set_rate(rate_for(share, cpus));
//! let Poll::Ready(Ok(grant)) = ticket.poll_grant(Waker::noop()) else { unreachable!() };
//! queue.done(grant, Duration::from_millis(40));
//! assert!(share > 0.05);
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod bucket;
mod clock;
mod config;
mod controller;
mod crowd;
pub mod decide;
mod error;
mod fast;
mod gate;
mod handle;
mod line;
mod queue;
mod recent_low;
mod retry;
mod ring;
mod shared;
mod sync;
mod tally;

pub use bucket::{rate_for, TokenBucket, MAX_RATE};
pub use clock::{Clock, ManualClock, MonotonicClock, ProcessCpuClock, ThreadCpuClock};
pub use config::ControllerConfig;
pub use controller::StepController;
pub use decide::split::{split_share, Want, FLOORS_AT_MOST};
pub use error::SettingError;
pub use gate::{
    GateAdmit, GateConfig, GateQueue, GateStats, GateTicket, QueueOrder, RejectKind, Rejection,
    SetupGrant,
};
pub use handle::ElasticHandle;
pub use queue::{
    Admit, Closed, Grant, QueueSnapshot, TickLoad, Ticket, WorkQueue, MAX_SLICE, MIN_SLICE,
};
pub use retry::{Attempt, RetryBudget};
pub use ring::{EventRing, ReadSince, Words};
