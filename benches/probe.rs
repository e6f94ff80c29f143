//! What measuring costs.
//!
//! * `probe_overhead/{none,probe,tokio_metrics}/{8,32}`: time per task poll of a poll-heavy
//!   workload (1024 tasks, each `yield_now()` in a loop) on a multi-thread runtime with 8 / 32
//!   workers: plain runtime, runtime instrumented by the probe with its default settings (task
//!   hooks + schedule-latency tracking, poll time on one poll in 8; a thread rotates every 100 ms
//!   as in production), and plain runtime with every task
//!   wrapped by `tokio_metrics::TaskMonitor::instrument` (the peer a user would otherwise pick).
//!   Without `--cfg tokio_unstable` the `probe` variant has no hooks and equals `none`.
//!   With `PROBE_BENCH_BREAKDOWN=1` (and `tokio_unstable`) more variants split the probe's
//!   cost one step at a time: `tracking_only` (tokio's schedule-latency tracking alone: two
//!   clock reads per poll inside tokio), `hooks_empty` (tracking plus empty poll hooks: the hook
//!   calls), `hooks_tls` (hooks touching a thread-local as the probe's do), `hooks_clock` (plus
//!   the two poll-time clock reads, `std::time::Instant`), `hooks_clock_quanta` (the same with
//!   `quanta::Instant`, the TSC), `probe_no_poll_time` (the probe recording queue latency only:
//!   over `hooks_tls`, the histogram record) and `probe_poll_time_every_1` (the probe measuring
//!   poll time on every poll).
//!
//!   Why 1024 tasks: with 64, the runtime settles within a run into one of two steady states on
//!   2 cores (about 65 or 130 ns per poll for the plain runtime, flipping between criterion's
//!   samples), which buries a 10 ns difference; with 1024 every worker always has work and the
//!   figure is stable to a few ns.
//! * `histogram/record`: one `Probe::record_poll` on a runtime worker (slot lookup, two bucket
//!   increments in the worker's own slot).
//! * `histogram/window_p99`: one `rotate()` plus the `window()` query on a full 25-interval
//!   window with samples in several worker slots (what the governor does every tick).
//! * `io_probe/{off,on}`: time per task poll of the same poll-heavy workload on a runtime with
//!   8 workers and I/O enabled, without and with an `IoProbe` running (a canary every 1 ms from
//!   its writer thread, read by its task on the runtime; rotated every tick as in production).
//!   The difference is what the I/O probe costs the foreground: its task's polls and I/O driver
//!   events on the workers, and its writer thread's CPU. After them the bench prints
//!   `io_probe/cpu_share`: the probe's own CPU as a share of one core (process CPU time per
//!   wall second on an idle runtime, without it, with it at 1 ms and quiet at 50 ms, 3
//!   interleaved rounds of 2 s).
//!
//! ```text
//! cargo bench --bench probe
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use elastic_cpu_core::ProcessCpuClock;
use elastic_cpu_probe::{IoProbe, IoProbeConfig, Probe, ProbeConfig};
use tokio::runtime::Runtime;

/// Tasks per run (see the module docs for why this many).
const TASKS: u64 = 1024;

#[derive(Clone, Copy)]
enum Variant {
    None,
    Probe,
    TokioMetrics,
    /// Breakdown (with `PROBE_BENCH_BREAKDOWN=1`): tokio's schedule-latency tracking alone.
    TrackingOnly,
    /// Breakdown: tracking plus empty poll hooks (the cost of calling the hooks).
    HooksEmpty,
    /// Breakdown: the probe with `poll_time_every = 1` (poll time on every poll).
    ProbeEveryPoll,
    /// Breakdown: tracking plus hooks that touch a thread-local as the probe's do (no clock,
    /// no record): the thread-local's cost over `hooks_empty`.
    HooksTls,
    /// Breakdown: `hooks_tls` plus the poll-time clock (`Instant::now()` before, `elapsed()`
    /// after, no record): the two clock reads' cost over `hooks_tls`.
    HooksClock,
    /// Breakdown: `hooks_clock` with `quanta::Instant` (TSC) instead of `std::time::Instant`.
    HooksQuanta,
    /// Breakdown: the probe without poll time (`poll_time_every = u32::MAX`): tracking, hooks,
    /// thread-local and one histogram record of the queue latency per poll; over `hooks_tls`,
    /// the record's cost.
    ProbeNoPollTime,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::None => "none",
            Variant::Probe => "probe",
            Variant::TokioMetrics => "tokio_metrics",
            Variant::TrackingOnly => "tracking_only",
            Variant::HooksEmpty => "hooks_empty",
            Variant::ProbeEveryPoll => "probe_poll_time_every_1",
            Variant::HooksTls => "hooks_tls",
            Variant::HooksClock => "hooks_clock",
            Variant::HooksQuanta => "hooks_clock_quanta",
            Variant::ProbeNoPollTime => "probe_no_poll_time",
        }
    }
}

