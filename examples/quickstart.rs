//! The README's quick start, runnable: `cargo run --release --example quickstart`.

use std::time::Duration;

use elastic_cpu::prelude::*;
use elastic_cpu::Elastic;
use futures_util::StreamExt;

/// A stand-in for a backup scan: CPU work with an await now and then.
async fn backup_scan() -> u64 {
    let mut h = 0u64;
    for i in 0..200u64 {
        for j in 0..20_000u64 {
            h = h.wrapping_mul(31).wrapping_add(i ^ j);
        }
        tokio::task::yield_now().await;
    }
    h
}

fn encode(row: u64) -> u64 {
    (0..200u64).fold(row, |a, x| a.rotate_left(5) ^ x)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let elastic = Elastic::builder().build()?; // Profile::Default
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().enable_all())
        .build()?;

    // A future.
    let backup = rt.spawn(backup_scan().paced(&elastic));
    // A stream of chunks.
    let chunks = futures_util::stream::iter(0..2_000u64).map(encode);
    let export = rt.spawn(
        chunks
            .paced(&elastic)
            .fold(0u64, |a, c| async move { a ^ c }),
    );
    // A tight loop.
    let mut pacer = elastic.pacer();
    let rows = rt.spawn(async move {
        let mut acc = 0u64;
        for row in 0..200_000u64 {
            pacer.pace().await;
            acc ^= encode(row);
        }
        acc
    });

    let started = std::time::Instant::now();
    let (a, b, c) = rt.block_on(async { (backup.await, export.await, rows.await) });
    let _ = (a?, b?, c?);
    let s = elastic.snapshot();
    println!(
        "done in {:?}: limit {:.3} of {} cpus, elastic CPU used {:?}, granted {:?}, sched p99 {:?}",
        started.elapsed(),
        s.limit,
        s.cpus,
        Duration::from_nanos(s.used_nanos),
        Duration::from_nanos(s.acquired_nanos - s.returned_nanos),
        s.sched_p99
    );
    Ok(())
}
