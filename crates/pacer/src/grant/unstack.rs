//! An idle pool's threads hand their CPU to a runtime worker the kernel left queued behind
//! another (why: on [`Unstack`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use elastic_cpu_core::{Clock, MonotonicClock};
use elastic_cpu_probe::{cpu_affinity, Stacking, ThreadRegistry, WorkerStacking};

/// A look at the workers costs at most 1/this of the time between two looks.
const COST_SHARE: u64 = 20;

/// After a look that found no CPU with two runnable workers, the next gap is twice the last, up
/// to `1 << CALM_SHIFT` times the cost-bound one; a look that finds two on one CPU starts over.
/// Only while the runtime has no more workers than there are CPUs: there a look in thousands
/// finds a worker to move, and looks then cost 1/160 of the pool's time rather than 1/20. With
/// more workers than CPUs, workers stack all the time and every look is worth its cost.
const CALM_SHIFT: u32 = 3;

/// Reads the workers' states (the OS's, or a test's script).
pub(crate) trait Look: Send {
    /// What the workers do now; `here`: the caller's CPU ([`Stacking::movable`]). `None`: no
    /// reading.
    fn look(&mut self, here: u32) -> Option<Stacking>;
}

impl Look for WorkerStacking {
    fn look(&mut self, here: u32) -> Option<Stacking> {
        self.read(Some(here)).ok()
    }
}

/// Moves a thread (the OS, or a test's record).
pub(crate) trait Mover: Send + Sync {
    /// The CPU the calling thread runs on (`None`: unknown here: never look).
    fn here(&self) -> Option<u32>;
    /// Moves thread `tid` onto CPU `cpu` and leaves its affinity as it was; whether it moved.
    fn move_to(&self, tid: u32, cpu: u32) -> bool;
}

/// The OS's: Linux affinity calls.
struct OsMover;

#[cfg(any(target_os = "linux", target_os = "android"))]
impl Mover for OsMover {
    fn here(&self) -> Option<u32> {
        u32::try_from(rustix::thread::sched_getcpu()).ok()
    }

    /// Pins the thread to `cpu` for a moment (the kernel moves it there before the call
    /// returns), then puts its own mask back, which leaves it where it is. Nothing if `cpu` is
    /// not in its mask.
    fn move_to(&self, tid: u32, cpu: u32) -> bool {
        use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet, Pid};
        let pid = i32::try_from(tid).ok().and_then(Pid::from_raw);
        let (Some(pid), Ok(cpu)) = (pid, usize::try_from(cpu)) else {
            return false;
        };
        // A CPU past the set's size is in no mask (and the set's accessors take none).
        if cpu >= CpuSet::MAX_CPU {
            return false;
        }
        let Ok(own) = sched_getaffinity(Some(pid)) else {
            return false;
        };
        if !own.is_set(cpu) {
            return false;
        }
        let mut only = CpuSet::new();
        only.set(cpu);
        if sched_setaffinity(Some(pid), &only).is_err() {
            return false;
        }
        // Its own mask back at once; a second try if the first fails (the mask it had was
        // valid a moment ago).
        if sched_setaffinity(Some(pid), &own).is_err() {
            let _ = sched_setaffinity(Some(pid), &own);
        }
        true
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
impl Mover for OsMover {
    fn here(&self) -> Option<u32> {
        None
    }

