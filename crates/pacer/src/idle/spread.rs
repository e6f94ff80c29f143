//! The idle pool's threads, one to a CPU.
//!
//! A `SCHED_IDLE` thread that is not pinned moves to whichever CPU falls idle: each time a
//! foreground thread takes its core, the balancer pulls it to the other one, and it moves back
//! when that one is wanted. Inside a quota, where the pool runs on part of the CPUs, that is
//! thousands of moves a second, each carrying the elastic call's working set from one cache to
//! another and leaving the foreground a cold one. Pinned one to a CPU, a pool thread stays
//! where it is while a foreground thread preempts it, and tokio's work stealing moves *tasks*
//! between the pool's threads, at poll boundaries, where a move is cheap.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The CPUs the process may run on when the pool was made, handed to its threads in turn.
#[derive(Debug)]
pub(crate) struct Spread {
    cpus: Vec<usize>,
    next: AtomicUsize,
}

impl Spread {
    /// The calling thread's CPUs; `None` where they cannot be read, or where there is one
    /// (nothing to spread over), or off Linux.
    pub(crate) fn of_this_thread() -> Option<Spread> {
        Spread::over(allowed_cpus()?)
    }

    /// A spread over `cpus`; `None` for fewer than two.
    pub(crate) fn over(cpus: Vec<usize>) -> Option<Spread> {
        (cpus.len() >= 2).then(|| Spread {
            cpus,
            next: AtomicUsize::new(0),
        })
    }

    /// The CPU the next thread takes: the allowed CPUs in turn.
    pub(crate) fn next_cpu(&self) -> usize {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        self.cpus[i % self.cpus.len()]
    }

    /// Pin the calling thread to the next CPU. A refusal (a CPU taken away since, a seccomp
    /// filter) leaves the thread where the kernel puts it: pinning is an optimisation.
    pub(crate) fn pin_this_thread(&self) {
        pin_to(self.next_cpu());
    }
}

#[cfg(target_os = "linux")]
fn allowed_cpus() -> Option<Vec<usize>> {
    use rustix::thread::{sched_getaffinity, CpuSet};
    let set = sched_getaffinity(None).ok()?;
    Some((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

#[cfg(not(target_os = "linux"))]
fn allowed_cpus() -> Option<Vec<usize>> {
    None
}

#[cfg(target_os = "linux")]
fn pin_to(cpu: usize) {
    use rustix::thread::{sched_setaffinity, CpuSet};
    let mut set = CpuSet::new();
    set.set(cpu);
    let _ = sched_setaffinity(None, &set);
}

#[cfg(not(target_os = "linux"))]
fn pin_to(_cpu: usize) {}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn threads_take_the_cpus_in_turn() {
        let spread = Spread::over(vec![3, 5, 8]).expect("three CPUs");
        let got: Vec<usize> = (0..7).map(|_| spread.next_cpu()).collect();
        assert_eq!(got, [3, 5, 8, 3, 5, 8, 3]);
    }

    #[test]
    fn one_cpu_is_nothing_to_spread() {
        assert!(Spread::over(vec![2]).is_none());
        assert!(Spread::over(Vec::new()).is_none());
    }
}
