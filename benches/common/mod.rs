//! What the benches share.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// Wall time for `threads` threads, released together, to each run `op` `iters` times.
pub fn concurrent<F>(threads: usize, iters: u64, op: F) -> Duration
where
    F: Fn() + Send + Sync + 'static,
{
    let op = Arc::new(op);
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (op, barrier) = (op.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..iters {
                    op();
                }
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().unwrap();
    }
    start.elapsed()
}
