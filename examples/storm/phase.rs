//! One phase of the run: the service's runtime and ports, the foreground load, the connecting
//! clients (depending on the phase), the storm's steps, a sample each second, and the phase's
//! summary over its measurement window.

use crate::args::Kind;
use crate::clients::{Clients, Params};
use crate::report::{Point, Report, Segment};
use crate::server::{self, Admission, Crowd, Service};
use crate::setup::{Ledger, Setup, Totals};
use crate::Ctx;
use elastic_cpu::gate::GateSettings;
use elastic_cpu::Elastic;
use elastic_cpu_examples::cpu_time::{machine_busy, process_cpu};
use elastic_cpu_examples::fg::{self, FgStats, LoadGen, Rate};
use elastic_cpu_examples::interrupt::{sleep_until, stopped};
use elastic_cpu_examples::latency::{fmt_us, q_us};
use elastic_cpu_examples::stats::mean;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// The service's runtime, built through the library in every phase (the probe installed, so
/// scheduling latency costs the same everywhere), steered by `target` (the library's default
/// without one).
pub fn service_runtime(
    workers: usize,
    target: Option<Duration>,
    unstack: bool,
) -> Result<(Elastic, Runtime), String> {
    let mut builder = Elastic::builder();
    if let Some(t) = target {
        builder = builder.target_p99(t);
    }
    if !unstack {
        builder = builder
            .enforcement(elastic_cpu::settings::Enforcement::default().unstack_workers(false));
    }
    let elastic = builder.build().map_err(|e| format!("elastic: {e}"))?;
    let rt = (elastic.runtime(fg::runtime_builder(workers)).build())
        .map_err(|e| format!("runtime: {e}"))?;
    Ok((elastic, rt))
}

/// A step of the storm: from `from` (a share of the phase) on, connection demand is `demand`
/// x the peak (the peak is `--peak` x capacity) and the foreground rate `fg` x calm's.
pub struct Step {
    pub from: f64,
    pub demand: f64,
    pub fg: f64,
}

/// Up to the peak, the foreground 1.5x halfway through the storm, both back down.
pub const STEPS: [Step; 6] = [
    Step {
        from: 0.0,
        demand: 0.05,
        fg: 1.0,
    },
    Step {
        from: 0.1,
        demand: 0.3,
        fg: 1.0,
    },
    Step {
        from: 0.25,
        demand: 1.0,
        fg: 1.0,
    },
    Step {
        from: 0.5,
        demand: 1.0,
        fg: 1.5,
    },
    Step {
        from: 0.75,
        demand: 0.3,
        fg: 1.0,
    },
    Step {
        from: 0.9,
        demand: 0.05,
        fg: 1.0,
    },
];

/// The storm phases' measurement window (shares of the phase): from the first step above
/// capacity to the last.
pub const STORM_WINDOW: (f64, f64) = (0.1, 0.9);

/// Where `el` seconds into a phase of `secs` stands in a storm phase's steps (a share of it):
/// a storm phase's own; calm's and capacity's measurement window `window` mapped onto the storm
/// phases' window, so they run the same foreground steps over what they measure: the p99s
/// compare the same foreground with and without the storm, and the setups per second the same
/// spare CPU (the foreground's 1.5x step takes a quarter of a CPU from the setups).
fn storm_share(kind: Kind, el: f64, secs: f64, window: (f64, f64)) -> Option<f64> {
    match kind {
        k if k.storm() => Some(el / secs),
        Kind::Calm | Kind::Capacity => {
            let into = ((el - window.0) / (window.1 - window.0).max(1e-9)).max(0.0);
            Some(STORM_WINDOW.0 + (STORM_WINDOW.1 - STORM_WINDOW.0) * into)
        }
        _ => None,
    }
}

