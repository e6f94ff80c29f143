//! Machine-pause watchdog. On a shared VM the whole guest is sometimes descheduled by its host
//! for tens of milliseconds: every thread stops, whatever the process does. A request in flight
//! across such a pause is late by the pause, in every phase alike, and a few pauses decide a
//! phase's p99. The watchdog finds them so the report can leave those requests out (and says
//! how many it left out).
//!
//! One thread per CPU, pinned to it, at real-time priority (SCHED_FIFO, when the OS allows it),
//! sleeps 1 ms at a time. No ordinary thread can keep it from running, so a wake-up later than
//! [`PAUSE_MIN`] means that CPU itself was not running (the host may take one vCPU or all).
//! Without real-time priority the watchdog reports nothing: under load an ordinary thread is
//! late for ordinary reasons.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A gap this long between 1 ms sleeps of a real-time thread is a machine pause.
pub const PAUSE_MIN: Duration = Duration::from_millis(4);

/// Pauses seen so far, as `[last wake-up before, first wake-up after]`.
#[derive(Clone)]
pub struct Pauses {
    seen: Arc<Mutex<Vec<(Instant, Instant)>>>,
    /// The watchdog runs at real-time priority (otherwise it records nothing).
    pub realtime: bool,
}

impl Pauses {
    /// Start the watchdog threads (they run until the process exits); without real-time
    /// priority, say that machine pauses stay in the figures.
    pub fn start() -> Pauses {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut realtime = true;
        for cpu in 0..cpus {
            let (tx, rx) = std::sync::mpsc::channel();
            let s = seen.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("pause-watch-{cpu}"))
                .spawn(move || {
                    let rt = pin_realtime(cpu);
                    let _ = tx.send(rt);
                    if !rt {
                        return;
                    }
                    let mut last = Instant::now();
                    loop {
                        std::thread::sleep(Duration::from_millis(1));
                        let now = Instant::now();
                        if now - last >= PAUSE_MIN {
                            s.lock().unwrap().push((last, now));
                        }
                        last = now;
                    }
                });
            realtime &= spawned.is_ok() && rx.recv().unwrap_or(false);
        }
        if !realtime {
            eprintln!("note: no real-time priority for the pause watchdog; machine pauses stay in the figures");
        }
        Pauses { seen, realtime }
    }

    /// Pauses that overlap `[from, to]`.
    pub fn between(&self, from: Instant, to: Instant) -> Vec<(Instant, Instant)> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .copied()
            .filter(|&(a, b)| b >= from && a <= to)
            .collect()
    }
}

/// Pin the calling thread to `cpu` and give it real-time priority.
#[cfg(target_os = "linux")]
fn pin_realtime(cpu: usize) -> bool {
    use rustix::thread::{sched_setaffinity, CpuSet};
    if cpu >= CpuSet::MAX_CPU {
        return false;
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    // `None`: the calling thread.
    sched_setaffinity(None, &set).is_ok() && crate::priority::realtime(50)
}

#[cfg(not(target_os = "linux"))]
fn pin_realtime(_cpu: usize) -> bool {
    false
}
