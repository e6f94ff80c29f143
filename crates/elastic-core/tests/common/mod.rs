//! What the core's tests share: a waker that counts its wakes, a clock that counts its reads,
//! the work queue's admissions taken apart and its ledger check, and a gate on a manual clock.
// Each test uses its own part of this.
#![allow(dead_code)]

use std::fmt::Debug;
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};
use std::time::Duration;

// Under loom the wakes are counted on a loom atomic, so the models see them.
#[cfg(loom)]
use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicUsize, Ordering};

use elastic_cpu_core::{
    Admit, Clock, GateAdmit, GateConfig, GateQueue, GateTicket, Grant, ManualClock, QueueOrder,
    QueueSnapshot, Ticket, WorkQueue,
};

/// A waker that counts how often it was woken.
pub struct WakeCounter(AtomicUsize);

impl Wake for WakeCounter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A counting waker, and the [`Waker`] that counts into it.
pub fn waker() -> (Arc<WakeCounter>, Waker) {
    let c = Arc::new(WakeCounter(AtomicUsize::new(0)));
    (c.clone(), Waker::from(c))
}

/// How often `c` was woken.
pub fn wakes(c: &WakeCounter) -> usize {
    c.0.load(Ordering::SeqCst)
}

/// A manual clock that counts its reads (a plain atomic even under loom, as the clock's own).
#[derive(Clone, Default)]
pub struct CountingClock {
    pub time: ManualClock,
    reads: Arc<std::sync::atomic::AtomicU64>,
}

impl Clock for CountingClock {
    fn now(&self) -> Duration {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.time.now()
    }
}

impl CountingClock {
    /// Reads so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The grant of an admission that must be granted at once.
pub fn granted<C: Clock>(a: Admit<C>) -> Grant {
    match a {
        Admit::Granted(g) => g,
        Admit::Queued(_) => panic!("queued, expected a grant"),
    }
}

/// The ticket of an admission that must queue.
pub fn queued<C: Clock>(a: Admit<C>) -> Ticket<C> {
    match a {
        Admit::Queued(t) => t,
        Admit::Granted(g) => panic!("granted {g:?}, expected to queue"),
    }
}

/// The grant a poll must have returned (a work queue's or a gate's).
pub fn grant_of<G: Debug, E: Debug>(polled: Poll<Result<G, E>>) -> G {
    match polled {
        Poll::Ready(Ok(g)) => g,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// The grant a ticket must hold now.
pub fn ready<C: Clock>(t: &mut Ticket<C>, w: &Waker) -> Grant {
    grant_of(t.poll_grant(w))
}

/// Poll a ticket that must still wait (registering `w`).
pub fn pending<C: Clock>(t: &mut Ticket<C>, w: &Waker) {
    assert!(t.poll_grant(w).is_pending(), "expected pending");
}

/// A queued admission that has polled once and waits, with the waker it registered.
pub struct Waiting<C: Clock> {
    pub ticket: Ticket<C>,
    pub woken: Arc<WakeCounter>,
    pub waker: Waker,
}

impl<C: Clock> Waiting<C> {
    /// Admit a slice that must queue, and poll it once (`Pending`).
    pub fn admit(q: &WorkQueue<C>, slice: Duration) -> Self {
        let (woken, waker) = waker();
        let mut ticket = queued(q.admit(slice));
        pending(&mut ticket, &waker);
        Self {
            ticket,
            woken,
            waker,
        }
    }

    /// How often it was woken.
    pub fn wakes(&self) -> usize {
        wakes(&self.woken)
    }

    /// Poll: it must still wait.
    pub fn pending(&mut self) {
        pending(&mut self.ticket, &self.waker);
    }

    /// Poll: it must be granted.
    pub fn ready(&mut self) -> Grant {
        ready(&mut self.ticket, &self.waker)
    }
}

/// Everything handed out and not `held` is accounted as used or returned.
pub fn assert_ledger(s: &QueueSnapshot, held: u64) {
    assert_eq!(
        s.acquired_nanos - s.returned_nanos + s.over_limit_nanos,
        s.used_nanos + held,
        "{s:?}"
    );
}

/// A gate on a new manual clock: `rate` CPU nanoseconds a second for setups, at most
/// `max_queue` waiting, granted in `order`, each setup estimated at `cost` until one is measured.
pub fn gate(
    rate: u64,
    max_queue: usize,
    order: QueueOrder,
    cost: Duration,
) -> (GateQueue<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let config = GateConfig {
        max_queue,
        order,
        initial_cost: cost,
        ..GateConfig::default()
    };
    (GateQueue::new(clock.clone(), rate, config), clock)
}

/// The ticket of an attempt that must queue.
pub fn gate_queued(a: GateAdmit<ManualClock>) -> GateTicket<ManualClock> {
    match a {
        GateAdmit::Queued(t) => t,
        other => panic!("not queued: {other:?}"),
    }
}

/// 0.1 CPU: 100 ms of CPU per second, burst 100 ms, drained by the one 100 ms grant returned.
pub fn drained() -> (ManualClock, WorkQueue<ManualClock>, Grant) {
    let clock = ManualClock::new();
    let q = WorkQueue::new(clock.clone(), 100_000_000);
    let g = granted(q.admit(Duration::from_millis(100)));
    assert_eq!(q.snapshot().balance_nanos, 0);
    (clock, q, g)
}

/// What a ticket came to when its first poll (`first`) raced what resolves it: that poll's
/// answer, or, if it was `Pending`, the next poll's after exactly one wake (no lost wake-up).
pub fn after_one_wake<T>(
    first: Poll<T>,
    woken: &WakeCounter,
    poll_again: impl FnOnce() -> Poll<T>,
) -> T {
    match first {
        Poll::Ready(r) => r,
        Poll::Pending => {
            assert_eq!(wakes(woken), 1, "lost wake-up");
            match poll_again() {
                Poll::Ready(r) => r,
                Poll::Pending => panic!("still pending after its wake-up"),
            }
        }
    }
}
