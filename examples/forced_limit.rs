//! A paced CPU-bound scan under a forced (static) limit: is the share the process spends the
//! share that was set?
//!
//! One runtime, one `Elastic`: first the runtime sits idle for `--secs` (the baseline: what the
//! runtime and the governor cost with no elastic work), then 16 paced scans run: `--warmup`
//! seconds while they spend the bucket's initial second of tokens, then `--secs` measured.
//! Process CPU is user + sys time of the process's CPU clock over each measured stretch. The
//! elastic stretch should spend `limit × cpus × secs` more than the baseline; the CPU granted
//! over the whole elastic run (warm-up included) stays within `limit × cpus × elapsed + burst`.
//!
//! `cargo run --release --example forced_limit -- --workers 8 --secs 5 --json out.json`
//!
//! Run time: about 12 s at the defaults (`--secs` idle, `--warmup`, then `--secs` paced).
//! Privileges: none.

use std::time::{Duration, Instant};

use clap::Parser;
use elastic_cpu::prelude::*;
use elastic_cpu::Elastic;
use futures_util::StreamExt;

#[derive(Parser)]
struct Args {
    /// The fixed limit: the elastic share of the CPUs.
    #[arg(long, default_value_t = 0.3)]
    limit: f64,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Seconds of each stretch (idle baseline, then elastic work).
    #[arg(long, default_value_t = 5.0)]
    secs: f64,
    /// Seconds the scans run before the measured stretch: the bucket starts with one second of
    /// tokens, which a steady share must not include.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Write the figures as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// User + sys CPU time of the whole process.
fn process_cpu() -> Duration {
    elastic_cpu_examples::cpu_time::process_cpu().unwrap_or_default()
}

/// Voluntary and involuntary context switches of every thread of the process.
fn context_switches() -> (u64, u64) {
    let mut sum = (0, 0);
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten() {
        let Ok(status) = std::fs::read_to_string(task.unwrap().path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            let field = |p: &str| {
                line.strip_prefix(p)
                    .and_then(|v| v.trim().parse::<u64>().ok())
            };
            if let Some(n) = field("voluntary_ctxt_switches:") {
                sum.0 += n;
            } else if let Some(n) = field("nonvoluntary_ctxt_switches:") {
                sum.1 += n;
            }
        }
    }
    sum
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let (limit, secs) = (args.limit, args.secs);
    let stretch = Duration::try_from_secs_f64(secs)?;

    let elastic = Elastic::builder().fixed_share(limit).build()?;
    let rt = elastic
        .runtime(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(args.workers)
                .enable_all(),
        )
        .build()?;

    // The baseline: the same runtime and governor, no elastic work.
    let cpu0 = process_cpu();
    std::thread::sleep(stretch);
    let baseline = process_cpu() - cpu0;

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
    std::thread::sleep(Duration::try_from_secs_f64(args.warmup)?);
    let used0 = elastic.snapshot().used;
    let (cpu1, switches1) = (process_cpu(), context_switches());
    let mut left = stretch;
    for second in 1.. {
        let nap = left.min(Duration::from_secs(1));
        std::thread::sleep(nap);
        left -= nap;
        let s = elastic.snapshot();
        println!(
            "[{second}s] granted {:.3} CPU-s, used {:.3} CPU-s, waiters {}, balance {:+.3} s, \
             overhead corrected {:.1} %",
            (s.acquired - s.returned).as_secs_f64(),
            s.used.as_secs_f64(),
            s.waiters,
            s.balance_secs_f64(),
            s.overhead * 100.0
        );
        if left.is_zero() {
            break;
        }
    }
    let (process, switches2) = (process_cpu() - cpu1, context_switches());
    // Settled grants only: a rough figure for the stretch, the exact one is `charged` below.
    let used_in_stretch = (elastic.snapshot().used - used0).as_secs_f64();
    for scan in &scans {
        scan.abort();
    }
    drop(rt); // every grant settled
    let elapsed = start.elapsed().as_secs_f64();
    let s = elastic.snapshot();
    let rate = limit * s.cpus;
    let bound = rate * elapsed + rate; // refill over the run + one second of burst
    let granted = (s.acquired - s.returned).as_secs_f64();
    let charged = s.used.as_secs_f64();
    let (process, baseline) = (process.as_secs_f64(), baseline.as_secs_f64());
    println!(
        "limit {limit} x {} cpus, {} workers over {elapsed:.2} s: granted {granted:.3} CPU-s \
         (charged {charged:.3}, over-limit {:.3}), bound rate*t + burst = {bound:.3} CPU-s -> {}",
        s.cpus,
        args.workers,
        s.over_limit.as_secs_f64(),
        if granted <= bound {
            "within"
        } else {
            "EXCEEDED"
        }
    );
    let want = rate * secs;
    println!(
        "process CPU {process:.3} s, idle baseline {baseline:.3} s: elastic spent {:.3} CPU-s \
         against {want:.3} set ({:.2}x; charged ~{used_in_stretch:.3}); context switches +{} \
         voluntary, +{} involuntary",
        process - baseline,
        (process - baseline) / want,
        switches2.0 - switches1.0,
        switches2.1 - switches1.1,
    );
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "workers": args.workers,
            "limit": limit,
            "cpus": s.cpus,
            "secs": secs,
            "granted_cpu_s": granted,
            "charged_cpu_s": charged,
            "process_cpu_s": process,
            "baseline_process_cpu_s": baseline,
            "bound_cpu_s": bound,
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")?;
    }
    Ok(())
}
