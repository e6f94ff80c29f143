//! What measuring costs.
//!
//! * `probe_overhead/{none,probe,tokio_metrics}/{8,32}`: time per task poll of a poll-heavy
//!   workload (1024 tasks, each `yield_now()` in a loop) on a multi-thread runtime with 8 / 32
//!   workers: plain runtime, runtime instrumented by the probe with its default settings (task
//!   hooks + schedule-latency tracking, poll time on one poll in 8; a thread rotates every 100 ms
//!   as in production), and plain runtime with every task
//!   wrapped by `tokio_metrics::TaskMonitor::instrument` (the peer a user would otherwise pick).
//!   `probe_trap_quiet` and `probe_trap` add the outlier trap at a threshold nothing reaches
//!   (10 s) and at its default floor (1 ms); after each the bench prints what the trap's last
//!   window held.
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
//! * `histogram/window_reread`: `window()` again before the next rotation (a copy).
//! * `outliers/record`: one outlier poll kept on a worker (the site's number, the ring write);
//!   `outliers/collect_128`: one `rotate()` that collects a worker's full ring, and the report.
//! * `io_probe/{off,on}`: time per task poll of the same poll-heavy workload on a runtime with
//!   8 workers and I/O enabled, without and with an `IoProbe` running (its default canaries, a
//!   timerfd on Linux, at the fixed default period, 2 ms; rotated every tick as in
//!   production). The difference is what the I/O probe costs a busy runtime: its task's polls
//!   and I/O driver events on the workers. After them the bench prints `io_probe/cpu_share`:
//!   the probe's own CPU as a share of one core (process CPU time per wall second without and
//!   with it, less the CPU of the load's own work, interleaved rounds): on an idle runtime at
//!   the fixed period from both canary sources and quiet, then following the runtime's load
//!   (the library's default) and at the fixed period under loads of 0–90 % of every CPU (see
//!   `io_probe_cpu_share`).
//! * `run_queue/sample/{8,32}`: one `RunQueueStats::sample()` over a registry of 8 / 32 threads
//!   (one `schedstat` read each, Linux): what the run-queue signal costs the governor per tick.
//!   `run_queue/bystanders/{8,32}`: the same threads unregistered, read as bystanders (a
//!   listing of the process's tasks, then a read each; the bench's own threads join them).
//!
//! ```text
//! cargo bench --bench probe
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use elastic_cpu_core::{Clock, ProcessCpuClock, ThreadCpuClock};
use elastic_cpu_probe::{
    current_tid, IoCanary, IoProbe, IoProbeConfig, Probe, ProbeConfig, RunQueueStats,
    ThreadRegistry, ThreadRole,
};
use tokio::runtime::Runtime;

/// Tasks per run (see the module docs for why this many).
const TASKS: u64 = 1024;

