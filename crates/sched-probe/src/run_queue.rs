//! OS run-queue delay of the runtime's threads, from Linux's per-thread scheduler statistics
//! (what and at what cost: on [`RunQueueStats`]).

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::threads::{ThreadRegistry, ThreadRole};

/// Where the real system mounts procfs.
const PROC: &str = "/proc";
/// A schedstat file is three numbers; reading at most this much keeps a bogus file cheap.
const READ_LIMIT: u64 = 256;
/// The start of every name this library gives its threads: such threads are never bystanders.
const OWN_THREADS: &str = "elastic-cpu-";

/// One thread's scheduler counters, as in its `schedstat` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Schedstat {
    pub(crate) on_cpu_ns: u64,
    pub(crate) wait_ns: u64,
    pub(crate) timeslices: u64,
}

impl Schedstat {
    /// Parses `<on cpu ns> <run-queue wait ns> <timeslices>`; later fields, if a kernel adds any,
    /// are ignored. `None` if the first three are not all numbers.
    pub(crate) fn parse(text: &str) -> Option<Schedstat> {
        let mut fields = text.split_ascii_whitespace().map(str::parse::<u64>);
        let mut next = || fields.next()?.ok();
        Some(Schedstat {
            on_cpu_ns: next()?,
            wait_ns: next()?,
            timeslices: next()?,
        })
    }

    /// What happened since `before`, or `None` if a counter went backwards: not the same thread
    /// (its tid was reused) or not a counter at all.
    fn since(self, before: Schedstat) -> Option<Schedstat> {
        Some(Schedstat {
            on_cpu_ns: self.on_cpu_ns.checked_sub(before.on_cpu_ns)?,
            wait_ns: self.wait_ns.checked_sub(before.wait_ns)?,
            timeslices: self.timeslices.checked_sub(before.timeslices)?,
        })
    }
}

/// One thread's scheduler activity over one tick.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadWait {
    /// The thread's id (Linux tid).
    pub tid: u32,
    /// Its role in the registry at the read.
    pub role: ThreadRole,
    /// Time it spent runnable but waiting for a CPU, in the OS run queue.
    pub run_queue_wait: Duration,
    /// Time it spent running on a CPU.
    pub on_cpu: Duration,
    /// Timeslices it ran (times the OS put it on a CPU).
    pub timeslices: u64,
    /// `run_queue_wait` as a fraction of the tick's `elapsed` (0.12 = waited 12 % of the tick).
    pub wait_fraction: f64,
}

/// What [`RunQueueStats::sample`] saw over one tick.
///
/// A thread read for the first time (or whose counters went backwards: a new thread under a
/// reused tid) only sets a baseline and is counted in `started`; threads whose file could not be
/// read are counted in `gone` / `malformed`. Only threads with two good reads are in `threads`.
///
/// ```
/// use elastic_cpu_probe::{RunQueueTick, ThreadRole, ThreadWait};
/// use std::time::Duration;
///
/// let wait = |tid, role, ms| ThreadWait {
///     tid,
///     role,
///     run_queue_wait: Duration::from_millis(ms),
///     on_cpu: Duration::from_millis(90),
///     timeslices: 10,
///     wait_fraction: ms as f64 / 100.0,
/// };
/// let tick = RunQueueTick {
///     elapsed: Duration::from_millis(100),
///     threads: vec![wait(1, ThreadRole::Worker, 12), wait(2, ThreadRole::Elastic, 30)],
///     ..RunQueueTick::default()
/// };
/// assert_eq!(tick.total_wait(ThreadRole::serves_foreground), Duration::from_millis(12));
/// assert_eq!(tick.wait_fraction(ThreadRole::serves_foreground), Some(0.12));
/// assert_eq!(tick.max_wait_fraction(|_| true), Some(0.3));
/// assert_eq!(tick.wait_fraction(|r| r == ThreadRole::Runtime), None); // no such thread: no data
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunQueueTick {
    /// Wall time the tick covered (since the previous sample).
    pub elapsed: Duration,
    /// Threads read at both ends of the tick, in tid order.
    pub threads: Vec<ThreadWait>,
    /// Threads read for the first time (or under a reused tid): a baseline, no delta yet.
    pub started: usize,
    /// Threads whose `schedstat` file does not exist: the thread has exited (or is not in this
    /// process), or the kernel does not keep the statistics.
    pub gone: usize,
    /// Threads whose file exists but could not be read or parsed, or reads `0 0 0` (a kernel
    /// that keeps no scheduler statistics; a registered thread has run, so its CPU time is not 0).
    pub malformed: usize,
}