    fn move_to(&self, _: u32, _: u32) -> bool {
        false
    }
}

/// Idle-priority work hands its CPU to a runtime worker queued behind another.
///
/// A CPU running only idle-priority threads never goes idle, so Linux neither balances onto it
/// as a CPU going idle nor, on a busy machine, finds it on a wake-up: it stops searching for
/// idle CPUs when the last-level cache's CPUs look fully used, idle-priority time included,
/// and a woken task goes where its waker or its last CPU is. A worker woken by another worker
/// then waits behind it on one CPU, for up to a time slice, while another CPU runs elastic
/// work at idle priority; once two workers share a CPU, their wake-ups keep them there.
///
/// So at its poll quantum an idle pool's thread may look at the workers ([`WorkerStacking`]):
/// if two are runnable on one CPU and none on its own, it moves one of them onto its own CPU
/// (pins it there for a moment, then puts its affinity mask back), where it preempts the
/// idle-priority thread at once. Looks are spaced by time, at least a quantum apart and so
/// that they cost at most 1/20 of the time between them (a look is a `pread` per worker, a few
/// µs each), down to 1/160 while looks find no two workers on one CPU and the runtime has no
/// more workers than CPUs. One thread looks at a time; the others run on.
pub(crate) struct Unstack {
    /// The workers' states.
    look: Mutex<Box<dyn Look>>,
    mover: Box<dyn Mover>,
    /// Wall time, where `next_look` counts from.
    clock: Box<dyn Clock>,
    /// When the next look is due, in nanoseconds of `clock`.
    next_look: AtomicU64,
    /// Looks in a row that found no two workers on one CPU, up to the last doubling.
    calm: AtomicU32,
    /// CPUs the workers may run on: with more workers, looks are never spaced out.
    cpus: u32,
    /// Workers moved so far.
    moved: AtomicU64,
}

impl Unstack {
    /// Looks at the workers of `foreground` (its [`ThreadRole::Worker`]s) in `/proc`.
    ///
    /// [`ThreadRole::Worker`]: elastic_cpu_probe::ThreadRole::Worker
    pub(crate) fn new(foreground: &ThreadRegistry) -> Unstack {
        // The CPUs in the affinity mask (the quota does not matter here: which CPU a worker
        // waits on does); unknown (off Linux, where nothing moves), never spaced out.
        let cpus = cpu_affinity().map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
        Unstack::with(
            Box::new(WorkerStacking::new(foreground)),
            Box::new(OsMover),
            Box::new(MonotonicClock::new()),
            cpus,
        )
    }

    /// Over a given reader, mover, clock and CPU count (tests).
    pub(crate) fn with(
        look: Box<dyn Look>,
        mover: Box<dyn Mover>,
        clock: Box<dyn Clock>,
        cpus: u32,
    ) -> Unstack {
        Unstack {
            look: Mutex::new(look),
            mover,
            clock,
            next_look: AtomicU64::new(0),
            calm: AtomicU32::new(0),
            cpus,
            moved: AtomicU64::new(0),
        }
    }

    /// Workers moved so far.
    pub(crate) fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    /// At a quantum of running time (`quantum` long): if a look is due, look at the workers
    /// and move one queued behind another onto this CPU. Returns whether it moved one.
    pub(crate) fn at_quantum(&self, quantum: Duration) -> bool {
        let now = nanos(self.clock.now());
        if now < self.next_look.load(Ordering::Relaxed) {
            return false;
        }
        let Some(here) = self.mover.here() else {
            return false;
        };
        let Ok(mut look) = self.look.try_lock() else {
            return false; // another thread is looking
        };
        let seen = look.look(here);
        let after = nanos(self.clock.now());
        // Counted under the look's lock: one thread at a time updates it.
        let calm = match seen {
            Some(s) if s.stacked() || s.workers > self.cpus => 0,
            _ => (self.calm.load(Ordering::Relaxed) + 1).min(CALM_SHIFT),
        };
        self.calm.store(calm, Ordering::Relaxed);
        drop(look);
        let gap = (after.saturating_sub(now))
            .saturating_mul(COST_SHARE << calm)
            .max(nanos(quantum));
        self.next_look
            .store(after.saturating_add(gap), Ordering::Relaxed);
        let moved = seen
            .and_then(|s| s.movable)
            .is_some_and(|tid| self.mover.move_to(tid, here));
        if moved {
            self.moved.fetch_add(1, Ordering::Relaxed);
        }
        moved
    }
}

/// `d` in nanoseconds, saturating (`shared` has its own: this module sits below it).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl std::fmt::Debug for Unstack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unstack")
            .field("moved", &self.moved())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elastic_cpu_core::ManualClock;
    use std::sync::Arc;
    use std::time::Instant;

    /// Scripted readings, one per look (the last repeats).
    struct Script(Vec<Stacking>);

    impl Look for Script {
        fn look(&mut self, _: u32) -> Option<Stacking> {
            let s = if self.0.len() > 1 {
                self.0.remove(0)
            } else {
                *self.0.first()?
            };
            Some(s)
        }
    }

