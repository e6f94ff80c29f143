//! Benches of the decision step (`elastic_cpu_core::decide`) and of the governor that drives it.
//!
//! * `decide/step/{1,10,100,1000}` — one tick's decision with that many classes (the own class
//!   and members of the elastic group made with `Elastic::class`, i.e. tenants), every one with
//!   work waiting and running, the signal moving tick to tick: measure, quiet schedule, steer,
//!   step, split by weight, rates and caps. Pure: no clock, no atomics, no I/O.
//! * `governor CPU at N classes` (printed after the benches) — a real `Elastic` with its
//!   governor thread at the default 100 ms tick and N classes made with `Elastic::class`, each
//!   with work waiting: the governor thread's own CPU time (from `/proc`) over 3 s of wall time,
//!   as a share of one CPU. Reading, deciding, applying and publishing, metrics export included
//!   (no recorder is installed: the `metrics` facade's no-op).
//!
//! `cargo bench --bench decide` runs in about half a minute.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use elastic_cpu::PacedExt;
use elastic_cpu_core::decide::{
    ClassKind, ClassReading, Decider, DeciderSettings, Part, QuietWindow, SignalReading,
    SignalSource, TickReadings,
};
use elastic_cpu_core::ControllerConfig;

const CLASSES: [usize; 4] = [1, 10, 100, 1000];
const TICK: Duration = Duration::from_millis(100);

struct Quiet;

impl QuietWindow for Quiet {
    fn quiet_p99(&mut self, _ticks: usize) -> Option<Duration> {
        Some(Duration::from_micros(200))
    }
}

fn decider(classes: usize) -> Decider {
    let mut d = Decider::new(DeciderSettings::new(ControllerConfig::default(), 8.0))
        .expect("valid settings");
    for i in 1..classes {
        let weight = 1.0 + (i % 4) as f64;
        d.add_member(
            ClassKind::Member(i),
            Part::new(&format!("tenant-{i}"), weight, None, 0.0),
        );
    }
    d
}

fn step(c: &mut Criterion) {
    let mut g = c.benchmark_group("decide/step");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(20);
    for n in CLASSES {
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, &n| {
            let mut d = decider(n);
            let mut readings = vec![
                ClassReading {
                    waited: true,
                    busy: true,
                    holders: 1,
                    steering: true,
                    ..ClassReading::default()
                };
                n
            ];
            let mut tick = 0u64;
            b.iter(|| {
                tick += 1;
                for (i, r) in readings.iter_mut().enumerate() {
                    r.charged += Duration::from_micros(50 + (i as u64 % 7) * 10);
                }
                let sched = Duration::from_micros(150 + (tick % 200));
                let r = TickReadings {
                    now: TICK * tick as u32,
                    period: TICK,
                    intervals: 10,
                    signal: SignalReading {
                        value: Some(sched),
                        source: SignalSource::Sched,
                        sched_p99: Some(sched),
                        ..SignalReading::default()
                    },
                    run_queue: None,
                    throttled_periods: 0,
                    process_cpu: Some(TICK * tick as u32),
                    foreground_per_sec: 5_000.0,
                    classes: &readings,
                };
                d.step(black_box(&r), &mut Quiet);
                black_box(d.decisions());
            });
        });
    }
    g.finish();
}

/// The governor thread's CPU time so far, from `/proc/self/task/*/schedstat` (Linux only: its
/// first field is the time the thread ran, in nanoseconds).
fn governor_cpu() -> Option<Duration> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with("elastic-cpu-gov") {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("schedstat")).ok()?;
        let ran: u64 = stat.split_whitespace().next()?.parse().ok()?;
        return Some(Duration::from_nanos(ran));
    }
    None
}

fn governor_share() {
    println!("\ngovernor CPU at N classes (100 ms tick, 3 s each)");
    for n in CLASSES {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let elastic = elastic_cpu::Elastic::builder().build().expect("elastic");
        elastic.attach(rt.handle()).expect("attach");
        let mut classes = Vec::new();
        for i in 1..n {
            let settings = elastic_cpu::settings::ClassSettings::new(format!("tenant-{i}"));
            classes.push(elastic.class(settings).expect("class"));
        }
        // One waiting task per class: each has work, so every class is read and split.
        for class in std::iter::once(&elastic).chain(&classes) {
            let class = class.clone();
            rt.spawn(async move {
                loop {
                    let _ = async { black_box(0) }.paced(&class).await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
        }
        std::thread::sleep(Duration::from_millis(500));
        let (Some(before), start) = (governor_cpu(), std::time::Instant::now()) else {
            println!("  {n:>5} classes: no governor thread found in /proc");
            continue;
        };
        std::thread::sleep(Duration::from_secs(3));
        let after = governor_cpu().unwrap_or(before);
        let share = (after - before).as_secs_f64() / start.elapsed().as_secs_f64();
        println!("  {n:>5} classes: {:.2} % of a CPU", share * 100.0);
        rt.shutdown_background();
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    step(&mut c);
    c.final_summary();
    governor_share();
}