impl RunQueueTick {
    /// Summed run-queue wait of the measured threads whose role `include` accepts
    /// (e.g. [`ThreadRole::serves_foreground`]).
    pub fn total_wait(&self, include: impl Fn(ThreadRole) -> bool) -> Duration {
        self.matching(include).map(|t| t.run_queue_wait).sum()
    }

    /// Summed run-queue wait of the threads `include` accepts, as a fraction of the tick: 0.12 =
    /// "these threads waited 12 % of the tick in the OS run queue", together (n threads can wait
    /// up to n ticks). `None` when no such thread was measured: no data, not 0.
    pub fn wait_fraction(&self, include: impl Fn(ThreadRole) -> bool) -> Option<f64> {
        let mut any = false;
        let total: Duration = self
            .matching(include)
            .inspect(|_| any = true)
            .map(|t| t.run_queue_wait)
            .sum();
        any.then(|| fraction(total, self.elapsed))
    }

    /// The largest single thread's wait fraction among those `include` accepts; `None` when no
    /// such thread was measured.
    pub fn max_wait_fraction(&self, include: impl Fn(ThreadRole) -> bool) -> Option<f64> {
        self.matching(include)
            .map(|t| t.wait_fraction)
            .max_by(f64::total_cmp)
    }

    fn matching(&self, include: impl Fn(ThreadRole) -> bool) -> impl Iterator<Item = &ThreadWait> {
        self.threads.iter().filter(move |t| include(t.role))
    }
}

/// `part / whole`, with a whole under 1 ns taken as 1 ns (never NaN or infinite).
fn fraction(part: Duration, whole: Duration) -> f64 {
    part.as_secs_f64() / whole.as_secs_f64().max(1e-9)
}

/// Why [`RunQueueStats::sample`] has nothing to report.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunQueueUnavailable {
    /// Not Linux: there is no `/proc/<pid>/task/<tid>/schedstat` to read.
    NotLinux,
    /// The registry holds no thread.
    NoThreads,
    /// Not one registered thread's `schedstat` could be read: the threads are gone, `/proc` is
    /// not mounted, or the kernel keeps no scheduler statistics.
    Unreadable {
        /// Threads tried.
        threads: usize,
    },
}

impl fmt::Display for RunQueueUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunQueueUnavailable::NotLinux => {
                f.write_str("run-queue delay unavailable: per-thread schedstat is Linux only")
            }
            RunQueueUnavailable::NoThreads => {
                f.write_str("run-queue delay unavailable: no thread registered")
            }
            RunQueueUnavailable::Unreadable { threads } => write!(
                f,
                "run-queue delay unavailable: no schedstat file of {threads} registered threads \
                 could be read"
            ),
        }
    }
}

impl std::error::Error for RunQueueUnavailable {}

