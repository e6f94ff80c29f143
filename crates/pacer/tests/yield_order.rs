//! The poll quantum's yield lets the tasks its own I/O driver poll woke run first, on a
//! multi-thread runtime, for a paced stream, a `Pacer` loop and a gate's setup permit.
//!
//! The set-up: one worker; a reader task waits on a socket; elastic work runs one stretch of a
//! quantum (manual running clock) during which a thread outside the runtime writes to the
//! socket, then yields. The worker's next driver poll wakes the reader. Without the yield's
//! second step the elastic task, woken from tokio's defer list after that poll, would take the
//! LIFO slot and run its next stretch first. Order is what is asserted, never time.

mod common;

use std::future::Future;
use std::io::Write;
use std::sync::{mpsc, Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::gate::GateSettings;
use elastic_cpu_pacer::settings::DEFAULT_QUANTUM;
use elastic_cpu_pacer::PacedStreamExt;
use futures_util::StreamExt;
use tokio::runtime::{Builder, Runtime};

type Log = Arc<Mutex<Vec<&'static str>>>;

fn one_worker() -> Runtime {
    Builder::new_multi_thread()
        .worker_threads(1)
        .enable_io()
        .build()
        .expect("runtime")
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

/// The elastic work's two stretches, logged: in the first (one quantum of running time) the
/// socket becomes readable.
struct Stretches {
    clock: ManualClock,
    writer: std::os::unix::net::UnixStream,
    log: Log,
}

impl Stretches {
    fn first(&mut self) {
        write_from_outside(&mut self.writer);
        self.clock.advance(DEFAULT_QUANTUM);
        self.log.lock().unwrap().push("stretch 1");
    }

    fn second(&self) {
        self.log.lock().unwrap().push("stretch 2");
    }
}

/// Run `work` (elastic work that yields between its two stretches) on one worker beside the
/// reader, and check the reader ran between the stretches.
fn assert_reader_runs_between<F>(clock: &ManualClock, work: impl FnOnce(Stretches) -> F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let rt = one_worker();
    let Wire { reader, writer } = wire(&rt);
    let log: Log = Arc::default();
    let reader = spawn_reader(&rt, reader, &log);
    let stretches = Stretches {
        clock: clock.clone(),
        writer,
        log: log.clone(),
    };
    rt.block_on(rt.spawn(work(stretches))).unwrap();
    rt.block_on(reader).unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        ["stretch 1", "reader", "stretch 2"],
        "the woken reader waited out an elastic stretch"
    );
}

#[test]
fn a_paced_stream_lets_the_woken_reader_run_before_its_next_item() {
    let clock = ManualClock::new();
    let elastic = common::manual_elastic(&clock, 1.0, 1.0);
    assert_reader_runs_between(&clock, |mut stretches| {
        let mut n = 0;
        let items = futures_util::stream::poll_fn(move |_| {
            n += 1;
            match n {
                1 => stretches.first(),
                2 => stretches.second(),
                _ => return Poll::Ready(None),
            }
            Poll::Ready(Some(()))
        });
        let mut stream = items.paced(&elastic);
        async move { while stream.next().await.is_some() {} }
    });
}

#[test]
fn a_pacer_loop_lets_the_woken_reader_run_before_its_next_stretch() {
    let clock = ManualClock::new();
    let elastic = common::manual_elastic(&clock, 1.0, 1.0);
    let mut pacer = elastic.pacer();
    assert_reader_runs_between(&clock, |mut stretches| async move {
        pacer.pace().await;
        stretches.first();
        pacer.pace().await;
        stretches.second();
    });
}

#[test]
fn a_setup_permit_lets_the_woken_reader_run_before_its_next_chunk() {
    let clock = ManualClock::new();
    let elastic = common::manual_elastic(&clock, 1.0, 1.0);
    let gate = elastic
        .connection_gate(GateSettings::new().share(0.5, 0.5).initial_share(0.5))
        .expect("valid settings");
    assert_reader_runs_between(&clock, |mut stretches| async move {
        let mut permit = gate.admit(Duration::from_secs(10)).await.expect("admitted");
        stretches.first();
        permit.pace().await;
        stretches.second();
    });
}
