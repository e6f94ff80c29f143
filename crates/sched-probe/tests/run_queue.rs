//! The run-queue reader on fake `/proc` trees: parsing, deltas, missing and malformed files,
//! threads that go away or come back under a reused tid, and the registry's part. No wall-clock
//! assertions: ticks are given with `sample_over`.

use elastic_cpu_probe::{RunQueueStats, RunQueueUnavailable, ThreadRegistry, ThreadRole};
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const TICK: Duration = Duration::from_millis(100);

/// A fake procfs root in its own temp directory, removed on drop.
struct FakeProc {
    root: PathBuf,
}

impl FakeProc {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "elastic-cpu-run-queue-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("self/task")).unwrap();
        FakeProc { root }
    }

    fn file(&self, tid: u32) -> PathBuf {
        self.root.join(format!("self/task/{tid}/schedstat"))
    }

    fn write(&self, tid: u32, text: &str) {
        let file = self.file(tid);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(file, text).unwrap();
    }

    /// `on_cpu` and `wait` in ms.
    fn stat(&self, tid: u32, on_cpu_ms: u64, wait_ms: u64, slices: u64) {
        self.write(
            tid,
            &format!(
                "{} {} {slices}\n",
                on_cpu_ms * 1_000_000,
                wait_ms * 1_000_000
            ),
        );
    }

    /// The thread exits: its directory goes away.
    fn remove(&self, tid: u32) {
        fs::remove_dir_all(self.file(tid).parent().unwrap()).unwrap();
    }

    fn stats(&self, registry: &ThreadRegistry) -> RunQueueStats {
        RunQueueStats::with_proc_root(registry, &self.root)
    }
}

impl Drop for FakeProc {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn deltas_per_thread_and_summed_as_fractions_of_the_tick() {
    let proc = FakeProc::new();
    let registry = ThreadRegistry::new();
    registry.register(11, ThreadRole::Worker);
    registry.register(12, ThreadRole::Worker);
    registry.register(20, ThreadRole::Elastic);
    proc.stat(11, 100, 10, 5);
    proc.stat(12, 100, 10, 5);
    proc.stat(20, 100, 10, 5);
    let mut stats = proc.stats(&registry);

    let first = stats.sample_over(TICK).unwrap();
    assert_eq!(first.started, 3, "the first read is a baseline");
    assert!(first.threads.is_empty());
    assert_eq!(
        first.wait_fraction(|_| true),
        None,
        "no delta yet: no data, not 0"
    );

    proc.stat(11, 180, 22, 9); // waited 12 ms
    proc.stat(12, 150, 10, 6); // did not wait
    proc.stat(20, 160, 50, 20); // the elastic thread waited 40 ms
    let tick = stats.sample_over(TICK).unwrap();
    assert_eq!((tick.started, tick.gone, tick.malformed), (0, 0, 0));
    assert_eq!(tick.elapsed, TICK);
    let tids: Vec<u32> = tick.threads.iter().map(|t| t.tid).collect();
    assert_eq!(tids, [11, 12, 20]);
    let t11 = &tick.threads[0];
    assert_eq!(t11.role, ThreadRole::Worker);
    assert_eq!(t11.run_queue_wait, ms(12));
    assert_eq!(t11.on_cpu, ms(80));
    assert_eq!(t11.timeslices, 4);
    assert!((t11.wait_fraction - 0.12).abs() < 1e-9);
    assert_eq!(tick.threads[1].run_queue_wait, Duration::ZERO);

    let workers = |r| r == ThreadRole::Worker;
    assert_eq!(tick.total_wait(workers), ms(12));
    assert!((tick.wait_fraction(workers).unwrap() - 0.12).abs() < 1e-9);
    assert!((tick.max_wait_fraction(workers).unwrap() - 0.12).abs() < 1e-9);
    assert_eq!(tick.total_wait(ThreadRole::serves_foreground), ms(12));
    assert_eq!(tick.total_wait(|_| true), ms(52));
    assert!((tick.wait_fraction(|_| true).unwrap() - 0.52).abs() < 1e-9);
    assert!((tick.max_wait_fraction(|_| true).unwrap() - 0.4).abs() < 1e-9);
    assert_eq!(tick.wait_fraction(|r| r == ThreadRole::Other), None);