/// Reads the OS run-queue delay of a [`ThreadRegistry`]'s threads, once per tick.
///
/// tokio's schedule latency starts when a task is queued *in tokio*. It does not see a worker
/// thread that is runnable but not running because the OS gave its CPU to another thread (a
/// blocking-pool thread running elastic work, a thread of another process): every task on that
/// worker waits too, and the task clock of the one being polled just runs on. The kernel counts
/// that time per thread: `/proc/self/task/<tid>/schedstat` holds three numbers, nanoseconds on
/// a CPU, nanoseconds waiting on a run queue (runnable, not running), and timeslices run.
/// This reads them once per tick for the registry's threads and reports the deltas, per thread
/// and summed, and as a fraction of the tick ("the workers waited 12 % of the tick in the OS run
/// queue").
///
/// # Cost
///
/// Per registered thread per tick: an open, a read and a close of a procfs file of ~30 bytes
/// (the kernel formats three counters it keeps anyway; a few µs), a map update. Per tick: one
/// registry lock to copy the thread list, one `Vec` for the result. Paths and buffers are
/// reused. Nothing runs between ticks. At 8 workers and 100 ms ticks that is tens of µs every
/// 100 ms, on the caller's thread (not measured yet).
///
/// # Precision
///
/// The kernel's counters are nanoseconds (`sched_info`, kept when the kernel is built with
/// `CONFIG_SCHED_INFO`, as distribution kernels are; a kernel that keeps none prints `0 0 0`,
/// which is counted as malformed rather than as "never waited"). A wait is added to the counter
/// when it ends (when the thread gets a CPU): a thread still waiting at the read shows that wait
/// in a later tick.
///
/// # Use
///
/// Call [`sample`](Self::sample) once per tick from one thread (the controller's); the first
/// call sets baselines only. Missing or malformed files never panic: they are counted in the
/// [`RunQueueTick`], and a thread that comes back starts again from a new baseline.
///
/// ```
/// use elastic_cpu_probe::{RunQueueStats, ThreadRegistry, ThreadRole};
///
/// let registry = ThreadRegistry::new();
/// let rt = registry
///     .instrument(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
///     .build()
///     .unwrap();
/// let mut stats = RunQueueStats::new(&registry);
/// let _baseline = stats.sample();
/// rt.block_on(async { /* a tick of work */ });
/// match stats.sample() {
///     Ok(tick) => {
///         if let Some(f) = tick.wait_fraction(ThreadRole::serves_foreground) {
///             println!("runtime threads waited {:.0} % of the tick for a CPU", f * 100.0);
///         }
///     }
///     Err(why) => println!("{why}"), // e.g. not Linux
/// }
/// ```
#[derive(Debug)]
pub struct RunQueueStats {
    registry: ThreadRegistry,
    /// `<proc root>/self/task`.
    task_dir: PathBuf,
    /// False off Linux with the real `/proc`: every sample says so.
    supported: bool,
    /// Per tid: the counters at the last good read and the sample that read them.
    last: HashMap<u32, (Schedstat, u64)>,
    /// Number of the current sample (marks which baselines are still registered).
    generation: u64,
    last_sample: Option<Instant>,
    /// The most threads outside the registry read per tick as bystanders (0: none).
    bystanders: usize,
    /// Per unregistered tid seen: whether it is one of this library's own threads (by name).
    own: HashMap<u32, bool>,
    // Reused buffers: the thread list, a file path, the tid as text, the file's text.
    threads: Vec<(u32, ThreadRole)>,
    path: PathBuf,
    name: String,
    text: String,
}

impl RunQueueStats {
    /// Reads the real `/proc` (off Linux every sample answers
    /// [`RunQueueUnavailable::NotLinux`]).
    pub fn new(registry: &ThreadRegistry) -> RunQueueStats {
        let mut stats = RunQueueStats::with_proc_root(registry, PROC);
        stats.supported = cfg!(any(target_os = "linux", target_os = "android"));
        stats
    }

