//! `--elastic-mix`: the elastic work as a user mixing the library's adapters would write it:
//! `Pacer` loops, paced streams, and one scan on a blocking thread paced by `pace_blocking` (a
//! thread the runtime's scheduling latency does not see: it competes with the workers in the
//! OS run queue). Unpaced phases run the same three shapes without pacing.

use crate::args::Args;
use crate::ctl::Control;
use crate::phase::Spawner;
use crate::scan::{self, Consume, Counters, ScanStream, Table};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// How the mix's tasks are split: the first range is the blocking scan, then this many
/// `Pacer` loops, the rest paced streams.
fn split(tasks: usize) -> (usize, usize) {
    let loops = tasks.saturating_sub(1) / 2;
    (loops, tasks.saturating_sub(1 + loops))
}

/// Spawn the mix over `table` through `spawner` (paced through `ctl` when `paced`).
pub fn spawn(
    spawner: &Spawner<'_>,
    ctl: &Control,
    paced: bool,
    table: &Arc<Table>,
    args: &Args,
    stop: &Arc<AtomicBool>,
    counters: &Arc<Counters>,
) -> Result<(), String> {
    let (tasks, chunk_rows) = (args.elastic_tasks.max(1), args.chunk_rows);
    let ranges = scan::ranges(table.rows.len(), tasks);
    let (loops, _streams) = split(tasks);
    for (i, &(from, to)) in ranges.iter().enumerate() {
        let s = ScanStream::new(table.clone(), from, to, chunk_rows, stop.clone());
        let counters = counters.clone();
        if i == 0 {
            // The blocking scan: a thread of the runtime's blocking pool, competing with the
            // workers for the cores.
            let mut pacer = paced.then(|| ctl.pacer());
            let stop = stop.clone();
            spawner.spawn_blocking(move || {
                let mut s = s;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(p) = pacer.as_mut() {
                        p.pace_blocking();
                    }
                    count(&counters, &s.next_chunk());
                }
            })?;
        } else if i <= loops {
            let mut pacer = paced.then(|| ctl.pacer());
            let stop = stop.clone();
            spawner.spawn(async move {
                let mut s = s;
                let mut out = tokio::io::sink();
                while !stop.load(Ordering::Relaxed) {
                    match pacer.as_mut() {
                        Some(p) => p.pace().await,
                        // Unpaced, a loop yields only when tokio's budget says so.
                        None => tokio::task::coop::consume_budget().await,
                    }
                    let c = s.next_chunk();
                    if out.write_all(&c.data).await.is_err() {
                        break;
                    }
                    count(&counters, &c);
                }
            })?;
        } else if paced {
            spawner.spawn(scan::drive(ctl.paced(s), counters, Consume::Plain))?;
        } else {
            spawner.spawn(scan::drive(s, counters, Consume::Plain))?;
        }
    }
    Ok(())
}

fn count(counters: &Counters, c: &scan::Chunk) {
    counters.rows.fetch_add(c.rows as u64, Ordering::Relaxed);
    counters
        .bytes
        .fetch_add(c.data.len() as u64, Ordering::Relaxed);
    counters.crc.fetch_xor(c.crc as u64, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    #[test]
    fn split_keeps_one_blocking_scan() {
        assert_eq!(super::split(8), (3, 4));
        assert_eq!(super::split(1), (0, 0));
        assert_eq!(super::split(2), (0, 1));
        assert_eq!(super::split(3), (1, 1));
    }
}