async fn yields(k: u64) {
    for _ in 0..k {
        tokio::task::yield_now().await;
    }
}

/// Runs about `polls` task polls (TASKS tasks, each yielding `k` times: k + 1 polls) and returns
/// the elapsed time scaled to exactly `polls` polls.
fn run_polls(rt: &Runtime, polls: u64, monitor: Option<&tokio_metrics::TaskMonitor>) -> Duration {
    let k = (polls / TASKS).saturating_sub(1).max(1);
    let actual = TASKS * (k + 1);
    let start = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::with_capacity(TASKS as usize);
        for _ in 0..TASKS {
            tasks.push(match monitor {
                Some(m) => tokio::spawn(m.instrument(yields(k))),
                None => tokio::spawn(yields(k)),
            });
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    start.elapsed().mul_f64(polls as f64 / actual as f64)
}

/// Rotates the probe every tick from its own thread until dropped, as the governor would.
struct Rotator {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Rotator {
    fn start(probe: &Probe) -> Rotator {
        let probe = probe.clone();
        Rotator::every(probe.config().tick, move || {
            probe.rotate();
            black_box(probe.window().queue_latency.all.p99);
        })
    }

    /// Runs `rotate` every `tick` until dropped.
    fn every(tick: Duration, rotate: impl Fn() + Send + 'static) -> Rotator {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    rotate();
                }
            })
        };
        Rotator {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Rotator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn probe_overhead(c: &mut Criterion) {
    let mut group = c.benchmark_group("probe_overhead");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let mut variants = vec![Variant::None, Variant::Probe, Variant::TokioMetrics];
    if cfg!(tokio_unstable) && std::env::var_os("PROBE_BENCH_BREAKDOWN").is_some() {
        variants.extend([
            Variant::TrackingOnly,
            Variant::HooksEmpty,
            Variant::HooksTls,
            Variant::HooksClock,
            Variant::HooksQuanta,
            Variant::ProbeNoPollTime,
            Variant::ProbeEveryPoll,
        ]);
    }
    for workers in [8usize, 32] {
        for &variant in &variants {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(workers);
            let probe = Probe::new(ProbeConfig {
                poll_time_every: match variant {
                    Variant::ProbeEveryPoll => 1,
                    Variant::ProbeNoPollTime => u32::MAX,
                    _ => ProbeConfig::default().poll_time_every,
                },
                ..ProbeConfig::default()
            })
            .unwrap();
            match variant {
                Variant::Probe | Variant::ProbeEveryPoll | Variant::ProbeNoPollTime => {
                    probe.instrument(&mut builder);
                }
                #[cfg(tokio_unstable)]
                Variant::TrackingOnly => {
                    builder.track_task_schedule_latency();
                }
                #[cfg(tokio_unstable)]
                Variant::HooksEmpty => {
                    builder
                        .track_task_schedule_latency()
                        .on_before_task_poll(|m| {
                            black_box(m);
                        })
                        .on_after_task_poll(|m| {
                            black_box(m.schedule_latency());
                        });
                }
                #[cfg(tokio_unstable)]
                Variant::HooksTls => {
                    builder
                        .track_task_schedule_latency()
                        .on_before_task_poll(|_| breakdown::before_tls())
                        .on_after_task_poll(|m| breakdown::after_tls(m.schedule_latency()));
                }
                #[cfg(tokio_unstable)]
                Variant::HooksClock => {
                    builder
                        .track_task_schedule_latency()
                        .on_before_task_poll(|_| breakdown::before_clock())
                        .on_after_task_poll(|m| breakdown::after_clock(m.schedule_latency()));
                }
                #[cfg(tokio_unstable)]
                Variant::HooksQuanta => {
                    builder
                        .track_task_schedule_latency()
                        .on_before_task_poll(|_| breakdown::before_quanta())
                        .on_after_task_poll(|m| breakdown::after_quanta(m.schedule_latency()));
                }
                _ => {}
            }
            let rt = builder.build().unwrap();
            let _rotator = matches!(
                variant,
                Variant::Probe | Variant::ProbeEveryPoll | Variant::ProbeNoPollTime
            )
            .then(|| Rotator::start(&probe));
            let monitor =
                matches!(variant, Variant::TokioMetrics).then(tokio_metrics::TaskMonitor::new);
            group.bench_function(BenchmarkId::new(variant.name(), workers), |b| {
                b.iter_custom(|polls| run_polls(&rt, polls, monitor.as_ref()))
            });
            if let Some(m) = &monitor {
                black_box(m.cumulative().total_poll_count);
            }
        }
    }
    group.finish();
}

/// Hooks for the breakdown variants: the probe's per-poll steps one at a time, on a poll state
/// shaped like the probe's (`hooks.rs`).
#[cfg(tokio_unstable)]
mod breakdown {
    use std::cell::Cell;
    use std::hint::black_box;
    use std::time::{Duration, Instant};

    struct State {
        start: Cell<Option<Instant>>,
        start_q: Cell<Option<quanta::Instant>>,
        elastic: Cell<bool>,
        countdown: Cell<u32>,
    }

    thread_local! {
        static STATE: State = const {
            State {
                start: Cell::new(None),
                start_q: Cell::new(None),
                elastic: Cell::new(false),
                countdown: Cell::new(0),
            }
        };
    }

    pub fn before_tls() {
        let _ = STATE.try_with(|s| {
            s.elastic.set(false);
            s.countdown.set(s.countdown.get().wrapping_add(1));
        });
    }

    pub fn after_tls(latency: Option<Duration>) {
        let e = STATE
            .try_with(|s| s.elastic.replace(false))
            .unwrap_or(false);
        black_box((latency, e));
    }

    pub fn before_clock() {
        let _ = STATE.try_with(|s| {
            s.elastic.set(false);
            s.start.set(Some(Instant::now()));
        });
    }

    pub fn after_clock(latency: Option<Duration>) {
        let (start, e) = STATE
            .try_with(|s| (s.start.take(), s.elastic.replace(false)))
            .unwrap_or((None, false));
        black_box((latency, start.map(|s| s.elapsed()), e));
    }

    pub fn before_quanta() {
        let _ = STATE.try_with(|s| {
            s.elastic.set(false);
            s.start_q.set(Some(quanta::Instant::now()));
        });
    }

    pub fn after_quanta(latency: Option<Duration>) {
        let (start, e) = STATE
            .try_with(|s| (s.start_q.take(), s.elastic.replace(false)))
            .unwrap_or((None, false));
        black_box((latency, start.map(|s| s.elapsed()), e));
    }
}

/// Pseudo-random durations spread log-uniformly over 1 µs .. ~16 ms.
fn durations(n: usize) -> Vec<Duration> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let exp = 10 + x % 14; // 2^10 ns .. 2^23 ns
            Duration::from_nanos((1 << exp) + (x >> 40) % (1 << exp))
        })
        .collect()
}

