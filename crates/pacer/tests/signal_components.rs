//! The signal's components (issue 16): the I/O wake-up probe and the OS run-queue delay, in the
//! snapshot with their availability; off by setting and on a manual clock; `pace_blocking`
//! threads read as elastic. Real runtimes and the governor thread: only what is measured at
//! all is asserted, never how long anything took (`eventually` is a hang guard).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::eventually;
use elastic_cpu_pacer::settings::Inputs;
use elastic_cpu_pacer::snapshot::{Availability, IO_TARGET_FACTOR};
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::Elastic;
use elastic_cpu_probe::{IoProbeConfig, IoProbeError};

const WITHIN: Duration = Duration::from_secs(30);

fn runtime(elastic: &Elastic) -> tokio::runtime::Runtime {
    elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .build()
        .unwrap()
}

/// A paced loop on the runtime: elastic work, so something steers by the signal.
struct ElasticJob {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl ElasticJob {
    fn start(rt: &tokio::runtime::Runtime, elastic: &Elastic) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut pacer = elastic.pacer();
        let task = {
            let stop = stop.clone();
            rt.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    pacer.pace().await;
                    common::spin(Duration::from_micros(50));
                }
            })
        };
        ElasticJob { stop, task }
    }

    fn stop(self, rt: &tokio::runtime::Runtime) {
        self.stop.store(true, Ordering::Relaxed);
        rt.block_on(self.task).unwrap();
    }
}

#[test]
fn both_components_are_in_the_snapshot() {
    // A target given: the signal is the latency itself (measured, it is what elastic work adds
    // over the quiet baseline: `auto_target.rs`).
    let elastic = Elastic::builder()
        .target_p99(Duration::from_millis(1))
        .build()
        .unwrap();
    // No `enable_io()` here: `runtime(..)` enables the driver for the probe.
    let rt = runtime(&elastic);
    assert!(elastic.snapshot().io_probe.is_on());
    eventually("an I/O p99 in the snapshot", WITHIN, || {
        elastic.snapshot().io_p99.is_some()
    });
    // The I/O p99 joins the signal once its window holds 100 canaries. Quiet (nothing steers,
    // one canary per 50 ms) a 2.5 s window holds 50, so it joins only while something steers:
    // elastic work, which also puts the canaries at the full rate for a window. From then on
    // the signal is at least the I/O p99 over its factor.
    let job = ElasticJob::start(&rt, &elastic);
    eventually("the I/O p99 in the signal", WITHIN, || {
        let s = elastic.snapshot();
        !s.io_quiet
            && s.signal_p99
                .zip(s.io_p99)
                .is_some_and(|(signal, io)| signal >= io / IO_TARGET_FACTOR)
    });
    job.stop(&rt);
    let s = elastic.snapshot();
    let signal = s.signal_p99.expect("a signal once a component has data");
    // The signal is the largest component of the last tick's reading, so at least its run-queue
    // delay. (Not `sched_p99`: that is the window as it is now, with its worst tick, which the
    // signal's scheduling component leaves out.)
    if let Some(rq) = s.run_queue_delay {
        assert!(signal >= rq, "{signal:?} under the run-queue delay {rq:?}");
    }
    if cfg!(target_os = "linux") && std::path::Path::new("/proc/thread-self").exists() {
        eventually("run-queue counters read", WITHIN, || {
            let s = elastic.snapshot();
            s.run_queue.is_on() && s.run_queue_wait.is_some()
        });
        let s = elastic.snapshot();
        assert!(s.run_queue_wait.unwrap() >= 0.0);
        // No `pace_blocking` thread yet: nothing elastic to read.
        assert_eq!(s.elastic_run_queue_wait, None);
    }
    drop(rt);
}

/// The I/O canaries slow to their quiet period while nothing steers by the signal, and speed
/// up again while elastic work runs: to the full rate while it keeps the runtime busy.
#[test]
fn io_canaries_are_quiet_without_elastic_work() {
    let elastic = Elastic::builder().build().unwrap();
    let rt = runtime(&elastic);
    eventually("quiet with no elastic work", WITHIN, || {
        elastic.snapshot().io_quiet
    });
    let quiet = elastic.snapshot().io_period;
    assert_eq!(quiet, Some(IoProbeConfig::default().quiet_period));
    let job = ElasticJob::start(&rt, &elastic);
    eventually("active while elastic work runs", WITHIN, || {
        !elastic.snapshot().io_quiet
    });
    // The pacer's stretches keep the workers busy part of the time: a period shorter than the
    // quiet one (how much shorter depends on the limit the controller has reached).
    eventually("canaries faster than quiet", WITHIN, || {
        let quiet = quiet.expect("the probe runs");
        elastic.snapshot().io_period.is_some_and(|p| p < quiet)
    });
    job.stop(&rt);
    eventually("quiet again once it stopped", WITHIN, || {
        elastic.snapshot().io_quiet
    });
}

#[test]
fn off_by_setting() {
    let elastic = Elastic::builder()
        .inputs(Inputs::default().io_wakeup(false).run_queue(false))
        .build()
        .unwrap();
    let _rt = runtime(&elastic);
    let ticks = elastic.snapshot().ticks;
    eventually("a few governor ticks", WITHIN, || {
        elastic.snapshot().ticks >= ticks + 3
    });
    let s = elastic.snapshot();
    assert_eq!(
        (s.io_probe, s.run_queue),
        (Availability::Off, Availability::Off)
    );
    assert_eq!(
        (s.io_p99, s.run_queue_delay, s.run_queue_wait),
        (None, None, None)
    );
}

