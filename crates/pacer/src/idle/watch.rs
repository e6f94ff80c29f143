//! [`PoolWatch`]: notices when normal-priority threads keep every core so busy that the idle
//! pool's threads get no CPU, and wakes the work `Placement::Auto` put on the pool so that it
//! comes back to the runtime.
//!
//! Why: a future on an idle-priority thread that holds a lock the foreground needs (a
//! `tokio::sync::Mutex` across an await, a connection pool's slot) is not run while normal
//! threads want every core, so the foreground waits for as long as the cores stay busy. A
//! runtime worker is a normal thread: there the future runs at the elastic share's floor and
//! lets the lock go. The pool cannot tell which futures hold what, so every future `Auto` put
//! there comes back once the pool is starved, between two of its polls.
//!
//! The pool runs a pulse task that stamps the time every [`PULSE`]. A watch thread at normal
//! priority looks every [`PULSE`]: a stamp older than [`STARVED`] at two looks in a row means
//! the pool's threads could not run a task that was ready for that long (one stale look may be
//! the host pausing the machine, which stops the watch too), and the watch wakes the runtime
//! side of every future on the pool (which takes the future back if it sits between polls).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How often the pool stamps its pulse, and the watch looks.
pub(crate) const PULSE: Duration = Duration::from_millis(100);

/// A pulse this late (at two looks in a row) means the pool is starved: far beyond the delays a
/// busy but not saturated machine gives an idle thread, which finds a free core within
/// milliseconds; on a saturated one the kernel runs a `SCHED_IDLE` thread for a slice every
/// few hundred milliseconds.
pub(crate) const STARVED: Duration = Duration::from_millis(250);

/// How long the pool must run unstarved before work that came back goes there again: long
/// against one starved spell, so a lock holder does not shuttle to and fro while normal
/// threads keep the cores busy with short breaks.
pub(crate) const SETTLED: Duration = Duration::from_secs(5);

/// The runtime side of a future on the pool: woken when the pool is starved.
pub(crate) trait Recall: Send + Sync {
    /// Wake the runtime task that waits for the future.
    fn wake(&self);
}

