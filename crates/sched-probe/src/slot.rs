//! Per-worker recording slots: lock-free, single-writer bucket counters.
//!
//! A worker slot is *owned* by one thread (claimed on its first sample, released when the thread
//! exits). The owner bumps a bucket with a relaxed load and store (no atomic read-modify-write,
//! no lock). [`Probe::rotate`](crate::Probe::rotate) never writes a slot: it reads every counter
//! and takes the difference with what it read last time, so a sample is counted exactly once,
//! in the interval of the first rotation that sees it, and a worker is never held up. Threads
//! that do not own a slot (off-runtime callers, a second runtime whose worker index collides)
//! share the overflow slot, whose counters use `fetch_add`.
//!
//! The bucket layout is hdrhistogram's own (same formulas, same parameters), so a counter index
//! maps to exactly one bucket of the interval histograms.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Arc, Weak};

use hdrhistogram::Histogram;

use crate::window::Hists;
use crate::Shared;

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

/// One recording slot. Aligned so that two slots' headers never share a cache line.
#[repr(align(128))]
pub(crate) struct Slot {
    /// Token of the owning thread, 0 when free. Unused by the shared (overflow) slot.
    owner: AtomicU64,
    /// Whether several threads write this slot (then counters use `fetch_add`).
    shared: bool,
    /// `SERIES` runs of `layout.len` cumulative counters.
    counts: Box<[AtomicU64]>,
}

impl Slot {
    pub(crate) fn new(layout: &Layout, shared: bool) -> Slot {
        Slot {
            owner: AtomicU64::new(0),
            shared,
            counts: (0..SERIES * layout.len)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    #[inline]
    fn counter(&self, layout: &Layout, series: usize, value: u64) -> &AtomicU64 {
        &self.counts[series * layout.len + layout.index(value)]
    }

    /// Records into this slot. Single-writer bumps unless the slot is shared.
    #[inline]
    fn bump(&self, layout: &Layout, queue_ns: Option<u64>, poll_ns: Option<u64>, elastic: bool) {
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

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's token (0 = not assigned yet).
    static TOKEN: Cell<u64> = const { Cell::new(0) };
    /// Slots this thread owns, released when it exits.
    static CLAIMS: RefCell<Claims> = const { RefCell::new(Claims { token: 0, slots: Vec::new() }) };
}

struct Claims {
    token: u64,
    slots: Vec<(Weak<Shared>, usize)>,
}

impl Drop for Claims {
    fn drop(&mut self) {
        for (shared, index) in self.slots.drain(..) {
            if let Some(slot) = shared.upgrade().as_ref().and_then(|s| s.slots[index].get()) {
                // Release pairs with the next owner's claim: it continues from our counts.
                let _ = slot.owner.compare_exchange(self.token, 0, Release, Relaxed);
            }
        }
    }
}

#[inline]
fn token() -> u64 {
    TOKEN
        .try_with(|t| match t.get() {
            0 => {
                let v = NEXT_TOKEN.fetch_add(1, Relaxed);
                t.set(v);
                v
            }
            v => v,
        })
        .unwrap_or(0)
}

/// Tries to make the calling thread (with `token`) the owner of worker slot `index`.
#[cold]
fn claim(shared: &Arc<Shared>, slot: &Slot, index: usize, token: u64) -> bool {
    if token == 0
        || slot
            .owner
            .compare_exchange(0, token, Acquire, Relaxed)
            .is_err()
    {
        return false;
    }
    let registered = CLAIMS.try_with(|claims| {
        let mut claims = claims.borrow_mut();
        claims.token = token;
        claims.slots.push((Arc::downgrade(shared), index));
    });
    if registered.is_err() {
        // Thread is exiting: nobody would release the slot.
        slot.owner.store(0, Release);
        return false;
    }
    true
}

impl Shared {
    /// Records one sample into the calling thread's slot.
    #[inline]
    pub(crate) fn record(
        self: &Arc<Self>,
        queue_ns: Option<u64>,
        poll_ns: Option<u64>,
        elastic: bool,
    ) {
        if !elastic && queue_ns.is_some_and(|q| q > self.alarm_above) {
            self.alarm();
        }
        if let Some(worker) = tokio::runtime::worker_index() {
            let index = worker % crate::SLOTS;
            let slot = self.slot(index);
            let token = token();
            let owner = slot.owner.load(Relaxed);
            if (owner != 0 && owner == token) || (owner == 0 && claim(self, slot, index, token)) {
                slot.bump(&self.layout, queue_ns, poll_ns, elastic);
                return;
            }
        }
        self.slot(crate::OVERFLOW)
            .bump(&self.layout, queue_ns, poll_ns, elastic);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Probe, ProbeConfig};
    use std::time::Duration;

    #[test]
    fn worker_slots_are_owned_then_released_when_workers_exit() {
        let probe = Probe::new(ProbeConfig::default()).unwrap();
        let slot0_owner = |p: &Probe| p.shared.slots[0].get().map(|s| s.owner.load(Relaxed));
        let record_in_task = |rt: &tokio::runtime::Runtime| {
            let p = probe.clone();
            rt.block_on(async move {
                tokio::spawn(
                    async move { p.record_poll(Some(Duration::from_micros(5)), None, false) },
                )
                .await
                .unwrap()
            });
        };

        // A multi-thread worker claims slot 0 ...
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        record_in_task(&rt);
        let worker = slot0_owner(&probe).unwrap();
        assert_ne!(worker, 0);
        assert_ne!(worker, token());
        // ... and releases it when it exits (dropping the runtime joins its threads).
        drop(rt);
        assert_eq!(slot0_owner(&probe), Some(0));

        // A current-thread runtime runs on this thread, as worker 0: it takes slot 0 over.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        record_in_task(&rt);
        assert_eq!(slot0_owner(&probe), Some(token()));

        // Another thread that is worker 0 meanwhile falls back to the overflow slot.
        let p = probe.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(async move { p.record_poll(Some(Duration::from_micros(7)), None, true) });
        })
        .join()
        .unwrap();
        assert_eq!(slot0_owner(&probe), Some(token()));

        probe.rotate();
        let w = probe.window();
        assert_eq!(w.queue_latency.foreground.count, 2);
        assert_eq!(w.queue_latency.elastic.count, 1);
    }

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
