//! The I/O wake-up probe end to end on real runtimes, with each canary source: canaries are read
//! and recorded, the probe stops on drop and by itself when the runtime is gone, a held-up
//! reader's canaries are all counted, the period follows quiet and the runtime's load, and a
//! runtime without I/O is a typed error. Counts with generous deadlines; no timing assertions.

mod common;

use common::wait_until;
use std::time::Duration;

use elastic_cpu_probe::{IoCanary, IoProbe, IoProbeConfig, IoProbeError, ProbeConfig};

/// Nothing leaves the window during a test; the default canary source.
fn config() -> IoProbeConfig {
    IoProbeConfig {
        period: Duration::from_millis(1),
        idle_period: Duration::from_millis(5),
        quiet_period: Duration::from_millis(10),
        probe: ProbeConfig {
            window: Duration::from_secs(1000),
            ..ProbeConfig::default()
        },
        ..IoProbeConfig::default()
    }
}

/// The canary sources this OS has.
fn canaries() -> Vec<IoCanary> {
    if cfg!(target_os = "linux") {
        vec![IoCanary::Timer, IoCanary::Thread]
    } else {
        vec![IoCanary::Thread]
    }
}

/// [`config`] with canaries from `canary`.
fn config_with(canary: IoCanary) -> IoProbeConfig {
    IoProbeConfig { canary, ..config() }
}

/// A current-thread runtime nobody drives until the test calls `block_on`.
fn undriven_with_io() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap()
}

fn one_worker_with_io() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_io()
        .build()
        .unwrap()
}

fn records_then_stops(rt: &tokio::runtime::Runtime, canary: IoCanary) {
    let io = IoProbe::start(rt.handle(), config_with(canary)).unwrap();
    assert!(io.is_running());
    assert_eq!(io.window().count, 0, "nothing rotated yet");
    wait_until(|| io.received() >= 10);
    io.rotate();
    let w = io.window();
    assert!(w.count >= 10, "{w:?}");
    assert!(w.p50.is_some() && w.p99.is_some() && w.max.is_some());
    // The writer counts a canary after its write returns, so the reader may count it first:
    // read `received` before `sent`, and allow the one canary the writer has not counted yet.
    let received = io.received();
    assert!(
        io.sent() + 1 >= received,
        "{} sent, {received} received",
        io.sent()
    );
    assert!(format!("{io:?}").contains("IoProbe"));

    // More canaries land in the next interval; the window holds both.
    let before = w.count;
    wait_until(|| io.received() >= before + 5);
    io.rotate();
    assert!(io.window().count >= before + 5);
    drop(io); // joins the writer, aborts the reader
}

#[test]
fn multi_thread_runtime() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .unwrap();
    for canary in canaries() {
        records_then_stops(&rt, canary);
    }
    // The runtime goes on working after the probe is gone.
    assert_eq!(
        rt.block_on(async { tokio::spawn(async { 7 }).await.unwrap() }),
        7
    );
}

#[test]
fn current_thread_runtime_driven_by_block_on() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::scope(|s| {
        let rt = &rt;
        // Someone has to drive a current-thread runtime (and its I/O driver).
        s.spawn(move || rt.block_on(async { stop_rx.await.ok() }));
        for canary in canaries() {
            records_then_stops(rt, canary);
        }
        stop_tx.send(()).unwrap();
    });
}

