//! The grants the classes of one `Elastic` may hold at once, together.
//!
//! Each class's holder cap is what the whole share pays for (a holder shares its worker with
//! the other classes' and rarely runs all the time), so with three classes three times as many
//! elastic tasks could sit in the workers' queues as with one, at the same elastic CPU, and each
//! foreground task waits behind more of them. So while more than one class splits the share, a
//! grant also takes one of these slots before it runs: together the classes hold no more than
//! one class would. Slots go to grants in the order they ask (tokio's fair semaphore), so a
//! class bound by its tokens cannot hold them while it waits for tokens: it asks only once its
//! grant is out. The governor sets how many there are each tick; with one class they are off,
//! and an admission pays one relaxed load for them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The slots of one `Elastic`'s classes (see the module docs).
#[derive(Debug)]
pub(crate) struct Slots {
    /// Grants take a slot: more than one class splits the share.
    on: AtomicBool,
    semaphore: Arc<Semaphore>,
    /// How many there are meant to be, and how many the semaphore still has out beyond that
    /// (held when the count went down; forgotten at the first setting after they come back).
    count: Mutex<(usize, usize)>,
}

/// A slot held with a grant, or the wait for one.
pub(crate) enum SlotClaim {
    Held(#[allow(dead_code)] OwnedSemaphorePermit),
    Waiting(Acquire),
}

/// The wait for a slot: tokio's acquire future (cancel-safe: dropped, it leaves the line).
pub(crate) type Acquire = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<OwnedSemaphorePermit, tokio::sync::AcquireError>>
            + Send
            + Sync,
    >,
>;

impl Default for Slots {
    /// Off, with no slots.
    fn default() -> Slots {
        Slots {
            on: AtomicBool::new(false),
            semaphore: Arc::new(Semaphore::new(0)),
            count: Mutex::new((0, 0)),
        }
    }
}

impl Slots {
    /// Whether a grant takes a slot now.
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// A slot at once, or the wait for one.
    pub(crate) fn take(&self) -> SlotClaim {
        match self.semaphore.clone().try_acquire_owned() {
            Ok(permit) => SlotClaim::Held(permit),
            Err(_) => SlotClaim::Waiting(Box::pin(self.semaphore.clone().acquire_owned())),
        }
    }

    /// `Some(n)`: grants take one of `n` slots (at least one); `None`: no slots. Slots held
    /// beyond a lowered count are forgotten at the first setting after they come back (the
    /// next tick), so until then a grant may take one.
    pub(crate) fn set(&self, count: Option<usize>) {
        if self.semaphore.is_closed() {
            return; // the governor has stopped: off for good
        }
        let mut c = self.count.lock().unwrap_or_else(|p| p.into_inner());
        let (now, over) = &mut *c;
        // Forget what came back of those out beyond the count.
        *over -= self.semaphore.forget_permits(*over);
        let Some(want) = count.map(|n| n.max(1)) else {
            self.on.store(false, Ordering::Relaxed);
            return;
        };
        if want > *now {
            let more = want - *now;
            // Those still out beyond the old count are now within the new one.
            let back = more.min(*over);
            *over -= back;
            self.semaphore.add_permits(more - back);
        } else if want < *now {
            let fewer = *now - want;
            *over += fewer - self.semaphore.forget_permits(fewer);
        }
        *now = want;
        self.on.store(true, Ordering::Relaxed);
    }

    /// The governor has stopped: no slots from now on, and a grant waiting for one runs without
    /// (its wait ends with the semaphore's close).
    pub(crate) fn close(&self) {
        self.on.store(false, Ordering::Relaxed);
        self.semaphore.close();
    }

    /// Slots free now (tests).
    #[cfg(test)]
    fn free(&self) -> usize {
        self.semaphore.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(slot: SlotClaim) -> OwnedSemaphorePermit {
        match slot {
            SlotClaim::Held(p) => p,
            SlotClaim::Waiting(_) => panic!("no slot free"),
        }
    }

    #[test]
    fn off_until_set_and_a_count_of_zero_is_one() {
        let slots = Slots::default();
        assert!(!slots.on());
        slots.set(Some(0));
        assert!(slots.on());
        assert_eq!(slots.free(), 1);
        slots.set(None);
        assert!(!slots.on());
    }

    #[test]
    fn a_lowered_count_forgets_the_slots_held_beyond_it_as_they_come_back() {
        let slots = Slots::default();
        slots.set(Some(3));
        let a = held(slots.take());
        let b = held(slots.take());
        slots.set(Some(1));
        assert_eq!(slots.free(), 0, "one free slot forgotten at once");
        drop(a);
        assert_eq!(slots.free(), 1, "back, not yet forgotten");
        slots.set(Some(1));
        assert_eq!(slots.free(), 0, "forgotten at the next setting");
        assert!(matches!(slots.take(), SlotClaim::Waiting(_)));
        drop(b);
        assert_eq!(slots.free(), 1, "the one slot left");
        // Raised again, with a slot out: two in all.
        let c = held(slots.take());
        slots.set(Some(2));
        assert_eq!(slots.free(), 1);
        drop(c);
        assert_eq!(slots.free(), 2);
    }
}
