//! [`ClassQueue`]: a class's queue as the governor drives it, implemented by each kind of class
//! (the `Elastic`'s own and member classes, the idle pool's, a gate's). It sits with the classes
//! rather than with the governor so that the classes do not import the governor.

use std::time::Duration;

use super::long_polls::LongPolls;
use crate::record::ClassRecord;

/// The queue of one class as the governor drives it.
pub(crate) trait ClassQueue: Send + Sync {
    /// Refill and grant waiters at the current rate; whether work waited since the last tick.
    fn tick(&self) -> bool;
    /// The token rate, in CPU nanoseconds per second.
    fn set_rate(&self, rate: u64);
    /// The token rate, without moving the balance (a part of a split share).
    fn retune(&self, rate: u64) {
        self.set_rate(rate);
    }
    /// Work waiting for a grant now.
    fn waiters(&self) -> usize {
        0
    }
    /// Grants held now.
    fn holders(&self) -> usize {
        0
    }
    /// Whether its bucket holds tokens now (work that waits then is held by something else).
    fn has_tokens(&self) -> bool {
        false
    }
    /// Fit the slice an admission asks for to `rate`, inside a CPU quota of this period.
    fn fit_slice(&self, _rate: u64, _quota_period: Option<Duration>) {}
    /// At most `cap` grants held at once.
    fn set_holder_cap(&self, cap: usize);
    /// The grants the classes that split the share hold together: `None` while they do not
    /// (see module `slots`).
    fn set_slots(&self, _count: Option<usize>) {}
    /// The longest wait since the last call (a waiter still queued counts).
    fn take_longest_wait(&self) -> Duration;
    /// Hold back every new grant while `held`, and with `braked` (the backlog brake) also ask
    /// holders to give theirs back; resume once not `held`. Without `braked` (a pause) the
    /// holders keep their grants until they settle.
    fn set_held(&self, held: bool, braked: bool);
    /// Whether something steers by the signal through this class now (elastic work running or
    /// waiting; a gate or an idle pool whenever it exists).
    fn steering(&self) -> bool;
    /// Whether work holds or waits for a grant now.
    fn busy(&self) -> bool;
    /// What the governor reads of the queue at a tick, at once (one look at the queue where
    /// the queue can give it so).
    fn state(&self) -> QueueState {
        QueueState {
            busy: self.busy(),
            has_tokens: self.has_tokens(),
            holders: self.holders(),
            waiters: self.waiters(),
            steering: self.steering(),
        }
    }
    /// [`tick`](Self::tick), then [`take_longest_wait`](Self::take_longest_wait) and
    /// [`state`](Self::state) (at one look where the queue can): whether work waited, the
    /// longest wait, the queue after the tick.
    fn tick_state(&self) -> (bool, Duration, QueueState) {
        let waited = self.tick();
        (waited, self.take_longest_wait(), self.state())
    }
    /// Running time charged to the class so far.
    fn charged(&self) -> Duration;
    /// What the governor decided for the class this tick (a gate keeps it for its snapshot).
    fn publish(&self, _record: &ClassRecord) {}
    /// Export the class's own metrics, if it has any besides the snapshot's (outside the
    /// governor's lock: an exporter may call back into the handles).
    #[cfg(feature = "metrics")]
    fn export(&self) {}
    /// The governor is gone: nothing waits for a grant that cannot come.
    fn close(&self);
    /// What the class's adapters or permits count of polls too long to cut, if they do.
    fn long_polls(&self) -> Option<&LongPolls> {
        None
    }
}

/// What the governor reads of a class's queue at a tick.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QueueState {
    pub(crate) busy: bool,
    pub(crate) has_tokens: bool,
    pub(crate) holders: usize,
    pub(crate) waiters: usize,
    pub(crate) steering: bool,
}