pub fn run(ctx: &Ctx, kind: Kind, round: usize, rep: &mut Report) -> Segment {
    let mut seg = Segment::new(kind, round);
    seg.start_ms = ctx.run_start.elapsed().as_millis() as u64;
    if let Err(e) = run_inner(ctx, kind, &mut seg, rep) {
        eprintln!("[{}] failed: {e}", kind.name());
        seg.skipped = Some(e);
    }
    seg.end_ms = ctx.run_start.elapsed().as_millis() as u64;
    seg
}

/// Whether the phase runs its setups on the idle pool: the gated phase's TLS setups, unless
/// `--gate-setups runtime`.
fn on_idle_pool(ctx: &Ctx, kind: Kind) -> bool {
    matches!(ctx.setup, Setup::Tls { .. }) && kind == Kind::Gated && ctx.args.gate_setups == "idle"
}

fn admission(
    ctx: &Ctx,
    kind: Kind,
    elastic: &Elastic,
    seg: &mut Segment,
) -> Result<Admission, String> {
    let a = &ctx.args;
    Ok(match kind {
        Kind::Calm | Kind::Capacity | Kind::Open => Admission::Open,
        Kind::Static => {
            let rate = ctx.capacity.ok_or("no capacity measured")? * a.static_share;
            seg.static_rate = Some(rate);
            Admission::fixed_rate(rate)
        }
        Kind::Gated => {
            let deadline = Duration::from_millis(a.gate_deadline_ms);
            let settings = GateSettings::new()
                .deadline(deadline)
                .max_queue(a.gate_queue)
                .setup_cost(ctx.setup.cpu());
            let gate = elastic
                .connection_gate(settings)
                .map_err(|e| format!("gate: {e}"))?;
            Admission::Gated {
                gate,
                deadline,
                crowd: a.gate_crowd_hint.then(Crowd::new),
            }
        }
    })
}

/// Counters at the start of the measurement window.
struct Mark {
    at: Instant,
    ledger: Totals,
    clients: [u64; 4],
}

fn client_totals(c: &Option<Clients>) -> [u64; 4] {
    c.as_ref().map_or([0; 4], |c| {
        let t = &c.totals;
        [
            t.ok.load(Ordering::Relaxed),
            t.timeouts.load(Ordering::Relaxed),
            t.rejects.load(Ordering::Relaxed),
            t.errors.load(Ordering::Relaxed),
        ]
    })
}

