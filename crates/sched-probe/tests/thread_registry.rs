//! The thread registry: by hand, through the scoped guard, and filled by tokio's thread hooks
//! (Linux: real tids). Counts only, with generous deadlines; no timing assertions.

mod common;

use common::wait_until;
use elastic_cpu_probe::{current_tid, ThreadRegistry, ThreadRole};
use std::time::Duration;

const LINUX: bool = cfg!(any(target_os = "linux", target_os = "android"));

#[test]
fn by_hand() {
    let registry = ThreadRegistry::new();
    assert!(registry.is_empty());
    assert_eq!(registry.register(5, ThreadRole::Worker), None);
    assert_eq!(registry.register(3, ThreadRole::Other), None);
    assert_eq!(
        registry.register(5, ThreadRole::Runtime),
        Some(ThreadRole::Worker)
    );
    assert_eq!(registry.len(), 2);
    assert_eq!(
        registry.threads(),
        [(3, ThreadRole::Other), (5, ThreadRole::Runtime)]
    );
    assert_eq!(registry.role(5), Some(ThreadRole::Runtime));
    assert_eq!(registry.role(4), None);
    // Clones are the same registry.
    let clone = registry.clone();
    assert_eq!(clone.unregister(5), Some(ThreadRole::Runtime));
    assert_eq!(registry.unregister(5), None);
    assert_eq!(registry.len(), 1);
    assert!(format!("{registry:?}").contains("Other"));
    assert_eq!(ThreadRole::Runtime.to_string(), "runtime thread");
    assert!(!ThreadRole::Elastic.serves_foreground());
    assert!(ThreadRole::Runtime.serves_foreground());
}

#[test]
fn current_thread_guard_restores_the_earlier_role() {
    let registry = ThreadRegistry::new();
    let tid = match current_tid() {
        Ok(tid) => tid,
        Err(e) if !LINUX => {
            assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
            assert!(registry.register_current(ThreadRole::Other).is_err());
            return;
        }
        Err(e) => panic!("current_tid fails on Linux: {e}"),
    };
    assert_eq!(current_tid().unwrap(), tid, "cached, stable");
    if LINUX {
        assert!(std::path::Path::new(&format!("/proc/self/task/{tid}")).exists());
    }
    {
        let outer = registry.register_current(ThreadRole::Runtime).unwrap();
        assert_eq!(outer.tid(), tid);
        {
            let _inner = registry.register_current(ThreadRole::Elastic).unwrap();
            assert_eq!(registry.role(tid), Some(ThreadRole::Elastic));
        }
        assert_eq!(registry.role(tid), Some(ThreadRole::Runtime));
        assert!(format!("{outer:?}").contains("ThreadRegistration"));
    }
    assert!(registry.is_empty());

    // Another thread has another tid.
    let other = std::thread::spawn(current_tid).join().unwrap().unwrap();
    assert_ne!(other, tid);
}

#[test]
fn runtime_threads_register_as_they_start_and_leave_as_they_stop() {
    if !LINUX {
        return; // no tids: the hooks register nothing
    }
    let registry = ThreadRegistry::new();
    let rt = registry
        .instrument(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all(),
        )
        .build()
        .unwrap();
    // Idle workers park soon after they start: both end up as workers.
    wait_until(|| {
        registry
            .threads()
            .iter()
            .filter(|(_, r)| *r == ThreadRole::Worker)
            .count()
            == 2
    });
    // A blocking-pool thread starts as a runtime thread and never parks in the scheduler.
    let tid = rt.block_on(async {
        tokio::task::spawn_blocking(|| current_tid().unwrap())
            .await
            .unwrap()
    });
    assert_eq!(registry.role(tid), Some(ThreadRole::Runtime));
    // Every registered thread is one of this process's threads.
    for (tid, _) in registry.threads() {
        assert!(std::path::Path::new(&format!("/proc/self/task/{tid}")).exists());
    }
    // Elastic work on a blocking thread tags it for the duration.
    let reg = registry.clone();
    let during = rt.block_on(async move {
        tokio::task::spawn_blocking(move || {
            let guard = reg.register_current(ThreadRole::Elastic).unwrap();
            let role = reg.role(guard.tid());
            drop(guard);
            (role, reg.role(current_tid().unwrap()))
        })
        .await
        .unwrap()
    });
    assert_eq!(
        during,
        (Some(ThreadRole::Elastic), Some(ThreadRole::Runtime))
    );

    drop(rt); // joins the workers and the blocking threads; each unregisters as it stops
    assert!(registry.is_empty(), "left: {registry:?}");
}

#[test]
fn a_current_thread_runtime_registers_its_thread_at_the_first_park() {
    if !LINUX {
        return;
    }
    let registry = ThreadRegistry::new();
    let rt = registry
        .instrument(tokio::runtime::Builder::new_current_thread().enable_time())
        .build()
        .unwrap();
    let me = current_tid().unwrap();
    assert_eq!(registry.role(me), None);
    // A sleep parks the scheduler (this thread).
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(1)).await });
    assert_eq!(registry.role(me), Some(ThreadRole::Worker));
    drop(rt);
    // Not started by tokio, so not stopped by it either: still registered, removable by hand.
    assert_eq!(registry.unregister(me), Some(ThreadRole::Worker));
}

#[test]
fn a_thread_registers_once_as_a_worker_of_each_of_a_few_registries() {
    // Two `Elastic`s attached to one runtime each register its workers: taking turns on one
    // thread must not register it again each time.
    let registries: Vec<ThreadRegistry> = (0..3).map(|_| ThreadRegistry::new()).collect();
    let first: Vec<Option<u32>> = registries
        .iter()
        .map(ThreadRegistry::register_current_worker)
        .collect();
    if !LINUX {
        assert!(first.iter().all(Option::is_none), "no tid off Linux");
        return;
    }
    let tid = current_tid().unwrap();
    assert!(first.iter().all(|&t| t == Some(tid)), "{first:?}");
    for _ in 0..3 {
        for r in &registries {
            assert_eq!(r.register_current_worker(), None, "registered again");
            assert_eq!(r.role(tid), Some(ThreadRole::Worker));
        }
    }
    // More registries than the thread remembers: still correct, the oldest registers again.
    let more: Vec<ThreadRegistry> = (0..5).map(|_| ThreadRegistry::new()).collect();
    for r in &more {
        assert_eq!(r.register_current_worker(), Some(tid));
    }
    assert_eq!(registries[0].register_current_worker(), Some(tid));
    assert_eq!(more[4].register_current_worker(), None);
}
