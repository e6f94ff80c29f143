//! With tokio task hooks (`--cfg tokio_unstable`): N polls of instrumented tasks produce N
//! samples, split by the elastic mark. Counts only, never times.
#![cfg(tokio_unstable)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use elastic_cpu_probe::{mark_elastic_poll, Probe, ProbeConfig, Source};

/// What an elastic wrapper does: mark every poll of the inner future.
struct Elastic<F>(Pin<Box<F>>);

impl<F: Future> Future for Elastic<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        mark_elastic_poll();
        self.0.as_mut().poll(cx)
    }
}

async fn yields(k: usize) {
    for _ in 0..k {
        tokio::task::yield_now().await;
    }
}

const FOREGROUND_TASKS: usize = 20;
const ELASTIC_TASKS: usize = 12;
const YIELDS: usize = 50;

/// Poll time on every poll, so both counts are exact.
fn every_poll() -> ProbeConfig {
    ProbeConfig {
        poll_time_every: 1,
        ..ProbeConfig::default()
    }
}

fn run(builder: tokio::runtime::Builder) {
    let w = run_with(builder, every_poll());

    // Each task is polled once per yield plus the final poll.
    let polls = YIELDS as u64 + 1;
    let elastic = ELASTIC_TASKS as u64 * polls;
    let foreground = FOREGROUND_TASKS as u64 * polls;
    assert_eq!(w.poll_time.elastic.count, elastic, "{w:#?}");
    assert_eq!(w.queue_latency.elastic.count, elastic, "{w:#?}");
    assert!(w.poll_time.foreground.count >= foreground, "{w:#?}");
    assert!(w.queue_latency.foreground.count >= foreground, "{w:#?}");
    assert_eq!(
        w.poll_time.all.count,
        w.poll_time.foreground.count + w.poll_time.elastic.count
    );
    assert!(w.queue_latency.all.p99.is_some());
    assert!(w.poll_time.elastic.max.is_some());
}

/// Runs the workload to completion and returns the window over it.
fn run_with(
    mut builder: tokio::runtime::Builder,
    config: ProbeConfig,
) -> elastic_cpu_probe::Window {
    assert_eq!(Probe::source(), Source::Hooks);
    let probe = Probe::new(config).unwrap();
    let rt = probe.instrument(&mut builder).build().unwrap();
    rt.block_on(async {
        // A mark outside any task poll must not leak into the next task poll.
        mark_elastic_poll();
        let mut tasks = Vec::new();
        for _ in 0..FOREGROUND_TASKS {
            tasks.push(tokio::spawn(yields(YIELDS)));
        }
        for _ in 0..ELASTIC_TASKS {
            tasks.push(tokio::spawn(Elastic(Box::pin(yields(YIELDS)))));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    // Dropping the runtime joins its workers: every after-poll hook has run.
    drop(rt);
    probe.rotate();
    probe.window()
}

#[test]
fn multi_thread_counts_every_poll() {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(4);
    run(b);
}

#[test]
fn current_thread_counts_every_poll() {
    run(tokio::runtime::Builder::new_current_thread());
}

#[test]
fn poll_time_every_n_measures_one_poll_in_n() {
    // Current-thread: one thread, one countdown, starting fresh on this test's thread.
    let config = ProbeConfig {
        poll_time_every: 4,
        ..ProbeConfig::default()
    };
    let w = run_with(tokio::runtime::Builder::new_current_thread(), config);
    let polls = (FOREGROUND_TASKS + ELASTIC_TASKS) as u64 * (YIELDS as u64 + 1);
    // Queue latency still on every poll, with the exact elastic split.
    assert_eq!(w.queue_latency.all.count, polls, "{w:#?}");
    assert_eq!(
        w.queue_latency.elastic.count,
        ELASTIC_TASKS as u64 * (YIELDS as u64 + 1)
    );
    // Poll time on every 4th poll.
    assert_eq!(w.poll_time.all.count, polls.div_ceil(4), "{w:#?}");
}

#[test]
fn instrumented_runtime_is_measured_without_a_sampler() {
    // Hooks alone feed the window; rotate by hand while the runtime keeps working.
    let probe = Probe::new(every_poll()).unwrap();
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(2);
    let rt = probe.instrument(&mut b).build().unwrap();
    rt.block_on(async {
        tokio::spawn(yields(10)).await.unwrap();
    });
    drop(rt);
    probe.rotate();
    assert!(probe.window().poll_time.foreground.count >= 11);
}

#[test]
fn default_times_one_poll_in_eight() {
    assert_eq!(ProbeConfig::default().poll_time_every, 8);
    let w = run_with(
        tokio::runtime::Builder::new_current_thread(),
        ProbeConfig::default(),
    );
    let polls = (FOREGROUND_TASKS + ELASTIC_TASKS) as u64 * (YIELDS as u64 + 1);
    assert_eq!(w.queue_latency.all.count, polls, "{w:#?}");
    assert_eq!(w.poll_time.all.count, polls.div_ceil(8), "{w:#?}");
}

/// A task that holds its worker (a busy poll past the threshold) is reported under the line it
/// was spawned at, and the foreground task queued behind it names it as the holder. Only the
/// order of events is asserted: the poll spins until it has run past the threshold.
#[test]
fn the_trap_names_the_spawn_site_of_a_long_poll() {
    let threshold = std::time::Duration::from_millis(2);
    let probe = Probe::new(ProbeConfig {
        outlier_threshold: Some(threshold),
        ..every_poll()
    })
    .unwrap();
    let mut builder = tokio::runtime::Builder::new_current_thread();
    probe.instrument(&mut builder);
    let rt = builder.build().unwrap();
    let line = rt.block_on(async {
        let queued = tokio::spawn(async {}); // waits behind the holder on the one worker
        let line = line!() + 1;
        let holder = tokio::spawn(async move {
            let start = std::time::Instant::now();
            while start.elapsed() <= 2 * threshold {
                std::hint::spin_loop();
            }
        });
        holder.await.unwrap();
        queued.await.unwrap();
        line
    });
    probe.rotate();
    let o = probe.outliers();
    let top = &o.sites[0];
    assert_eq!(top.site.unwrap().line(), line, "{o:#?}");
    assert!(top.site.unwrap().file().ends_with("hooks_runtime.rs"));
    assert!(!top.elastic);
    assert!(top.worst > threshold && top.count >= 1);
    assert!(o.slowest_polls[0].task.is_some());
}