    /// Reads `<proc_root>/self/task/<tid>/schedstat` instead of `/proc/...`: a fake tree for
    /// tests, or procfs mounted elsewhere. Works on any OS (the files are only text).
    ///
    /// ```
    /// use elastic_cpu_probe::{RunQueueStats, ThreadRegistry, ThreadRole};
    /// use std::time::Duration;
    ///
    /// let root = std::env::temp_dir().join(format!("rq-doc-{}", std::process::id()));
    /// let task = root.join("self/task/101");
    /// std::fs::create_dir_all(&task).unwrap();
    /// let write = |wait_ns: u64| {
    ///     std::fs::write(task.join("schedstat"), format!("5000000 {wait_ns} 40\n")).unwrap()
    /// };
    ///
    /// let registry = ThreadRegistry::new();
    /// registry.register(101, ThreadRole::Worker);
    /// let mut stats = RunQueueStats::with_proc_root(&registry, &root);
    /// write(1_000_000);
    /// assert_eq!(stats.sample_over(Duration::from_millis(100)).unwrap().started, 1); // baseline
    /// write(13_000_000); // 12 ms more spent waiting for a CPU
    /// let tick = stats.sample_over(Duration::from_millis(100)).unwrap();
    /// assert_eq!(tick.threads[0].run_queue_wait, Duration::from_millis(12));
    /// assert_eq!(tick.wait_fraction(|r| r == ThreadRole::Worker), Some(0.12));
    /// # std::fs::remove_dir_all(&root).unwrap();
    /// ```
    pub fn with_proc_root(
        registry: &ThreadRegistry,
        proc_root: impl Into<PathBuf>,
    ) -> RunQueueStats {
        RunQueueStats {
            registry: registry.clone(),
            task_dir: proc_root.into().join("self").join("task"),
            supported: true,
            last: HashMap::new(),
            generation: 0,
            last_sample: None,
            bystanders: 0,
            own: HashMap::new(),
            threads: Vec::new(),
            path: PathBuf::new(),
            name: String::new(),
            text: String::new(),
        }
    }

    /// Also read up to `at_most` threads of the process that the registry does not know, as
    /// [`ThreadRole::Bystander`]s (lowest tids first): threads beside the runtime (another
    /// runtime's, a client library's) whose waits elastic work may lengthen too. This library's
    /// own threads (named `elastic-cpu-*`: the governor, the sampler, the idle pool) are never
    /// bystanders. Each tick then lists `<proc root>/self/task` once (a directory read that
    /// allocates), reads each new thread's `comm` once, and each bystander's `schedstat` as a
    /// registered thread's.
    ///
    /// ```
    /// use elastic_cpu_probe::{RunQueueStats, ThreadRegistry, ThreadRole};
    ///
    /// let registry = ThreadRegistry::new();
    /// let _me = registry.register_current(ThreadRole::Worker);
    /// let (running, started) = std::sync::mpsc::channel();
    /// let (stop, stopped) = std::sync::mpsc::channel::<()>();
    /// let other = std::thread::spawn(move || {
    ///     running.send(()).unwrap();
    ///     let _ = stopped.recv(); // blocked until the end of the example
    /// });
    /// started.recv().unwrap(); // it has run, so its counters are not all zero
    /// let mut stats = RunQueueStats::new(&registry).read_bystanders(64);
    /// let _baseline = stats.sample();
    /// if let Ok(tick) = stats.sample() {
    ///     // On Linux the spawned thread is read, as a bystander.
    ///     let roles: Vec<_> = tick.threads.iter().map(|t| t.role).collect();
    ///     assert!(roles.contains(&ThreadRole::Bystander));
    /// }
    /// drop(stop);
    /// other.join().unwrap();
    /// ```
    pub fn read_bystanders(mut self, at_most: usize) -> RunQueueStats {
        self.bystanders = at_most;
        self
    }

