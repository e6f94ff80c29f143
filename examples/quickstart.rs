//! The README's quick start, verbatim (tests/user-crate checks that they agree):
//! `cargo run --release --example quickstart`.
//!
//! Run time: a few seconds (it ends when its work is done). Privileges: none.

use elastic_cpu::prelude::*; // `.paced(&elastic)` for futures and streams
use elastic_cpu::Elastic;
use futures_util::StreamExt;

/// Stands in for the CPU-heavy part of elastic work: encoding, hashing, compressing.
fn encode(row: u64) -> u64 {
    (0..2_000u64).fold(row, |h, x| (h ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let elastic = Elastic::builder().build()?; // every setting at its default
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().enable_all())
        .build()?; // installs the probe and sizes the token bucket for the workers
    let _in_rt = rt.enter(); // `elastic.spawn` may put work on this runtime

    // `elastic.spawn` runs elastic work paced on this runtime; it moves to an idle-priority
    // pool if its polls run long (see "Which path to use").
    let backup = elastic.spawn(async { (0..2_000u64).map(encode).fold(0, |a, h| a ^ h) })?;

    // A stream: put the work *inside* the stream (`map`), before `.paced`, so that producing
    // each item is what gets paced, with a yield to the foreground every poll quantum.
    let export = elastic.spawn(
        futures_util::stream::iter(0..2_000u64)
            .map(encode)
            .paced(&elastic)
            .fold(0u64, |acc, chunk| async move { acc ^ chunk }),
    )?;

    // A tight loop: `pace()` every iteration (a counter decrement inside the grant).
    let mut pacer = elastic.pacer();
    let scan = elastic.spawn(async move {
        let mut acc = 0;
        for row in 0..2_000u64 {
            pacer.pace().await;
            acc ^= encode(row);
        }
        acc
    })?;

    let (a, b, c) = rt.block_on(async { (backup.await, export.await, scan.await) });
    println!("checksums {:x} {:x} {:x}", a?, b?, c?);

    let s = elastic.snapshot(); // where work went and why, the share, the signal, the ledger
    println!(
        "on {:?} ({}), share {:.2}",
        s.placement, s.placement_reason, s.share
    );
    Ok(())
}
