//! Helpers shared by the pacer tests.
#![allow(dead_code, missing_docs)]

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::testing::Script;
use elastic_cpu_pacer::{Elastic, ElasticBuilder, Snapshot};
use futures_core::Stream;

/// A stream of `left` items, each taking `step` of running time on the manual clock.
pub struct TimedItems {
    pub clock: ManualClock,
    pub step: Duration,
    pub left: u128,
}

impl Stream for TimedItems {
    type Item = ();
    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<()>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        self.left -= 1;
        self.clock.advance(self.step);
        Poll::Ready(Some(()))
    }
}

/// Counts the `Pending`s of the future it wraps: the task's yields.
pub struct CountPending<F> {
    pub inner: Pin<Box<F>>,
    pub pending: Arc<AtomicUsize>,
}

impl<F: Future> Future for CountPending<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let out = self.inner.as_mut().poll(cx);
        if out.is_pending() {
            self.pending.fetch_add(1, Ordering::SeqCst);
        }
        out
    }
}

/// Runs `fut` as a task on `rt`; returns how many times it returned `Pending`.
pub fn yields_of<F>(rt: &tokio::runtime::Runtime, fut: F) -> usize
where
    F: Future<Output = ()> + Send + 'static,
{
    let pending = Arc::new(AtomicUsize::new(0));
    let task = CountPending {
        inner: Box::pin(fut),
        pending: pending.clone(),
    };
    rt.block_on(rt.spawn(task)).expect("the loop task");
    pending.load(Ordering::SeqCst)
}

/// A waker that counts its wake-ups.
#[derive(Default)]
pub struct CountingWaker(pub AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl CountingWaker {
    pub fn new() -> (Arc<Self>, Waker) {
        let w = Arc::new(CountingWaker::default());
        (w.clone(), Waker::from(w))
    }
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A future that "runs" `per_poll` of CPU on the manual clock each poll, `polls` times.
pub struct Burn {
    pub clock: ManualClock,
    pub per_poll: Duration,
    pub polls: usize,
}

impl Future for Burn {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.clock.advance(self.per_poll);
        self.polls -= 1;
        if self.polls == 0 {
            Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Everything driven by `clock`: no governor thread, polls timed on the same clock.
/// Fixed limit `limit` of `cpus` CPUs.
pub fn manual_elastic(clock: &ManualClock, limit: f64, cpus: f64) -> Elastic {
    Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .fixed_share(limit)
        .cpus(cpus)
        .build()
        .expect("valid settings")
}

/// A builder whose whole control loop runs on `clock` with every reading from `script`: no
/// governor thread, polls timed on the same clock.
pub fn scripted(clock: &ManualClock, script: &Script) -> ElasticBuilder {
    Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .script(script.clone())
}

/// A current-thread runtime built through `elastic`: attaching it starts the (scripted) I/O
/// probe and finds the (scripted) quota.
pub fn attached(elastic: &Elastic) -> tokio::runtime::Runtime {
    elastic
        .runtime(tokio::runtime::Builder::new_current_thread())
        .build()
        .unwrap()
}

/// One millisecond: `100 * MS` is 100 ms.
pub const MS: Duration = Duration::from_millis(1);

/// `acquired − returned + over_limit == used`: every granted nanosecond is accounted for.
pub fn assert_ledger_balanced(s: &Snapshot) {
    let nanos = |d: Duration| d.as_nanos() as i128;
    assert_eq!(
        nanos(s.acquired) - nanos(s.returned) + nanos(s.over_limit),
        nanos(s.used),
        "ledger unbalanced: {s:#?}"
    );
}

/// Burn `d` of the calling thread's time (stands in for CPU-heavy work on a real runtime).
pub fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Burn `d` of the calling thread's CPU time: a poll as long as the OS lets the thread run.
#[cfg(target_os = "linux")]
pub fn spin_cpu(d: Duration) {
    use elastic_cpu_core::{Clock, ThreadCpuClock};
    let start = ThreadCpuClock.now();
    while ThreadCpuClock.now() - start < d {
        std::hint::spin_loop();
    }
}

/// `SCHED_IDLE` as `/proc/thread-self/stat` reports a thread's policy.
pub const SCHED_IDLE: u32 = 5;

/// The scheduling policy of the calling thread, from `/proc/thread-self/stat` (field 41), read
/// independently of how the library set it.
#[cfg(target_os = "linux")]
pub fn this_thread_policy() -> u32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // Fields after the parenthesised command name start at field 3.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace()
        .nth(41 - 3)
        .unwrap()
        .parse()
        .unwrap()
}

/// An `Elastic` for 2 CPUs on a manual clock (polls timed on it too), no quota (scripted), and
/// a 2-worker runtime built through it.
pub fn manual_elastic_on_two_workers(
    clock: &ManualClock,
) -> (elastic_cpu_pacer::Elastic, tokio::runtime::Runtime) {
    let elastic = elastic_cpu_pacer::Elastic::builder()
        .manual(clock.clone())
        .running_clock(clock.clone())
        .script(elastic_cpu_pacer::testing::Script::new())
        .cpus(2.0)
        .build()
        .unwrap();
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
        .build()
        .unwrap();
    (elastic, rt)
}

/// Threads alive in this process (Linux). Thread names are not reliable in every sandbox, so
/// tests count threads: everything they started must be gone at the end.
#[cfg(target_os = "linux")]
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Run `f` on a thread; fail (instead of hanging the suite) if it has not finished `within`.
/// A hang guard, not a timing assertion.
pub fn must_finish<T: Send + 'static>(
    what: &str,
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(within) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what} hung"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what} failed (see above)"),
    }
}

/// Wait until `cond` holds; fail if it has not `within` (a hang guard).
pub fn eventually(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A fake cgroup directory with a `cpu.stat` holding `throttled` periods (removed on drop).
pub struct FakeCgroup(pub PathBuf);

impl FakeCgroup {
    pub fn new(name: &str) -> FakeCgroup {
        let dir = std::env::temp_dir().join(format!(
            "elastic-cpu-fake-cgroup-{name}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let cg = FakeCgroup(dir);
        cg.set(0);
        cg
    }

    pub fn set(&self, throttled: u64) {
        let text = format!(
            "nr_periods {}\nnr_throttled {throttled}\nthrottled_time {}\n",
            1000 + throttled,
            throttled * 20_000_000
        );
        std::fs::write(self.0.join("cpu.stat"), text).unwrap();
    }
}

impl Drop for FakeCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
