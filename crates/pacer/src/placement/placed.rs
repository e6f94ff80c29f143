//! A future `Elastic::spawn` placed with `Placement::Auto`: paced on the runtime, it moves to
//! the idle pool at its next poll once elastic work runs long (see module `placement`), comes back
//! to the runtime while the pool starves (see `idle/watch.rs`), and goes again once it does not.

use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use elastic_cpu_core::{Clock, ThreadCpuClock};

use tokio::task::{AbortHandle, JoinHandle};

use crate::grant::paced::Paced;
use crate::grant::class_state::ClassState;
use crate::idle::watch::{PoolWatch, Recall};
use crate::idle::IdleRuntime;
use crate::placement::Placer;

/// The spawned task's own abort handle, set right after the spawn: a moved task whose pool task
/// was cancelled (the pool shut down) ends cancelled too.
pub(crate) type OwnAbort = Arc<OnceLock<AbortHandle>>;

/// Elastic work that `Auto` placed: on the runtime now, on the pool, or back on the runtime.
pub(crate) struct Placed<F: Future> {
    state: State<F>,
    /// The `Elastic`'s own class.
    shared: Arc<ClassState>,
    /// Where the pool is; empty once a move found none (the `Elastic` shut down): it stays on
    /// the runtime then.
    placer: Weak<Placer>,
    /// The pool it came back from, starved: it goes there again once the pool has settled.
    starved: Option<Arc<PoolWatch>>,
    own: OwnAbort,
}

// The task's own allocation holds it: boxing the paced variant would add one per spawn.
#[allow(clippy::large_enum_variant)]
enum State<F: Future> {
    /// Paced on the runtime.
    Here(Paced<Pin<Box<F>>>),
    /// On the pool.
    There(OnPool<F>),
    /// Between the two, only inside a move.
    Moving,
}

/// A future on the pool, and how to take it back.
struct OnPool<F: Future> {
    /// The pool's task: `None` once the future was taken back.
    task: JoinHandle<Option<F::Output>>,
    slot: Arc<Slot<F>>,
    watch: Arc<PoolWatch>,
}

/// Where a future on the pool waits between its polls, so the runtime can take it back.
struct Slot<F: Future> {
    held: Mutex<Held<F>>,
    /// The runtime task waiting for it.
    waker: Mutex<Option<Waker>>,
    /// A poll of it on the pool was starved: it took [`SLOW_POLL`] or more of wall time, and
    /// ran for under a quarter of it (the pool's threads got little CPU, if they were
    /// scheduled often enough to keep the pulse fresh).
    starved: AtomicBool,
}

/// A pool poll this long in wall time, running a quarter of it or less, was starved.
const SLOW_POLL: Duration = Duration::from_millis(100);

// In the slot's own allocation, one per moved future.
#[allow(clippy::large_enum_variant)]
enum Held<F: Future> {
    /// Between polls.
    Parked(Paced<Pin<Box<F>>>),
    /// A pool thread polls it.
    Polling,
    /// Done, or taken back.
    Gone,
}

impl<F: Future> Slot<F> {
    fn lock(&self) -> MutexGuard<'_, Held<F>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The future, if it is between polls; `then` is left in its place.
    fn take(&self, then: Held<F>) -> Option<Paced<Pin<Box<F>>>> {
        let mut held = self.lock();
        match mem::replace(&mut *held, Held::Gone) {
            Held::Parked(paced) => {
                *held = then;
                Some(paced)
            }
            other => {
                *held = other;
                None
            }
        }
    }
}

impl<F: Future> Slot<F> {
    fn wake_runtime(&self) {
        let waker = self.waker.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<F: Future + Send + 'static> Recall for Slot<F> {
    fn wake(&self) {
        self.wake_runtime();
    }
}

/// The pool's task for a future in a [`Slot`]: polls it while it is there; ends with `None` if
/// the runtime took it back.
struct Shuttle<F: Future>(Arc<Slot<F>>);

impl<F: Future> Future for Shuttle<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<F::Output>> {
        let slot = &self.0;
        let Some(mut paced) = slot.take(Held::Polling) else {
            return Poll::Ready(None);
        };
        // Four clock reads a poll: polls here are long ones.
        let (wall, cpu) = (Instant::now(), ThreadCpuClock.now());
        let out = Pin::new(&mut paced).poll(cx);
        let (wall, cpu) = (wall.elapsed(), ThreadCpuClock.now().saturating_sub(cpu));
        let starved = wall >= SLOW_POLL && cpu < wall / 4;
        *slot.lock() = match out {
            Poll::Ready(_) => Held::Gone,
            Poll::Pending => Held::Parked(paced),
        };
        if starved && out.is_pending() {
            slot.starved.store(true, Ordering::Release);
            slot.wake_runtime();
        }
        out.map(Some)
    }
}

