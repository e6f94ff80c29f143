//! The idle-priority elastic pool: its threads really run at the lowest OS priority, paced work
//! on it runs in the idle class, balances the ledger and stays out of the foreground probe,
//! shutdown is clean.

mod common;

use std::time::Duration;

#[cfg(target_os = "linux")]
use common::this_thread_policy;
use common::{assert_ledger_balanced, eventually, must_finish, spin, SCHED_IDLE};
use elastic_cpu_pacer::idle::IdlePriority;
use elastic_cpu_pacer::idle::IdleRuntime;
use elastic_cpu_pacer::{Elastic, PacedStreamExt};
use futures_util::StreamExt;

/// The calling thread's id, from `/proc/thread-self/stat` (field 1).
#[cfg(target_os = "linux")]
fn this_thread_id() -> u32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    stat.split_whitespace().next().unwrap().parse().unwrap()
}

fn foreground(elastic: &Elastic) -> tokio::runtime::Runtime {
    elastic
        .runtime(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all(),
        )
        .build()
        .unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn every_pool_thread_runs_at_sched_idle_and_the_foreground_does_not() {
    let elastic = Elastic::builder().fixed_share(0.5).build().unwrap();
    let fg = foreground(&elastic);
    let idle = elastic.idle_runtime(3).unwrap();
    assert_eq!(idle.priority(), IdlePriority::SchedIdle);
    // Many tasks at once, each blocking its thread a little, so every worker runs some.
    let tasks: Vec<_> = (0..24)
        .map(|_| {
            idle.spawn(async {
                std::thread::sleep(Duration::from_millis(2));
                (
                    std::thread::current().name().map(str::to_owned),
                    this_thread_policy(),
                )
            })
        })
        .collect();
    let blocking = idle.handle().spawn_blocking(|| {
        (
            std::thread::current().name().map(str::to_owned),
            this_thread_policy(),
        )
    });
    let (seen, blocking) = must_finish("the pool's tasks", Duration::from_secs(30), move || {
        fg.block_on(async {
            let mut seen = Vec::new();
            for t in tasks {
                seen.push(t.await.unwrap());
            }
            (seen, blocking.await.unwrap())
        })
    });
    for (name, policy) in seen.iter().chain([&blocking]) {
        assert_eq!(name.as_deref(), Some("elastic-cpu-idle"));
        assert_eq!(*policy, SCHED_IDLE, "{name:?}");
    }
    let fg = foreground(&elastic);
    let fg_policy = fg.block_on(async { tokio::spawn(async { this_thread_policy() }).await });
    assert_ne!(fg_policy.unwrap(), SCHED_IDLE);
    assert_ne!(this_thread_policy(), SCHED_IDLE);
}

/// The calling thread's allowed CPUs, from `/proc/thread-self/status`.
#[cfg(target_os = "linux")]
fn this_thread_cpus() -> String {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap();
    line.trim().to_owned()
}

/// An `Elastic` at `share`, its foreground runtime and a pool of 2 threads; `None` (said on
/// stderr) on a machine with one CPU, where there is nothing to spread the pool over.
#[cfg(target_os = "linux")]
fn two_thread_pool(share: f64) -> Option<(Elastic, tokio::runtime::Runtime, IdleRuntime)> {
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        eprintln!("one CPU: nothing to spread the pool over");
        return None;
    }
    let elastic = Elastic::builder().fixed_share(share).build().unwrap();
    let fg = foreground(&elastic);
    let idle = elastic.idle_runtime(2).unwrap();
    Some((elastic, fg, idle))
}

#[cfg(target_os = "linux")]
#[test]
fn each_pool_thread_keeps_to_a_cpu_of_its_own() {
    let Some((_elastic, fg, idle)) = two_thread_pool(0.5) else {
        return;
    };
    let tasks: Vec<_> = (0..24)
        .map(|_| {
            idle.spawn(async {
                std::thread::sleep(Duration::from_millis(2));
                (this_thread_id(), this_thread_cpus())
            })
        })
        .collect();
    let seen = must_finish("the pool's tasks", Duration::from_secs(30), move || {
        fg.block_on(async {
            let mut seen = std::collections::BTreeMap::new();
            for t in tasks {
                let (tid, cpus) = t.await.unwrap();
                seen.insert(tid, cpus);
            }
            seen
        })
    });
    for cpus in seen.values() {
        let one: usize = cpus
            .parse()
            .unwrap_or_else(|_| panic!("not one CPU: {cpus}"));
        assert!(one < 1024);
    }
    let distinct: std::collections::BTreeSet<_> = seen.values().collect();
    assert_eq!(
        distinct.len(),
        seen.len(),
        "two threads on one CPU: {seen:?}"
    );
    // The threads outside the pool keep every CPU.
    assert!(
        this_thread_cpus().parse::<usize>().is_err(),
        "{}",
        this_thread_cpus()
    );
}

