//! Per-worker recording slots: lock-free, single-writer bucket counters.
//!
//! A worker slot is *owned* by one thread (claimed on its first sample, released when the thread
//! exits; see `shared`). The owner bumps a bucket with a relaxed load and store (no atomic
//! read-modify-write, no lock). [`Probe::rotate`](crate::Probe::rotate) never writes a slot: it
//! reads every counter and takes the difference with what it read last time, so a sample is
//! counted exactly once, in the interval of the first rotation that sees it, and a worker is never
//! held up. Threads that do not own a slot (off-runtime callers, a second runtime whose worker
//! index collides) share the overflow slot, whose counters use `fetch_add`.
//!
//! The bucket layout is hdrhistogram's own (same formulas, same parameters), so a counter index
//! maps to exactly one bucket of the interval histograms.

use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Mutex, OnceLock, PoisonError};

use elastic_cpu_core::EventRing;
use hdrhistogram::Histogram;

use crate::hists::Hists;
use crate::outliers::{Record, WORDS};

/// Outlier records a worker's ring holds: what it may record between two collections (a tick)
/// before it overwrites records not yet read.
pub(crate) const OUTLIER_RING: usize = 128;

/// How many of its latest records a worker searches for the polls that held up a wait.
const HOLDER_LOOKBACK: u64 = 16;

/// Series per slot: queue latency foreground / elastic, poll time foreground / elastic.
const SERIES: usize = 4;

/// hdrhistogram's bucket layout for one set of bounds.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    unit_magnitude: u32,
    sub_bucket_half_count_magnitude: u32,
    sub_bucket_half_count: u32,
    sub_bucket_mask: u64,
    leading_zero_count_base: u32,
    /// Counters per series (the histogram's `distinct_values()`).
    len: usize,
    /// Values above this are clamped to it.
    highest: u64,
}

impl Layout {
    /// The layout of `template`, built by `Histogram::new_with_bounds(lowest, highest, sigfig)`.
    pub(crate) fn new(template: &Histogram<u64>, lowest: u64, highest: u64, sigfig: u8) -> Layout {
        // As in `Histogram::new_with_bounds`, with integer logarithms.
        let unit_magnitude = 63 - lowest.leading_zeros();
        let largest = 2 * 10u64.pow(u32::from(sigfig));
        let sub_bucket_count_magnitude = 64 - (largest - 1).leading_zeros();
        let sub_bucket_count = 1u32 << sub_bucket_count_magnitude;
        Layout {
            unit_magnitude,
            sub_bucket_half_count_magnitude: sub_bucket_count_magnitude - 1,
            sub_bucket_half_count: sub_bucket_count / 2,
            sub_bucket_mask: (u64::from(sub_bucket_count) - 1) << unit_magnitude,
            leading_zero_count_base: 64 - unit_magnitude - sub_bucket_count_magnitude,
            len: template.distinct_values(),
            highest,
        }
    }

    /// Counter index of `value` (clamped to the range).
    #[inline]
    pub(crate) fn index(&self, value: u64) -> usize {
        let value = value.min(self.highest);
        let bucket = self.leading_zero_count_base - (value | self.sub_bucket_mask).leading_zeros();
        let sub_bucket = (value >> (bucket + self.unit_magnitude)) as usize;
        let base = ((bucket + 1) as usize) << self.sub_bucket_half_count_magnitude;
        // `sub_bucket >= half` except in bucket 0, where `base == half`: never negative.
        (base + sub_bucket - self.sub_bucket_half_count as usize).min(self.len - 1)
    }

    /// Lowest value of the bucket at counter `index`.
    pub(crate) fn value(&self, index: usize) -> u64 {
        let half = self.sub_bucket_half_count as usize;
        let mut bucket = (index >> self.sub_bucket_half_count_magnitude) as i64 - 1;
        let mut sub_bucket = (index & (half - 1)) + half;
        if bucket < 0 {
            sub_bucket -= half;
            bucket = 0;
        }
        (sub_bucket as u64) << (bucket as u32 + self.unit_magnitude)
    }
}

/// One recording slot. Kept in a `CachePadded` (see `shared`) so that two slots' headers never
/// share a cache line.
pub(crate) struct RecordSlot {
    /// Token of the owning thread, 0 when free. Unused by the shared (overflow) slot. Claimed and
    /// released by the recording threads (see `shared`).
    pub(crate) owner: AtomicU64,
    /// Whether several threads write this slot (then counters use `fetch_add`).
    shared: bool,
    /// `SERIES` runs of `layout.len` cumulative counters.
    counts: Box<[AtomicU64]>,
    /// The outlier records of this slot's polls, made at its first outlier.
    pub(crate) outliers: OnceLock<EventRing<WORDS>>,
    /// Serialises the writers of a shared slot's ring (its one-writer rule).
    outlier_writers: Mutex<()>,
}

