//! The `culprit` phase's planted offender: a foreground task that holds its worker for 2 ms
//! every 100 ms (a synchronous call in a handler: compression, a regex, a lock held too long),
//! for the outlier trap to name.

use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long each of its polls holds the worker.
pub const HOLD: Duration = Duration::from_millis(2);
/// How often it does.
pub const EVERY: Duration = Duration::from_millis(100);

/// The offender's own clock: its longest hold since the last [`take`](Self::take). What the
/// trap reports for its line can be read against it: a hold the OS stretched (another thread
/// took the core as the 2 ms ran out) is longer on both clocks.
#[derive(Clone, Default)]
pub struct Longest(Arc<AtomicU64>);

impl Longest {
    /// The longest hold since the last call, in µs (0: none), and start over.
    pub fn take(&self) -> u64 {
        self.0.swap(0, Ordering::Relaxed)
    }

    fn note(&self, held: Duration) {
        let us = u64::try_from(held.as_micros()).unwrap_or(u64::MAX);
        self.0.fetch_max(us, Ordering::Relaxed);
    }
}

/// Spawns the offender on `rt` until `stop`; returns the spawn site, the caller's line (tokio
/// records the same one), and its own record of its holds.
#[track_caller]
pub fn spawn(
    rt: &tokio::runtime::Handle,
    stop: Arc<AtomicBool>,
) -> (&'static Location<'static>, Longest) {
    let longest = Longest::default();
    rt.spawn(run(stop, longest.clone()));
    (Location::caller(), longest)
}

async fn run(stop: Arc<AtomicBool>, longest: Longest) {
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        every.tick().await;
        // Wall time, as a blocking call holds a worker: preempted or not.
        let start = Instant::now();
        while start.elapsed() < HOLD {
            std::hint::spin_loop();
        }
        longest.note(start.elapsed());
    }
}
