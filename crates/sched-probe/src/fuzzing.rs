//! The private parsers of `/proc` files, callable from the fuzz targets (`fuzz/`) and the
//! parser property tests. Hidden: not part of the API, and it may change in any release.
//!
//! The other parsers are public already ([`CpuThrottling::parse`](crate::CpuThrottling::parse),
//! [`parse_cpu_list`](crate::parse_cpu_list), [`cpu_affinity_in`](crate::cpu_affinity_in),
//! [`cpu_quota_at`](crate::cpu_quota_at) on a fake tree).

/// A thread's `stat` line as the stacking read parses it: (runnable, CPU), or `None`.
pub fn worker_state(line: &[u8]) -> Option<(bool, u32)> {
    crate::stacking::WorkerState::parse(line).map(|s| (s.runnable, s.cpu))
}

/// A thread's `schedstat` text as the run-queue read parses it: (on-CPU ns, run-queue wait ns,
/// timeslices), or `None`.
pub fn schedstat(text: &str) -> Option<(u64, u64, u64)> {
    crate::run_queue::Schedstat::parse(text).map(|s| (s.on_cpu_ns, s.wait_ns, s.timeslices))
}

/// The largest CPU number [`worker_state`] accepts (the read indexes a per-CPU table by it).
pub const MAX_WORKER_CPU: u32 = crate::stacking::MAX_CPU;