/// Keeps the calling thread on `cpu`.
#[cfg(target_os = "linux")]
fn pin_this_thread_to(cpu: usize) {
    // SAFETY: plain system calls on a zeroed `cpu_set_t` owned here.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let size = std::mem::size_of::<libc::cpu_set_t>();
        assert_eq!(libc::sched_setaffinity(0, size, &set), 0);
    }
}

#[cfg(target_os = "linux")]
#[test]
fn work_moves_to_the_pool_thread_whose_cpu_is_free() {
    let Some((_elastic, fg, idle)) = two_thread_pool(1.0) else {
        return;
    };
    // The pool's threads take the allowed CPUs in turn: the first keeps to the first.
    let held = first_allowed_cpu();
    // A normal-priority thread takes one pool thread's CPU for the whole test: that thread
    // gets next to nothing, and the work must go to the other.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            pin_this_thread_to(held);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            idle.spawn(async {
                spin(Duration::from_millis(1));
                this_thread_cpus().parse::<usize>().unwrap()
            })
        })
        .collect();
    let ran_on = must_finish("the pool's tasks", Duration::from_secs(60), move || {
        fg.block_on(async {
            let mut on = Vec::new();
            for t in tasks {
                on.push(t.await.unwrap());
            }
            on
        })
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    spinner.join().unwrap();
    let on_held = ran_on.iter().filter(|&&c| c == held).count();
    assert!(
        on_held <= 5,
        "{on_held} of 20 tasks ran on the held CPU {held}: {ran_on:?}"
    );
}

#[test]
fn a_worker_count_out_of_range_is_a_typed_error() {
    let elastic = Elastic::builder().build().unwrap();
    for workers in [0, IdleRuntime::MAX_WORKERS + 1, usize::MAX] {
        let err = elastic.idle_runtime(workers).unwrap_err();
        let elastic_cpu_pacer::BuildError::Setting(setting) = err else {
            panic!("a setting error: {err}")
        };
        let message = setting.to_string();
        assert!(message.contains("idle_runtime(workers)"), "{message}");
        assert!(
            message.contains(&IdleRuntime::MAX_WORKERS.to_string()),
            "the bound named: {message}"
        );
    }
}

#[test]
fn paced_work_on_the_pool_balances_the_ledger_and_stays_out_of_the_fg_probe() {
    let elastic = Elastic::builder().fixed_share(0.5).build().unwrap();
    let fg = foreground(&elastic);
    let idle = elastic.idle_runtime(2).unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        tasks.push(idle.spawn(async {
            for _ in 0..20 {
                spin(Duration::from_micros(200));
                tokio::task::yield_now().await;
            }
        }));
        let stream = futures_util::stream::iter(0..50)
            .map(|_| spin(Duration::from_micros(100)))
            .paced(&elastic)
            .for_each(|_| async {});
        tasks.push(idle.handle().spawn(stream));
    }
    must_finish(
        "paced work on the pool",
        Duration::from_secs(60),
        move || {
            fg.block_on(async {
                for t in tasks {
                    t.await.unwrap();
                }
            });
            fg
        },
    );
    // Let the governor close an interval or two so the window holds what was recorded.
    std::thread::sleep(Duration::from_millis(300));
    let s = elastic.snapshot();
    // Both kinds of work ran in the idle class (its own bucket), none in the elastic one.
    let q = s.idle_queue.clone().expect("the pool's class");
    assert!(q.used_nanos > 0 && q.grants > 0, "{s:#?}");
    assert_eq!(q.waiters, 0);
    assert_eq!(
        q.acquired_nanos - q.returned_nanos + q.over_limit_nanos,
        q.used_nanos,
        "{q:#?}"
    );
    assert_eq!(s.queue.grants, 0, "{s:#?}");
    assert_eq!(s.waiters, 0);
    assert_ledger_balanced(&s);
    // The pool has no probe hooks: none of its polls is an elastic queue-latency sample.
    assert_eq!(s.window.queue_latency.elastic.count, 0, "{s:#?}");
}