impl RecordSlot {
    pub(crate) fn new(layout: &Layout, shared: bool) -> RecordSlot {
        RecordSlot {
            owner: AtomicU64::new(0),
            shared,
            counts: (0..SERIES * layout.len)
                .map(|_| AtomicU64::new(0))
                .collect(),
            outliers: OnceLock::new(),
            outlier_writers: Mutex::new(()),
        }
    }

    /// Appends an outlier record; for a wait (whose `holders` it fills), first finds the
    /// outlier polls recorded here that overlap it. Only the slot's writer calls it (or, for
    /// a shared slot, one writer at a time).
    #[cold]
    pub(crate) fn push_outlier(&self, mut record: Record) {
        let _one_writer = self.shared.then(|| {
            self.outlier_writers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        });
        let ring = self.outliers.get_or_init(|| EventRing::new(OUTLIER_RING));
        if record.wait {
            let from = record.at.saturating_sub(record.nanos);
            let head = ring.pushed();
            let mut found = 0;
            for n in (head.saturating_sub(HOLDER_LOOKBACK)..head).rev() {
                let Some(held) = ring.get(n).map(Record::decode) else {
                    continue;
                };
                // A poll that ended inside the wait, or ran across its start.
                if !held.wait && held.at > from && held.at.saturating_sub(held.nanos) < record.at {
                    record.holders[found] = Some((held.site, held.elastic));
                    found += 1;
                    if found == record.holders.len() {
                        break;
                    }
                }
            }
        }
        ring.push(record.encode());
    }

    #[inline]
    fn counter(&self, layout: &Layout, series: usize, value: u64) -> &AtomicU64 {
        &self.counts[series * layout.len + layout.index(value)]
    }

    /// Records into this slot. Single-writer bumps unless the slot is shared.
    #[inline]
    pub(crate) fn bump(
        &self,
        layout: &Layout,
        queue_ns: Option<u64>,
        poll_ns: Option<u64>,
        elastic: bool,
    ) {
        let e = usize::from(elastic);
        for (series, value) in [(e, queue_ns), (2 + e, poll_ns)] {
            if let Some(v) = value {
                let c = self.counter(layout, series, v);
                if self.shared {
                    c.fetch_add(1, Relaxed);
                } else {
                    // Only the owner writes: a plain load and store cannot lose an update.
                    c.store(c.load(Relaxed) + 1, Relaxed);
                }
            }
        }
    }

    /// Adds what was recorded since `seen` into `interval` (created on the first new sample) and
    /// advances `seen`.
    pub(crate) fn collect(
        &self,
        layout: &Layout,
        seen: &mut [u64],
        interval: &mut Option<Box<Hists>>,
        new_interval: &mut dyn FnMut() -> Box<Hists>,
    ) {
        for (i, (counter, seen)) in self.counts.iter().zip(seen.iter_mut()).enumerate() {
            let now = counter.load(Relaxed);
            if now == *seen {
                continue;
            }
            let delta = now.wrapping_sub(*seen);
            *seen = now;
            let hists = interval.get_or_insert_with(&mut *new_interval);
            let (series, index) = (i / layout.len, i % layout.len);
            let h = match series {
                0 | 1 => &mut hists.queue[series],
                _ => &mut hists.poll[series - 2],
            };
            h.saturating_record_n(layout.value(index), delta);
        }
    }

    /// Number of counters (the size of a `seen` snapshot).
    pub(crate) fn len(&self) -> usize {
        self.counts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_hdrhistogram() {
        for (low, high, sigfig) in [
            (1_000u64, 10_000_000_000u64, 2u8),
            (1, 1_000_000, 3),
            (1_000, 3_600_000_000_000, 1),
            (512, 2_000_000, 5),
            (3, 7, 2),
        ] {
            let h = Histogram::<u64>::new_with_bounds(low, high, sigfig).unwrap();
            let layout = Layout::new(&h, low, high, sigfig);
            let mut v = 0u64;
            while v <= high {
                let i = layout.index(v);
                assert!(i < layout.len);
                assert_eq!(
                    layout.value(i),
                    h.lowest_equivalent(v),
                    "value {v} ({low}, {high}, {sigfig})"
                );
                v = v * 17 / 16 + 1;
            }
            // Every index in range maps back to itself.
            for i in (0..layout.len).filter(|&i| layout.value(i) <= high) {
                assert_eq!(layout.index(layout.value(i)), i);
            }
            // Clamped above the range.
            assert_eq!(layout.index(u64::MAX), layout.index(high));
        }
    }
}
