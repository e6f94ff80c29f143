//! Benches of the enforce layer (`crates/pacer`).
//!
//! * `paced_overhead/{raw,paced,spawn}/{8,32}` — the per-poll cost of `Paced`. `TASKS` tasks,
//!   each a CPU-bound future that does a few hundred ns of work per poll and then returns
//!   `Pending` after waking itself, run on a multi-thread runtime with 8 or 32 workers (this
//!   machine has 2 cores: 32 is also the oversubscribed case). `raw` spawns the futures as they
//!   are, `paced` spawns `fut.paced(&elastic)`, `spawn` calls `elastic.spawn(fut)` (the quick
//!   start's path: on a host where the OS grants idle priority, a future that may move to the
//!   idle pool checks at each poll whether it should); all on the same runtime, built through
//!   `elastic.runtime(..)` (so the probe's hooks run on every poll of both). Tokens are never
//!   the bottleneck: `fixed_limit(1.0)` on `cpus(1024.0)` is a bucket of 1024 CPU-seconds, and
//!   the bench prints the queue's `waits` / `waiters` after each variant to show nobody
//!   waited. The time reported is wall time per poll (the batch's elapsed time over the polls
//!   it made), so `paced − raw` is what `Paced` adds per poll. With both cores free, wall time
//!   per poll is about half the CPU time per poll; with other processes on the machine it is
//!   whatever they leave. So the bench also prints the process's CPU time per poll (from
//!   `/proc/self/stat`), and a cross-check that contention cannot swamp: the same future polled
//!   by hand on one thread, raw and paced in alternating blocks timed by the thread's CPU clock.
//! * `pace_loop/{bare,instant_now,pacer}` — one task on a current-thread runtime running a
//!   tight loop of trivial work (a `wrapping_add` of a `black_box`ed counter): `bare`;
//!   `instant_now`, the naive check (read `Instant::now()` every iteration and `yield_now()`
//!   once a poll quantum has passed); `pacer`, `pacer.pace().await` every iteration. Wall time
//!   per iteration; the bench also prints the thread's CPU time per iteration. The pacer yields
//!   every poll quantum (pausing its grant, and settling it and taking a new one once the slice
//!   is spent): that cost is in the figure, and the bench prints how long the task's polls
//!   really ran between yields for `instant_now` and `pacer`.
//!
//! * `gate/admit_release` — the connection gate's hot path: one attempt admitted at once (tokens
//!   there, nobody waiting) and its permit dropped at once, polled by hand on one thread.
//! * `quantum_cost/{none,default}` — what the poll quantum costs the elastic work itself: one
//!   task scans `SCAN_ROWS` rows (a few ns of hashing per row, `pacer.pace().await` per row) on
//!   an otherwise idle 2-worker runtime with I/O and timers enabled, built through
//!   `elastic.runtime(..)`. `default` uses the 50 µs default quantum (a yield, i.e. a
//!   reschedule and an I/O driver poll, every 50 µs); `none` sets the quantum to the slice
//!   (100 ms, the largest the builder accepts), longer than one whole scan, so the scan never
//!   yields. Throughput in rows (elements); the bench prints the task's polls per scan.
//!   `one_worker` / `one_worker_no_os_yield`: the same scan on a 1-worker runtime, where no
//!   other worker is ever parked, so every quantum yields; with and without the OS yield
//!   (`sched_yield`) at each: what `os_yield` costs elastic work.
//!
//! * `classes/admit/{1,4}/{8,32}` — admission with one class of elastic work and with four
//!   (`Elastic::class`): 8 or 32 OS threads released together, each polling a ready future
//!   `.paced(..)` to completion per iteration (admission on the fast path, the poll, the
//!   settle), with thread `i` in class `i % classes`. Wall time per admission; tokens are never
//!   the bottleneck.
//! * `classes/tick/{1,64}` (with `--features test-util`) — one governor tick with the own
//!   class alone and with 64 classes made with `Elastic::class`, half of them with a waiting
//!   admission, on a manual clock: the split's cost per tick.
//!
//! `cargo bench --bench pacer` runs it in about a minute.

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

mod common;

use common::concurrent;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use elastic_cpu::gate::GateSettings;
use elastic_cpu::prelude::*;
use elastic_cpu::settings::{Enforcement, Timing};
use elastic_cpu::settings::{DEFAULT_QUANTUM, DEFAULT_SLICE};
use elastic_cpu::Elastic;
use elastic_cpu_core::{Clock, ThreadCpuClock};
use tokio::runtime::{Builder, Runtime};