#[test]
fn shutdown_is_clean_with_work_still_waiting_for_grants() {
    // A tiny fixed limit: most of the work is queued for a grant when the pool shuts down.
    let elastic = Elastic::builder().fixed_share(0.01).build().unwrap();
    let fg = foreground(&elastic);
    let idle = elastic.idle_runtime(2).unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            idle.spawn(async {
                loop {
                    spin(Duration::from_micros(500));
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    // The pool's thread ids, seen from tasks that block their thread a little.
    #[cfg(target_os = "linux")]
    let tids: Vec<u32> = {
        let probes: Vec<_> = (0..16)
            .map(|_| {
                idle.handle().spawn(async {
                    std::thread::sleep(Duration::from_millis(2));
                    this_thread_id()
                })
            })
            .collect();
        let mut tids: Vec<u32> = fg.block_on(async {
            let mut v = Vec::new();
            for p in probes {
                v.push(p.await.unwrap());
            }
            v
        });
        tids.sort_unstable();
        tids.dedup();
        tids
    };
    std::thread::sleep(Duration::from_millis(50));
    // Shutdown is under test here, not the priority: a SCHED_IDLE thread gets next to no CPU
    // while normal threads (this binary's other tests) keep the cores busy, and the pool's own
    // threads are what cancel its tasks. Lift them back to normal first.
    #[cfg(target_os = "linux")]
    for &tid in &tids {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: system calls on a thread id of this process, with a param owned here.
        unsafe {
            libc::sched_setscheduler(tid as libc::pid_t, libc::SCHED_OTHER, &param);
            libc::setpriority(libc::PRIO_PROCESS, tid, 0); // back from nice 19 where allowed
        }
    }
    must_finish("the pool's shutdown", Duration::from_secs(30), move || {
        idle.shutdown_timeout(Duration::from_secs(10));
    });
    // Every task was cancelled, none hangs, and the pool's threads are gone.
    let results = must_finish("the cancelled tasks", Duration::from_secs(30), move || {
        fg.block_on(async {
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await);
            }
            out
        })
    });
    assert!(results
        .iter()
        .all(|r| r.as_ref().is_err_and(|e| e.is_cancelled())));
    #[cfg(target_os = "linux")]
    eventually("the pool's threads to end", Duration::from_secs(30), || {
        tids.iter()
            .all(|t| !std::path::Path::new(&format!("/proc/self/task/{t}")).exists())
    });
    let s = elastic.snapshot();
    assert_eq!(s.waiters, 0, "{s:#?}");
    assert_ledger_balanced(&s);
}

/// Keeps the calling thread (and the threads it starts from now on) on the first CPU it may
/// run on.
#[cfg(target_os = "linux")]
fn pin_to_one_cpu() {
    pin_this_thread_to(first_allowed_cpu());
}

/// The first CPU the calling thread may run on.
#[cfg(target_os = "linux")]
fn first_allowed_cpu() -> usize {
    // SAFETY: a plain system call on a zeroed `cpu_set_t` owned here.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        assert_eq!(libc::sched_getaffinity(0, size, &mut set), 0);
        (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .unwrap()
    }
}

#[cfg(target_os = "linux")]
#[test]
fn short_items_on_the_pool_are_charged_their_cpu_time_not_the_time_the_os_took_the_core() {
    // One CPU for everything here: a normal-priority thread that runs 1 ms in every 2 takes
    // the core from the pool's thread mid-item, again and again. The items' 40 ms span several
    // 10 ms grants (on the pool the quantum is the slice: runs of items end as grants do).
    std::thread::spawn(|| {
        pin_to_one_cpu();
        let elastic = Elastic::builder()
            .fixed_share(1.0)
            .enforcement(
                elastic_cpu_pacer::settings::Enforcement::default()
                    .slice(Duration::from_millis(10)),
            )
            .build()
            .unwrap();
        let idle = elastic.idle_runtime(1).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hog = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    spin(Duration::from_millis(1));
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        let items = {
            let elastic = elastic.clone();
            async move {
                use elastic_cpu_core::{Clock, ThreadCpuClock};
                let start = ThreadCpuClock.now();
                futures_util::stream::iter(0..20_000)
                    .map(|_| spin(Duration::from_micros(2)))
                    .paced(&elastic)
                    .for_each(|_| async {})
                    .await;
                ThreadCpuClock.now() - start
            }
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ran = rt.block_on(idle.handle().spawn(items)).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        hog.join().unwrap();
        let s = elastic.snapshot();
        let charged = Duration::from_nanos(s.idle_queue.clone().unwrap().used_nanos);
        // Timed on the wall clock alone the items were charged about twice what they ran.
        assert!(
            charged.as_secs_f64() <= 1.3 * ran.as_secs_f64(),
            "charged {charged:?} for {ran:?} of CPU"
        );
        assert_ledger_balanced(&s);
    })
    .join()
    .unwrap();
}
