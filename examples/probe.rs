//! The scheduling-latency probe on an 8-worker runtime: idle-ish foreground load, then the same
//! plus CPU-saturating tasks. Prints the window's p99 queue latency and poll time once a second
//! and, at the end, how much the p99 queue latency rose under saturation.
//!
//! ```text
//! cargo run --release --example probe
//! ```
//!
//! Run time: about 8 s (two phases of 4 s). Privileges: none.
//!
//! Built with `--cfg tokio_unstable` (this workspace's default) the probe uses tokio's task poll
//! hooks (every poll is a sample); without it, the sampling fallback (a probe task per ~1 ms that
//! times one wait at the back of a worker's run queue; queue latency only). With hooks, `PROBE_COMPARE_SAMPLER=1` also
//! runs the sampler on a second probe and prints its p99 next to the hooks' figures.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use elastic_cpu_probe::{mark_elastic_poll, Probe, ProbeConfig, Source, Summary, Window};

const WORKERS: usize = 8;
const PHASE: Duration = Duration::from_secs(4);
const SPINNERS: usize = 32;
const SPIN_PER_POLL: Duration = Duration::from_millis(2);

/// Marks every poll of the inner future as elastic, as the pacer's `Paced` does.
struct Elastic<F>(Pin<Box<F>>);

impl<F: Future> Future for Elastic<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        mark_elastic_poll();
        self.0.as_mut().poll(cx)
    }
}

/// Idle-ish foreground: every ~1 ms wake up and spawn a few small tasks.
async fn foreground(stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(1)).await;
        for i in 0..4u64 {
            tokio::spawn(async move {
                // A few microseconds of work.
                let mut x = i;
                for k in 0..500u64 {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(k));
                }
                std::hint::black_box(x);
            });
        }
    }
}

/// CPU-saturating work: spin ~2 ms per poll, then yield.
async fn spinner(stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        while start.elapsed() < SPIN_PER_POLL {
            std::hint::spin_loop();
        }
        tokio::task::yield_now().await;
    }
}

fn fmt(d: Option<Duration>) -> String {
    match d {
        None => "     -".to_string(),
        Some(d) if d < Duration::from_millis(1) => format!("{:>4}µs", d.as_micros()),
        Some(d) => format!("{:>4.1}ms", d.as_secs_f64() * 1e3),
    }
}

fn line(second: u64, phase: &str, w: &Window, sampled: Option<&Window>) {
    let q = &w.queue_latency;
    let p = &w.poll_time;
    let sampled = sampled
        .map(|s| format!(" | sampler p99 {}", fmt(s.queue_latency.all.p99)))
        .unwrap_or_default();
    println!(
        "[{second:>2}s] {phase:<9} queue p99 fg {} elastic {} | poll p99 fg {} elastic {} | \
         samples fg {:>7} elastic {:>6}{sampled}",
        fmt(q.foreground.p99),
        fmt(q.elastic.p99),
        fmt(p.foreground.p99),
        fmt(p.elastic.p99),
        q.foreground.count,
        q.elastic.count.max(p.elastic.count),
    );
}

fn main() {
    let config = ProbeConfig::default();
    let probe = Probe::new(config.clone()).expect("default config is valid");
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(WORKERS).enable_all();
    let rt = probe.instrument(&mut builder).build().expect("runtime");
    // Without hooks the probe samples the runtime. With hooks and PROBE_COMPARE_SAMPLER=1, a
    // second probe runs the sampler alongside, to compare the fallback with the hooks in the same
    // run (the hooks then also see the sampler's tasks).
    let compare = std::env::var_os("PROBE_COMPARE_SAMPLER").is_some();
    let sampler_probe = match Probe::source() {
        Source::Hooks if compare => Some(Probe::new(config.clone()).expect("valid")),
        _ => None,
    };
    let sampler = match (Probe::source(), &sampler_probe) {
        (Source::Sampler, _) => Some(probe.start_sampler(rt.handle())),
        (Source::Hooks, Some(second)) => Some(second.start_sampler(rt.handle())),
        (Source::Hooks, None) => None,
    };
    let _sampler = sampler
        .transpose()
        .expect("the OS refused the sampler's thread");
    println!(
        "elastic-cpu-probe example: {WORKERS} workers, source {:?}, tick {:?}, window {:?}; \
         {:?} idle, then {:?} with {SPINNERS} tasks spinning {:?} per poll",
        Probe::source(),
        config.tick,
        config.window,
        PHASE,
        PHASE,
        SPIN_PER_POLL
    );

    let stop = Arc::new(AtomicBool::new(false));
    rt.spawn(foreground(stop.clone()));

    // This thread drives the ticks (outside the runtime it measures).
    let start = Instant::now();
    let mut next_tick = start;
    let mut ticks = 0u64;
    let mut spinning = false;
    let mut idle_end = Summary::default();
    let mut saturated_end = Summary::default();
    let ticks_per_second = (Duration::from_secs(1).as_nanos() / config.tick.as_nanos()) as u64;
    let phase_ticks = (PHASE.as_nanos() / config.tick.as_nanos()) as u64;
    while ticks < 2 * phase_ticks {
        next_tick += config.tick;
        if let Some(wait) = next_tick.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        probe.rotate();
        if let Some(s) = &sampler_probe {
            s.rotate();
        }
        ticks += 1;
        if !spinning && ticks >= phase_ticks {
            spinning = true;
            for _ in 0..SPINNERS {
                rt.spawn(Elastic(Box::pin(spinner(stop.clone()))));
            }
        }
        if ticks.is_multiple_of(ticks_per_second) {
            let w = probe.window();
            let phase = if ticks <= phase_ticks {
                "idle"
            } else {
                "saturated"
            };
            let sampled = sampler_probe.as_ref().map(Probe::window);
            line(ticks / ticks_per_second, phase, &w, sampled.as_ref());
            if ticks == phase_ticks {
                idle_end = w.queue_latency.foreground;
            }
            if ticks == 2 * phase_ticks {
                saturated_end = w.queue_latency.foreground;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    drop(_sampler);
    rt.shutdown_timeout(Duration::from_secs(1));

    println!(
        "p99 foreground queue latency over the last window of each phase: idle {}, saturated {}",
        fmt(idle_end.p99),
        fmt(saturated_end.p99)
    );
    match (idle_end.p99, saturated_end.p99) {
        (Some(idle), Some(saturated)) => {
            let ratio = saturated.as_secs_f64() / idle.as_secs_f64().max(1e-9);
            let verdict = if ratio >= 5.0 { "ok" } else { "BELOW 5x" };
            println!("ratio saturated/idle: {ratio:.1}x ({verdict})");
        }
        _ => println!("ratio saturated/idle: no data in one of the phases"),
    }
}
