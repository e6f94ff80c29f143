//! Which OS threads to watch: a registry of thread ids (Linux tids) and their roles, filled by
//! tokio's thread hooks ([`ThreadRegistry::instrument`]) or by hand, read by
//! [`RunQueueStats`](crate::RunQueueStats) once per tick.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// What a registered thread does, so a reader can tell foreground-serving threads from threads
/// running elastic work.
///
/// ```
/// use elastic_cpu_probe::ThreadRole;
/// assert!(ThreadRole::Worker.serves_foreground());
/// assert!(!ThreadRole::Elastic.serves_foreground());
/// assert!(!ThreadRole::Bystander.serves_foreground());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ThreadRole {
    /// A thread that runs the scheduler: a multi-thread worker, or a current-thread runtime's
    /// thread. Known by its parking in the scheduler (tokio's `on_thread_park` hook), which
    /// blocking-pool threads never do.
    Worker,
    /// A thread the runtime started that has not (yet) parked in the scheduler: a blocking-pool
    /// thread, or a worker that has been busy since it started. tokio starts both through the
    /// same `on_thread_start` hook, so that hook alone cannot tell them apart.
    Runtime,
    /// A thread running elastic work (e.g. a blocking-pool thread inside an elastic
    /// `spawn_blocking` closure), registered with [`ThreadRegistry::register_current`].
    Elastic,
    /// Any other thread registered by hand.
    Other,
    /// A thread of the process the registry does not know, read only when
    /// [`RunQueueStats::read_bystanders`](crate::RunQueueStats::read_bystanders) asks for them:
    /// another runtime's, a client library's, a sidecar's in-process half. Its waits are kept
    /// apart from the runtime's: elastic work can delay it, but it does not run the runtime's
    /// tasks.
    Bystander,
}

impl ThreadRole {
    /// Whether a run-queue wait of this thread delays the runtime's foreground work: true for
    /// the registered roles but [`Elastic`](ThreadRole::Elastic), whose waits only slow elastic
    /// work down; false for a [`Bystander`](ThreadRole::Bystander), which is read apart.
    pub fn serves_foreground(self) -> bool {
        !matches!(self, ThreadRole::Elastic | ThreadRole::Bystander)
    }
}

impl fmt::Display for ThreadRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ThreadRole::Worker => "worker",
            ThreadRole::Runtime => "runtime thread",
            ThreadRole::Elastic => "elastic",
            ThreadRole::Other => "other",
            ThreadRole::Bystander => "bystander",
        })
    }
}

/// The set of OS threads whose run-queue delay [`RunQueueStats`](crate::RunQueueStats) reads,
/// by thread id (a Linux tid, see [`current_tid`]) with a [`ThreadRole`] each.
///
/// Cheap to clone (an `Arc`); every clone is the same registry. Registering and reading take a
/// mutex held for a map update or a copy of the map, never across I/O: it is touched at thread
/// start and stop, at a worker's first park, and once per tick by the reader.
///
/// ```
/// use elastic_cpu_probe::{ThreadRegistry, ThreadRole};
///
/// let registry = ThreadRegistry::new();
/// let mut builder = tokio::runtime::Builder::new_multi_thread();
/// builder.worker_threads(2);
/// registry.instrument(&mut builder); // registers the runtime's threads as they start
/// let rt = builder.build().unwrap();
///
/// registry.register(4242, ThreadRole::Other); // any thread, by tid
/// assert_eq!(registry.role(4242), Some(ThreadRole::Other));
/// drop(rt); // the runtime's threads unregister as they stop
/// ```
#[derive(Clone, Default)]
pub struct ThreadRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    /// Tells registries apart in the per-thread "already seen parking" mark.
    id: u64,
    threads: Mutex<BTreeMap<u32, ThreadRole>>,
}

impl Default for Inner {
    fn default() -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Inner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            threads: Mutex::new(BTreeMap::new()),
        }
    }
}

/// Registries a thread remembers being a worker of; a thread of more re-registers (correct,
/// one map insert).
const WORKER_OF_SLOTS: usize = 4;

thread_local! {
    /// This thread's tid, once read (0: not yet).
    static TID: Cell<u32> = const { Cell::new(0) };
    /// Ids of the registries that have this thread as a [`ThreadRole::Worker`] (0: none), the
    /// latest first, so that the park hook costs one thread-local read after the first park, and
    /// two registries sampling one runtime do not take turns registering its workers.
    static WORKER_OF: Cell<[u64; WORKER_OF_SLOTS]> = const { Cell::new([0; WORKER_OF_SLOTS]) };
}

