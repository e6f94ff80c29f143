//! Dropping an `IoProbe` ends its writer thread: counted in `/proc/self/task` by thread name
//! (Linux only). Its own test binary, so no other test's probe threads are counted.

#[cfg(any(target_os = "linux", target_os = "android"))]
mod common;

#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn drop_ends_the_writer_thread() {
    use common::wait_until;
    use elastic_cpu_probe::{IoProbe, IoProbeConfig};

    /// Threads of this process named like the writer.
    fn writers() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end() == "io-probe-canary")
            .count()
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_io()
        .build()
        .unwrap();
    assert_eq!(writers(), 0);
    let io = IoProbe::start(rt.handle(), IoProbeConfig::default()).unwrap();
    // The thread names itself as it starts: maybe not yet when `start` returns.
    wait_until(|| writers() == 1);
    wait_until(|| io.received() >= 1);
    drop(io);
    // The join returns as the thread exits; the kernel removes its entry a moment later.
    wait_until(|| writers() == 0);
    // The runtime shuts down cleanly (the reader task was aborted).
    drop(rt);
}
