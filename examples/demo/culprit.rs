//! The `culprit` phase's planted offender: a foreground task that holds its worker for 2 ms
//! every 100 ms (a synchronous call in a handler: compression, a regex, a lock held too long),
//! for the outlier trap to name.

use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long each of its polls holds the worker.
pub const HOLD: Duration = Duration::from_millis(2);
/// How often it does.
pub const EVERY: Duration = Duration::from_millis(100);

/// Spawns the offender on `rt` until `stop`; returns the spawn site, the caller's line (tokio
/// records the same one).
#[track_caller]
pub fn spawn(rt: &tokio::runtime::Handle, stop: Arc<AtomicBool>) -> &'static Location<'static> {
    rt.spawn(run(stop));
    Location::caller()
}

async fn run(stop: Arc<AtomicBool>) {
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        every.tick().await;
        // Wall time, as a blocking call holds a worker: preempted or not.
        let start = Instant::now();
        while start.elapsed() < HOLD {
            std::hint::spin_loop();
        }
    }
}
