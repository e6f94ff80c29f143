//! Running time charged to a class's grants, as it is charged: what the decision step's
//! overhead correction and quota headroom compare with the process's CPU time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Running time charged to grants so far, as it is charged (the queue's ledger learns it only
/// when a grant settles, a slice at a time).
#[derive(Debug, Default)]
pub(crate) struct Charged(AtomicU64);

impl Charged {
    #[inline]
    pub(crate) fn add(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Take back `took` charged before (a true-up: see `paced::ItemStretch`).
    #[inline]
    pub(crate) fn sub(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_sub(nanos, Ordering::Relaxed);
    }

    pub(crate) fn total(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}
