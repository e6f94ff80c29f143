//! The poll quantum's yield lets the tasks its own I/O driver poll woke run first, on a
//! multi-thread runtime, for a paced stream, a `Pacer` loop and a gate's setup permit.
//!
//! The set-up: one worker; a reader task waits on a socket; elastic work runs one stretch of a
//! quantum (manual running clock) during which a thread outside the runtime writes to the
//! socket, then yields. The worker's next driver poll wakes the reader. Without the yield's
//! second step the elastic task, woken from tokio's defer list after that poll, would take the
//! LIFO slot and run its next stretch first. Order is what is asserted, never time.

mod common;

use std::io::Write;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::{Elastic, GateSettings, PacedStreamExt, DEFAULT_QUANTUM};
use tokio::runtime::{Builder, Runtime};

type Log = Arc<Mutex<Vec<&'static str>>>;

fn one_worker() -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(1)
        .enable_io()
        .build()
        .expect("runtime")
}

fn elastic(clock: &ManualClock) -> Elastic {
    Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .fixed_limit(1.0)
        .cpus(1.0)
        .build()
        .expect("valid settings")
}

/// A socket the reader task waits on, and a writer that makes it readable from a thread
/// outside the runtime (so only the worker's driver poll can see it).
struct Wire {
    reader: tokio::net::UnixStream,
    writer: std::os::unix::net::UnixStream,
}

fn wire(rt: &Runtime) -> Wire {
    let (a, b) = std::os::unix::net::UnixStream::pair().expect("socket pair");
    a.set_nonblocking(true).unwrap();
    let reader = rt
        .block_on(async { tokio::net::UnixStream::from_std(a) })
        .unwrap();
    Wire { reader, writer: b }
}

/// Spawn the reader on `rt`: it logs "reader" once its socket is readable. Returns once its
/// first poll has begun; the one worker finishes that poll (and so registers the reader's
/// interest) before it runs anything spawned later.
fn spawn_reader(
    rt: &Runtime,
    reader: tokio::net::UnixStream,
    log: &Log,
) -> tokio::task::JoinHandle<()> {
    let (armed_tx, armed_rx) = mpsc::channel();
    let log = log.clone();
    let task = rt.spawn(async move {
        let _ = armed_tx.send(());
        reader.readable().await.expect("readable");
        log.lock().unwrap().push("reader");
    });
    armed_rx.recv().expect("reader armed");
    task
}

/// The write from outside the runtime, done (and so readable) before this returns.
fn write_from_outside(writer: &mut std::os::unix::net::UnixStream) {
    let mut w = writer.try_clone().unwrap();
    std::thread::spawn(move || w.write_all(b"x").unwrap())
        .join()
        .unwrap();
}

/// One quantum of running time, in which the socket becomes readable.
fn stretch(clock: &ManualClock, writer: &mut std::os::unix::net::UnixStream) {
    write_from_outside(writer);
    clock.advance(DEFAULT_QUANTUM);
}

fn assert_reader_ran_first(log: &Log) {
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        ["stretch 1", "reader", "stretch 2"],
        "the woken reader waited out an elastic stretch"
    );
}

#[test]
fn a_paced_stream_lets_the_woken_reader_run_before_its_next_item() {
    let clock = ManualClock::new();
    let elastic = elastic(&clock);
    let rt = one_worker();
    let Wire { reader, mut writer } = wire(&rt);
    let log: Log = Arc::default();
    let reader = spawn_reader(&rt, reader, &log);
    let (c, l) = (clock.clone(), log.clone());
    let mut n = 0;
    let items = futures_util::stream::poll_fn(move |_| {
        n += 1;
        match n {
            1 => {
                stretch(&c, &mut writer);
                l.lock().unwrap().push("stretch 1");
                std::task::Poll::Ready(Some(()))
            }
            2 => {
                l.lock().unwrap().push("stretch 2");
                std::task::Poll::Ready(None)
            }
            _ => std::task::Poll::Ready(None),
        }
    });
    let mut stream = items.paced(&elastic);
    rt.block_on(rt.spawn(async move {
        use futures_util::StreamExt;
        while stream.next().await.is_some() {}
    }))
    .unwrap();
    rt.block_on(reader).unwrap();
    assert_reader_ran_first(&log);
}

#[test]
fn a_pacer_loop_lets_the_woken_reader_run_before_its_next_stretch() {
    let clock = ManualClock::new();
    let elastic = elastic(&clock);
    let rt = one_worker();
    let Wire { reader, mut writer } = wire(&rt);
    let log: Log = Arc::default();
    let reader = spawn_reader(&rt, reader, &log);
    let (c, l) = (clock.clone(), log.clone());
    let mut pacer = elastic.pacer();
    rt.block_on(rt.spawn(async move {
        pacer.pace().await;
        stretch(&c, &mut writer);
        l.lock().unwrap().push("stretch 1");
        pacer.pace().await;
        l.lock().unwrap().push("stretch 2");
    }))
    .unwrap();
    rt.block_on(reader).unwrap();
    assert_reader_ran_first(&log);
}

#[test]
fn a_setup_permit_lets_the_woken_reader_run_before_its_next_chunk() {
    let clock = ManualClock::new();
    let elastic = elastic(&clock);
    let gate = elastic
        .connection_gate(GateSettings::new().share(0.5, 0.5).initial_share(0.5))
        .expect("valid settings");
    let rt = one_worker();
    let Wire { reader, mut writer } = wire(&rt);
    let log: Log = Arc::default();
    let reader = spawn_reader(&rt, reader, &log);
    let (c, l) = (clock.clone(), log.clone());
    rt.block_on(rt.spawn(async move {
        let mut permit = gate.admit(Duration::from_secs(10)).await.expect("admitted");
        stretch(&c, &mut writer);
        l.lock().unwrap().push("stretch 1");
        permit.pace().await;
        l.lock().unwrap().push("stretch 2");
    }))
    .unwrap();
    rt.block_on(reader).unwrap();
    assert_reader_ran_first(&log);
}