    /// The moves made: (tid, CPU).
    type Moves = Arc<Mutex<Vec<(u32, u32)>>>;

    /// Records moves; runs on CPU `here`.
    #[derive(Clone, Default)]
    struct Record {
        here: Option<u32>,
        moves: Moves,
    }

    impl Mover for Record {
        fn here(&self) -> Option<u32> {
            self.here
        }
        fn move_to(&self, tid: u32, cpu: u32) -> bool {
            self.moves.lock().unwrap().push((tid, cpu));
            true
        }
    }

    fn stacked(movable: Option<u32>) -> Stacking {
        Stacking {
            workers: 2,
            runnable: 2,
            most_on_one_cpu: 2,
            movable,
        }
    }

    /// An `Unstack` over `readings`, on CPU `here`, and the record of its moves.
    fn unstack(readings: Vec<Stacking>, here: Option<u32>) -> (Unstack, Moves) {
        let record = Record {
            here,
            ..Record::default()
        };
        let moves = record.moves.clone();
        (
            Unstack::with(
                Box::new(Script(readings)),
                Box::new(record),
                Box::new(ManualClock::new()),
                2,
            ),
            moves,
        )
    }

    /// Scripted readings, each taking `cost` of a manual clock.
    struct Timed {
        readings: Script,
        clock: ManualClock,
        cost: Duration,
    }

    impl Look for Timed {
        fn look(&mut self, here: u32) -> Option<Stacking> {
            self.clock.advance(self.cost);
            self.readings.look(here)
        }
    }

    /// The gap after each look, for `readings` (one look each) that take 10 µs apiece, on
    /// `cpus` CPUs.
    fn gaps(readings: Vec<Stacking>, cpus: u32) -> Vec<Duration> {
        let clock = ManualClock::new();
        let n = readings.len();
        let look = Timed {
            readings: Script(readings),
            clock: clock.clone(),
            cost: Duration::from_micros(10),
        };
        let mover = Record {
            here: Some(0),
            ..Record::default()
        };
        let u = Unstack::with(
            Box::new(look),
            Box::new(mover),
            Box::new(clock.clone()),
            cpus,
        );
        let mut out = Vec::new();
        for _ in 0..n {
            // Just before the look is due nothing happens; at it, the look.
            let due = Duration::from_nanos(u.next_look.load(Ordering::Relaxed));
            if due > clock.now() + Duration::from_nanos(1) {
                clock.set(due - Duration::from_nanos(1));
                u.at_quantum(Duration::ZERO);
                assert_eq!(
                    nanos(clock.now()),
                    nanos(due) - 1,
                    "looked before it was due"
                );
            }
            clock.set(due);
            u.at_quantum(Duration::ZERO);
            let next = Duration::from_nanos(u.next_look.load(Ordering::Relaxed));
            out.push(next - clock.now());
        }
        out
    }

    /// `workers` workers, one runnable: nothing stacked.
    fn calm(workers: u32) -> Stacking {
        Stacking {
            workers,
            runnable: 1,
            most_on_one_cpu: 1,
            movable: None,
        }
    }

    #[test]
    fn looks_that_find_no_stacking_space_out_and_a_stacked_one_starts_over() {
        let calm = calm(2);
        // Stacked, but on this CPU too: nothing to move, yet the gap starts over.
        let busy = stacked(None);
        let us = |n: u64| Duration::from_micros(10 * n);
        let readings = vec![
            calm,
            calm,
            calm,
            calm,
            calm,
            busy,
            calm,
            stacked(Some(3)),
            calm,
        ];
        let want = [40, 80, 160, 160, 160, 20, 40, 20, 40].map(us);
        assert_eq!(gaps(readings, 2), want);
    }

    #[test]
    fn with_more_workers_than_cpus_looks_are_never_spaced_out() {
        let us = |n: u64| Duration::from_micros(10 * n);
        assert_eq!(gaps(vec![calm(3); 6], 2), vec![us(20); 6]);
        assert_eq!(gaps(vec![calm(3); 6], 3)[5], us(160));
    }