    /// Appends up to `self.bystanders` tids from the task directory that are not already in
    /// `threads` (the registry's, sorted by tid) nor this library's own, as bystanders, lowest
    /// first; then sorts the whole list by tid.
    fn add_bystanders(&mut self, threads: &mut Vec<(u32, ThreadRole)>) {
        if self.bystanders == 0 {
            return;
        }
        let Ok(dir) = std::fs::read_dir(&self.task_dir) else {
            return;
        };
        let known = threads.len();
        let mut others: Vec<u32> = dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|tid| threads[..known].binary_search_by_key(tid, |t| t.0).is_err())
            .collect();
        others.sort_unstable();
        self.own.retain(|tid, _| others.binary_search(tid).is_ok());
        for &tid in &others {
            if !self.own.contains_key(&tid) {
                let own = self.is_own(tid);
                self.own.insert(tid, own);
            }
        }
        others.retain(|tid| self.own.get(tid) == Some(&false));
        others.truncate(self.bystanders);
        threads.extend(others.into_iter().map(|tid| (tid, ThreadRole::Bystander)));
        threads.sort_unstable_by_key(|t| t.0);
    }

    /// The registry whose threads are read.
    pub fn registry(&self) -> &ThreadRegistry {
        &self.registry
    }

    /// Reads every registered thread's counters and reports what changed since the previous
    /// sample, over the wall time since then (measured here with `Instant`; zero at the first
    /// sample, which only sets baselines).
    pub fn sample(&mut self) -> Result<RunQueueTick, RunQueueUnavailable> {
        let now = Instant::now();
        let elapsed = self
            .last_sample
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        self.read_all(elapsed, now)
    }

    /// As [`sample`](Self::sample), with the tick length given by the caller (who may already
    /// know it: the governor's tick, a test). Fractions are of `elapsed`.
    pub fn sample_over(&mut self, elapsed: Duration) -> Result<RunQueueTick, RunQueueUnavailable> {
        self.read_all(elapsed, Instant::now())
    }

    fn read_all(
        &mut self,
        elapsed: Duration,
        now: Instant,
    ) -> Result<RunQueueTick, RunQueueUnavailable> {
        self.last_sample = Some(now);
        if !self.supported {
            return Err(RunQueueUnavailable::NotLinux);
        }
        let mut threads = std::mem::take(&mut self.threads);
        self.registry.snapshot(&mut threads);
        let registered = threads.len();
        self.add_bystanders(&mut threads);
        self.generation += 1;
        let generation = self.generation;
        let mut tick = RunQueueTick {
            elapsed,
            threads: Vec::with_capacity(threads.len()),
            ..RunQueueTick::default()
        };
        for &(tid, role) in &threads {
            match self.read(tid) {
                Ok(now) => match self.last.insert(tid, (now, generation)) {
                    Some((before, _)) => match now.since(before) {
                        Some(d) => tick.threads.push(ThreadWait {
                            tid,
                            role,
                            run_queue_wait: Duration::from_nanos(d.wait_ns),
                            on_cpu: Duration::from_nanos(d.on_cpu_ns),
                            timeslices: d.timeslices,
                            wait_fraction: fraction(Duration::from_nanos(d.wait_ns), elapsed),
                        }),
                        None => tick.started += 1,
                    },
                    None => tick.started += 1,
                },
                Err(Unread::Gone) => {
                    self.last.remove(&tid);
                    tick.gone += 1;
                }
                Err(Unread::Malformed) => {
                    self.last.remove(&tid);
                    tick.malformed += 1;
                }
            }
        }
        // Forget threads that left the registry: a later thread under the same tid starts anew.
        self.last.retain(|_, &mut (_, seen)| seen == generation);
        let tried = threads.len();
        self.threads = threads;
        if registered == 0 {
            return Err(RunQueueUnavailable::NoThreads);
        }
        if tick.gone + tick.malformed == tried {
            return Err(RunQueueUnavailable::Unreadable { threads: tried });
        }
        Ok(tick)
    }

    /// Whether thread `tid` is one of this library's own, by the name in its `comm` file.
    fn is_own(&mut self, tid: u32) -> bool {
        self.read_text(tid, "comm").is_ok() && self.text.starts_with(OWN_THREADS)
    }

    /// Reads `<task_dir>/<tid>/<file>` (at most [`READ_LIMIT`] bytes) into the text buffer,
    /// reusing the path and text buffers.
    fn read_text(&mut self, tid: u32, file: &str) -> io::Result<usize> {
        self.name.clear();
        let _ = write!(self.name, "{tid}");
        self.path.as_mut_os_string().clear();
        self.path.push(&self.task_dir);
        self.path.push(&self.name);
        self.path.push(file);
        self.text.clear();
        File::open(&self.path).and_then(|f| f.take(READ_LIMIT).read_to_string(&mut self.text))
    }

    /// Reads `<task_dir>/<tid>/schedstat`.
    fn read(&mut self, tid: u32) -> Result<Schedstat, Unread> {
        match self.read_text(tid, "schedstat") {
            Ok(_) => Schedstat::parse(&self.text)
                .filter(|s| s.on_cpu_ns != 0 || s.wait_ns != 0 || s.timeslices != 0)
                .ok_or(Unread::Malformed),
            Err(e) if e.kind() == io::ErrorKind::NotFound || exited(&e) => Err(Unread::Gone),
            Err(_) => Err(Unread::Malformed),
        }
    }
}