/// The pool's pulse, the futures on it, and the watch thread.
pub(crate) struct PoolWatch {
    base: Instant,
    /// When the pool's pulse task last ran: nanoseconds since `base`.
    pulse: AtomicU64,
    /// When the pool was last seen starved: nanoseconds since `base` (0: never).
    last_starved: AtomicU64,
    /// The last look found the pulse stale.
    stale: AtomicBool,
    /// Two looks in a row found it stale, and no look since found it fresh.
    starved: AtomicBool,
    /// Futures on the pool that may come back.
    moved: Mutex<Vec<Weak<dyn Recall>>>,
    /// Futures that came back.
    returned: AtomicU64,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl PoolWatch {
    /// A watch whose pulse was stamped at `base`, without its thread.
    fn stamped_at(base: Instant) -> PoolWatch {
        PoolWatch {
            base,
            pulse: AtomicU64::new(0),
            last_starved: AtomicU64::new(0),
            stale: AtomicBool::new(false),
            starved: AtomicBool::new(false),
            moved: Mutex::new(Vec::new()),
            returned: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
        }
    }

    /// A watch whose pulse is fresh now, and its thread (an error if the OS refuses one).
    pub(crate) fn start() -> std::io::Result<Arc<PoolWatch>> {
        let watch = Arc::new(PoolWatch::stamped_at(Instant::now()));
        let weak = Arc::downgrade(&watch);
        let thread = thread::Builder::new()
            .name("elastic-cpu-idle-watch".into())
            .spawn(move || run(weak))?;
        *watch.lock_thread() = Some(thread);
        Ok(watch)
    }

    fn lock_thread(&self) -> std::sync::MutexGuard<'_, Option<JoinHandle<()>>> {
        self.thread.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The pool's pulse task ran.
    pub(crate) fn beat(&self) {
        self.pulse.store(self.now(), Ordering::Relaxed);
    }

    /// One look at the pulse (the watch thread's, every [`PULSE`]): whether the pool is starved
    /// now.
    fn look(&self) -> bool {
        let now = self.now();
        let stale =
            now.saturating_sub(self.pulse.load(Ordering::Relaxed)) > STARVED.as_nanos() as u64;
        let starved = stale && self.stale.swap(stale, Ordering::Relaxed);
        if !stale {
            self.stale.store(false, Ordering::Relaxed);
        }
        if starved {
            self.last_starved.store(now.max(1), Ordering::Relaxed);
        }
        self.starved.store(starved, Ordering::Release);
        starved
    }

    /// A future's poll on the pool was starved (the pool got little CPU, if often enough to
    /// keep the pulse fresh): work that came back waits [`SETTLED`] from now.
    pub(crate) fn saw_starved(&self) {
        self.last_starved
            .store(self.now().max(1), Ordering::Relaxed);
    }

    /// Whether the pool is starved, as the watch's last look found it.
    pub(crate) fn starved(&self) -> bool {
        self.starved.load(Ordering::Acquire)
    }

    /// Whether the pool has run unstarved for [`SETTLED`]: work that came back may go again.
    pub(crate) fn settled(&self) -> bool {
        let last = self.last_starved.load(Ordering::Relaxed);
        !self.starved()
            && (last == 0 || self.now().saturating_sub(last) > SETTLED.as_nanos() as u64)
    }

    /// A future went to the pool: wake `recall` while the pool is starved.
    pub(crate) fn watch(&self, recall: Weak<dyn Recall>) {
        let mut moved = self.moved.lock().unwrap_or_else(|p| p.into_inner());
        // Futures that ended leave their entries: drop them as new ones come.
        moved.retain(|r| r.strong_count() > 0);
        moved.push(recall);
    }

    /// A future came back to the runtime.
    pub(crate) fn returned(&self) {
        self.returned.fetch_add(1, Ordering::Relaxed);
    }

    /// Futures that came back so far.
    pub(crate) fn returns(&self) -> u64 {
        self.returned.load(Ordering::Relaxed)
    }

    /// Wake every future on the pool that is still there.
    fn recall(&self) {
        let live: Vec<_> = {
            let mut moved = self.moved.lock().unwrap_or_else(|p| p.into_inner());
            moved.retain(|r| r.strong_count() > 0);
            moved.iter().filter_map(Weak::upgrade).collect()
        };
        for r in live {
            r.wake();
        }
    }

    /// End the watch thread; `wait`: join it.
    pub(crate) fn stop(&self, wait: bool) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.lock_thread().take() {
            thread.thread().unpark();
            if wait && thread.thread().id() != thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

fn run(watch: Weak<PoolWatch>) {
    loop {
        thread::park_timeout(PULSE);
        let Some(watch) = watch.upgrade() else {
            return;
        };
        if watch.stop.load(Ordering::Acquire) {
            return;
        }
        if watch.look() {
            watch.recall();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter(AtomicU64);

    impl Recall for Counter {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_fresh_pulse_is_not_starved_and_ended_futures_are_dropped() {
        let watch = PoolWatch::start().unwrap();
        watch.beat();
        assert!(!watch.look() && !watch.starved() && watch.settled());
        let live: Arc<dyn Recall> = Arc::new(Counter(AtomicU64::new(0)));
        watch.watch(Arc::downgrade(&live));
        {
            let gone: Arc<dyn Recall> = Arc::new(Counter(AtomicU64::new(0)));
            watch.watch(Arc::downgrade(&gone));
        }
        watch.watch(Arc::downgrade(&live));
        assert_eq!(
            watch.moved.lock().unwrap().len(),
            2,
            "the ended one dropped"
        );
        watch.recall();
        watch.stop(true);
        assert!(watch.lock_thread().is_none());
    }

    #[test]
    fn a_stale_pulse_is_starved() {
        // Stamped "long ago": past the starved bound.
        let Some(base) = Instant::now().checked_sub(STARVED * 2) else {
            return; // the clock starts later than that on this machine
        };
        let stale = PoolWatch::stamped_at(base);
        // One stale look may be the machine paused: starved at the second.
        assert!(!stale.look());
        assert!(stale.look() && stale.starved());
        stale.beat();
        assert!(!stale.look() && !stale.starved());
        // Starved just now: not settled until it has run for a while.
        assert!(!stale.settled());
    }
}
