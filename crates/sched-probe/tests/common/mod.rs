//! Helpers shared by the probe's tests.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Wait until `cond` holds, polling every 5 ms; fail if it has not within 60 s. A hang guard
/// for tests that count events, not a timing assertion.
#[track_caller]
pub fn wait_until(mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "condition not met before the deadline"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