/// ESRCH: the thread exited between the open and the read.
fn exited(e: &io::Error) -> bool {
    cfg!(any(target_os = "linux", target_os = "android")) && e.raw_os_error() == Some(3)
}

/// Why a thread's counters could not be read this tick.
enum Unread {
    Gone,
    Malformed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_schedstat() {
        let s = Schedstat::parse("4468186 89020 31\n").unwrap();
        assert_eq!((s.on_cpu_ns, s.wait_ns, s.timeslices), (4468186, 89020, 31));
        assert!(
            Schedstat::parse("1 2 3 4 5").is_some(),
            "later fields ignored"
        );
        for bad in [
            "",
            "\n",
            "1 2",
            "1 2 x",
            "-1 2 3",
            "1.5 2 3",
            "a b c",
            "1 2 18446744073709551616",
        ] {
            assert_eq!(Schedstat::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn deltas_refuse_counters_going_backwards() {
        let at = |c, w, t| Schedstat {
            on_cpu_ns: c,
            wait_ns: w,
            timeslices: t,
        };
        assert_eq!(at(10, 20, 3).since(at(4, 5, 1)), Some(at(6, 15, 2)));
        assert_eq!(at(10, 20, 3).since(at(10, 20, 3)), Some(at(0, 0, 0)));
        assert_eq!(at(10, 4, 3).since(at(4, 5, 1)), None);
        assert_eq!(at(10, 20, 0).since(at(4, 5, 1)), None);
    }

    #[test]
    fn bystanders_are_the_unregistered_threads_lowest_first_up_to_the_limit() {
        let root = std::env::temp_dir().join(format!("rq-bystanders-{}", std::process::id()));
        for tid in ["100", "101", "102", "103", "104", "not-a-tid"] {
            let dir = root.join("self/task").join(tid);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("schedstat"), "5000000 1000000 40\n").unwrap();
            std::fs::write(dir.join("comm"), "client-io\n").unwrap();
        }
        // The library's own threads are never bystanders.
        std::fs::write(root.join("self/task/100/comm"), "elastic-cpu-gov\n").unwrap();
        let registry = ThreadRegistry::new();
        registry.register(103, ThreadRole::Worker);
        let read = |stats: &mut RunQueueStats| {
            let _baseline = stats.sample_over(Duration::from_millis(100)).unwrap();
            let tick = stats.sample_over(Duration::from_millis(100)).unwrap();
            tick.threads
                .iter()
                .map(|t| (t.tid, t.role))
                .collect::<Vec<_>>()
        };
        let mut off = RunQueueStats::with_proc_root(&registry, &root);
        assert_eq!(read(&mut off), [(103, ThreadRole::Worker)]);
        let mut two = RunQueueStats::with_proc_root(&registry, &root).read_bystanders(2);
        assert_eq!(
            read(&mut two),
            [
                (101, ThreadRole::Bystander),
                (102, ThreadRole::Bystander),
                (103, ThreadRole::Worker)
            ]
        );
        // Bystanders alone are no runtime to read.
        let empty = ThreadRegistry::new();
        let mut none = RunQueueStats::with_proc_root(&empty, &root).read_bystanders(8);
        assert_eq!(
            none.sample_over(Duration::from_millis(100)),
            Err(RunQueueUnavailable::NoThreads)
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn fractions_are_never_nan() {
        assert_eq!(fraction(Duration::ZERO, Duration::ZERO), 0.0);
        assert!(fraction(Duration::from_millis(1), Duration::ZERO).is_finite());
    }
}