fn run_inner(ctx: &Ctx, kind: Kind, seg: &mut Segment, rep: &mut Report) -> Result<(), String> {
    let a = &ctx.args;
    let name = kind.name();
    let (elastic, rt) = service_runtime(
        a.fg.workers,
        a.target_us.map(Duration::from_micros),
        !a.no_unstack,
    )?;
    let fg_addr = fg::start_server(&rt, a.fg.work_us)?;
    let rate = Rate::new(ctx.rate);
    let stats = FgStats::new();
    let seed = a.seed.wrapping_add(seg.start_ms);
    let lg = LoadGen::start(fg_addr, rate.clone(), a.fg.conns, stats.clone(), seed)?;

    let idle = if on_idle_pool(ctx, kind) {
        let pool = elastic.idle_runtime(ctx.cpus());
        Some(pool.map_err(|e| format!("idle pool: {e}"))?)
    } else {
        None
    };
    let (svc, mut clients) = if kind == Kind::Calm {
        (None, None)
    } else {
        let svc = Arc::new(Service {
            setup_pool: idle.as_ref().map(|p| p.handle().clone()),
            admission: admission(ctx, kind, &elastic, seg)?,
            setup: ctx.setup.clone(),
            work_us: a.fg.work_us,
            ledger: Ledger::default(),
            client_timeout: Duration::from_millis(a.timeout_ms),
        });
        let addr = server::start(&rt, svc.clone())?;
        let p = Params {
            addr,
            timeout: (kind != Kind::Capacity).then(|| Duration::from_millis(a.timeout_ms)),
            think: Duration::from_millis(a.think_ms),
            requests: a.requests,
            cert: ctx.setup.cert().map(<[u8]>::to_vec),
            polite: a.clients == "polite",
        };
        let mut c = Clients::start(p)?;
        if kind == Kind::Capacity {
            c.set_population(a.capacity_clients);
        }
        (Some(svc), Some(c))
    };

    let secs = match kind {
        Kind::Calm => a.calm_secs(),
        Kind::Capacity => a.capacity_secs,
        _ => a.storm_secs,
    };
    let (w0, w1) = if kind.storm() {
        (secs * STORM_WINDOW.0, secs * STORM_WINDOW.1)
    } else {
        (a.warmup_secs, secs)
    };
    // Clients per unit of demand: each asks for a setup about once per think time.
    let peak_clients = ctx.capacity.unwrap_or(0.0) * a.peak * a.think_ms as f64 / 1e3;
    let t0 = Instant::now();
    let sample = Duration::from_secs(1);
    let mut next = t0;
    let mut step = usize::MAX;
    let mut mark: Option<Mark> = None;
    let mut last = (t0, Totals::default(), client_totals(&clients));
    let cpus = |c: &Option<Clients>| {
        (
            process_cpu().unwrap_or_default(),
            c.as_ref().and_then(Clients::cpu).unwrap_or_default(),
            machine_busy().map(|(busy, _)| busy),
        )
    };
    let mut last_cpu = cpus(&clients);
    let mut shares = Vec::new();
    let mut population = 0usize;
    let mut fg_factor = 1.0;
    loop {
        let el = t0.elapsed().as_secs_f64();
        if let Some(at) = storm_share(kind, el, secs, (w0, w1)) {
            let s = STEPS.iter().rposition(|s| at >= s.from).unwrap_or(0);
            if s != step {
                step = s;
                // Calm and capacity mark their foreground steps only; capacity keeps its
                // closed-loop clients.
                let marked = kind.storm() || STEPS[s].fg != fg_factor;
                fg_factor = STEPS[s].fg;
                rate.set(ctx.rate * fg_factor);
                if kind.storm() {
                    population = (STEPS[s].demand * peak_clients).round() as usize;
                    if let Some(c) = clients.as_mut() {
                        c.set_population(population);
                    }
                }
                if s > 0 && marked {
                    seg.step_ms.push(ctx.run_start.elapsed().as_millis() as u64);
                }
            }
        }
        next += sample;
        sleep_until(next);
        let now = Instant::now();
        let el = (now - t0).as_secs_f64();
        let led = svc
            .as_ref()
            .map_or(Totals::default(), |s| s.ledger.totals());
        let cl = client_totals(&clients);
        if mark.is_none() && el >= w0 {
            stats.measure_from_now();
            mark = Some(Mark {
                at: now,
                ledger: led,
                clients: cl,
            });
        }
        let dt = (now - last.0).as_secs_f64().max(1e-9);
        let d = led.since(&last.1);
        let timeouts = (cl[1] - last.2[1]) as f64 / dt;
        let cpu = cpus(&clients);
        let server_cpu = (cpu.0.saturating_sub(last_cpu.0)).as_secs_f64() / dt;
        let client_cpu = (cpu.1.saturating_sub(last_cpu.1)).as_secs_f64() / dt;
        // What else ran on the machine: its busy time less both processes' (clock ticks:
        // clamped at zero).
        let others_cpu = match (cpu.2, last_cpu.2) {
            (Some(now), Some(then)) => Some(
                (now.saturating_sub(then).as_secs_f64() / dt - server_cpu - client_cpu).max(0.0),
            ),
            _ => None,
        };
        last_cpu = cpu;
        last = (now, led, cl);
        if let Some(s) = &svc {
            s.admission.set_pressure(
                (d.rejected + d.expired) as f64 / dt,
                (d.completed + d.wasted) as f64 / dt,
            );
        }
        let (share, queue, in_flight) = match svc.as_ref().map(|s| &s.admission) {
            Some(Admission::Gated { gate, .. }) => {
                let g = gate.snapshot();
                let cap = g.stats.max_in_setup;
                (
                    Some(g.share),
                    Some(g.queue_len as f64),
                    Some((g.in_setup, cap)),
                )
            }
            _ => (None, None, None),
        };
        if mark.is_some() && el <= w1 + 0.5 {
            if let Some(s) = share {
                shares.push(s);
            }
        }
        let h = stats.take_sample();
        let p = Point {
            t_ms: ctx.run_start.elapsed().as_millis() as u64,
            phase: name.to_string(),
            fg_p99_us: q_us(&h, 0.99),
            completed_per_sec: d.completed as f64 / dt,
            wasted_cpu: d.wasted_ns as f64 / 1e9 / dt,
            useful_cpu: d.useful_ns as f64 / 1e9 / dt,
            rejected_per_sec: d.rejected as f64 / dt,
            expired_per_sec: d.expired as f64 / dt,
            timeouts_per_sec: timeouts,
            server_cpu,
            client_cpu,
            others_cpu,
            share,
            queue,
            population,
            fg_factor,
        };
        println!(
            "[{:<8} {:>3.0}s] est p99 {:>7} | clients {:>5} fg {:.1}x | setups {:>4.0}/s wasted {:>4.2} cpu | rej {:>5.0}/s exp {:>4.0}/s timeouts {:>5.0}/s | cpu {:.2} + clients {:.2} + others {} | age {}{}",
            name,
            el,
            fmt_us(p.fg_p99_us),
            population,
            fg_factor,
            p.completed_per_sec,
            p.wasted_cpu,
            p.rejected_per_sec,
            p.expired_per_sec,
            p.timeouts_per_sec,
            server_cpu,
            client_cpu,
            others_cpu.map_or("-".into(), |o| format!("{o:.2}")),
            d.hello_age_ms().map_or("-".into(), |a| format!("{a:.0}ms")),
            match (share, queue) {
                (Some(s), Some(q)) => {
                    // What the gate's controller steered by (the elastic signal it shares).
                    let e = elastic.snapshot();
                    format!(
                        " | share {s:.2} queue {q:.0} in setup {} of {} | signal {} ({}, sched {}, io {})",
                        in_flight.map_or(0, |f| f.0),
                        in_flight.map_or(0, |f| f.1),
                        fmt_us(e.signal_p99.map(|d| d.as_secs_f64() * 1e6)),
                        e.signal_source,
                        fmt_us(e.sched_p99.map(|d| d.as_secs_f64() * 1e6)),
                        fmt_us(e.io_p99.map(|d| d.as_secs_f64() * 1e6)),
                    )
                }
                _ => String::new(),
            }
        );
        rep.timeline.push(p);
        if let Some(m) = &mark {
            if el >= w1 && seg.measured_secs == 0.0 {
                stats.measure_until_now();
                seg.measured_secs = (now - m.at).as_secs_f64();
                seg.setups = led.since(&m.ledger);
                for (i, x) in seg.clients.iter_mut().enumerate() {
                    *x = cl[i] - m.clients[i];
                }
            }
        }
        if el >= secs || stopped() {
            if let (Some(m), 0.0) = (&mark, seg.measured_secs) {
                stats.measure_until_now();
                seg.measured_secs = (now - m.at).as_secs_f64();
                seg.setups = led.since(&m.ledger);
                for (i, x) in seg.clients.iter_mut().enumerate() {
                    *x = cl[i] - m.clients[i];
                }
            }
            break;
        }
    }
    seg.interrupted = stopped();
    seg.unanswered = lg.stop_and_drain(Duration::from_secs(3));
    drop(clients);
    rt.shutdown_timeout(Duration::from_secs(3));
    if let Some(idle) = idle {
        idle.shutdown_timeout(Duration::from_secs(3));
    }
    drop(elastic);

    if let Some(m) = mark {
        let w = stats.window(&ctx.pauses, m.at);
        seg.pauses = w.pauses.len();
        seg.left_out = w.left_out;
        seg.raw_p99_us = q_us(&w.raw, 0.99);
        seg.share_mean = mean(&shares);
        seg.hist = Some(w.hist);
    }
    Ok(())
}