/// The calling thread's OS thread id (Linux tid), as `/proc/self/task/<tid>` names it.
///
/// Read once per thread from the `/proc/thread-self` link (Linux ≥ 3.17) and cached, so no
/// `unsafe` `gettid` call is needed. Elsewhere, or without `/proc`, an error of kind
/// `Unsupported` / `NotFound`.
///
/// ```
/// match elastic_cpu_probe::current_tid() {
///     Ok(tid) => println!("this thread is /proc/self/task/{tid}"),
///     Err(e) => println!("no thread id here: {e}"),
/// }
/// ```
pub fn current_tid() -> io::Result<u32> {
    let cached = TID.try_with(Cell::get).unwrap_or(0);
    if cached != 0 {
        return Ok(cached);
    }
    let tid = read_tid()?;
    let _ = TID.try_with(|t| t.set(tid));
    Ok(tid)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn read_tid() -> io::Result<u32> {
    // The link reads `<pid>/task/<tid>`.
    let link = std::fs::read_link("/proc/thread-self")?;
    link.file_name()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|&tid| tid != 0)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/proc/thread-self points to {link:?}, not <pid>/task/<tid>"),
            )
        })
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn read_tid() -> io::Result<u32> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "thread ids from /proc are Linux only",
    ))
}

impl fmt::Debug for ThreadRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.lock().iter()).finish()
    }
}

impl ThreadRegistry {
    /// An empty registry.
    pub fn new() -> ThreadRegistry {
        ThreadRegistry::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, ThreadRole>> {
        self.inner
            .threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers the runtime's threads as they come and go, through tokio's thread hooks:
    ///
    /// * `on_thread_start`: the new thread as [`ThreadRole::Runtime`] (a worker or a
    ///   blocking-pool thread: tokio starts both the same way);
    /// * `on_thread_park`: the parking thread as [`ThreadRole::Worker`], once per thread (only
    ///   scheduler threads park there; after the first park this hook is one thread-local read);
    /// * `on_thread_stop`: removes the thread.
    ///
    /// These replace hooks of the same names set before; set yours after this call and you
    /// replace ours. A current-thread runtime's thread (the one calling `block_on`) is not started
    /// by tokio: it is registered at its first park and stays registered after the runtime is
    /// gone (remove it with [`unregister`](Self::unregister) if it matters). A worker that hands
    /// its core over in `block_in_place` keeps its [`Worker`](ThreadRole::Worker) role.
    /// Registration needs [`current_tid`]; where it fails (off Linux) the hooks register nothing.
    ///
    /// ```
    /// use elastic_cpu_probe::ThreadRegistry;
    ///
    /// let registry = ThreadRegistry::new();
    /// let rt = registry
    ///     .instrument(tokio::runtime::Builder::new_multi_thread().worker_threads(1))
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(async {});
    /// drop(rt);
    /// assert!(registry.is_empty()); // every runtime thread unregistered as it stopped
    /// ```
    pub fn instrument<'a>(
        &self,
        builder: &'a mut tokio::runtime::Builder,
    ) -> &'a mut tokio::runtime::Builder {
        let (start, park, stop) = (self.clone(), self.clone(), self.clone());
        builder
            .on_thread_start(move || {
                if let Ok(tid) = current_tid() {
                    // A new thread: a stale entry under a reused tid is replaced.
                    start.lock().insert(tid, ThreadRole::Runtime);
                }
            })
            .on_thread_park(move || park.note_worker())
            .on_thread_stop(move || {
                if let Ok(tid) = current_tid() {
                    stop.lock().remove(&tid);
                }
                let _ = WORKER_OF.try_with(|w| w.set([0; WORKER_OF_SLOTS]));
            })
    }

    /// The park hook: marks the calling thread as a worker of this registry, once.
    #[inline]
    fn note_worker(&self) {
        let _ = self.register_current_worker();
    }

    /// Registers the calling thread as a [`ThreadRole::Worker`], once per thread: later calls
    /// (and the park hook of [`instrument`](Self::instrument), which does the same) cost one
    /// thread-local read. For a runtime built without `instrument` (`#[tokio::main]`, a
    /// framework's): call it from a task, and the workers that task runs on are read. Such a
    /// registration stays until [`unregister`](Self::unregister), as no stop hook removes it.
    ///
    /// Returns the thread's tid when this call registered it; `None` when it was already
    /// registered this way (by a park or an earlier call) or [`current_tid`] fails (off Linux).
    ///
    /// ```
    /// use elastic_cpu_probe::{ThreadRegistry, ThreadRole};
    ///
    /// let registry = ThreadRegistry::new();
    /// let rt = tokio::runtime::Builder::new_current_thread().build().unwrap(); // not instrumented
    /// let first = rt.block_on({
    ///     let registry = registry.clone();
    ///     async move { (registry.register_current_worker(), registry.register_current_worker()) }
    /// });
    /// match first {
    ///     (Some(tid), None) => assert_eq!(registry.role(tid), Some(ThreadRole::Worker)),
    ///     (None, None) => assert!(elastic_cpu_probe::current_tid().is_err()), // off Linux
    ///     other => panic!("registered twice: {other:?}"),
    /// }
    /// ```
    #[inline]
    pub fn register_current_worker(&self) -> Option<u32> {
        let id = self.inner.id;
        let known = WORKER_OF
            .try_with(Cell::get)
            .unwrap_or([id; WORKER_OF_SLOTS]);
        if known.contains(&id) {
            return None;
        }
        let _ = WORKER_OF.try_with(|w| {
            let mut ids = known;
            ids.rotate_right(1);
            ids[0] = id;
            w.set(ids);
        });
        let tid = current_tid().ok()?;
        self.lock().insert(tid, ThreadRole::Worker);
        Some(tid)
    }