    // Nothing changed over the next tick: measured, zero wait (data, and it is 0).
    let idle = stats.sample_over(TICK).unwrap();
    assert_eq!(idle.threads.len(), 3);
    assert_eq!(idle.wait_fraction(|_| true), Some(0.0));
}

#[test]
fn missing_and_malformed_files_are_counted_never_fatal() {
    let proc = FakeProc::new();
    let registry = ThreadRegistry::new();
    for tid in [1, 2, 3, 4, 5, 6, 7, 8] {
        registry.register(tid, ThreadRole::Worker);
    }
    // 7 has no file at all (the thread is gone, or this kernel has no schedstat).
    proc.stat(1, 10, 1, 1); // good
    proc.write(2, ""); // empty
    proc.write(3, "12 abc 4\n"); // not a number
    proc.write(4, "12 34\n"); // too short
    proc.write(5, "0 0 0\n"); // what a kernel without scheduler statistics prints
    fs::create_dir_all(proc.file(6)).unwrap(); // a directory where the file should be
    proc.write(8, &"9".repeat(10_000)); // huge garbage
    let mut stats = proc.stats(&registry);
    for _ in 0..2 {
        let tick = stats.sample_over(TICK).unwrap();
        assert_eq!(tick.gone, 1);
        assert_eq!(tick.malformed, 6);
        assert_eq!(tick.started + tick.threads.len(), 1);
    }
    // The good thread went on being measured.
    proc.stat(1, 20, 3, 2);
    let tick = stats.sample_over(TICK).unwrap();
    assert_eq!(tick.threads.len(), 1);
    assert_eq!(tick.threads[0].run_queue_wait, ms(2));
}

#[test]
fn a_thread_that_goes_away_and_a_reused_tid_start_from_a_new_baseline() {
    let proc = FakeProc::new();
    let registry = ThreadRegistry::new();
    registry.register(1, ThreadRole::Worker);
    registry.register(2, ThreadRole::Worker);
    proc.stat(1, 10, 1, 1);
    proc.stat(2, 500, 300, 50);
    let mut stats = proc.stats(&registry);
    stats.sample_over(TICK).unwrap();

    // Thread 2 exits.
    proc.remove(2);
    let tick = stats.sample_over(TICK).unwrap();
    assert_eq!((tick.threads.len(), tick.gone), (1, 1));

    // A new thread gets tid 2: it is a baseline again, not a delta against the old counters.
    proc.stat(2, 5, 1, 1);
    let tick = stats.sample_over(TICK).unwrap();
    assert_eq!((tick.threads.len(), tick.started, tick.gone), (1, 1, 0));
    proc.stat(2, 9, 4, 2);
    let tick = stats.sample_over(TICK).unwrap();
    assert_eq!(tick.threads.len(), 2);
    assert_eq!(tick.threads[1].run_queue_wait, ms(3));

    // Reused without a read in between: the counters go backwards, also a baseline.
    proc.stat(2, 1, 0, 1);
    let tick = stats.sample_over(TICK).unwrap();
    assert_eq!((tick.threads.len(), tick.started), (1, 1));
}

#[test]
fn a_thread_that_leaves_the_registry_is_forgotten() {
    let proc = FakeProc::new();
    let registry = ThreadRegistry::new();
    registry.register(1, ThreadRole::Worker);
    registry.register(2, ThreadRole::Runtime);
    proc.stat(1, 10, 1, 1);
    proc.stat(2, 10, 1, 1);
    let mut stats = proc.stats(&registry);
    stats.sample_over(TICK).unwrap();

    assert_eq!(registry.unregister(2), Some(ThreadRole::Runtime));
    proc.stat(2, 20, 9, 2);
    let tick = stats.sample_over(TICK).unwrap();
    assert_eq!(tick.threads.len() + tick.started, 1, "thread 2 is not read");

    // Back in the registry (as elastic now): a new baseline, and the role read is the new one.
    registry.register(2, ThreadRole::Elastic);
    assert_eq!(stats.sample_over(TICK).unwrap().started, 1);
    proc.stat(2, 30, 10, 3);
    let tick = stats.sample_over(TICK).unwrap();
    let t2 = tick.threads.iter().find(|t| t.tid == 2).unwrap();
    assert_eq!((t2.role, t2.run_queue_wait), (ThreadRole::Elastic, ms(1)));
}

#[test]
fn unavailable_says_why() {
    let proc = FakeProc::new();
    let registry = ThreadRegistry::new();
    let mut stats = proc.stats(&registry);
    assert_eq!(
        stats.sample_over(TICK).unwrap_err(),
        RunQueueUnavailable::NoThreads
    );

    registry.register(1, ThreadRole::Worker);
    registry.register(2, ThreadRole::Worker);
    proc.write(2, "garbage");
    let err = stats.sample_over(TICK).unwrap_err();
    assert_eq!(err, RunQueueUnavailable::Unreadable { threads: 2 });
    assert!(err.to_string().contains("unavailable"), "{err}");

    // A root that does not exist at all.
    let mut nowhere = RunQueueStats::with_proc_root(&registry, proc.root.join("no/such/dir"));
    assert_eq!(
        nowhere.sample_over(TICK).unwrap_err(),
        RunQueueUnavailable::Unreadable { threads: 2 }
    );

    // Off Linux, the real /proc is not there to read.
    let real = RunQueueStats::new(&registry).sample();
    if cfg!(not(any(target_os = "linux", target_os = "android"))) {
        assert_eq!(real.unwrap_err(), RunQueueUnavailable::NotLinux);
        assert!(RunQueueUnavailable::NotLinux
            .to_string()
            .contains("unavailable"));
    }
}

#[test]
fn sample_measures_the_tick_itself() {
    let proc = FakeProc::new();
    let registry = ThreadRegistry::new();
    registry.register(1, ThreadRole::Worker);
    proc.stat(1, 10, 1, 1);
    let mut stats = proc.stats(&registry);
    let first = stats.sample().unwrap();
    assert_eq!(first.elapsed, Duration::ZERO, "no previous sample");
    proc.stat(1, 10, 2, 1);
    let tick = stats.sample().unwrap();
    assert_eq!(tick.threads.len(), 1);
    assert!(tick.threads[0].wait_fraction.is_finite());
    assert!(tick.wait_fraction(|_| true).unwrap().is_finite());
    assert!(std::ptr::eq(stats.registry(), stats.registry()));
}

/// The real thing: this thread's own counters in the real `/proc` (Linux only; skipped when the
/// kernel keeps no per-thread schedstat).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn reads_this_threads_real_schedstat() {
    if !std::path::Path::new("/proc/thread-self/schedstat").exists() {
        eprintln!("no /proc/thread-self/schedstat here: skipped");
        return;
    }
    let registry = ThreadRegistry::new();
    let _me = registry.register_current(ThreadRole::Other).unwrap();
    let mut stats = RunQueueStats::new(&registry);
    assert_eq!(stats.sample().unwrap().started, 1);
    // Burn some CPU so that the counters move (no assertion on how much).
    let mut x = 0u64;
    for i in 0..1_000_000u64 {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
    }
    let tick = stats.sample().unwrap();
    assert_eq!(tick.threads.len(), 1);
    assert_eq!(tick.threads[0].tid, _me.tid());
    assert_eq!(tick.threads[0].role, ThreadRole::Other);
    assert!(tick.threads[0].timeslices >= 1 || tick.threads[0].on_cpu > Duration::ZERO);
}