fn histogram(c: &mut Criterion) {
    let mut group = c.benchmark_group("histogram");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));

    let probe = Probe::new(ProbeConfig::default()).unwrap();
    let values = durations(4096);
    let mut i = 0usize;
    // Inside a current-thread runtime this thread is worker 0: the owned-slot path the hooks use.
    let current = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    current.block_on(async {
        group.bench_function("record", |b| {
            b.iter(|| {
                i = (i + 1) % values.len();
                let v = values[i];
                probe.record_poll(Some(v), Some(v / 2), i.is_multiple_of(8));
            })
        });
    });

    // A full window: 25 intervals, each with samples in the slots of 8 workers.
    let probe = Probe::new(ProbeConfig::default()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(8)
        .build()
        .unwrap();
    let values = Arc::new(values);
    let fill = |probe: &Probe, per_task: usize| {
        rt.block_on(async {
            let mut tasks = Vec::new();
            for t in 0..16 {
                let (probe, values) = (probe.clone(), values.clone());
                tasks.push(tokio::spawn(async move {
                    for j in 0..per_task {
                        let v = values[(t * per_task + j) % values.len()];
                        probe.record_poll(Some(v), Some(v / 4), j.is_multiple_of(4));
                        if j.is_multiple_of(16) {
                            tokio::task::yield_now().await;
                        }
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        })
    };
    for _ in 0..25 {
        fill(&probe, 1000);
        probe.rotate();
    }
    group.bench_function("window_p99", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                fill(&probe, 64); // not timed: fresh samples in several worker slots
                let start = Instant::now();
                probe.rotate();
                black_box(probe.window().queue_latency.all.p99);
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
}

fn io_probe(c: &mut Criterion) {
    let mut group = c.benchmark_group("io_probe");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for on in [false, true] {
        let (rt, io, _rotator) = io_probe_runtime(on, false);
        group.bench_function(if on { "on" } else { "off" }, |b| {
            b.iter_custom(|polls| run_polls(&rt, polls, None))
        });
        if let Some(io) = &io {
            assert!(io.received() > 0, "the I/O probe read no canary");
        }
    }
    group.finish();
    io_probe_cpu_share();
}

/// An 8-worker runtime with I/O enabled (with or without the probe, only the probe differs)
/// and, with `probe`, an `IoProbe` on it (`quiet` as given) rotated every tick as in
/// production.
fn io_probe_runtime(probe: bool, quiet: bool) -> (Runtime, Option<Arc<IoProbe>>, Option<Rotator>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(8)
        .enable_io()
        .build()
        .unwrap();
    let io =
        probe.then(|| Arc::new(IoProbe::start(rt.handle(), IoProbeConfig::default()).unwrap()));
    if let Some(io) = &io {
        io.set_quiet(quiet);
    }
    let rotator = io.clone().map(|io| {
        Rotator::every(io.config().probe.tick, move || {
            io.rotate();
            black_box(io.window().p99);
        })
    });
    (rt, io, rotator)
}

/// The I/O probe's own CPU, in share of one core: the process's CPU time per wall second on an
/// idle runtime (8 workers, I/O enabled), without the probe, with it at its 1 ms period and with
/// it quiet (50 ms), 3 interleaved rounds of 2 s each. Printed, not a criterion figure:
/// criterion plans its iterations from the time it measures, and a CPU time per wall second is
/// not one.
fn io_probe_cpu_share() {
    const ROUND: Duration = Duration::from_secs(2);
    const VARIANTS: [&str; 3] = ["off", "on", "quiet"];
    let mut used = [Duration::ZERO; 3];
    for _ in 0..3 {
        for (v, name) in VARIANTS.iter().enumerate() {
            let _probe = io_probe_runtime(*name != "off", *name == "quiet");
            // Let the workers park before measuring.
            std::thread::sleep(Duration::from_millis(200));
            let Some(cpu) = ProcessCpuClock::now() else {
                println!("io_probe/cpu_share: no process CPU clock on this target");
                return;
            };
            std::thread::sleep(ROUND);
            used[v] += ProcessCpuClock::now().unwrap_or(cpu).saturating_sub(cpu);
        }
    }
    let pct = |d: Duration| 100.0 * d.as_secs_f64() / (3.0 * ROUND.as_secs_f64());
    println!(
        "io_probe/cpu_share: off {:.3} % of one core; on (1 ms) {:.3} %, the probe {:+.3} %; \
         quiet (50 ms) {:.3} %, the probe {:+.3} % (process CPU per wall second, idle runtime, \
         3 interleaved rounds of 2 s)",
        pct(used[0]),
        pct(used[1]),
        pct(used[1]) - pct(used[0]),
        pct(used[2]),
        pct(used[2]) - pct(used[0]),
    );
}

criterion_group!(benches, probe_overhead, histogram, io_probe);
criterion_main!(benches);
