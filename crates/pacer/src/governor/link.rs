//! A class's queue as the governor drives it: the [`Link`] that reads a class's [`ClassQueue`]
//! into the decision step's [`ClassReading`] and applies its [`ClassDecision`].

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use elastic_cpu_core::decide::{ClassDecision, ClassKind, ClassReading, HoldChange, Part};

use crate::grant::class_queue::ClassQueue;
use crate::grant::long_polls::{LongPollWatch, LongPolls};
use crate::record::{ClassRecord, PartRecord};

/// One class's queue, held weakly: the class lives while any handle, adapter or permit holds
/// its queue. Dropping the link (the governor is gone) closes the queue.
pub(crate) struct Link {
    pub(crate) kind: ClassKind,
    queue: Weak<dyn ClassQueue>,
    /// Running time charged when the link was made: readings count from it.
    base: Duration,
    /// Running time charged at the last reading.
    charged: Duration,
    /// The longest wait in each tick of the window, newest last.
    waits: VecDeque<Duration>,
    /// Whether its time came mostly in long polls (for classes that count them).
    long_watch: LongPollWatch,
    /// Work waiting for a grant at the last reading.
    waiters: usize,
    /// The share last reported to `tracing`.
    pub(crate) reported: f64,
}

impl Link {
    pub(crate) fn new(kind: ClassKind, queue: Weak<dyn ClassQueue>, share: f64) -> Link {
        let base = queue.upgrade().map_or(Duration::ZERO, |q| q.charged());
        Link {
            kind,
            queue,
            base,
            charged: base,
            waits: VecDeque::new(),
            long_watch: LongPollWatch::new(),
            waiters: 0,
            reported: share,
        }
    }

    /// The class's queue, while any handle, adapter or permit holds it.
    pub(crate) fn queue(&self) -> Option<Arc<dyn ClassQueue>> {
        self.queue.upgrade()
    }

    /// Whether its queue is still held by anyone.
    pub(crate) fn is_alive(&self) -> bool {
        self.queue.strong_count() > 0
    }

    /// Grant waiters at the rate in force, then read the class for the decision step (over a
    /// window of `intervals` ticks for its long polls).
    pub(crate) fn read(&mut self, intervals: usize) -> ClassReading {
        let Some(queue) = self.queue() else {
            return ClassReading {
                charged: self.charged.saturating_sub(self.base),
                ..ClassReading::default()
            };
        };
        let (waited, longest, state) = queue.tick_state();
        self.waits.push_back(longest);
        while self.waits.len() > intervals.max(1) {
            self.waits.pop_front();
        }
        let now = queue.charged();
        let ran = now.saturating_sub(self.charged);
        self.charged = now;
        let polls = queue.long_polls();
        if let Some(polls) = polls {
            self.long_watch.tick(polls, ran, intervals);
        }
        self.waiters = state.waiters;
        ClassReading {
            charged: now.saturating_sub(self.base),
            waited,
            busy: state.busy,
            has_tokens: state.has_tokens,
            holders: state.holders,
            steering: state.steering,
            long_polls: polls.is_some_and(LongPolls::mostly),
        }
    }

    /// Apply `d` (inside a CPU quota of `quota_period`, the slices fit a period).
    pub(crate) fn apply(&self, d: &ClassDecision, quota_period: Option<Duration>) {
        let Some(queue) = self.queue() else {
            return;
        };
        if d.retune {
            queue.retune(d.rate);
        } else {
            queue.set_rate(d.rate);
        }
        queue.fit_slice(d.rate, quota_period);
        if let Some(cap) = d.holder_cap {
            queue.set_holder_cap(cap);
        }
        if let Some(slots) = d.slots {
            queue.set_slots(slots);
        }
    }

    /// Hold the queue as `change` says.
    pub(crate) fn hold(&self, change: HoldChange) {
        if let Some(q) = self.queue() {
            q.set_held(change.held, change.braking);
        }
    }

    /// What the class looks like with decision `d` (and, for a member, its `part`).
    pub(crate) fn record(&self, d: &ClassDecision, part: Option<&Part>) -> ClassRecord {
        let queue = self.queue();
        let record = ClassRecord {
            kind: self.kind,
            share: d.share,
            applied: d.applied,
            longest_wait: self.waits.iter().copied().max().unwrap_or_default(),
            part: part.map(|p| PartRecord {
                name: p.name.clone(),
                weight: p.weight,
                cap: p.cap,
                floor: p.floor,
                charged: self.charged,
                waiters: self.waiters,
            }),
        };
        if let Some(queue) = queue {
            queue.publish(&record);
        }
        record
    }

    /// The governor has stopped: let go of every hold and close the queue, so nothing waits
    /// for a grant (or a release) that cannot come.
    pub(crate) fn end(&self) {
        if let Some(q) = self.queue() {
            q.close();
            q.set_held(false, false);
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if let Some(queue) = self.queue() {
            queue.close();
        }
    }
}
