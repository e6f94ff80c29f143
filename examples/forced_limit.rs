//! A paced CPU-bound scan on an 8-worker runtime under a forced (static) limit: the snapshot's
//! ledger shows the CPU granted stays within `limit × cpus × elapsed + burst`.
//!
//! `cargo run --release --example forced_limit [LIMIT] [SECONDS]` (defaults 0.3, 5).

use std::time::{Duration, Instant};

use elastic_cpu::prelude::*;
use elastic_cpu::Elastic;
use futures_util::StreamExt;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let limit: f64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(0.3);
    let secs: f64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5.0);

    let elastic = Elastic::builder().fixed_limit(limit).build()?;
    let rt = elastic
        .runtime(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(8)
                .enable_all(),
        )
        .build()?;
    let start = Instant::now();
    // 16 scans: chunks of ~20 µs of hashing each, as a paced stream.
    let scans: Vec<_> = (0..16u64)
        .map(|seed| {
            rt.spawn(
                futures_util::stream::iter(0..u64::MAX)
                    .map(move |chunk| {
                        (0..4_000u64)
                            .fold(seed ^ chunk, |h, x| (h ^ x).wrapping_mul(0x100_0000_01b3))
                    })
                    .paced(&elastic)
                    .for_each(|h| async move {
                        std::hint::black_box(h);
                    }),
            )
        })
        .collect();
    for second in 1..=secs.ceil() as u64 {
        std::thread::sleep(Duration::from_secs(1).min(Duration::from_secs_f64(secs)));
        let s = elastic.snapshot();
        println!(
            "[{second}s] granted {:.3} CPU-s, used {:.3} CPU-s, waiters {}, balance {:+.3} s",
            (s.acquired - s.returned).as_secs_f64(),
            s.used.as_secs_f64(),
            s.waiters,
            s.balance_secs_f64()
        );
    }
    for scan in &scans {
        scan.abort();
    }
    drop(rt); // every grant settled
    let elapsed = start.elapsed().as_secs_f64();
    let s = elastic.snapshot();
    let rate = limit * s.cpus;
    let bound = rate * elapsed + rate; // refill over the run + one second of burst
    let granted = (s.acquired - s.returned).as_secs_f64();
    println!(
        "limit {limit} x {} cpus over {elapsed:.2} s: granted {granted:.3} CPU-s (used {:.3}, over-limit {:.3}), bound rate*t + burst = {bound:.3} CPU-s -> {}",
        s.cpus,
        s.used.as_secs_f64(),
        s.over_limit.as_secs_f64(),
        if granted <= bound { "within" } else { "EXCEEDED" }
    );
    Ok(())
}