/// Tasks per `paced_overhead` batch (≥ the largest worker count, so every worker has work).
const TASKS: u64 = 64;
/// Worker counts of the multi-threaded benches.
const WORKERS: [usize; 2] = [8, 32];
/// Multiply-add rounds per poll of a `Steps` future: a dependent chain of a few hundred ns.
const WORK_ROUNDS: u32 = 192;

const SAMPLES: usize = 20;
const WARM_UP: Duration = Duration::from_millis(500);
const MEASURE: Duration = Duration::from_millis(2500);

/// An elastic handle whose bucket never runs dry in these benches: limit 1.0 of 1024 CPUs.
fn unlimited() -> Elastic {
    Elastic::builder()
        .fixed_share(1.0)
        .cpus(1024.0)
        .build()
        .expect("elastic settings")
}

/// A few hundred ns of CPU work that the optimiser cannot fold.
#[inline]
fn work(mut x: u64) -> u64 {
    for _ in 0..WORK_ROUNDS {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(black_box(1_442_695_040_888_963_407));
    }
    x
}

/// A CPU-bound future polled in small steps: `work` per poll, then `Pending` after waking
/// itself, `left` polls in all.
struct Steps {
    left: u64,
    acc: u64,
}

impl Future for Steps {
    type Output = u64;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u64> {
        let acc = work(self.acc);
        self.acc = acc;
        self.left -= 1;
        if self.left == 0 {
            Poll::Ready(acc)
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Process CPU time (user + system, all threads) from `/proc/self/stat`, in clock ticks of
/// 10 ms (Linux's `USER_HZ`); `None` where there is no procfs.
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start at field 3 (`state`):
    // utime is field 14, stime field 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`): a current-thread runtime runs
/// its tasks on the thread that calls `block_on`, so this is the bench task's CPU time.
fn thread_cpu() -> Duration {
    ThreadCpuClock.now()
}

/// Units of work done, and the wall and process CPU time they took, over a whole bench
/// (warm-up included).
#[derive(Default)]
struct Tally {
    units: u64,
    wall: Duration,
    cpu: Duration,
    /// Some batch had no CPU reading.
    cpu_missing: bool,
}

impl Tally {
    fn add(&mut self, units: u64, wall: Duration, cpu: Option<Duration>) {
        self.units += units;
        self.wall += wall;
        match cpu {
            Some(c) => self.cpu += c,
            None => self.cpu_missing = true,
        }
    }

    fn per_unit(&self) -> String {
        let per = |d: Duration| d.as_secs_f64() * 1e9 / self.units.max(1) as f64;
        let cpu = if self.cpu_missing {
            "CPU n/a".to_string()
        } else {
            format!("{:.1} ns CPU", per(self.cpu))
        };
        format!("{:.1} ns wall, {cpu}", per(self.wall))
    }
}

/// How the bench's futures are spawned.
#[derive(Clone, Copy)]
enum Variant {
    Raw,
    Paced,
    Spawn,
}

impl Variant {
    const ALL: [(&'static str, Variant); 3] = [
        ("raw", Variant::Raw),
        ("paced", Variant::Paced),
        ("spawn", Variant::Spawn),
    ];
}

/// Runs `TASKS` `Steps` futures of `steps` polls each on `rt`, spawned as `variant` says;
/// returns the wall time and the process CPU time the batch took.
fn poll_batch(
    rt: &Runtime,
    elastic: &Elastic,
    variant: Variant,
    steps: u64,
) -> (Duration, Option<Duration>) {
    let cpu0 = process_cpu();
    let start = Instant::now();
    let acc = rt.block_on(async {
        let handles: Vec<_> = (0..TASKS)
            .map(|i| {
                let fut = Steps {
                    left: steps,
                    acc: i,
                };
                match variant {
                    Variant::Raw => tokio::spawn(fut),
                    Variant::Paced => tokio::spawn(fut.paced(elastic)),
                    Variant::Spawn => elastic.spawn(fut).expect("inside the runtime"),
                }
            })
            .collect();
        let mut acc = 0u64;
        for h in handles {
            acc ^= h.await.expect("bench task");
        }
        acc
    });
    let wall = start.elapsed();
    black_box(acc);
    let cpu = match (cpu0, process_cpu()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    (wall, cpu)
}

fn paced_overhead(c: &mut Criterion) {
    let mut group = c.benchmark_group("paced_overhead");
    group
        .sample_size(SAMPLES)
        .warm_up_time(WARM_UP)
        .measurement_time(MEASURE);
    let mut ran = false;
    for workers in WORKERS {
        let elastic = unlimited();
        let rt = elastic
            .runtime(Builder::new_multi_thread().worker_threads(workers))
            .build()
            .expect("runtime");
        for (variant, how) in Variant::ALL {
            let mut tally = Tally::default();
            group.bench_with_input(BenchmarkId::new(variant, workers), &workers, |b, _| {
                // One criterion iteration is one poll: `iters` polls spread over TASKS tasks.
                b.iter_custom(|iters| {
                    let steps = iters.div_ceil(TASKS).max(1);
                    let polls = steps * TASKS;
                    let (wall, cpu) = poll_batch(&rt, &elastic, how, steps);
                    tally.add(polls, wall, cpu);
                    wall.mul_f64(iters as f64 / polls as f64)
                })
            });
            if tally.units == 0 {
                continue; // filtered out
            }
            ran = true;
            let s = elastic.snapshot();
            println!(
                "    {variant}/{workers}: per poll {}; placement {:?} ({}); queue: grants {}, waits {}, waiters {}, \
                 running time charged {} ms (process CPU in the batches {} ms), \
                 over-limit {} ms",
                tally.per_unit(),
                s.placement,
                s.placement_reason,
                s.queue.grants,
                s.queue.waits,
                s.waiters,
                s.used.as_millis(),
                tally.cpu.as_millis(),
                s.over_limit.as_millis(),
            );
            if s.queue.waits != 0 || s.waiters != 0 {
                println!(
                    "    WARNING: elastic work waited for tokens: the bucket was a bottleneck"
                );
            }
        }
        drop(rt);
    }
    group.finish();
    if ran {
        paced_cost_by_hand();
    }
}

/// Polls `fut` `n` times on this thread; the thread CPU time it took (immune to preemption).
fn poll_block<F: Future + Unpin>(fut: &mut F, cx: &mut Context<'_>, n: u32) -> Duration {
    let start = thread_cpu();
    for _ in 0..n {
        // `black_box` on the future too, or the raw future's work is dead code here.
        black_box(Pin::new(black_box(&mut *fut)).poll(cx).is_ready());
    }
    thread_cpu().saturating_sub(start)
}

/// A cross-check that CPU contention from other processes cannot swamp: the `Steps` future
/// polled by hand on this thread (no runtime, no-op waker), raw and paced in short alternating
/// blocks timed by the thread's CPU clock; prints the median over block pairs of what `Paced`
/// adds per poll. Without a runtime the probe's hooks do not run, so this is `Paced` alone: with
/// the default wall-clock running time, and with `thread_cpu_time()` (exact under preemption,
/// dearer to read).
fn paced_cost_by_hand() {
    let wall = unlimited();
    let cpu_clock = Elastic::builder()
        .fixed_share(1.0)
        .cpus(1024.0)
        .enforcement(Enforcement::default().timing(Timing::ThreadCpu))
        .build()
        .expect("elastic settings");
    for (name, elastic) in [
        ("Paced (wall running time, the default)", &wall),
        ("Paced with Timing::ThreadCpu", &cpu_clock),
    ] {
        println!("    by hand: {name}: {}", paced_cost_alternating(elastic));
    }
}

/// One thread, no runtime: raw and paced `Steps` in alternating blocks timed by the thread's
/// CPU clock; the median and spread over block pairs of what `Paced` adds per poll.
fn paced_cost_alternating(elastic: &Elastic) -> String {
    const BLOCK: u32 = 4096;
    const PAIRS: usize = 300;
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut raw = Steps {
        left: u64::MAX,
        acc: 1,
    };
    let mut paced = Steps {
        left: u64::MAX,
        acc: 2,
    }
    .paced(elastic);
    poll_block(&mut raw, &mut cx, BLOCK);
    poll_block(&mut paced, &mut cx, BLOCK);
    let per_poll = |d: Duration| d.as_secs_f64() * 1e9 / f64::from(BLOCK);
    let (mut raws, mut deltas) = (Vec::with_capacity(PAIRS), Vec::with_capacity(PAIRS));
    for i in 0..PAIRS {
        let (r, p) = if i % 2 == 0 {
            let r = poll_block(&mut raw, &mut cx, BLOCK);
            (r, poll_block(&mut paced, &mut cx, BLOCK))
        } else {
            let p = poll_block(&mut paced, &mut cx, BLOCK);
            (poll_block(&mut raw, &mut cx, BLOCK), p)
        };
        raws.push(per_poll(r));
        deltas.push(per_poll(p) - per_poll(r));
    }
    let q = |v: &mut Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    format!(
        "raw poll {:.1} ns, Paced adds {:.1} ns per poll (median of {PAIRS} alternating \
         blocks of {BLOCK} polls, thread CPU time; p10 {:.1}, p90 {:.1})",
        q(&mut raws, 0.5),
        q(&mut deltas, 0.5),
        q(&mut deltas, 0.1),
        q(&mut deltas, 0.9),
    )
}

/// How long each poll of the bench task ran (its running time between yields).
#[derive(Default)]
struct PollStats {
    polls: Vec<Duration>,
}

impl PollStats {
    fn merge(&mut self, o: PollStats) {
        self.polls.extend(o.polls);
    }

    /// Count, p50 / p90 / p99 / max in µs, and the share of polls over 1.5 × the quantum.
    fn summary(&self) -> String {
        let mut v = self.polls.clone();
        if v.is_empty() {
            return "no polls".to_string();
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
        let long = v
            .iter()
            .filter(|d| **d > DEFAULT_QUANTUM.mul_f64(1.5))
            .count();
        format!(
            "{} task polls: p50 {:.0} µs, p90 {:.0} µs, p99 {:.0} µs, max {:.0} µs; \
             {:.0} % over 1.5 × the {} µs quantum",
            v.len(),
            at(0.5),
            at(0.9),
            at(0.99),
            at(1.0),
            100.0 * long as f64 / v.len() as f64,
            DEFAULT_QUANTUM.as_micros(),
        )
    }
}

/// Times every poll of `inner` (two clock reads per poll of the task, not per iteration).
struct Timed<F: Future> {
    inner: Pin<Box<F>>,
    stats: PollStats,
}

impl<F: Future> Future for Timed<F> {
    type Output = (F::Output, PollStats);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let start = Instant::now();
        let out = self.inner.as_mut().poll(cx);
        self.stats.polls.push(start.elapsed());
        out.map(|v| (v, std::mem::take(&mut self.stats)))
    }
}

/// Spawns `fut` as one task on the current-thread `rt` and waits for it.
fn run_task<F>(rt: &Runtime, fut: F) -> (Duration, PollStats)
where
    F: Future<Output = u64> + Send + 'static,
{
    let timed = Timed {
        inner: Box::pin(fut),
        stats: PollStats {
            polls: Vec::with_capacity(1024),
        },
    };
    let start = Instant::now();
    let (x, stats) = rt.block_on(rt.spawn(timed)).expect("bench task");
    let wall = start.elapsed();
    black_box(x);
    (wall, stats)
}

fn pace_loop(c: &mut Criterion) {
    let elastic = unlimited();
    let rt = elastic
        .runtime(Builder::new_current_thread())
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("pace_loop");
    group
        .sample_size(SAMPLES)
        .warm_up_time(WARM_UP)
        .measurement_time(MEASURE);

    let report = |name: &str, tally: &Tally, stats: &PollStats| {
        if tally.units > 0 {
            println!(
                "    {name}: per iteration {}; {}",
                tally.per_unit(),
                stats.summary()
            );
        }
    };

    let mut tally = Tally::default();
    let mut stats = PollStats::default();
    group.bench_function("bare", |b| {
        b.iter_custom(|iters| {
            let cpu0 = thread_cpu();
            let (wall, s) = run_task(&rt, async move {
                let mut x = 0u64;
                for i in 0..iters {
                    x = x.wrapping_add(black_box(i));
                }
                x
            });
            tally.add(iters, wall, Some(thread_cpu().saturating_sub(cpu0)));
            stats.merge(s);
            wall
        })
    });
    report("bare", &tally, &stats);

    let mut tally = Tally::default();
    let mut stats = PollStats::default();
    group.bench_function("instant_now", |b| {
        b.iter_custom(|iters| {
            let cpu0 = thread_cpu();
            let (wall, s) = run_task(&rt, async move {
                let mut x = 0u64;
                let mut deadline = Instant::now() + DEFAULT_QUANTUM;
                for i in 0..iters {
                    x = x.wrapping_add(black_box(i));
                    if Instant::now() >= deadline {
                        tokio::task::yield_now().await;
                        deadline = Instant::now() + DEFAULT_QUANTUM;
                    }
                }
                x
            });
            tally.add(iters, wall, Some(thread_cpu().saturating_sub(cpu0)));
            stats.merge(s);
            wall
        })
    });
    report("instant_now", &tally, &stats);

    let mut tally = Tally::default();
    let mut stats = PollStats::default();
    group.bench_function("pacer", |b| {
        b.iter_custom(|iters| {
            let mut pacer = elastic.pacer();
            let cpu0 = thread_cpu();
            let (wall, s) = run_task(&rt, async move {
                let mut x = 0u64;
                for i in 0..iters {
                    pacer.pace().await;
                    x = x.wrapping_add(black_box(i));
                }
                x
            });
            tally.add(iters, wall, Some(thread_cpu().saturating_sub(cpu0)));
            stats.merge(s);
            wall
        })
    });
    report("pacer", &tally, &stats);
    if tally.units > 0 {
        let s = elastic.snapshot();
        println!(
            "    pacer queue: grants {}, waits {}, waiters {}, used {} ms, over-limit {} ns",
            s.queue.grants,
            s.queue.waits,
            s.waiters,
            s.used.as_millis(),
            s.over_limit.as_nanos(),
        );
        if s.queue.waits != 0 || s.waiters != 0 {
            println!("    WARNING: the pacer waited for tokens: the bucket was a bottleneck");
        }
    }
    group.finish();
}

fn gate(c: &mut Criterion) {
    let elastic = unlimited();
    let gate = elastic
        .connection_gate(
            GateSettings::new()
                .share(1.0, 1.0)
                .initial_share(1.0)
                .cap_concurrency(false),
        )
        .expect("valid settings");
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut group = c.benchmark_group("gate");
    group
        .sample_size(SAMPLES)
        .warm_up_time(WARM_UP)
        .measurement_time(MEASURE);
    group.bench_function("admit_release", |b| {
        b.iter(|| {
            let mut admission = gate.admit(Duration::from_secs(1));
            match Pin::new(&mut admission).poll(&mut cx) {
                Poll::Ready(Ok(permit)) => drop(black_box(permit)),
                _ => panic!("not admitted at once: the bucket was a bottleneck"),
            }
        })
    });
    group.finish();
    let s = gate.snapshot();
    if s.admitted > 0 {
        println!(
            "    gate: admitted {}, queued {}, refused {}",
            s.admitted, s.stats.waits, s.rejected
        );
    }
}

/// Rows per `quantum_cost` scan: ~10–20 ms of work here, well inside one 100 ms slice.
const SCAN_ROWS: usize = 1 << 20;

/// One row's work in a `quantum_cost` scan: a few dependent multiply-xorshift rounds.
#[inline]
fn hash_row(acc: u64, row: u64) -> u64 {
    let mut x = acc ^ row;
    for _ in 0..4 {
        x = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    }
    x
}

fn quantum_cost(c: &mut Criterion) {
    use criterion::Throughput;
    use std::sync::Arc;

    let table: Arc<Vec<u64>> = Arc::new((0..SCAN_ROWS as u64).map(|i| i * 7 + 3).collect());
    let mut group = c.benchmark_group("quantum_cost");
    group
        .sample_size(SAMPLES)
        .warm_up_time(WARM_UP)
        .measurement_time(MEASURE)
        .throughput(Throughput::Elements(SCAN_ROWS as u64));
    // "none": the builder's largest quantum, the slice itself (longer than a whole scan).
    // "one_worker*": no other worker is ever parked, so every quantum yields (and, by
    // default, yields the thread's CPU to the OS too): what `os_yield` costs.
    for (name, quantum, workers, os_yield) in [
        ("none", DEFAULT_SLICE, 2, true),
        ("default", DEFAULT_QUANTUM, 2, true),
        ("one_worker", DEFAULT_QUANTUM, 1, true),
        ("one_worker_no_os_yield", DEFAULT_QUANTUM, 1, false),
    ] {
        let elastic = Elastic::builder()
            .fixed_share(1.0)
            .cpus(1024.0)
            .enforcement(Enforcement::default().quantum(quantum).os_yield(os_yield))
            .build()
            .expect("elastic settings");
        let rt = elastic
            .runtime(
                Builder::new_multi_thread()
                    .worker_threads(workers)
                    .enable_all(),
            )
            .build()
            .expect("runtime");
        let mut stats = PollStats::default();
        let mut scans = 0u64;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (table, mut pacer) = (table.clone(), elastic.pacer());
                    let (wall, s) = run_task(&rt, async move {
                        let mut acc = 0u64;
                        for &row in table.iter() {
                            pacer.pace().await;
                            acc = hash_row(acc, black_box(row));
                        }
                        acc
                    });
                    total += wall;
                    scans += 1;
                    stats.merge(s);
                }
                total
            })
        });
        if scans > 0 {
            let s = elastic.snapshot();
            println!(
                "    {name} (quantum {:?}): {:.1} task polls per scan of {SCAN_ROWS} rows; \
                 queue: grants {}, waits {}; OS yields per scan {:.1}",
                quantum,
                stats.polls.len() as f64 / scans as f64,
                s.queue.grants,
                s.queue.waits,
                s.os_yields as f64 / scans as f64,
            );
        }
    }
    group.finish();
}

