//! The README's quick start, verbatim (tests/user-crate checks that they agree):
//! `cargo run --release --example quickstart`.

use elastic_cpu::prelude::*; // `.paced(&elastic)` for futures and streams
use elastic_cpu::Elastic;
use futures_util::StreamExt;

/// Stands in for the CPU-heavy part of elastic work: encoding, hashing, compressing.
fn encode(row: u64) -> u64 {
    (0..2_000u64).fold(row, |h, x| h.rotate_left(5) ^ x.wrapping_mul(0x9e37_79b9))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let elastic = Elastic::builder().build()?; // defaults: Profile::Default
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().enable_all())
        .build()?; // installs the probe and sizes the token bucket for the workers

    // A stream: put the work *inside* the stream (`map`), before `.paced`, so that producing
    // each item is what gets paced. Work in a later `for_each` closure would not be.
    let export = futures_util::stream::iter(0..2_000u64)
        .map(encode)
        .paced(&elastic)
        .fold(0u64, |acc, chunk| async move { acc ^ chunk });

    // A future: each poll holds CPU tokens and is charged what it ran.
    let backup = async { (0..2_000u64).map(encode).fold(0, |a, h| a ^ h) }.paced(&elastic);

    // A tight loop: `pace()` every iteration (a counter decrement inside the grant).
    let mut pacer = elastic.pacer();
    let scan = async move {
        let mut acc = 0;
        for row in 0..2_000u64 {
            pacer.pace().await;
            acc ^= encode(row);
        }
        acc
    };

    let (export, backup, scan) = (rt.spawn(export), rt.spawn(backup), rt.spawn(scan));
    let (a, b, c) = rt.block_on(async { (export.await, backup.await, scan.await) });
    println!("checksums {:x} {:x} {:x}", a?, b?, c?);

    let s = elastic.snapshot(); // share, scheduling p99, tokens, the ledger
    println!("share {:.2}, elastic CPU used {:?}", s.share, s.used);
    assert!(!s.used.is_zero()); // the ledger charged the work
    Ok(())
}
