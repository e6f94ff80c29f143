//! The work queue's lock-free fast path: while nobody waits, an admission or a settle is one
//! compare-and-swap on one word; the queue's lock is taken only when tokens run short, someone
//! waits, a grant overran its slice, or the governor changes something.
//!
//! The lock side lends the bucket's whole balance to the word ([`FastPath::open`]) and takes it
//! back before anything else it does ([`FastPath::close`]). While the word is open the bucket
//! itself holds nothing, so the balance is exactly the word's `avail`, and `avail` can be capped
//! at the burst without the lock. While it is closed (flag `SLOW`) the word is changed only
//! under the lock, so the lock side sees a settled state.
//!
//! The word: `SLOW` (1 bit) | `epoch` (8 bits, bumped at each opening, so a settle that read the
//! cap of an older opening fails its compare-and-swap) | `holders` (15 bits) | `avail` (40 bits,
//! tokens in CPU nanoseconds: up to ~1,100 CPU-seconds, so rates up to ~1,100 CPUs; above that
//! the word stays closed and every admission takes the lock).

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};
use crate::tally::{Counts, Tally};

const AVAIL_BITS: u32 = 40;
/// The most tokens the word holds: rates above this are never lent.
pub(crate) const AVAIL_MAX: u64 = (1 << AVAIL_BITS) - 1;
const HOLDER_BITS: u32 = 15;
const HOLDER_ONE: u64 = 1 << AVAIL_BITS;
/// The most grants outstanding at once (the holders field's capacity).
pub(crate) const HOLDERS_MAX: u64 = (1 << HOLDER_BITS) - 1;
const HOLDER_FIELD: u64 = HOLDERS_MAX << AVAIL_BITS;
const EPOCH_SHIFT: u32 = AVAIL_BITS + HOLDER_BITS;
const EPOCH_FIELD: u64 = 0xFF << EPOCH_SHIFT;
const SLOW: u64 = 1 << 63;

#[inline]
fn avail(w: u64) -> u64 {
    w & AVAIL_MAX
}

#[inline]
fn holders(w: u64) -> u64 {
    (w & HOLDER_FIELD) >> AVAIL_BITS
}

/// The fast path's word (a cache line of its own: the one line an admission or a settle moves
/// between cores) and the counters both paths keep (per thread, see `tally.rs`).
pub(crate) struct FastPath {
    word: CachePadded<AtomicU64>,
    /// The burst of the current opening: the most `avail` may hold.
    cap: AtomicU64,
    /// The holder cap, at most [`HOLDERS_MAX`].
    max_holders: AtomicU64,
    tally: Tally,
}

impl FastPath {
    /// Closed, nothing lent, no holders, no cap.
    pub(crate) fn new() -> Self {
        Self {
            word: CachePadded::new(AtomicU64::new(SLOW)),
            cap: AtomicU64::new(0),
            max_holders: AtomicU64::new(HOLDERS_MAX),
            tally: Tally::new(),
        }
    }

    /// Take `n` tokens and one holder if the word is open and covers both.
    #[inline]
    pub(crate) fn try_admit(&self, n: u64) -> bool {
        let max = self.max_holders.load(Ordering::Relaxed);
        let mut w = self.word.load(Ordering::Acquire);
        loop {
            // A closed word holds no tokens, so `avail < n` also turns away a closed word.
            if avail(w) < n || holders(w) >= max {
                return false;
            }
            match self.word.compare_exchange_weak(
                w,
                w - n + HOLDER_ONE,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        self.count_grant(n);
        true
    }

    /// Settle a grant of `allotted` that used `used` (no overrun) if the word is open: the
    /// unused rest goes back to `avail`, capped at the burst.
    #[inline]
    pub(crate) fn try_settle(&self, allotted: u64, used: u64) -> bool {
        let Some(back) = allotted.checked_sub(used) else {
            return false; // an overrun is charged under the lock
        };
        let mut w = self.word.load(Ordering::Acquire);
        loop {
            if w & SLOW != 0 || holders(w) == 0 {
                return false;
            }
            // The cap of the opening this word belongs to: a later opening bumps the epoch, so
            // a cap read from it fails the exchange below.
            let cap = self.cap.load(Ordering::Relaxed);
            let a = avail(w).saturating_add(back).min(cap);
            let new = (w & !AVAIL_MAX) - HOLDER_ONE + a;
            match self
                .word
                .compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        self.count_settle(back, used);
        true
    }

    /// Close the word (the lock side's first step): the fast path stops, and the tokens it held
    /// come back to the caller. Idempotent.
    pub(crate) fn close(&self) -> u64 {
        let mut w = self.word.load(Ordering::Acquire);
        loop {
            let new = (w | SLOW) & !AVAIL_MAX;
            if new == w {
                return 0;
            }
            match self
                .word
                .compare_exchange(w, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return avail(w),
                Err(now) => w = now,
            }
        }
    }

    /// Open the word with `lent` tokens (≤ `cap` ≤ [`AVAIL_MAX`]) under a burst of `cap`. Only
    /// while closed, under the lock: nobody else changes a closed word.
    pub(crate) fn open(&self, lent: u64, cap: u64) {
        debug_assert!(lent <= cap && cap <= AVAIL_MAX);
        let w = self.word.load(Ordering::Acquire);
        debug_assert!(w & SLOW != 0 && avail(w) == 0);
        self.cap.store(cap, Ordering::Relaxed);
        let epoch = (w & EPOCH_FIELD).wrapping_add(1 << EPOCH_SHIFT) & EPOCH_FIELD;
        self.word
            .store(epoch | (w & HOLDER_FIELD) | lent, Ordering::Release);
    }

    /// Grants outstanding.
    pub(crate) fn holders(&self) -> u64 {
        holders(self.word.load(Ordering::Acquire))
    }

    /// One more holder (under the lock, word closed; the caller checked [`HOLDERS_MAX`]).
    pub(crate) fn add_holder(&self) {
        self.word.fetch_add(HOLDER_ONE, Ordering::AcqRel);
    }

    /// One holder fewer, never below zero (under the lock, word closed).
    pub(crate) fn remove_holder(&self) {
        if holders(self.word.load(Ordering::Acquire)) > 0 {
            self.word.fetch_sub(HOLDER_ONE, Ordering::AcqRel);
        }
    }

    /// The holder cap (already at most [`HOLDERS_MAX`]).
    pub(crate) fn set_max_holders(&self, max: u64) {
        self.max_holders
            .store(max.min(HOLDERS_MAX), Ordering::Relaxed);
    }

    /// Count a grant of `n`.
    #[inline]
    pub(crate) fn count_grant(&self, n: u64) {
        self.tally.add(Counts {
            grants: 1,
            acquired: n,
            ..Counts::default()
        });
    }

    /// Count a settle: `back` returned (or given back by a cancel), `used` reported.
    #[inline]
    pub(crate) fn count_settle(&self, back: u64, used: u64) {
        self.tally.add(Counts {
            returned: back,
            used,
            ..Counts::default()
        });
    }

    /// The counts, summed over the threads that counted.
    pub(crate) fn counters(&self) -> Counts {
        self.tally.read()
    }
}