/// Admission through one class of elastic work or four, from 8 and 32 threads.
fn classes(c: &mut Criterion) {
    let mut group = c.benchmark_group("classes");
    group
        .sample_size(SAMPLES)
        .warm_up_time(WARM_UP)
        .measurement_time(MEASURE);
    for n in [1usize, 4] {
        let elastic = unlimited();
        let handles: Vec<Elastic> = if n == 1 {
            vec![elastic.clone()]
        } else {
            (0..n)
                .map(|i| {
                    let settings = elastic_cpu::settings::ClassSettings::new(format!("c{i}"));
                    elastic.class(settings).expect("class")
                })
                .collect()
        };
        // The split gives each class its part at the governor's next tick.
        std::thread::sleep(Duration::from_millis(300));
        for threads in WORKERS {
            let handles = std::sync::Arc::new(handles.clone());
            let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            group.bench_with_input(
                BenchmarkId::new(format!("admit/{n}"), threads),
                &threads,
                |b, &threads| {
                    b.iter_custom(|iters| {
                        let (handles, next) = (handles.clone(), next.clone());
                        let op = move || {
                            thread_local!(static MINE: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) });
                            let i = MINE.with(|m| {
                                if m.get() == usize::MAX {
                                    m.set(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                                }
                                m.get()
                            });
                            let class = &handles[i % handles.len()];
                            let mut fut = std::pin::pin!(std::future::ready(()).paced(class));
                            let mut cx = Context::from_waker(std::task::Waker::noop());
                            while fut.as_mut().poll(&mut cx).is_pending() {
                                std::hint::spin_loop();
                            }
                        };
                        concurrent(threads, iters, op) / threads as u32
                    })
                },
            );
        }
        let s = elastic.snapshot();
        let waits: u64 = s.waits;
        println!(
            "    {n} class(es): waits on the own class {waits}, classes {:?}",
            (s.classes.iter())
                .map(|c| (c.name.to_string(), c.waiters))
                .collect::<Vec<_>>()
        );
    }
    #[cfg(feature = "test-util")]
    tick_cost(&mut group);
    group.finish();
}

