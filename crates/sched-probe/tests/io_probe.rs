//! The I/O wake-up probe end to end on real runtimes: canaries are read and recorded, the probe
//! stops on drop and by itself when the runtime is gone, and a runtime without I/O is a typed
//! error. Counts with generous deadlines; no timing assertions.

mod common;

use common::wait_until;
use std::time::Duration;

use elastic_cpu_probe::{IoProbe, IoProbeConfig, IoProbeError, ProbeConfig};

/// Nothing leaves the window during a test.
fn config() -> IoProbeConfig {
    IoProbeConfig {
        period: Duration::from_millis(1),
        quiet_period: Duration::from_millis(10),
        probe: ProbeConfig {
            window: Duration::from_secs(1000),
            ..ProbeConfig::default()
        },
    }
}

fn one_worker_with_io() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_io()
        .build()
        .unwrap()
}

fn records_then_stops(rt: &tokio::runtime::Runtime) {
    let io = IoProbe::start(rt.handle(), config()).unwrap();
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
    records_then_stops(&rt);
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
        records_then_stops(rt);
        stop_tx.send(()).unwrap();
    });
}

#[test]
fn an_undriven_runtime_gets_no_records_and_the_writer_skips_when_the_buffer_is_full() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    let io = IoProbe::start(rt.handle(), config()).unwrap();
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

#[test]
fn runtime_shutdown_stops_the_probe_without_a_hang() {
    let rt = one_worker_with_io();
    let io = IoProbe::start(rt.handle(), config()).unwrap();
    wait_until(|| io.received() >= 1);
    drop(rt); // drops the reader task and closes its end of the socket
    wait_until(|| !io.is_running()); // the writer notices at its next canary
    let sent = io.sent();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(io.sent(), sent, "the writer has stopped");
    io.rotate();
    assert!(io.window().count >= 1);
    drop(io);
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
    assert_eq!(IoProbeConfig::default().period, Duration::from_millis(1));
}

/// Quiet, the canaries still flow (at the quiet period), and leaving quiet resumes them.
#[test]
fn quiet_canaries_still_flow() {
    let rt = one_worker_with_io();
    let io = IoProbe::start(rt.handle(), config()).unwrap();
    io.set_quiet(true);
    assert!(io.is_quiet());
    let at = io.received();
    wait_until(|| io.received() >= at + 3);
    io.set_quiet(false);
    assert!(!io.is_quiet());
    let at = io.received();
    wait_until(|| io.received() >= at + 10);
    assert!(format!("{io:?}").contains("quiet: false"));
}
