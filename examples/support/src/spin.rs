//! CPU work of a known size: a calibrated spin loop.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::Instant;

/// Iterations of [`spin_iters`] per microsecond of CPU, measured once.
static SPIN_PER_US: OnceLock<f64> = OnceLock::new();

#[inline(never)]
fn spin_iters(n: u64) -> u64 {
    let mut x = black_box(0x1234_5678_9ABC_DEF1u64);
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    black_box(x)
}

/// Measure the spin loop (once): best of several tries (other processes share the cores).
/// Returns its iterations per microsecond of CPU.
pub fn calibrate_spin() -> f64 {
    *SPIN_PER_US.get_or_init(|| {
        let n = 2_000_000u64;
        let mut best = f64::MAX;
        for _ in 0..15 {
            let t = Instant::now();
            spin_iters(n);
            best = best.min(t.elapsed().as_secs_f64());
        }
        n as f64 / (best * 1e6)
    })
}

/// Burn about `us` microseconds of CPU (fixed work, not wall time).
pub fn spin_us(us: f64) {
    let per_us = calibrate_spin();
    spin_iters((us * per_us) as u64);
}