/// One governor tick on a manual clock, with the own class alone and with 64 classes.
#[cfg(feature = "test-util")]
fn tick_cost(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    for n in [1usize, 64] {
        let clock = elastic_cpu_core::ManualClock::new();
        let elastic = Elastic::builder()
            .manual(clock.clone())
            .running_clock(clock.clone())
            .fixed_share(0.5)
            .cpus(8.0)
            .build()
            .expect("elastic settings");
        let classes: Vec<Elastic> = (1..n)
            .map(|i| {
                let settings = elastic_cpu::settings::ClassSettings::new(format!("c{i}"));
                elastic.class(settings).expect("class")
            })
            .collect();
        // Half the classes with work waiting: the split has both kinds to sort.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut waiting: Vec<_> = (classes.iter().step_by(2))
            .map(|c| Box::pin(std::future::pending::<()>().paced(c)))
            .collect();
        for w in &mut waiting {
            let _ = w.as_mut().poll(&mut cx);
        }
        group.bench_function(BenchmarkId::new("tick", n), |b| {
            b.iter(|| {
                clock.advance(Duration::from_millis(100));
                elastic.tick();
            })
        });
        drop(waiting);
    }
}

criterion_group!(
    benches,
    paced_overhead,
    pace_loop,
    gate,
    quantum_cost,
    classes
);
criterion_main!(benches);
