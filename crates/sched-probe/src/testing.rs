//! Test plumbing (feature `test-util`): make the probe's sampler thread fail to start, as the
//! OS refuses a thread under a pids or thread limit, so the error's path can be tested without
//! lowering the test process's real limits.

use std::cell::Cell;

thread_local! {
    /// Sampler spawns from this thread still to fail.
    static FAILING: Cell<usize> = const { Cell::new(0) };
}

/// The next `n` sampler threads started from the calling thread
/// ([`Probe::start_sampler`](crate::Probe::start_sampler) and the like) fail to spawn, with the
/// error a pids limit gives (`EAGAIN`: [`WouldBlock`](std::io::ErrorKind::WouldBlock)). Per
/// thread: tests running beside it are not affected.
///
/// ```
/// use elastic_cpu_probe::{testing::fail_sampler_spawns, Probe, ProbeConfig};
///
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// let probe = Probe::new(ProbeConfig::default()).unwrap();
/// fail_sampler_spawns(1);
/// let err = probe.start_sampler(rt.handle()).unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
/// assert!(probe.start_sampler(rt.handle()).is_ok(), "only the next one");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn fail_sampler_spawns(n: usize) {
    FAILING.with(|f| f.set(n));
}

/// Whether this spawn is to fail (counting it).
pub(crate) fn take_spawn_failure() -> bool {
    FAILING.with(|f| {
        let left = f.get();
        f.set(left.saturating_sub(1));
        left > 0
    })
}
