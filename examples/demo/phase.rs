//! One phase of the run: the runtime under test with its service, the scan (depending on the
//! phase), the load generator, the samples of the timeline, and the phase's summary.

use crate::args::{Kind, PhaseSpec, ProfileSpec};
use crate::ctl::{Control, Mode};
use crate::report::{self, PhaseResult, Point};
use crate::scan::{self, Consume, Counters, ScanStream};
use crate::{tuning, Ctx};
use elastic_cpu_examples::cpu_time::{machine_busy, process_cpu};
use elastic_cpu_examples::fg::{self, FgStats, LoadGen, Rate};
use elastic_cpu_examples::interrupt::{sleep_until, stopped};
use elastic_cpu_examples::latency::{fmt_us, q_us, Latency};
use elastic_cpu_examples::priority::lowest_priority;
use elastic_cpu_examples::stats::mean;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn mode_of(ctx: &Ctx, spec: &PhaseSpec) -> Mode {
    let profile = spec.profile.unwrap_or(ProfileSpec::Default);
    match spec.kind {
        Kind::Baseline | Kind::Unthrottled | Kind::Yield | Kind::Dedicated | Kind::IdleRuntime => {
            Mode::Unpaced
        }
        Kind::Static => Mode::Fixed(ctx.args.static_limit),
        // Later rounds resume where the last paced phase ended, like a service whose
        // controller has been running all along.
        Kind::Paced | Kind::PacedIdle | Kind::Classes => Mode::Controlled {
            profile,
            initial: ctx
                .rest_by_name
                .get(&rest_key(ctx, spec))
                .map(|l| l.clamp(report::LOW_START, report::HIGH_START)),
        },
        Kind::Default | Kind::Culprit => Mode::Library,
        Kind::Step => Mode::Controlled {
            profile,
            initial: ctx
                .rest_level
                .map(|l| l.clamp(report::LOW_START, report::HIGH_START)),
        },
        Kind::Low => Mode::Controlled {
            profile,
            initial: Some(report::LOW_START),
        },
        Kind::High => Mode::Controlled {
            profile,
            initial: Some(report::HIGH_START),
        },
    }
}

/// Where a paced phase's resting limit is kept between rounds: per environment and phase.
pub fn rest_key(ctx: &Ctx, spec: &PhaseSpec) -> String {
    format!("{}/{}", ctx.env.name(), spec.name())
}

pub fn run_phase(ctx: &Ctx, spec: &PhaseSpec, timeline: &mut Vec<Point>) -> PhaseResult {
    let name = spec.name();
    let mut res = PhaseResult::new(&name, spec.kind, ctx.env);
    res.quota_cpus = ctx.quota.as_ref().map(|q| q.cpus);
    if spec.kind.controlled() {
        res.target_us = ctx.target_us;
    }
    // The timeline and the report label quota phases `quota:NAME`.
    let name = res.label();
    res.start_ms = ctx.run_start.elapsed().as_millis() as u64;
    let mode = mode_of(ctx, spec);
    match run_phase_inner(ctx, spec, &name, mode, timeline, &mut res) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("[{name}] failed: {e}");
            res.skipped = Some(e);
        }
    }
    res.end_ms = ctx.run_start.elapsed().as_millis() as u64;
    res
}

/// Where a phase spawns its elastic work: a runtime's handle, or `Elastic::spawn` (the quick
/// start's way, which places it).
pub enum Spawner<'a> {
    Runtime(&'a tokio::runtime::Handle),
    Elastic(&'a Control),
}

impl Spawner<'_> {
    pub fn spawn<F>(&self, fut: F) -> Result<(), String>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self {
            Spawner::Runtime(h) => {
                h.spawn(fut);
                Ok(())
            }
            Spawner::Elastic(ctl) => ctl.spawn(fut),
        }
    }

    pub fn spawn_blocking(&self, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
        match self {
            Spawner::Runtime(h) => {
                h.spawn_blocking(f);
                Ok(())
            }
            Spawner::Elastic(ctl) => ctl.spawn_blocking(f),
        }
    }
}

