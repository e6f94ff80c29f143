//! [`EventRing`]: a bounded ring of small records with one writer and lock-free readers.
//!
//! The probe keeps each worker's outliers (polls and waits over a threshold) in one: the worker
//! that owns it appends without a lock or a read-modify-write, and the thread that collects
//! the window reads what is new without ever holding the worker up. The ring never grows: once
//! full, a new record overwrites the oldest, and a reader that fell that far behind is told how
//! many it missed.
//!
//! Each entry is a sequence lock of its own: the writer marks the entry odd (being written),
//! writes the words, and publishes it even, tagged with the record's number; a reader keeps a
//! copy only if the tag is the number it wanted, before and after it read the words.

use crate::sync::{fence, AtomicU64, Ordering};

/// A record: `W` words.
pub type Words<const W: usize> = [u64; W];

struct Entry<const W: usize> {
    /// `2 × n + 2` once record `n` is complete in this entry, odd while being written, 0
    /// before the first.
    tag: AtomicU64,
    words: [AtomicU64; W],
}

/// A ring of `capacity` records of `W` words each, written by one thread at a time, read by any.
///
/// ```
/// use elastic_cpu_core::EventRing;
///
/// let ring = EventRing::<2>::new(4);
/// for n in 0..6u64 {
///     ring.push([n, 10 * n]); // one writer
/// }
/// let mut seen = Vec::new();
/// let read = ring.read_from(0, |n, words| seen.push((n, words)));
/// // Records 0 and 1 were overwritten; 2..6 are there, oldest first.
/// assert_eq!((read.next, read.missed), (6, 2));
/// assert_eq!(seen, vec![(2, [2, 20]), (3, [3, 30]), (4, [4, 40]), (5, [5, 50])]);
/// ```
pub struct EventRing<const W: usize> {
    entries: Box<[Entry<W>]>,
    /// Records pushed so far (the next record's number).
    head: AtomicU64,
}

/// What [`EventRing::read_from`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadSince {
    /// The number to read from next time: every record before it was read or missed.
    pub next: u64,
    /// Records overwritten before they could be read (or caught mid-write and overwritten).
    pub missed: u64,
}

impl<const W: usize> EventRing<W> {
    /// An empty ring of `capacity` records (at least 1).
    pub fn new(capacity: usize) -> EventRing<W> {
        EventRing {
            entries: (0..capacity.max(1))
                .map(|_| Entry {
                    tag: AtomicU64::new(0),
                    words: std::array::from_fn(|_| AtomicU64::new(0)),
                })
                .collect(),
            head: AtomicU64::new(0),
        }
    }

    /// How many records it holds at most.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Records pushed so far.
    pub fn pushed(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// Appends a record, overwriting the oldest once full; returns its number.
    ///
    /// One writer at a time: callers make sure of it (the probe's worker slots have one owner,
    /// and its shared slot pushes under a lock). Never blocks, never allocates.
    pub fn push(&self, words: Words<W>) -> u64 {
        let n = self.head.load(Ordering::Relaxed);
        let entry = &self.entries[(n % self.entries.len() as u64) as usize];
        entry.tag.store(2 * n + 1, Ordering::Relaxed);
        // The odd tag is visible before any new word is.
        fence(Ordering::Release);
        for (slot, w) in entry.words.iter().zip(words) {
            slot.store(w, Ordering::Relaxed);
        }
        entry.tag.store(2 * n + 2, Ordering::Release);
        self.head.store(n + 1, Ordering::Release);
        n
    }

    /// Record `n`, if the ring still holds it whole.
    pub fn get(&self, n: u64) -> Option<Words<W>> {
        let entry = &self.entries[(n % self.entries.len() as u64) as usize];
        let want = 2 * n + 2;
        if entry.tag.load(Ordering::Acquire) != want {
            return None;
        }
        let words = std::array::from_fn(|i| entry.words[i].load(Ordering::Relaxed));
        // The words are read before the tag is read again.
        fence(Ordering::Acquire);
        (entry.tag.load(Ordering::Relaxed) == want).then_some(words)
    }

    /// Calls `each(n, record)` for every record from number `from` on that the ring still holds,
    /// oldest first.
    pub fn read_from(&self, from: u64, mut each: impl FnMut(u64, Words<W>)) -> ReadSince {
        let head = self.pushed();
        let oldest = head.saturating_sub(self.entries.len() as u64);
        let mut missed = oldest.saturating_sub(from);
        for n in from.max(oldest)..head {
            match self.get(n) {
                Some(words) => each(n, words),
                None => missed += 1,
            }
        }
        ReadSince {
            next: head.max(from),
            missed,
        }
    }
}

impl<const W: usize> std::fmt::Debug for EventRing<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRing")
            .field("capacity", &self.capacity())
            .field("pushed", &self.pushed())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn reads_what_is_new_and_counts_what_was_overwritten() {
        let ring = EventRing::<3>::new(3);
        let mut got = Vec::new();
        let r = ring.read_from(0, |n, w| got.push((n, w)));
        assert_eq!((r, got.len()), (ReadSince::default(), 0));
        ring.push([1, 2, 3]);
        ring.push([4, 5, 6]);
        let r = ring.read_from(0, |n, w| got.push((n, w)));
        assert_eq!(r, ReadSince { next: 2, missed: 0 });
        assert_eq!(got, vec![(0, [1, 2, 3]), (1, [4, 5, 6])]);
        for i in 0..5 {
            ring.push([i, i, i]);
        }
        got.clear();
        let r = ring.read_from(2, |n, w| got.push((n, w)));
        assert_eq!(r, ReadSince { next: 7, missed: 2 });
        assert_eq!(got, vec![(4, [2, 2, 2]), (5, [3, 3, 3]), (6, [4, 4, 4])]);
        assert_eq!(ring.get(3), None);
        assert_eq!(ring.get(6), Some([4, 4, 4]));
        assert_eq!(ring.get(7), None, "not pushed yet");
    }
}
