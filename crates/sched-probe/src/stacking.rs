//! Whether the runtime's workers are stacked on one CPU, from Linux's per-thread `stat` files
//! (what and why: on [`WorkerStacking`]).

use std::fs::File;
use std::path::PathBuf;

use crate::run_queue::RunQueueUnavailable;
use crate::threads::{ThreadRegistry, ThreadRole};

/// Where the real system mounts procfs.
const PROC: &str = "/proc";
/// A `stat` line is ~300 bytes; a longer read only costs.
const STAT_BYTES: usize = 512;
/// Reads between two looks at the registry (a worker starts or stops rarely; a stale file
/// fails its read and is dropped at once).
const RELIST_EVERY: u32 = 1024;
/// CPU numbers above this are not a kernel's (`NR_CPUS` is at most 8192): the read sizes a
/// per-CPU table by the number, so a garbled file must not name CPU 4 billion.
pub(crate) const MAX_CPU: u32 = 65_535;

/// One worker's scheduler state in its `stat` file: runnable (`R`: running or waiting for a
/// CPU) or not, and the CPU whose run queue it is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WorkerState {
    pub(crate) runnable: bool,
    pub(crate) cpu: u32,
}

impl WorkerState {
    /// Parses `<pid> (<comm>) <state> ... <processor> ...`: the state is the third field and the
    /// CPU the 39th, counted after the last `)` (a thread's name may hold spaces and
    /// parentheses). `None` if the line is cut short or the CPU is not a number up to
    /// [`MAX_CPU`].
    pub(crate) fn parse(line: &[u8]) -> Option<WorkerState> {
        let close = line.iter().rposition(|&b| b == b')')?;
        let mut fields = line.get(close + 2..)?.split(|&b| b == b' ');
        let state = fields.next()?;
        // Fields 4 to 38 lie between the state and the processor.
        let cpu = fields.nth(35)?;
        let cpu = std::str::from_utf8(cpu).ok()?.trim_end().parse().ok()?;
        if cpu > MAX_CPU {
            return None;
        }
        Some(WorkerState {
            runnable: state == b"R",
            cpu,
        })
    }
}

/// What one read found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stacking {
    /// Workers read (files that answered).
    pub workers: u32,
    /// Workers runnable: running or waiting for a CPU.
    pub runnable: u32,
    /// The most runnable workers on one CPU's run queue.
    pub most_on_one_cpu: u32,
    /// A worker (its tid) on the run queue of a CPU that holds two or more runnable workers,
    /// while the CPU the read was asked about holds none: one that could run there now.
    pub movable: Option<u32>,
}

impl Stacking {
    /// Two or more workers runnable on one CPU: all but one of them wait for it.
    pub fn stacked(&self) -> bool {
        self.most_on_one_cpu >= 2
    }
}

/// Reads, for each of a [`ThreadRegistry`]'s [`ThreadRole::Worker`]s, whether it is runnable and
/// on which CPU's run queue, and says whether two or more share one CPU.
///
/// Why: a CPU that runs only idle-priority (`SCHED_IDLE`) threads is never idle, so Linux never
/// balances onto it as a CPU going idle, and on a busy machine its wake-up path stops searching
/// for idle CPUs (it estimates the LLC as fully used, the idle threads' time included). A worker
/// woken by the other then queues behind it on the same CPU for up to a time slice while the
/// second CPU runs idle-priority work. An idle-priority thread that reads "stacked" can hand
/// its CPU to one of them ([`Stacking::movable`]).
///
/// # Cost
///
/// Per worker one `pread` of its `/proc/self/task/<tid>/stat` (kept open; the kernel formats
/// ~300 bytes: a few µs), a scan of the line, no allocation. Every 1024 reads the worker list is
/// copied from the registry (one lock, one reused `Vec`) and files are opened for new workers.
/// Meant for idle-priority threads, whose CPU time is what is spare.
///
/// ```
/// use elastic_cpu_probe::{ThreadRegistry, ThreadRole, WorkerStacking};
///
/// let root = std::env::temp_dir().join(format!("stacking-doc-{}", std::process::id()));
/// let stat = |tid: u32, state: &str, cpu: u32| {
///     let dir = root.join(format!("self/task/{tid}"));
///     std::fs::create_dir_all(&dir).unwrap();
///     let fields_4_to_38 = vec!["0"; 35].join(" ");
///     let line = format!("{tid} (tokio-rt-worker) {state} {fields_4_to_38} {cpu} 0 0\n");
///     std::fs::write(dir.join("stat"), line).unwrap();
/// };
/// let registry = ThreadRegistry::new();
/// registry.register(11, ThreadRole::Worker);
/// registry.register(12, ThreadRole::Worker);
/// stat(11, "R", 0);
/// stat(12, "S", 0);
/// let mut stacking = WorkerStacking::with_proc_root(&registry, &root);
/// assert!(!stacking.read(Some(1)).unwrap().stacked());
/// stat(12, "R", 0); // woken onto the CPU the other one runs on
/// let s = stacking.read(Some(1)).unwrap();
/// assert!(s.stacked());
/// assert!(s.movable.is_some()); // CPU 1 holds no runnable worker: one of them could run there
/// # std::fs::remove_dir_all(&root).unwrap();
/// ```
#[derive(Debug)]
pub struct WorkerStacking {
    registry: ThreadRegistry,
    /// `<proc root>/self/task`.
    task_dir: PathBuf,
    /// False off Linux with the real `/proc`: every read says so.
    supported: bool,
    /// The workers' `stat` files, by tid.
    files: Vec<(u32, File)>,
    /// Reads until the worker list is copied again (0: at the next read).
    relist_in: u32,
    /// Reused: the registry's threads; per CPU, the runnable workers and the last one's tid.
    threads: Vec<(u32, ThreadRole)>,
    per_cpu: Vec<(u32, u32)>,
}

