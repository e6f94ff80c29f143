//! The work queue's counters, kept per thread: each of a queue's cells is owned by one thread at
//! a time (claimed on the thread's first count, released when it ends), so its owner adds with a
//! plain load and store (no locked instruction, no cache line shared with another core). A count
//! finds its cell through a thread-local `(tally id, cell index)` with no destructor: one
//! thread-local read and a compare, no borrow flag, no search. A snapshot sums the cells; a cell
//! keeps its counts when its owner ends, and the next owner adds to them. Threads beyond the
//! owned cells share one more cell, with `fetch_add`.

use std::cell::{Cell as StdCell, RefCell};
use std::sync::atomic::AtomicU64 as StdAtomicU64;
use std::sync::{Arc, Weak};

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

/// Owned cells per queue; a thread that finds none free counts in the shared cell.
const CELLS: usize = 32;

/// No tally: tally ids start at 0 and never reach it.
const NONE: u64 = u64::MAX;

/// What the queue counts (the lock side's counts too, so every count has one home).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) grants: u64,
    pub(crate) acquired: u64,
    pub(crate) returned: u64,
    pub(crate) used: u64,
}

/// One cell of counts, kept in a `CachePadded`: on cache lines of its own.
struct Cell {
    /// Token of the owning thread, 0 when free (unused by the shared cell).
    owner: AtomicU64,
    grants: AtomicU64,
    acquired: AtomicU64,
    returned: AtomicU64,
    used: AtomicU64,
}

impl Cell {
    fn new() -> Self {
        Self {
            owner: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            acquired: AtomicU64::new(0),
            returned: AtomicU64::new(0),
            used: AtomicU64::new(0),
        }
    }

    /// Add `c`: only by the cell's owner (one writer, so a load and a store suffice).
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

struct Cells {
    owned: Box<[CachePadded<Cell>]>,
    shared: CachePadded<Cell>,
}

/// The cells a thread owns, released when it ends.
struct Owned {
    token: u64,
    cells: Vec<(u64, Weak<Cells>, usize)>,
}

impl Drop for Owned {
    fn drop(&mut self) {
        // Counts made from here on go to the shared cells.
        let _ = LAST.try_with(|l| l.set((NONE, 0)));
        for (_, cells, i) in self.cells.drain(..) {
            if let Some(cells) = cells.upgrade() {
                // Release pairs with the next owner's claim: it continues from our counts.
                let _ = cells.owned[i].owner.compare_exchange(
                    self.token,
                    0,
                    Ordering::Release,
                    Ordering::Relaxed,
                );
            }
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    /// The cell this thread counted into last: (tally id, index into its owned cells).
    static LAST: StdCell<(u64, usize)> = const { StdCell::new((NONE, 0)) };
    static OWNED: RefCell<Owned> = const { RefCell::new(Owned { token: 0, cells: Vec::new() }) };
}

#[cfg(loom)]
loom::thread_local! {
    static LAST: StdCell<(u64, usize)> = StdCell::new((NONE, 0));
    static OWNED: RefCell<Owned> = RefCell::new(Owned { token: 0, cells: Vec::new() });
}

/// Thread tokens (never 0).
static NEXT_TOKEN: StdAtomicU64 = StdAtomicU64::new(1);

/// One queue's counters: add from any thread, read the sum.
pub(crate) struct Tally {
    id: u64,
    cells: Arc<Cells>,
}

impl Tally {
    pub(crate) fn new() -> Self {
        static NEXT_ID: StdAtomicU64 = StdAtomicU64::new(0);
        Self {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            cells: Arc::new(Cells {
                owned: (0..CELLS).map(|_| CachePadded::new(Cell::new())).collect(),
                shared: CachePadded::new(Cell::new()),
            }),
        }
    }

    /// Add `c` to this thread's cell.
    #[inline]
    pub(crate) fn add(&self, c: Counts) {
        let hit = LAST.try_with(|l| match l.get() {
            (id, i) if id == self.id => {
                self.cells.owned[i].bump(c);
                true
            }
            _ => false,
        });
        if !matches!(hit, Ok(true)) {
            self.add_slow(c);
        }
    }

    /// The thread's cell for this tally is not the one it used last: find or claim it.
    #[cold]
    fn add_slow(&self, c: Counts) {
        let counted = OWNED.try_with(|owned| {
            let Ok(mut owned) = owned.try_borrow_mut() else {
                return false;
            };
            let i = match owned.cells.iter().find(|e| e.0 == self.id) {
                Some(e) => e.2,
                None => match self.claim(&mut owned) {
                    Some(i) => i,
                    None => return false,
                },
            };
            let _ = LAST.try_with(|l| l.set((self.id, i)));
            self.cells.owned[i].bump(c);
            true
        });
        if !matches!(counted, Ok(true)) {
            // No free cell, or the thread is being torn down: count in the shared cell.
            self.cells.shared.bump_shared(c);
        }
    }

    /// Claim a free cell for the calling thread, if one is free.
    fn claim(&self, owned: &mut Owned) -> Option<usize> {
        if owned.token == 0 {
            owned.token = NEXT_TOKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let i = self.cells.owned.iter().position(|cell| {
            cell.owner.load(Ordering::Relaxed) == 0
                && cell
                    .owner
                    .compare_exchange(0, owned.token, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
        })?;
        // Forget queues that are gone, so a thread that touches many queues keeps few entries.
        owned.cells.retain(|e| e.1.strong_count() > 0);
        owned.cells.push((self.id, Arc::downgrade(&self.cells), i));
        Some(i)
    }

    /// The sums over every cell.
    pub(crate) fn read(&self) -> Counts {
        self.cells
            .owned
            .iter()
            .map(|cell| cell.read())
            .fold(self.cells.shared.read(), |a, b| Counts {
                grants: a.grants.wrapping_add(b.grants),
                acquired: a.acquired.wrapping_add(b.acquired),
                returned: a.returned.wrapping_add(b.returned),
                used: a.used.wrapping_add(b.used),
            })
    }
}