#[test]
fn an_undriven_runtime_gets_no_records_and_the_writer_skips_when_the_buffer_is_full() {
    let rt = undriven_with_io();
    let io = IoProbe::start(rt.handle(), config_with(IoCanary::Thread)).unwrap();
    // Nobody drives the runtime: the canaries queue in the socket until it is full.
    wait_until(|| io.skipped() >= 1);
    assert_eq!(io.received(), 0);
    io.rotate();
    assert_eq!(io.window().count, 0);
    assert_eq!(io.window().p99, None);
    // Driving it now reads the queued canaries, each with its own (long) wait.
    let queued = io.sent();
    rt.block_on(async {
        while io.received() < queued {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    io.rotate();
    assert!(io.window().count >= queued);
}

/// The timer's expiries wait for a reader in the kernel's count: once the runtime is driven,
/// every one is recorded with its own wait, the first ones the longest.
#[cfg(target_os = "linux")]
#[test]
fn an_undriven_runtime_keeps_the_timer_expiries_for_the_reader() {
    let rt = undriven_with_io();
    let io = IoProbe::start(rt.handle(), config_with(IoCanary::Timer)).unwrap();
    // Nothing is read while nobody drives the runtime (at least 30 expiries go by: 30 ms).
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!((io.sent(), io.received()), (0, 0));
    rt.block_on(async {
        while io.received() < 30 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    assert_eq!(io.skipped(), 0, "a window holds them all");
    io.rotate();
    let w = io.window();
    assert!(w.count >= 30, "{w:?}");
    // The first read found ≥ 30 expiries at once: the oldest had waited ≥ 29 periods.
    assert!(w.max.unwrap() >= Duration::from_millis(29), "{w:?}");
}

/// A reader held up for longer than the window records a window's worth of the newest
/// expiries and counts the older ones as skipped.
#[cfg(target_os = "linux")]
#[test]
fn a_timer_backlog_past_the_window_is_skipped_not_recorded() {
    let rt = undriven_with_io();
    // A 100 ms window (10 ticks of 10 ms) at 1 ms: of a backlog, the newest 100 are recorded.
    let config = IoProbeConfig {
        probe: ProbeConfig {
            tick: Duration::from_millis(10),
            window: Duration::from_millis(100),
            ..ProbeConfig::default()
        },
        ..config_with(IoCanary::Timer)
    };
    let io = IoProbe::start(rt.handle(), config).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    rt.block_on(async {
        while io.sent() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    // The runtime is no longer driven: the counts stand still. The first read found ≥ 250
    // expiries, recorded the newest 100 and skipped the rest; later reads skipped none.
    assert!(io.skipped() >= 150, "{io:?}");
    assert!(io.received() >= 100, "{io:?}");
    assert_eq!(io.sent(), io.received() + io.skipped(), "{io:?}");
}

#[test]
fn runtime_shutdown_stops_the_probe_without_a_hang() {
    for canary in canaries() {
        let rt = one_worker_with_io();
        let io = IoProbe::start(rt.handle(), config_with(canary)).unwrap();
        wait_until(|| io.received() >= 1);
        drop(rt); // drops the reader task, which closes its end (and disarms the timer)
        wait_until(|| !io.is_running()); // a writer thread notices at its next canary
        let sent = io.sent();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(io.sent(), sent, "{canary:?}: no more canaries");
        io.rotate();
        assert!(io.window().count >= 1);
        drop(io);
    }
}

#[test]
fn shut_down_runtime_refuses_to_start() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_io()
        .build()
        .unwrap();
    let handle = rt.handle().clone();
    drop(rt);
    match IoProbe::start(&handle, config()) {
        Err(IoProbeError::Socket(e)) => assert!(!e.to_string().is_empty()),
        // If tokio ever accepts the registration, the probe must still wind down by itself.
        Ok(io) => wait_until(|| !io.is_running()),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[test]
fn a_runtime_without_io_is_a_typed_error() {
    for mut builder in [
        tokio::runtime::Builder::new_current_thread(),
        tokio::runtime::Builder::new_multi_thread(),
    ] {
        let rt = builder.enable_time().build().unwrap();
        let err = IoProbe::start(rt.handle(), config()).unwrap_err();
        assert!(matches!(err, IoProbeError::IoDisabled), "{err:?}");
        assert!(err.to_string().contains("enable_io"), "{err}");
        // The runtime is unharmed.
        rt.block_on(async { tokio::spawn(async {}).await.unwrap() });
    }
}

#[test]
fn bad_settings_are_refused_with_the_setting_named() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let zero = IoProbeConfig {
        period: Duration::ZERO,
        ..IoProbeConfig::default()
    };
    let Err(IoProbeError::Setting(e)) = IoProbe::start(rt.handle(), zero) else {
        panic!("period 0 accepted")
    };
    assert_eq!(e.setting, "period");

    let quiet_too_short = IoProbeConfig {
        quiet_period: Duration::from_micros(500),
        ..IoProbeConfig::default()
    };
    let err = IoProbe::start(rt.handle(), quiet_too_short).unwrap_err();
    assert!(matches!(&err, IoProbeError::Setting(e) if e.setting == "quiet_period"));

    let short_window = IoProbeConfig {
        probe: ProbeConfig {
            window: Duration::from_millis(1),
            ..ProbeConfig::default()
        },
        ..IoProbeConfig::default()
    };
    let err = IoProbe::start(rt.handle(), short_window).unwrap_err();
    assert!(matches!(&err, IoProbeError::Setting(e) if e.setting == "window"));
    assert!(std::error::Error::source(&err).is_some());
    assert_eq!(IoProbeConfig::default().period, Duration::from_millis(2));
}

/// Quiet, the canaries still flow (at the quiet period), and leaving quiet resumes them.
#[test]
fn quiet_canaries_still_flow() {
    for canary in canaries() {
        let rt = one_worker_with_io();
        let io = IoProbe::start(rt.handle(), config_with(canary)).unwrap();
        io.set_quiet(true);
        assert!(io.is_quiet());
        assert_eq!(io.period(), Duration::from_millis(10));
        let at = io.received();
        wait_until(|| io.received() >= at + 3);
        io.set_quiet(false);
        assert!(!io.is_quiet());
        assert_eq!(io.period(), Duration::from_millis(1));
        let at = io.received();
        wait_until(|| io.received() >= at + 10);
        assert!(format!("{io:?}").contains("quiet: false"));
    }
}

/// The period follows the runtime's load, measured at each rotate: an idle runtime stretches it
/// to `idle_period`, a busy one brings it back toward `period`; with `follow_load` off it
/// stays.
#[test]
fn the_period_follows_the_runtime_load() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    for canary in canaries() {
        let rt = one_worker_with_io();
        // The default window: 25 rotations of 100 ms.
        let config = IoProbeConfig {
            probe: ProbeConfig::default(),
            ..config_with(canary)
        };
        let io = IoProbe::start(rt.handle(), config).unwrap();
        let fixed = IoProbeConfig {
            follow_load: false,
            ..config_with(canary)
        };
        let fixed = IoProbe::start(rt.handle(), fixed).unwrap();
        // Idle: the worker only reads canaries, a small share of its time. The first window's
        // worth of rotations (the default 25) stays at the full rate.
        for _ in 0..24 {
            io.rotate();
            assert_eq!(
                io.period(),
                Duration::from_millis(1),
                "{canary:?} warming up"
            );
        }
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(20));
            io.rotate();
            fixed.rotate();
        }
        assert_eq!(io.period(), Duration::from_millis(5), "{canary:?} idle");
        assert_eq!(fixed.period(), Duration::from_millis(1));
        let at = io.received();
        wait_until(|| io.received() >= at + 3);
        // Busy: a task whose polls each hold the worker for 2 ms, yielding in between. (A task
        // that only yields is not enough: tokio counts the driver polls between its polls as
        // parked time, and such a worker reads about half busy.)
        let stop = Arc::new(AtomicBool::new(false));
        let spinning = {
            let stop = stop.clone();
            rt.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let held = std::time::Instant::now();
                    while held.elapsed() < Duration::from_millis(2) {
                        std::hint::spin_loop();
                    }
                    tokio::task::yield_now().await;
                }
            })
        };
        io.rotate();
        wait_until(|| {
            std::thread::sleep(Duration::from_millis(20));
            io.rotate();
            io.period() < Duration::from_millis(5)
        });
        stop.store(true, Ordering::Relaxed);
        rt.block_on(spinning).unwrap();
        let at = io.received();
        wait_until(|| io.received() >= at + 10);
    }
}
