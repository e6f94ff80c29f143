//! The work queue's counters, kept per thread: each thread adds to a cell only it writes (a
//! plain load and store, no locked instruction, no cache line shared with another core), and a
//! snapshot sums the cells. A cell whose thread has ended is folded into a shared total.

use std::cell::RefCell;
use std::sync::atomic::AtomicU64 as StdAtomicU64;
use std::sync::{Arc, Weak};

use crate::sync::{lock, AtomicU64, Mutex, Ordering};

/// What the queue counts (the lock side's counts too, so every count has one home).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) grants: u64,
    pub(crate) acquired: u64,
    pub(crate) returned: u64,
    pub(crate) used: u64,
}

/// One thread's counts for one queue, on a cache line of its own.
#[repr(align(64))]
struct Cell {
    grants: AtomicU64,
    acquired: AtomicU64,
    returned: AtomicU64,
    used: AtomicU64,
}

impl Cell {
    fn new() -> Self {
        Self {
            grants: AtomicU64::new(0),
            acquired: AtomicU64::new(0),
            returned: AtomicU64::new(0),
            used: AtomicU64::new(0),
        }
    }

    /// Add `c`: only by the cell's own thread (one writer, so a load and a store suffice).
    #[inline]
    fn bump(&self, c: Counts) {
        let add = |a: &AtomicU64, v: u64| {
            if v != 0 {
                a.store(a.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
            }
        };
        add(&self.grants, c.grants);
        add(&self.acquired, c.acquired);
        add(&self.returned, c.returned);
        add(&self.used, c.used);
    }

    /// Add `c` from any thread.
    fn bump_shared(&self, c: Counts) {
        self.grants.fetch_add(c.grants, Ordering::Relaxed);
        self.acquired.fetch_add(c.acquired, Ordering::Relaxed);
        self.returned.fetch_add(c.returned, Ordering::Relaxed);
        self.used.fetch_add(c.used, Ordering::Relaxed);
    }

    fn read(&self) -> Counts {
        Counts {
            grants: self.grants.load(Ordering::Relaxed),
            acquired: self.acquired.load(Ordering::Relaxed),
            returned: self.returned.load(Ordering::Relaxed),
            used: self.used.load(Ordering::Relaxed),
        }
    }
}

struct Registry {
    /// The cells of threads that have counted and not ended.
    live: Mutex<Vec<Arc<Cell>>>,
    /// The counts of ended threads (and of counting during a thread's teardown).
    ended: Cell,
}

/// A thread's registration with one queue's tally: folds the cell into `ended` when the thread
/// ends (or the entry is pruned).
struct Entry {
    id: u64,
    cell: Arc<Cell>,
    registry: Weak<Registry>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(r) = self.registry.upgrade() {
            let mut live = lock(&r.live);
            // Under the lock: a snapshot sees the cell in `live` or in `ended`, never both.
            r.ended.bump_shared(self.cell.read());
            live.retain(|c| !Arc::ptr_eq(c, &self.cell));
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    static MINE: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

#[cfg(loom)]
loom::thread_local! {
    static MINE: RefCell<Vec<Entry>> = RefCell::new(Vec::new());
}

/// One queue's counters: add from any thread, read the sum.
pub(crate) struct Tally {
    id: u64,
    registry: Arc<Registry>,
}

impl Tally {
    pub(crate) fn new() -> Self {
        static NEXT_ID: StdAtomicU64 = StdAtomicU64::new(0);
        Self {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            registry: Arc::new(Registry {
                live: Mutex::new(Vec::new()),
                ended: Cell::new(),
            }),
        }
    }

    /// Add `c` to this thread's cell (registering it on first use).
    #[inline]
    pub(crate) fn add(&self, c: Counts) {
        let counted = MINE.try_with(|mine| {
            let Ok(mut mine) = mine.try_borrow_mut() else {
                return false;
            };
            if let Some(e) = mine.iter().find(|e| e.id == self.id) {
                e.cell.bump(c);
                return true;
            }
            self.register(&mut mine).bump(c);
            true
        });
        if !matches!(counted, Ok(true)) {
            // The thread is being torn down: count in the shared total.
            self.registry.ended.bump_shared(c);
        }
    }

    #[cold]
    fn register<'a>(&self, mine: &'a mut Vec<Entry>) -> &'a Cell {
        // Forget queues that are gone, so a thread that touches many queues keeps few entries.
        mine.retain(|e| e.registry.strong_count() > 0);
        let cell = Arc::new(Cell::new());
        lock(&self.registry.live).push(cell.clone());
        mine.push(Entry {
            id: self.id,
            cell,
            registry: Arc::downgrade(&self.registry),
        });
        &mine[mine.len() - 1].cell
    }

    /// The sums over every thread that counted.
    pub(crate) fn read(&self) -> Counts {
        let live = lock(&self.registry.live);
        live.iter()
            .map(|c| c.read())
            .fold(self.registry.ended.read(), |a, b| Counts {
                grants: a.grants.wrapping_add(b.grants),
                acquired: a.acquired.wrapping_add(b.acquired),
                returned: a.returned.wrapping_add(b.returned),
                used: a.used.wrapping_add(b.used),
            })
    }
}
