//! Dropping an `IoProbe` ends its writer thread (counted in `/proc/self/task` by thread name),
//! and closes its timer (counted in `/proc/self/fd`); the timer source starts no thread (Linux
//! only). Its own test binary, so no other test's probe threads or descriptors are counted; the
//! two tests share a lock, so neither counts the other's.

#[cfg(any(target_os = "linux", target_os = "android"))]
mod common;

/// Held by each test: the other's threads and descriptors are not counted.
#[cfg(any(target_os = "linux", target_os = "android"))]
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The lock, then a one-worker runtime with I/O.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn alone_with_one_worker() -> (std::sync::MutexGuard<'static, ()>, tokio::runtime::Runtime) {
    let alone = ALONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_io()
        .build()
        .unwrap();
    (alone, rt)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn drop_ends_the_writer_thread() {
    use common::wait_until;
    use elastic_cpu_probe::{IoCanary, IoProbe, IoProbeConfig};

    /// Threads of this process named like the writer (`elastic-cpu-io-canary`: the kernel keeps
    /// the first 15 bytes of a thread's name).
    fn writers() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end() == &"elastic-cpu-io-canary"[..15])
            .count()
    }

    let (_alone, rt) = alone_with_one_worker();
    assert_eq!(writers(), 0);
    let thread = IoProbeConfig {
        canary: IoCanary::Thread,
        ..IoProbeConfig::default()
    };
    let io = IoProbe::start(rt.handle(), thread).unwrap();
    // The thread names itself as it starts: maybe not yet when `start` returns.
    wait_until(|| writers() == 1);
    wait_until(|| io.received() >= 1);
    drop(io);
    // The join returns as the thread exits; the kernel removes its entry a moment later.
    wait_until(|| writers() == 0);
    // The runtime shuts down cleanly (the reader task was aborted).
    drop(rt);
}

#[cfg(target_os = "linux")]
#[test]
fn the_timer_starts_no_thread_and_drop_closes_it() {
    use common::wait_until;
    use elastic_cpu_probe::{IoCanary, IoProbe, IoProbeConfig};

    /// This process's thread ids (a thread of another test may exit meanwhile, so the check is
    /// that no new id appears, not that the count is unchanged), and its open timerfds.
    fn threads() -> std::collections::BTreeSet<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
            .collect()
    }
    fn timerfds() -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().contains("timerfd"))
            .count()
    }

    let (_alone, rt) = alone_with_one_worker();
    let (threads_before, timers_before) = (threads(), timerfds());
    let timer = IoProbeConfig {
        canary: IoCanary::Timer,
        ..IoProbeConfig::default()
    };
    let io = IoProbe::start(rt.handle(), timer).unwrap();
    wait_until(|| io.received() >= 1);
    let started: Vec<_> = threads().difference(&threads_before).cloned().collect();
    assert!(
        started.is_empty(),
        "no thread of the probe's own: {started:?}"
    );
    assert_eq!(timerfds(), timers_before + 1);
    drop(io);
    // The reader task, which holds the timer too, is dropped at its next poll.
    wait_until(|| timerfds() == timers_before);
    drop(rt);
}