#[test]
fn a_manual_clock_turns_both_off() {
    let clock = elastic_cpu_pacer::testing::ManualClock::new();
    let elastic = Elastic::builder().manual(clock).build().unwrap();
    let _rt = runtime(&elastic);
    elastic.tick();
    let s = elastic.snapshot();
    assert_eq!(
        (s.io_probe, s.run_queue),
        (Availability::Off, Availability::Off)
    );
    assert_eq!(s.io_p99, None);
}

#[test]
fn attached_by_hand_without_io() {
    let elastic = Elastic::builder().build().unwrap();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(1);
    let rt = elastic.instrument(&mut builder).build().unwrap();
    elastic.attach(rt.handle()).unwrap();
    assert_eq!(elastic.snapshot().io_probe, Availability::NotStarted);
    // tokio panics registering a socket on a runtime without I/O; the probe catches it.
    let err = elastic.start_io_probe(rt.handle()).unwrap_err();
    assert!(matches!(err, IoProbeError::IoDisabled), "{err}");
    assert!(matches!(
        elastic.snapshot().io_probe,
        Availability::Unavailable(_)
    ));
}

#[test]
#[cfg(target_os = "linux")]
fn pace_blocking_threads_read_as_elastic() {
    if !std::path::Path::new("/proc/thread-self").exists() {
        return; // no thread ids here: the registry cannot work
    }
    let elastic = Elastic::builder().build().unwrap();
    let rt = runtime(&elastic);
    let stop = Arc::new(AtomicBool::new(false));
    let mut pacer = elastic.pacer();
    let job = {
        let stop = stop.clone();
        rt.spawn_blocking(move || {
            while !stop.load(Ordering::Relaxed) {
                pacer.pace_blocking();
                common::spin(Duration::from_micros(200));
            }
        })
    };
    eventually("the blocking thread read as elastic", WITHIN, || {
        elastic.snapshot().elastic_run_queue_wait.is_some()
    });
    stop.store(true, Ordering::Relaxed);
    rt.block_on(job).unwrap();
}

/// Issue 16, item 4: a `pace_blocking` thread competes with the workers for the cores, so its
/// grant counts against the same holder cap as work on the runtime (one work queue).
#[test]
fn a_pace_blocking_holder_counts_against_the_holder_cap() {
    let clock = elastic_cpu_pacer::testing::ManualClock::new();
    // ceil(0.3 × 2) = 1 holder at a time.
    let elastic = common::manual_elastic(&clock, 0.3, 2.0);
    let mut blocking = elastic.pacer();
    blocking.pace_blocking(); // the bucket starts full: granted at once, held
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut on_runtime = elastic.pacer();
    rt.block_on(async {
        let mut pace = std::pin::pin!(on_runtime.pace());
        assert!(poll_once(pace.as_mut()).await.is_pending());
        assert_eq!(
            elastic.snapshot().waiters,
            1,
            "capped behind the blocking holder"
        );
        drop(blocking); // settles its grant: the waiter may hold one now
        elastic.tick();
        assert!(poll_once(pace.as_mut()).await.is_ready());
    });
    assert_eq!(elastic.snapshot().waiters, 0);
}

/// Issue 16, item 4: a `pace_blocking` loop's running time is paid from the same bucket as work
/// on the runtime, so the limit counts the CPU it takes from the workers: its overrun is debt the
/// runtime's elastic work waits out.
#[test]
fn a_pace_blocking_loop_pays_from_the_runtimes_bucket() {
    let clock = elastic_cpu_pacer::testing::ManualClock::new();
    // 10 % of one CPU: 100 ms of tokens per second, one 100 ms slice at a time.
    let elastic = common::manual_elastic(&clock, 0.1, 1.0);
    let mut blocking = elastic.pacer();
    blocking.pace_blocking(); // granted at once: the bucket starts full
    clock.advance(150 * common::MS); // the loop runs 150 ms on its thread
    drop(blocking); // settles: 50 ms over its slice
    let s = elastic.snapshot();
    assert_eq!((s.used, s.over_limit), (150 * common::MS, 50 * common::MS));
    // 150 ms refilled 15 ms: 35 ms of debt.
    assert_eq!((s.tokens, s.debt), (Duration::ZERO, 35 * common::MS));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut on_runtime = elastic.pacer();
    rt.block_on(async {
        let mut pace = std::pin::pin!(on_runtime.pace());
        assert!(poll_once(pace.as_mut()).await.is_pending());
        // 300 ms refill 30 ms: still 5 ms short.
        clock.advance(300 * common::MS);
        elastic.tick();
        assert!(poll_once(pace.as_mut()).await.is_pending());
        clock.advance(100 * common::MS);
        elastic.tick();
        assert!(poll_once(pace.as_mut()).await.is_ready());
    });
    drop(on_runtime);
    common::assert_ledger_balanced(&elastic.snapshot());
}

/// Poll `f` once, whatever it returns.
async fn poll_once<F: std::future::Future>(
    mut f: std::pin::Pin<&mut F>,
) -> std::task::Poll<F::Output> {
    std::future::poll_fn(|cx| std::task::Poll::Ready(f.as_mut().poll(cx))).await
}