/// Counters at the start of a phase's measurement window.
struct Mark {
    at: Instant,
    rows: u64,
    cpu: Option<Duration>,
    busy: Option<(Duration, Duration)>,
    used_ns: u64,
    brakes: u64,
    throttling: Option<elastic_cpu_probe::CpuThrottling>,
}

fn run_phase_inner(
    ctx: &Ctx,
    spec: &PhaseSpec,
    name: &str,
    mode: Mode,
    timeline: &mut Vec<Point>,
    res: &mut PhaseResult,
) -> Result<(), String> {
    let a = &ctx.args;
    let ctl = Control::new(a.fg.workers, mode, tuning(ctx))?;
    let addr = fg::start_server(&ctl.rt, a.fg.work_us)?;

    // The elastic scan.
    let stop_scan = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counters::default());
    let mut dedicated = None;
    let mut idle_pool = None;
    let mut classes = None;
    let mut planted: Option<crate::culprit::Longest> = None;
    if spec.kind != Kind::Baseline {
        // The machine's cores (inside a quota, available_parallelism rounds the quota down).
        let cores = ctx.machine_cpus;
        let handle = match spec.kind {
            Kind::Dedicated => {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("dedicated")
                    .enable_all()
                    .build()
                    .map_err(|e| format!("dedicated runtime: {e}"))?;
                let h = rt.handle().clone();
                dedicated = Some(rt);
                h
            }
            Kind::IdleRuntime => {
                // What a Linux user would write instead of this library: the scan on its own
                // runtime, one worker per core, each thread switched to SCHED_IDLE.
                let got = Arc::new(std::sync::Mutex::new(Vec::new()));
                let seen = got.clone();
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(cores)
                    .thread_name("idle-runtime")
                    .on_thread_start(move || {
                        let p = lowest_priority();
                        seen.lock().unwrap().push(p);
                    })
                    .enable_all()
                    .build()
                    .map_err(|e| format!("idle runtime: {e}"))?;
                let h = rt.handle().clone();
                dedicated = Some(rt);
                std::thread::sleep(Duration::from_millis(20));
                let got = got.lock().unwrap().clone();
                let what = match got.iter().copied().collect::<Option<Vec<_>>>() {
                    Some(v) if !v.is_empty() => v[0].to_string(),
                    _ => "normal priority (the OS refused a lower one)".into(),
                };
                eprintln!("[{name}] scan on a separate {cores}-worker runtime at {what}");
                h
            }
            Kind::PacedIdle => {
                let pool = ctl.idle_runtime(cores)?;
                eprintln!(
                    "[{name}] scan paced on the library's idle pool, {cores} workers at {}",
                    pool.priority()
                );
                let h = pool.handle().clone();
                idle_pool = Some(pool);
                h
            }
            _ => ctl.rt.handle().clone(),
        };
        let consume = if spec.kind == Kind::Yield {
            Consume::YieldEach
        } else {
            Consume::Plain
        };
        let paced = !matches!(mode, Mode::Unpaced);
        // The quick start's way: `elastic.spawn` places the work.
        let spawner = if spec.kind.quick_start() {
            Spawner::Elastic(&ctl)
        } else {
            Spawner::Runtime(&handle)
        };
        if a.elastic_mix {
            crate::mix::spawn(&spawner, &ctl, paced, &ctx.table, a, &stop_scan, &counters)?;
        }
        let stream_ranges = if a.elastic_mix {
            Vec::new()
        } else {
            scan::ranges(ctx.table.rows.len(), a.elastic_tasks)
        };
        if spec.kind == Kind::Classes {
            classes = Some(crate::classes::spawn(
                &ctl,
                &ctx.table,
                a.chunk_rows,
                a.elastic_tasks,
                &stop_scan,
                &counters,
            )?);
        }
        let stream_ranges = if spec.kind == Kind::Classes {
            Vec::new()
        } else {
            stream_ranges
        };
        for (from, to) in stream_ranges {
            let s = ScanStream::new(ctx.table.clone(), from, to, a.chunk_rows, stop_scan.clone());
            if paced {
                spawner.spawn(scan::drive(ctl.paced(s), counters.clone(), consume))?;
            } else {
                spawner.spawn(scan::drive(s, counters.clone(), consume))?;
            }
        }
        if spec.kind == Kind::Culprit {
            let (at, longest) = crate::culprit::spawn(ctl.rt.handle(), stop_scan.clone());
            res.planted_at = Some(format!("{}:{}", at.file(), at.line()));
            planted = Some(longest);
            eprintln!(
                "[{name}] planted: a foreground task holding its worker {:?} every {:?}, spawned at {}:{}",
                crate::culprit::HOLD,
                crate::culprit::EVERY,
                at.file(),
                at.line()
            );
        }
        if spec.kind.quick_start() {
            let s = ctl.full_snapshot();
            eprintln!(
                "[{name}] scan spawned as the quick start does: on {:?} ({})",
                s.placement, s.placement_reason
            );
        }
    }

    let rate = Rate::new(ctx.rate);
    let stats = FgStats::new();
    let seed = a.seed.wrapping_add(res.start_ms);
    let lg = LoadGen::start(addr, rate.clone(), a.fg.conns, stats.clone(), seed)?;

    let t0 = Instant::now();
    let phase = Duration::from_secs_f64(a.phase_secs);
    let warmup = Duration::from_secs_f64(a.warmup_secs);
    let mut next = t0;
    let mut last_rows = 0u64;
    let mut last_t = t0;
    let mut last_print = t0;
    let mut print_rows = 0u64;
    let mut measuring: Option<Mark> = None;
    let mut limits = Vec::new();
    let mut scheds = Vec::new();
    let mut stepped = 0;
    // The outlier trap's window: read once per window, on a fixed schedule from the start of
    // the measurement, so each outlier is counted once (to within a governor tick).
    let outlier_window = crate::ctl::probe_window(mode);
    let mut next_outliers: Option<Instant> = None;
    loop {
        next += a.sample;
        sleep_until(next);
        let now = Instant::now();
        let el = now - t0;
        if measuring.is_none() && el >= warmup {
            stats.measure_from_now();
            measuring = Some(Mark {
                at: now,
                rows: counters.rows.load(Ordering::Relaxed),
                cpu: process_cpu(),
                busy: machine_busy(),
                used_ns: ctl.used().as_nanos() as u64,
                brakes: ctl.full_snapshot().brakes,
                throttling: ctx.quota.as_ref().and_then(|q| q.throttling()),
            });
        }
        if spec.kind == Kind::Step {
            let third = phase / 3;
            if stepped == 0 && el >= third {
                rate.set(ctx.rate * report::STEP_FACTOR);
                res.step_ms.push(ctx.run_start.elapsed().as_millis() as u64);
                stepped = 1;
            } else if stepped == 1 && el >= third * 2 {
                rate.set(ctx.rate);
                res.step_ms.push(ctx.run_start.elapsed().as_millis() as u64);
                stepped = 2;
            }
        }
        // The classes phase reads the full snapshot once a sample, for its classes and the rest.
        let full = classes.as_ref().map(|_| ctl.full_snapshot());
        if let (Some(running), Some(s)) = (&classes, &full) {
            if res.first_class_stop_ms.is_none() && el >= phase / 2 {
                running.stop_first.store(true, Ordering::SeqCst);
                res.first_class_stop_ms = Some(ctx.run_start.elapsed().as_millis() as u64);
            }
            let t_ms = ctx.run_start.elapsed().as_millis() as u64;
            let p = crate::classes::sample(
                s,
                t_ms,
                name,
                res.first_class_stop_ms.is_none(),
                res.class_samples.last(),
            );
            res.class_samples.push(p);
        }
        if let Some(m) = &measuring {
            if let (None, Some(planted)) = (next_outliers, &planted) {
                // Holds before the measurement are not in the trap's figures either.
                planted.take();
            }
            let due = *next_outliers.get_or_insert(m.at + outlier_window);
            if now >= due {
                let held_us = planted.as_ref().map(crate::culprit::Longest::take);
                let s = ctl.full_snapshot();
                res.outlier_threshold_us = s.outliers.threshold.map(|t| t.as_secs_f64() * 1e6);
                // The window read may end up to a tick before `due`: look back two windows.
                let paused = !ctx.pauses.between(due - outlier_window * 2, now).is_empty();
                if paused {
                    res.outlier_windows_paused += 1;
                } else {
                    report::add_outliers(&mut res.outliers, &s.outliers);
                    res.outlier_secs += outlier_window.as_secs_f64();
                    if let Some(us) = held_us {
                        let longest = res.planted_longest_us.get_or_insert(0.0);
                        *longest = longest.max(us as f64);
                    }
                }
                // Every poll is a queue-latency sample: the runtime's polls per second.
                let polls = s.window.queue_latency.all.count as f64;
                res.polls_per_sec.push(polls / outlier_window.as_secs_f64());
                next_outliers = Some(due + outlier_window);
            }
        }
        let snap = match &full {
            Some(s) => ctl.snap_of(s),
            None => ctl.snapshot(),
        };
        let h = stats.take_sample();
        let rows = counters.rows.load(Ordering::Relaxed);
        let rps = (rows - last_rows) as f64 / (now - last_t).as_secs_f64();
        last_rows = rows;
        last_t = now;
        timeline.push(Point {
            t_ms: ctx.run_start.elapsed().as_millis() as u64,
            phase: name.to_string(),
            limit: snap.limit,
            headroom_share: snap.headroom_share,
            own_share: snap.own_share,
            idle_share: snap.idle_share,
            sched_p99_us: snap.sched_p99_us,
            sched_fg_p99_us: snap.sched_fg_p99_us,
            sched_elastic_p99_us: snap.sched_elastic_p99_us,
            fg_p99_us: q_us(&h, 0.99),
            elastic_rows_per_sec: rps,
            signal: snap.signal,
            target_us: snap.target_us,
        });
        if measuring.is_some() {
            if let Some(l) = snap.limit {
                limits.push(l);
            }
            if let Some(s) = snap.sched_p99_us {
                scheds.push(s);
            }
        }
        if now - last_print >= Duration::from_millis(995) {
            let h = stats.take_second();
            let rps = (rows - print_rows) as f64 / (now - last_print).as_secs_f64();
            print_rows = rows;
            last_print = now;
            println!(
                "[{:<14} {:>3.0}s] fg p99 {:>7} | sched p99 {:>7} (fg {:>7}) | io p99 {:>7} | rq {:>7} | limit {} | {:>9} {:>7} of {:>6} | elastic {:>6.2}M rows/s",
                name,
                el.as_secs_f64(),
                fmt_us(q_us(&h, 0.99)),
                fmt_us(snap.sched_p99_us),
                fmt_us(snap.sched_fg_p99_us),
                fmt_us(snap.signal.io_p99_us),
                fmt_us(snap.signal.rq_delay_us),
                snap.limit
                    .map(|l| format!("{l:.3}"))
                    .unwrap_or_else(|| "  -  ".into()),
                snap.signal.source,
                fmt_us(snap.signal.signal_p99_us),
                fmt_us(snap.target_us),
                rps / 1e6
            );
        }
        if el >= phase || stopped() {
            break;
        }
    }
    stats.measure_until_now();
    let end = Instant::now();
    let rows_end = counters.rows.load(Ordering::Relaxed);
    let cpu_end = process_cpu();
    let busy_end = machine_busy();
    let used_end = ctl.used().as_nanos() as u64;
    let end_snap = ctl.full_snapshot();
    let brakes_end = end_snap.brakes;
    if end_snap.idle_unstacked > 0 {
        eprintln!(
            "[{name}] idle pool moved a stacked worker {} times",
            end_snap.idle_unstacked
        );
    }
    if spec.kind.quick_start() {
        // `Auto` moves work to the idle pool once its polls run long: where it ended up.
        eprintln!(
            "[{name}] scan ended on {:?} ({})",
            end_snap.placement, end_snap.placement_reason
        );
    }
    // The library's own target, where it measured one: what elastic work may add.
    if spec.kind.quick_start() || (spec.kind.controlled() && ctx.target_us.is_none()) {
        res.target_us = Some(end_snap.target.as_micros() as u64);
    }
    let throttling_end = ctx.quota.as_ref().and_then(|q| q.throttling());
    res.interrupted = stopped();
    res.unanswered = lg.stop_and_drain(Duration::from_secs(3));
    stop_scan.store(true, Ordering::SeqCst);
    if let Some(running) = &classes {
        running.stop();
    }
    ctl.shutdown();
    if let Some(rt) = dedicated {
        rt.shutdown_timeout(Duration::from_secs(3));
    }
    if let Some(pool) = idle_pool {
        pool.shutdown_timeout(Duration::from_secs(3));
    }

    if let Some(Mark {
        at: m0,
        rows: rows0,
        cpu: cpu0,
        busy: busy0,
        used_ns: used0,
        brakes: brakes0,
        throttling: throttling0,
    }) = measuring
    {
        let secs = (end - m0).as_secs_f64().max(1e-9);
        let w = stats.window(&ctx.pauses, m0);
        res.pauses = w.pauses.len();
        res.paused_ms = (w.pauses.iter())
            .map(|&(a, b)| (b - a).as_secs_f64() * 1e3)
            .sum::<f64>()
            + 0.0; // an empty f64 sum is -0.0
        res.left_out = w.left_out;
        if a.hops {
            eprintln!("[{name}] hops: {}", stats.hop_report(&w.pauses));
        }
        let h = w.hist;
        res.raw_p99_us = q_us(&w.raw, 0.99);
        res.raw_hist = Some(w.raw);
        res.rows = rows_end - rows0;
        res.brakes = brakes_end - brakes0;
        res.limits = limits.clone();
        res.scheds = scheds.clone();
        res.measured_secs = secs;
        res.fg = Latency::of(&h);
        res.sched_p99_us = mean(&scheds);
        res.rows_per_sec = (rows_end - rows0) as f64 / secs;
        res.cpu_share = res.rows_per_sec / (ctx.rows_per_cpu_sec * ctx.cpus);
        if !matches!(mode, Mode::Unpaced) {
            res.used_share = Some((used_end - used0) as f64 / 1e9 / secs / ctx.cpus);
        }
        res.limit_mean = mean(&limits);
        res.limit_min = limits.iter().copied().reduce(f64::min);
        res.limit_max = limits.iter().copied().reduce(f64::max);
        res.hist = Some(h);
        if let (Some(c0), Some(c1)) = (cpu0, cpu_end) {
            let machine = ctx.machine_cpus as f64;
            res.process_cpu_share = Some((c1 - c0).as_secs_f64() / secs / machine);
            res.process_cpus = Some((c1 - c0).as_secs_f64() / secs);
        }
        if let (Some(t0), Some(t1)) = (throttling0, throttling_end) {
            let d = t1.since(&t0);
            res.periods = Some(d.periods);
            res.throttled_periods = Some(d.throttled_periods);
            res.throttled_ms = Some(d.throttled_time.as_secs_f64() * 1e3);
        }
        if classes.is_some() {
            let from = m0.duration_since(ctx.run_start).as_millis() as u64;
            res.classes = crate::report::ClassesResult::of(
                &res.class_samples,
                from,
                res.first_class_stop_ms,
                res.end_of_samples(),
            );
        }
        if let (Some((b0, t0)), Some((b1, t1))) = (busy0, busy_end) {
            let dt = (t1 - t0).as_secs_f64();
            if dt > 0.0 {
                res.machine_busy_share = Some((b1 - b0).as_secs_f64() / dt);
            }
        }
    }
    Ok(())
}
