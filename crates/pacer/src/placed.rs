//! A future `Elastic::spawn` put on the runtime for now: paced there, it moves to the idle pool
//! at its next poll once elastic work runs long (see `placement.rs`).

use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};
use std::task::{ready, Context, Poll};

use tokio::task::{AbortHandle, JoinHandle};

use crate::paced::Paced;
use crate::placement::Placer;
use crate::shared::Shared;

/// The spawned task's own abort handle, set right after the spawn: a moved task whose pool task
/// was cancelled (the pool shut down) ends cancelled too.
pub(crate) type OwnAbort = Arc<OnceLock<AbortHandle>>;

/// Elastic work on the runtime that may move to the idle pool.
pub(crate) struct Placed<F: Future> {
    state: State<F>,
    /// The `Elastic`'s own class.
    shared: Arc<Shared>,
    /// Where the pool is; empty once a move found none (the `Elastic` shut down).
    placer: Weak<Placer>,
    own: OwnAbort,
}

// The task's own allocation holds it: boxing the paced variant would add one per spawn.
#[allow(clippy::large_enum_variant)]
enum State<F: Future> {
    /// Paced on the runtime.
    Here(Paced<Pin<Box<F>>>),
    /// Moved: the pool's task.
    There(JoinHandle<F::Output>),
    /// Between the two, only inside `move_to_pool`.
    Moving,
}

impl<F: Future> Placed<F> {
    #[track_caller]
    pub(crate) fn new(future: F, shared: Arc<Shared>, placer: Weak<Placer>, own: OwnAbort) -> Self {
        Placed {
            state: State::Here(Paced::new(Box::pin(future), shared.clone())),
            shared,
            placer,
            own,
        }
    }
}

impl<F> Placed<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// Hand the future to the pool (its grant here is settled), or keep it here for good if
    /// there is no pool any more.
    fn move_to_pool(&mut self, placer: &Placer) {
        let State::Here(paced) = mem::replace(&mut self.state, State::Moving) else {
            return;
        };
        let shared = self.shared.clone();
        let on_pool =
            |pool: &crate::idle::IdleRuntime, f| pool.handle().spawn(Paced::new(f, shared));
        self.state = match placer.on_pool(on_pool, paced.into_inner()) {
            Ok(task) => State::There(task),
            Err(future) => {
                self.placer = Weak::new();
                State::Here(Paced::new(future, self.shared.clone()))
            }
        };
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
        if matches!(this.state, State::Here(_)) && this.shared.long_polls.mostly() {
            if let Some(placer) = this.placer.upgrade() {
                this.move_to_pool(&placer);
            }
        }
        match &mut this.state {
            State::Here(paced) => Pin::new(paced).poll(cx),
            State::There(task) => match ready!(Pin::new(task).poll(cx)) {
                Ok(out) => Poll::Ready(out),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => {
                    // Cancelled with the pool: end cancelled too.
                    match this.own.get() {
                        Some(own) => own.abort(),
                        None => cx.waker().wake_by_ref(),
                    }
                    Poll::Pending
                }
            },
            State::Moving => unreachable!("a move ends Here or There"),
        }
    }
}

impl<F: Future> Drop for Placed<F> {
    fn drop(&mut self) {
        // The task here was aborted or dropped: so is its work on the pool.
        if let State::There(task) = &self.state {
            task.abort();
        }
    }
}