#[derive(Clone, Copy)]
enum Variant {
    None,
    Probe,
    /// The probe with the outlier trap on at a threshold no poll or wait here reaches (10 s):
    /// `probe_trap_quiet − probe` is what the trap adds to a poll below its threshold.
    ProbeTrapQuiet,
    /// The trap at its default floor, 1 ms. With 8 or 32 workers on 2 cores the OS deschedules
    /// workers for milliseconds, so many of this workload's waits pass it: every worker is on
    /// the alert (timing every poll) and records a flood of waits.
    ProbeTrap,
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
            Variant::ProbeTrapQuiet => "probe_trap_quiet",
            Variant::ProbeTrap => "probe_trap",
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
    fn every(tick: Duration, mut rotate: impl FnMut() + Send + 'static) -> Rotator {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(ROTATOR.into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(tick);
                        rotate();
                    }
                })
                .unwrap()
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
    let mut variants = vec![
        Variant::None,
        Variant::Probe,
        Variant::ProbeTrapQuiet,
        Variant::ProbeTrap,
        Variant::TokioMetrics,
    ];
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
                outlier_threshold: match variant {
                    Variant::ProbeTrapQuiet => Some(Duration::from_secs(10)),
                    Variant::ProbeTrap => Some(Duration::from_millis(1)),
                    _ => None,
                },
                ..ProbeConfig::default()
            })
            .unwrap();
            match variant {
                Variant::Probe
                | Variant::ProbeTrapQuiet
                | Variant::ProbeTrap
                | Variant::ProbeEveryPoll
                | Variant::ProbeNoPollTime => {
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
                Variant::Probe
                    | Variant::ProbeTrapQuiet
                    | Variant::ProbeTrap
                    | Variant::ProbeEveryPoll
                    | Variant::ProbeNoPollTime
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
            if matches!(variant, Variant::ProbeTrapQuiet | Variant::ProbeTrap) {
                // How often the trap left its fast path: outliers in the last window.
                let o = probe.outliers();
                let polls: u64 = o.sites.iter().map(|s| s.count).sum();
                let waits: usize = o.longest_waits.len();
                println!(
                    "probe_overhead/{}/{workers}: last window {polls} polls and {}{waits} waits over {:?}, {} missed",
                    variant.name(),
                    if waits == 8 { "8+ " } else { "" },
                    o.threshold.unwrap_or_default(),
                    o.missed
                );
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
    // A second read before the next rotation (the metrics export, a snapshot): a copy.
    probe.rotate();
    black_box(probe.window());
    group.bench_function("window_reread", |b| {
        b.iter(|| black_box(probe.window().queue_p99_trimmed))
    });
    group.finish();
}

/// The outlier trap's slow path and its collection.
fn outliers(c: &mut Criterion) {
    let mut group = c.benchmark_group("outliers");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let config = ProbeConfig {
        outlier_threshold: Some(Duration::from_millis(1)),
        ..ProbeConfig::default()
    };
    let site = std::panic::Location::caller();
    // One outlier poll kept on a worker (inside `block_on` this thread is worker 0, its own
    // slot's ring): the site's number and the ring write (no task id outside a task).
    let current = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let probe = Probe::new(config.clone()).unwrap();
    current.block_on(async {
        group.bench_function("record", |b| {
            b.iter(|| probe.trap_poll(site, Duration::from_millis(2), false))
        });
    });
    group.bench_function("collect_128", |b| {
        // One rotation that collects a full worker ring (128 records) and the report after it.
        let probe = Probe::new(config.clone()).unwrap();
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                current.block_on(async {
                    for _ in 0..128 {
                        probe.trap_poll(site, Duration::from_millis(2), false);
                    }
                });
                let start = Instant::now();
                probe.rotate();
                black_box(probe.outliers().sites.len());
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
        let (rt, io, _rotator) = io_probe_runtime(on.then(IoCanary::default), false, false);
        // A criterion filter may skip the bench: then nothing ran to read a canary.
        let mut ran = false;
        group.bench_function(if on { "on" } else { "off" }, |b| {
            ran = true;
            b.iter_custom(|polls| run_polls(&rt, polls, None))
        });
        if let (true, Some(io)) = (ran, &io) {
            assert!(io.received() > 0, "the I/O probe read no canary");
        }
    }
    group.finish();
    io_probe_cpu_share();
}

/// A runtime (8 workers) with I/O and time enabled (with or without the probe, only the probe
/// differs) and, with `probe`, an `IoProbe` from that canary source on it (`quiet` as given;
/// with `follow_load` its period follows the runtime's load), rotated every tick as in
/// production.
fn io_probe_runtime(
    probe: Option<IoCanary>,
    quiet: bool,
    follow_load: bool,
) -> (Runtime, Option<Arc<IoProbe>>, Option<Rotator>) {
    io_probe_runtime_with(8, probe, quiet, follow_load)
}

/// [`io_probe_runtime`] with `workers` workers.
fn io_probe_runtime_with(
    workers: usize,
    probe: Option<IoCanary>,
    quiet: bool,
    follow_load: bool,
) -> (Runtime, Option<Arc<IoProbe>>, Option<Rotator>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(IO_BENCH_WORKER)
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    let io = probe.map(|canary| {
        let config = IoProbeConfig {
            canary,
            follow_load,
            ..IoProbeConfig::default()
        };
        Arc::new(IoProbe::start(rt.handle(), config).unwrap())
    });
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

/// Spin iterations per µs of CPU on this machine (measured once).
fn spins_per_us() -> u64 {
    static SPINS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SPINS.get_or_init(|| {
        let n = 2_000_000u64;
        let start = Instant::now();
        spin(n);
        (n as f64 / start.elapsed().as_secs_f64() / 1e6).max(1.0) as u64
    })
}

fn spin(n: u64) {
    let mut x = 0u64;
    for i in 0..n {
        x = black_box(x.wrapping_mul(31).wrapping_add(i));
    }
    black_box(x);
}

/// A load on the runtime: one task per CPU, each doing a fixed amount of work, `share` of a
/// ms of CPU, every ms. Fixed work, not a wall-clock spin: a canary that takes a worker's CPU
/// makes the load run longer, so the process's CPU time counts what the probe costs. Returns
/// the CPU time the load's own work has taken so far (nanos; each piece of work timed on its
/// thread's CPU clock), so a round can subtract it: the host's contention moves the time of a
/// fixed piece of work by more than the probe costs, and that variance is the load's own.
fn start_load(rt: &Runtime, share: f64) -> Arc<AtomicU64> {
    let load_cpu = Arc::new(AtomicU64::new(0));
    if share <= 0.0 {
        return load_cpu;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let work = (spins_per_us() as f64 * 1000.0 * share) as u64;
    for _ in 0..cpus {
        let load_cpu = load_cpu.clone();
        rt.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // Both reads in one poll, on one thread: no await between them.
                let start = ThreadCpuClock.now();
                spin(work);
                let took = ThreadCpuClock.now().saturating_sub(start);
                load_cpu.fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
            }
        });
    }
    load_cpu
}

/// The I/O probe's own CPU, in share of one core: the process's CPU time per wall second with
/// and without the probe, less what the load's own work took (timed on its threads' CPU
/// clocks: on a loaded VM the same work takes ±2–4 % more or less CPU from round to round,
/// more than the probe costs, and subtracting it leaves the probe's part), interleaved rounds.
/// Printed, not a criterion figure: criterion plans its iterations from the time it measures,
/// and a CPU time per wall second is not one.
///
/// First on an idle 8-worker runtime, the probe's worst case (each canary wakes a parked worker
/// on a halted CPU): at the fixed default period from both canary sources, and quiet (50 ms);
/// 3 rounds of 2 s. Then as the library runs it (its period following the runtime's load) and
/// at the fixed period, under a load of 0, 25, 50, 75 and 90 % of every CPU run on the runtime as
/// fixed work, with one worker per CPU (tokio's default); 4 rounds of 1.5 s (after the probe's
/// warm-up), and the spread of the rounds' differences. The load ticks every 1 ms: a fixed
/// period of a whole number of ms keeps one phase to it through a round, a following one
/// (stretched by the load) drifts through its phases.
fn io_probe_cpu_share() {
    let fixed = |canary: IoCanary, quiet: bool| (Some(canary), quiet, false, 0.0);
    let mut idle = vec![
        ("on, fixed period", fixed(IoCanary::default(), false)),
        ("quiet", fixed(IoCanary::default(), true)),
    ];
    if IoCanary::default() != IoCanary::Thread {
        idle.push((
            "on, thread canaries, fixed period",
            fixed(IoCanary::Thread, false),
        ));
        idle.push(("quiet, thread canaries", fixed(IoCanary::Thread, true)));
    }
    print_cpu_share("idle 8-worker runtime, fixed period", 8, 3, &idle);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for load in [0.0, 0.25, 0.5, 0.75, 0.9] {
        let variants = [
            (
                "following the load",
                (Some(IoCanary::default()), false, true, load),
            ),
            (
                "fixed period",
                (Some(IoCanary::default()), false, false, load),
            ),
        ];
        let what = format!(
            "{cpus}-worker runtime, load {:.0} % of every CPU",
            load * 100.0
        );
        print_cpu_share(&what, cpus, 4, &variants);
    }
}

/// One line of `io_probe/cpu_share`: `off` (no probe, the first variant's load) against each
/// variant (canary source, quiet, follow_load, load), interleaved.
type ShareVariant<'a> = (&'a str, (Option<IoCanary>, bool, bool, f64));

/// A round's CPU time: the whole process's, and the part the load's own work took.
#[derive(Clone, Copy)]
struct RoundCpu {
    process: Duration,
    load: Duration,
}

impl RoundCpu {
    /// What the process spent besides the load's work: the runtime, the rotator and the probe.
    fn besides_load(self) -> Duration {
        self.process.saturating_sub(self.load)
    }
}

fn print_cpu_share(what: &str, workers: usize, rounds: u32, variants: &[ShareVariant<'_>]) {
    let round = Duration::from_secs(6) / rounds;
    let load = variants.first().map_or(0.0, |v| v.1 .3);
    let all: Vec<ShareVariant<'_>> = std::iter::once(("off", (None, false, false, load)))
        .chain(variants.iter().copied())
        .collect();
    let mut used: Vec<Vec<RoundCpu>> = vec![Vec::new(); all.len()];
    let mut periods = vec![Vec::new(); all.len()];
    for _ in 0..rounds {
        for (v, (_, (canary, quiet, follow_load, load))) in all.iter().enumerate() {
            let (rt, io, rotator) = io_probe_runtime_with(workers, *canary, *quiet, *follow_load);
            let load_cpu = start_load(&rt, *load);
            // Let the workers settle, and a probe that follows the load finish its warm-up (a
            // window's worth of rotations at the full rate) and find its period.
            let warm_up = if *follow_load {
                let c = IoProbeConfig::default().probe;
                c.tick * (c.intervals() as u32 + 3)
            } else {
                Duration::ZERO
            };
            std::thread::sleep(Duration::from_millis(300) + warm_up);
            let Some(cpu) = ProcessCpuClock::now() else {
                println!("io_probe/cpu_share: no process CPU clock on this target");
                return;
            };
            let load_start = load_cpu.load(Ordering::Relaxed);
            std::thread::sleep(round);
            used[v].push(RoundCpu {
                process: ProcessCpuClock::now().unwrap_or(cpu).saturating_sub(cpu),
                load: Duration::from_nanos(
                    load_cpu.load(Ordering::Relaxed).saturating_sub(load_start),
                ),
            });
            if let Some(io) = &io {
                periods[v].push(io.period().as_secs_f64() * 1e3);
            }
            drop(rotator);
            rt.shutdown_background();
        }
    }
    let pct = |d: Duration| 100.0 * d.as_secs_f64() / round.as_secs_f64();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let off = &used[0];
    let parts: Vec<String> = all
        .iter()
        .zip(used.iter().zip(&periods))
        .skip(1)
        .map(|((name, _), (on, p))| {
            let diff = |f: fn(RoundCpu) -> Duration| -> Vec<f64> {
                on.iter()
                    .zip(off)
                    .map(|(on, off)| pct(f(*on)) - pct(f(*off)))
                    .collect()
            };
            let besides = diff(RoundCpu::besides_load);
            let total = diff(|r| r.process);
            let lo = besides.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = besides.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!(
                "{name}: the probe {:+.2} % (rounds {lo:+.2} .. {hi:+.2}; all process CPU {:+.2} %; \
                 period {:.1} ms)",
                mean(&besides),
                mean(&total),
                mean(p),
            )
        })
        .collect();
    let off_total: Vec<f64> = off.iter().map(|r| pct(r.process)).collect();
    let off_besides: Vec<f64> = off.iter().map(|r| pct(r.besides_load())).collect();
    println!(
        "io_probe/cpu_share ({what}): off {:.2} % of one core, {:.2} % besides the load's work; {} \
         (process CPU per wall second less the load's own work's CPU, {rounds} interleaved \
         rounds; canaries: {:?})",
        mean(&off_total),
        mean(&off_besides),
        parts.join("; "),
        IoCanary::default(),
    );
}

/// The runtime's worker threads in `io_probe_runtime`.
const IO_BENCH_WORKER: &str = "io-bench-worker";
/// The thread of a [`Rotator`].
const ROTATOR: &str = "bench-rotator";

/// What the run-queue signal costs per governor tick: one sample over 8 and 32 registered
/// threads (parked while measured, as idle workers are).
fn run_queue(c: &mut Criterion) {
    let mut group = c.benchmark_group("run_queue");
    for threads in [8usize, 32] {
        let registry = ThreadRegistry::new();
        let stop = Arc::new(AtomicBool::new(false));
        let parked: Vec<_> = (0..threads)
            .map(|_| {
                let (registry, stop) = (registry.clone(), stop.clone());
                std::thread::spawn(move || {
                    let _registered = registry.register_current(ThreadRole::Worker).ok();
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::park();
                    }
                })
            })
            .collect();
        while registry.len() < threads {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut stats = RunQueueStats::new(&registry);
        if stats.sample().is_err() {
            println!("run_queue/sample: no per-thread schedstat on this target");
        } else {
            group.bench_function(BenchmarkId::new("sample", threads), |b| {
                b.iter(|| black_box(stats.sample().is_ok()))
            });
            // The same threads unregistered, read as bystanders beside one registered thread.
            let lone = ThreadRegistry::new();
            if let Ok(tid) = current_tid() {
                lone.register(tid, ThreadRole::Worker);
            }
            let mut beside = RunQueueStats::new(&lone).read_bystanders(64);
            group.bench_function(BenchmarkId::new("bystanders", threads), |b| {
                b.iter(|| black_box(beside.sample().is_ok()))
            });
        }
        stop.store(true, Ordering::Relaxed);
        for t in parked {
            t.thread().unpark();
            let _ = t.join();
        }
    }
    // The park hook on a thread already registered: what every park of a worker costs, with
    // one registry and with two sampling the same runtime (taking turns).
    let one = ThreadRegistry::new();
    let _ = one.register_current_worker();
    group.bench_function("known_worker/1", |b| {
        b.iter(|| black_box(one.register_current_worker()))
    });
    let two = ThreadRegistry::new();
    let _ = two.register_current_worker();
    group.bench_function("known_worker/2", |b| {
        b.iter(|| {
            black_box(one.register_current_worker());
            black_box(two.register_current_worker())
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    probe_overhead,
    histogram,
    outliers,
    io_probe,
    run_queue
);
criterion_main!(benches);