impl<F: Future> Placed<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    #[track_caller]
    pub(crate) fn new(
        future: F,
        shared: Arc<ClassState>,
        placer: Weak<Placer>,
        own: OwnAbort,
    ) -> Self {
        Placed {
            state: State::Here(Paced::new(Box::pin(future), shared.clone())),
            shared,
            placer,
            starved: None,
            own,
        }
    }

    /// Elastic work that starts on `pool`, and comes back to the runtime if the pool starves.
    pub(crate) fn on_pool(
        future: F,
        pool: &IdleRuntime,
        shared: Arc<ClassState>,
        placer: Weak<Placer>,
        own: OwnAbort,
    ) -> Self {
        Placed {
            state: State::There(OnPool::start(pool, Box::pin(future), shared.clone())),
            shared,
            placer,
            starved: None,
            own,
        }
    }

    /// Hand the future to the pool (its grant here is settled), or keep it here for good if
    /// there is no pool any more.
    fn move_to_pool(&mut self, placer: &Placer) {
        let State::Here(paced) = mem::replace(&mut self.state, State::Moving) else {
            return;
        };
        let shared = self.shared.clone();
        let start = |pool: &IdleRuntime, f| OnPool::start(pool, f, shared);
        self.state = match placer.on_pool(start, paced.into_inner()) {
            Ok(on) => State::There(on),
            Err(future) => {
                self.placer = Weak::new();
                State::Here(Paced::new(future, self.shared.clone()))
            }
        };
    }

    /// The pool is starved: take the future back if it is between polls, until the pool runs
    /// again.
    fn recall(&mut self) {
        let State::There(on) = &mut self.state else {
            return;
        };
        let Some(paced) = on.slot.take(Held::Gone) else {
            return;
        };
        on.task.abort();
        on.watch.returned();
        on.watch.saw_starved();
        self.starved = Some(on.watch.clone());
        self.state = State::Here(Paced::new(paced.into_inner(), self.shared.clone()));
    }
}

impl<F> OnPool<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn start(pool: &IdleRuntime, future: Pin<Box<F>>, shared: Arc<ClassState>) -> OnPool<F> {
        let slot = Arc::new(Slot {
            held: Mutex::new(Held::Parked(Paced::new(future, shared))),
            waker: Mutex::new(None),
            starved: AtomicBool::new(false),
        });
        let watch = pool.watch().clone();
        let recall: Arc<dyn Recall> = slot.clone();
        watch.watch(Arc::downgrade(&recall));
        OnPool {
            task: pool.handle().spawn(Shuttle(slot.clone())),
            slot,
            watch,
        }
    }
}

impl<F> Future for Placed<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Unpin: the future is boxed.
        let this = self.get_mut();
        if matches!(this.state, State::Here(_))
            && this.shared.long_polls.mostly()
            && this.starved.as_ref().is_none_or(|w| w.settled())
        {
            if let Some(placer) = this.placer.upgrade() {
                this.move_to_pool(&placer);
            }
        }
        if let State::There(on) = &mut this.state {
            *on.slot.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
            match Pin::new(&mut on.task).poll(cx) {
                Poll::Ready(Ok(Some(out))) => return Poll::Ready(out),
                Poll::Ready(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Poll::Ready(Err(_)) => {
                    // Cancelled with the pool: end cancelled too.
                    match this.own.get() {
                        Some(own) => own.abort(),
                        None => cx.waker().wake_by_ref(),
                    }
                    return Poll::Pending;
                }
                // Taken back: only `recall` does that, and it leaves `There` at once.
                Poll::Ready(Ok(None)) | Poll::Pending => {}
            }
            if on.watch.starved() || on.slot.starved.load(Ordering::Acquire) {
                this.recall();
            }
        }
        match &mut this.state {
            State::Here(paced) => Pin::new(paced).poll(cx),
            State::There(_) => Poll::Pending,
            State::Moving => unreachable!("a move ends Here or There"),
        }
    }
}

impl<F: Future> Drop for Placed<F> {
    fn drop(&mut self) {
        // The task here was aborted or dropped: so is its work on the pool.
        if let State::There(on) = &self.state {
            on.task.abort();
        }
    }
}