impl WorkerStacking {
    /// Reads the real `/proc` (off Linux every read answers [`RunQueueUnavailable::NotLinux`]).
    pub fn new(registry: &ThreadRegistry) -> WorkerStacking {
        let mut s = WorkerStacking::with_proc_root(registry, PROC);
        s.supported = cfg!(any(target_os = "linux", target_os = "android"));
        s
    }

    /// Reads `<proc_root>/self/task/<tid>/stat` instead of `/proc/...`: a fake tree for tests.
    pub fn with_proc_root(
        registry: &ThreadRegistry,
        proc_root: impl Into<PathBuf>,
    ) -> WorkerStacking {
        WorkerStacking {
            registry: registry.clone(),
            task_dir: proc_root.into().join("self").join("task"),
            supported: true,
            files: Vec::new(),
            relist_in: 0,
            threads: Vec::new(),
            per_cpu: Vec::new(),
        }
    }

    /// Reads every worker's state once. `here`: the CPU a worker could move to (the caller's),
    /// for [`Stacking::movable`].
    pub fn read(&mut self, here: Option<u32>) -> Result<Stacking, RunQueueUnavailable> {
        if !self.supported {
            return Err(RunQueueUnavailable::NotLinux);
        }
        if self.relist_in == 0 {
            self.relist();
        }
        self.relist_in -= 1;
        self.per_cpu.iter_mut().for_each(|n| *n = (0, 0));
        let mut found = Stacking::default();
        let mut buf = [0u8; STAT_BYTES];
        let mut gone = false;
        for (tid, file) in &self.files {
            let Some(state) = read_at_start(file, &mut buf).and_then(WorkerState::parse) else {
                gone = true;
                continue;
            };
            found.workers += 1;
            if !state.runnable {
                continue;
            }
            found.runnable += 1;
            // At most `MAX_CPU`: the parse refuses any larger number.
            let cpu = state.cpu as usize;
            if cpu >= self.per_cpu.len() {
                self.per_cpu.resize(cpu + 1, (0, 0));
            }
            let on = &mut self.per_cpu[cpu];
            *on = (on.0 + 1, *tid);
            found.most_on_one_cpu = found.most_on_one_cpu.max(on.0);
        }
        if gone {
            // A worker stopped (or its file went bad): look again at the next read.
            self.relist_in = 0;
        }
        let here_free = here.is_some_and(|h| self.per_cpu.get(h as usize).is_none_or(|n| n.0 == 0));
        if here_free {
            found.movable = (self.per_cpu.iter()).find(|n| n.0 >= 2).map(|n| n.1);
        }
        Ok(found)
    }

    /// Copies the registry's workers and opens files for those not open yet.
    fn relist(&mut self) {
        self.relist_in = RELIST_EVERY;
        self.registry.snapshot(&mut self.threads);
        self.threads.retain(|t| t.1 == ThreadRole::Worker);
        let threads = &self.threads;
        self.files
            .retain(|(tid, _)| threads.binary_search_by_key(tid, |t| t.0).is_ok());
        for &(tid, _) in threads {
            if self.files.iter().any(|f| f.0 == tid) {
                continue;
            }
            if let Ok(file) = File::open(self.task_dir.join(tid.to_string()).join("stat")) {
                self.files.push((tid, file));
            }
        }
    }
}