    #[test]
    fn a_movable_worker_is_moved_onto_this_cpu() {
        let (u, moves) = unstack(vec![stacked(Some(7))], Some(1));
        assert!(u.at_quantum(Duration::ZERO));
        assert_eq!(*moves.lock().unwrap(), vec![(7, 1)]);
        assert_eq!(u.moved(), 1);
    }

    #[test]
    fn nothing_moves_when_no_worker_is_movable() {
        let (u, moves) = unstack(vec![calm(2), stacked(None), calm(2)], Some(0));
        for _ in 0..3 {
            assert!(!u.at_quantum(Duration::ZERO));
        }
        assert!(moves.lock().unwrap().is_empty());
        assert_eq!(u.moved(), 0);
    }

    #[test]
    fn without_a_known_cpu_there_is_no_look() {
        let (u, moves) = unstack(vec![stacked(Some(7))], None);
        assert!(!u.at_quantum(Duration::ZERO));
        assert!(moves.lock().unwrap().is_empty());
    }

    #[test]
    fn looks_are_at_least_a_quantum_apart() {
        let (u, moves) = unstack(vec![stacked(Some(7))], Some(1));
        // A quantum of an hour: the first look is due, the next not within this test.
        assert!(u.at_quantum(Duration::from_secs(3600)));
        assert!(!u.at_quantum(Duration::from_secs(3600)));
        assert_eq!(moves.lock().unwrap().len(), 1);
    }

    /// The OS mover moves a spinning thread onto the CPU asked for and leaves its mask as it
    /// was.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn the_os_mover_moves_a_thread_and_puts_its_mask_back() {
        use rustix::thread::{gettid, sched_getaffinity, sched_getcpu, CpuSet, Pid};
        use std::sync::atomic::{AtomicBool, AtomicI64};

        let mine = sched_getaffinity(None).unwrap();
        let allowed: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&c| mine.is_set(c)).collect();
        if allowed.len() < 2 {
            return; // one CPU: nowhere to move to
        }
        // The spinner reports its tid, the CPU it runs on, and whether it ran on `want`.
        let stop = Arc::new(AtomicBool::new(false));
        let (on, tid, want) = (
            Arc::new(AtomicI64::new(-1)),
            Arc::new(AtomicI64::new(0)),
            Arc::new(AtomicI64::new(-1)),
        );
        let seen = Arc::new(AtomicBool::new(false));
        let spinner = {
            let (stop, on, tid, want, seen) = (
                stop.clone(),
                on.clone(),
                tid.clone(),
                want.clone(),
                seen.clone(),
            );
            std::thread::spawn(move || {
                tid.store(i64::from(gettid().as_raw_pid()), Ordering::SeqCst);
                while !stop.load(Ordering::Relaxed) {
                    let cpu = sched_getcpu() as i64;
                    on.store(cpu, Ordering::Relaxed);
                    if cpu == want.load(Ordering::Relaxed) {
                        seen.store(true, Ordering::Relaxed);
                    }
                }
            })
        };
        let hang_guard = Instant::now() + Duration::from_secs(60);
        while on.load(Ordering::Relaxed) < 0 {
            assert!(Instant::now() < hang_guard, "the spinner never ran");
            std::thread::sleep(Duration::from_millis(1));
        }
        let tid = u32::try_from(tid.load(Ordering::SeqCst)).unwrap();
        let pid = Pid::from_raw(tid as i32);
        let before = sched_getaffinity(pid).unwrap();
        let from = on.load(Ordering::Relaxed) as usize;
        let target = *allowed.iter().find(|&&c| c != from).unwrap();
        want.store(target as i64, Ordering::Relaxed);
        // With its mask back, the kernel may move it away again before it ran there (other
        // tests keep the CPUs busy): move it again until it has run there once.
        while !seen.load(Ordering::Relaxed) {
            assert!(OsMover.move_to(tid, target as u32));
            assert_eq!(
                sched_getaffinity(pid).unwrap(),
                before,
                "the mask is put back"
            );
            assert!(
                Instant::now() < hang_guard,
                "the spinner never ran on CPU {target}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // A CPU outside the thread's mask: no move.
        assert!(!OsMover.move_to(tid, CpuSet::MAX_CPU as u32 + 1));
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
    }
}