    /// Registers thread `tid` with `role`, replacing its earlier role; returns that earlier role.
    /// Any tid is accepted: a thread that is not (or no longer) in this process is simply not
    /// found by the reader.
    ///
    /// ```
    /// use elastic_cpu_probe::{ThreadRegistry, ThreadRole};
    /// let registry = ThreadRegistry::new();
    /// assert_eq!(registry.register(7, ThreadRole::Worker), None);
    /// assert_eq!(registry.register(7, ThreadRole::Elastic), Some(ThreadRole::Worker));
    /// assert_eq!(registry.unregister(7), Some(ThreadRole::Elastic));
    /// assert!(registry.is_empty());
    /// ```
    pub fn register(&self, tid: u32, role: ThreadRole) -> Option<ThreadRole> {
        self.lock().insert(tid, role)
    }

    /// Removes thread `tid`; returns its role if it was registered.
    pub fn unregister(&self, tid: u32) -> Option<ThreadRole> {
        self.lock().remove(&tid)
    }

    /// Registers the calling thread with `role` until the returned guard is dropped, which puts
    /// back the role it had before (or removes it if it had none). For threads tokio's hooks do
    /// not classify: a blocking-pool thread while it runs elastic work, a thread of your own.
    ///
    /// Fails where [`current_tid`] does (off Linux).
    ///
    /// ```
    /// use elastic_cpu_probe::{ThreadRegistry, ThreadRole};
    ///
    /// let registry = ThreadRegistry::new();
    /// // Inside an elastic `spawn_blocking` closure, say:
    /// if let Ok(_elastic) = registry.register_current(ThreadRole::Elastic) {
    ///     assert_eq!(registry.threads().len(), 1);
    ///     // ... the elastic work ...
    /// }
    /// assert!(registry.is_empty()); // the guard put the old (absent) role back
    /// ```
    pub fn register_current(&self, role: ThreadRole) -> io::Result<ThreadRegistration> {
        let tid = current_tid()?;
        let previous = self.register(tid, role);
        Ok(ThreadRegistration {
            registry: self.clone(),
            tid,
            previous,
        })
    }

    /// The role of thread `tid`, if registered.
    pub fn role(&self, tid: u32) -> Option<ThreadRole> {
        self.lock().get(&tid).copied()
    }

    /// Every registered thread and its role, by tid.
    pub fn threads(&self) -> Vec<(u32, ThreadRole)> {
        self.lock().iter().map(|(&t, &r)| (t, r)).collect()
    }

    /// Number of registered threads.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no thread is registered.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Replaces `out` with the registered threads (reusing its allocation: the reader's tick).
    pub(crate) fn snapshot(&self, out: &mut Vec<(u32, ThreadRole)>) {
        out.clear();
        out.extend(self.lock().iter().map(|(&t, &r)| (t, r)));
    }
}

/// The calling thread's registration from [`ThreadRegistry::register_current`]; dropping it
/// puts back the role the thread had before (or removes it).
///
/// ```
/// use elastic_cpu_probe::{ThreadRegistry, ThreadRole};
///
/// let registry = ThreadRegistry::new();
/// if let Ok(reg) = registry.register_current(ThreadRole::Other) {
///     assert_eq!(registry.role(reg.tid()), Some(ThreadRole::Other));
/// }
/// ```
#[must_use = "dropping the guard ends the registration at once"]
pub struct ThreadRegistration {
    registry: ThreadRegistry,
    tid: u32,
    previous: Option<ThreadRole>,
}

impl ThreadRegistration {
    /// The registered thread's id.
    pub fn tid(&self) -> u32 {
        self.tid
    }
}

impl fmt::Debug for ThreadRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadRegistration")
            .field("tid", &self.tid)
            .field("previous", &self.previous)
            .finish()
    }
}

impl Drop for ThreadRegistration {
    fn drop(&mut self) {
        let mut threads = self.registry.lock();
        match self.previous {
            Some(role) => threads.insert(self.tid, role),
            None => threads.remove(&self.tid),
        };
    }
}
