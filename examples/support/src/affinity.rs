//! The calling thread's CPU affinity: the CPUs it may run on, and pinning it to some of them
//! (threads it starts afterwards inherit the mask). Linux only; elsewhere the CPUs are unknown
//! and pinning is refused.

/// The CPUs the calling thread may run on, ascending (None: unknown, or not Linux).
#[cfg(target_os = "linux")]
pub fn allowed() -> Option<Vec<usize>> {
    use rustix::thread::{sched_getaffinity, CpuSet};
    let set = sched_getaffinity(None).ok()?;
    Some((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

/// See the Linux version.
#[cfg(not(target_os = "linux"))]
pub fn allowed() -> Option<Vec<usize>> {
    None
}

/// Pin the calling thread to `cpus` (not empty), or say why not.
#[cfg(target_os = "linux")]
pub fn pin(cpus: &[usize]) -> Result<(), String> {
    use rustix::thread::{sched_setaffinity, CpuSet};
    if cpus.is_empty() {
        return Err("no CPU to pin to".into());
    }
    let mut set = CpuSet::new();
    for &c in cpus {
        if c >= CpuSet::MAX_CPU {
            return Err(format!("CPU {c} is beyond the largest CPU set"));
        }
        set.set(c);
    }
    // `None`: the calling thread.
    sched_setaffinity(None, &set).map_err(|e| format!("sched_setaffinity {cpus:?}: {e}"))
}

/// See the Linux version.
#[cfg(not(target_os = "linux"))]
pub fn pin(_cpus: &[usize]) -> Result<(), String> {
    Err("pinning to CPUs needs Linux".into())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_to_one_allowed_cpu_reads_it_back_and_its_threads_inherit_it() {
        let all = allowed().expect("the mask reads on Linux");
        assert!(!all.is_empty());
        let last = *all.last().unwrap();
        // A thread of its own: the test harness's thread keeps its mask.
        std::thread::spawn(move || {
            pin(&[last]).unwrap();
            assert_eq!(allowed(), Some(vec![last]));
            let inner = std::thread::spawn(allowed).join().unwrap();
            assert_eq!(inner, Some(vec![last]));
        })
        .join()
        .unwrap();
        assert!(pin(&[]).is_err());
        assert!(pin(&[usize::MAX]).is_err());
    }
}