/// Reads the file from its start into `buf`: the bytes read, or `None` on an error or an
/// empty file.
fn read_at_start<'b>(file: &File, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    #[cfg(unix)]
    let n = std::os::unix::fs::FileExt::read_at(file, buf, 0).ok()?;
    #[cfg(not(unix))]
    let n = {
        let _ = (file, &buf);
        0
    };
    (n > 0).then(|| &buf[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `stat` line as Linux 6.x writes it (52 fields), with `comm` and the fields that matter.
    fn line(comm: &str, state: &str, cpu: u32) -> String {
        let mut rest: Vec<String> = (4..=52).map(|f| (f * 10).to_string()).collect();
        rest[39 - 4] = cpu.to_string();
        format!("4242 ({comm}) {state} {}\n", rest.join(" "))
    }

    #[test]
    fn state_and_cpu_come_from_fields_3_and_39() {
        let s = WorkerState::parse(line("tokio-rt-worker", "R", 7).as_bytes());
        assert_eq!(
            s,
            Some(WorkerState {
                runnable: true,
                cpu: 7
            })
        );
        let s = WorkerState::parse(line("tokio-rt-worker", "S", 1).as_bytes()).unwrap();
        assert!(!s.runnable);
    }

    #[test]
    fn a_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let s = WorkerState::parse(line("a) R (b", "D", 3).as_bytes()).unwrap();
        assert_eq!(
            s,
            WorkerState {
                runnable: false,
                cpu: 3
            }
        );
    }

    /// A fake `/proc` with one `stat` file per worker: `(tid, state, cpu)`.
    struct FakeProc {
        root: PathBuf,
    }

    impl FakeProc {
        fn new(name: &str) -> FakeProc {
            let root = std::env::temp_dir().join(format!("stacking-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            FakeProc { root }
        }

        fn set(&self, tid: u32, state: &str, cpu: u32) {
            let dir = self.root.join(format!("self/task/{tid}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("stat"), line("tokio-rt-worker", state, cpu)).unwrap();
        }
    }

    impl Drop for FakeProc {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    #[test]
    fn a_worker_is_movable_only_from_a_stacked_cpu_to_a_free_one() {
        let proc = FakeProc::new("movable");
        let registry = ThreadRegistry::new();
        for tid in [21, 22, 23] {
            registry.register(tid, ThreadRole::Worker);
        }
        registry.register(24, ThreadRole::Elastic); // not a worker: never read
        proc.set(21, "R", 0);
        proc.set(22, "R", 0);
        proc.set(23, "S", 1);
        proc.set(24, "R", 1);
        let mut s = WorkerStacking::with_proc_root(&registry, &proc.root);
        let read = s.read(Some(1)).unwrap();
        assert_eq!(
            (read.workers, read.runnable, read.most_on_one_cpu),
            (3, 2, 2)
        );
        assert!(matches!(read.movable, Some(21 | 22)));
        // Nowhere to move to: the caller's CPU is the stacked one, or none was given.
        assert_eq!(s.read(Some(0)).unwrap().movable, None);
        assert_eq!(s.read(None).unwrap().movable, None);
        // A runnable worker on the caller's CPU: it is not free.
        proc.set(23, "R", 1);
        assert_eq!(s.read(Some(1)).unwrap().movable, None);
        // Not stacked.
        proc.set(22, "S", 0);
        proc.set(23, "S", 1);
        let read = s.read(Some(1)).unwrap();
        assert!(!read.stacked());
        assert_eq!(read.movable, None);
    }

    #[test]
    fn a_worker_that_stops_is_dropped_and_one_that_starts_is_read() {
        let proc = FakeProc::new("relist");
        let registry = ThreadRegistry::new();
        registry.register(31, ThreadRole::Worker);
        proc.set(31, "R", 0);
        let mut s = WorkerStacking::with_proc_root(&registry, &proc.root);
        assert_eq!(s.read(Some(1)).unwrap().workers, 1);
        // A dead thread's file fails its read (here: reads empty).
        std::fs::write(proc.root.join("self/task/31/stat"), "").unwrap();
        registry.unregister(31);
        registry.register(32, ThreadRole::Worker);
        proc.set(32, "R", 0);
        // The failed read makes the next one copy the registry again.
        assert_eq!(s.read(Some(1)).unwrap().workers, 0);
        assert_eq!(s.read(Some(1)).unwrap().workers, 1);
    }

    #[test]
    fn a_short_or_garbled_line_is_none() {
        assert_eq!(WorkerState::parse(b""), None);
        assert_eq!(WorkerState::parse(b"12 (x) R 1 2 3"), None);
        assert_eq!(WorkerState::parse(b"no parenthesis R"), None);
        let garbled = line("w", "R", 0).replace(" 0 ", " x ");
        assert_eq!(WorkerState::parse(garbled.as_bytes()), None);
    }

    #[test]
    fn a_cpu_no_kernel_has_is_none() {
        // The read sizes a per-CPU table by the number: CPU 4 billion would ask for 32 GB.
        for cpu in [MAX_CPU + 1, u32::MAX] {
            assert_eq!(WorkerState::parse(line("w", "R", cpu).as_bytes()), None);
        }
        let last = WorkerState::parse(line("w", "R", MAX_CPU).as_bytes()).unwrap();
        assert_eq!(last.cpu, MAX_CPU);
        // Read from a file, it is a bad file (dropped), not a table of 4 billion CPUs.
        let proc = FakeProc::new("huge-cpu");
        let registry = ThreadRegistry::new();
        registry.register(41, ThreadRole::Worker);
        proc.set(41, "R", u32::MAX);
        let mut s = WorkerStacking::with_proc_root(&registry, &proc.root);
        assert_eq!(s.read(Some(0)).unwrap().workers, 0);
    }
}
