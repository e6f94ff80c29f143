//! The interval ring, the running window sum and the window summaries.

use std::collections::VecDeque;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::hists::{Hists, ELASTIC, FOREGROUND};
use crate::slot::{Layout, RecordSlot};

/// Percentiles of one set of samples. Counts are samples (task polls); durations are the upper
/// end of the histogram bucket the percentile falls in (within the configured significant
/// figures, never below the true value by more than one bucket).
///
/// An empty set answers `count == 0` and `None` everywhere: no data is never reported as a
/// healthy 0.
///
/// ```
/// let s = elastic_cpu_probe::Summary::default();
/// assert_eq!(s.count, 0);
/// assert_eq!(s.p99, None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub count: u64,
    /// Median, `None` without samples.
    pub p50: Option<Duration>,
    /// 99th percentile, `None` without samples.
    pub p99: Option<Duration>,
    /// 99.9th percentile, `None` without samples.
    pub p999: Option<Duration>,
    /// Largest sample (clamped to the configured `highest`), `None` without samples.
    pub max: Option<Duration>,
}

impl Summary {
    pub(crate) fn of(h: &Histogram<u64>) -> Summary {
        if h.is_empty() {
            return Summary::default();
        }
        let at = |q: f64| Some(Duration::from_nanos(h.value_at_quantile(q)));
        Summary {
            count: h.len(),
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            max: Some(Duration::from_nanos(h.max())),
        }
    }
}

/// One measure split by kind of work.
///
/// ```
/// let split = elastic_cpu_probe::Split::default();
/// assert_eq!(split.all.count, split.foreground.count + split.elastic.count);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Split {
    /// Polls not marked elastic.
    pub foreground: Summary,
    /// Polls marked with [`mark_elastic_poll`](crate::mark_elastic_poll).
    pub elastic: Summary,
    /// Both together (percentiles of the merged histograms, not a mix of the two summaries).
    pub all: Summary,
}

/// The window's statistics, as returned by [`Probe::window`](crate::Probe::window).
///
/// ```
/// use elastic_cpu_probe::{Probe, ProbeConfig};
/// use std::time::Duration;
///
/// let probe = Probe::new(ProbeConfig::default()).unwrap();
/// probe.record_poll(Some(Duration::from_micros(80)), Some(Duration::from_micros(20)), false);
/// probe.rotate();
/// let w = probe.window();
/// assert_eq!(w.intervals, 1);
/// assert_eq!(w.queue_latency.foreground.count, 1);
/// assert_eq!(w.poll_time.elastic.p99, None);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Window {
    /// Scheduling (queue) latency: time from a task being scheduled to the start of its poll.
    pub queue_latency: Split,
    /// Poll time: duration of one poll of a task.
    pub poll_time: Split,
    /// Number of intervals (ticks) currently in the window, up to
    /// [`ProbeConfig::intervals`](crate::ProbeConfig::intervals).
    pub intervals: usize,
    /// The p99 of every poll's queue latency without the interval whose own p99 was highest
    /// (with at least 3 intervals with samples; else `queue_latency.all.p99`): a latency that
    /// lasted one tick (a host pause, a burst) moves it little.
    pub queue_p99_trimmed: Option<Duration>,
}

/// The ring of past intervals and the running sum over it.
pub(crate) struct WindowState {
    capacity: usize,
    template: Histogram<u64>,
    /// Oldest first; `None` marks an interval without samples (costs no histogram memory).
    ring: VecDeque<Option<Box<Hists>>>,
    /// Each interval's own queue-latency p99 over every poll (nanoseconds; 0: no samples), in
    /// `ring`'s order.
    p99s: VecDeque<u64>,
    /// Sum of every interval in `ring`.
    running: Hists,
    /// Per slot: the counter values read at the last rotation.
    seen: Vec<Option<Box<[u64]>>>,
    /// Reusable empty interval sets. Boxed because they move between `ring` and here without
    /// reallocating.
    #[allow(clippy::vec_box)]
    pool: Vec<Box<Hists>>,
    /// Scratch histogram for the merged foreground + elastic summaries.
    scratch: Histogram<u64>,
    /// The summaries of the window as it is, computed at the first read after a push: the
    /// window changes only at a push, and a tick, the metrics export and any snapshot between
    /// two rotations read the same one.
    summary: Option<Window>,
}

impl WindowState {
    pub(crate) fn new(template: &Histogram<u64>, capacity: usize) -> WindowState {
        WindowState {
            capacity,
            template: Histogram::new_from(template),
            ring: VecDeque::new(),
            p99s: VecDeque::new(),
            running: Hists::new(template),
            seen: Vec::new(),
            pool: Vec::new(),
            scratch: Histogram::new_from(template),
            summary: None,
        }
    }

    /// Adds what slot `index` recorded since the last rotation to `interval`.
    pub(crate) fn collect_from(
        &mut self,
        index: usize,
        slot: &RecordSlot,
        layout: &Layout,
        interval: &mut Option<Box<Hists>>,
    ) {
        if self.seen.len() <= index {
            self.seen.resize_with(index + 1, || None);
        }
        let seen = self.seen[index].get_or_insert_with(|| vec![0; slot.len()].into_boxed_slice());
        let (pool, template) = (&mut self.pool, &self.template);
        slot.collect(layout, seen, interval, &mut || {
            pool.pop().unwrap_or_else(|| Box::new(Hists::new(template)))
        });
    }

    /// Pushes a finished interval and evicts what falls out of the window.
    pub(crate) fn push(&mut self, interval: Option<Box<Hists>>) {
        self.summary = None;
        let mut p99 = 0;
        if let Some(iv) = &interval {
            self.running.add(iv);
            merge(&iv.queue, &mut self.scratch);
            p99 = self.scratch.value_at_quantile(0.99);
        }
        self.ring.push_back(interval);
        self.p99s.push_back(p99);
        while self.ring.len() > self.capacity {
            self.p99s.pop_front();
            if let Some(Some(mut old)) = self.ring.pop_front() {
                self.running.subtract(&old);
                old.reset();
                self.pool.push(old);
            }
        }
        // An empty window has nothing to keep: start from exact zeros again.
        if self.ring.iter().all(Option::is_none) && !self.running.is_empty() {
            self.running.reset();
        }
    }

    pub(crate) fn window(&mut self) -> Window {
        if let Some(w) = &self.summary {
            return w.clone();
        }
        let queue_latency = split(&self.running.queue, &mut self.scratch);
        let w = Window {
            queue_p99_trimmed: self.trimmed_p99().or(queue_latency.all.p99),
            queue_latency,
            poll_time: split(&self.running.poll, &mut self.scratch),
            intervals: self.ring.len(),
        };
        self.summary = Some(w.clone());
        w
    }

    /// The all-polls queue p99 without the interval whose own p99 was highest, from
    /// [`TRIM_FROM`] intervals with samples.
    fn trimmed_p99(&mut self) -> Option<Duration> {
        if self.p99s.iter().filter(|&&p| p > 0).count() < TRIM_FROM {
            return None;
        }
        let worst = (0..self.p99s.len()).max_by_key(|&i| self.p99s[i])?;
        let iv = self.ring[worst].as_ref()?;
        merge(&self.running.queue, &mut self.scratch);
        for h in &iv.queue {
            let res = self.scratch.subtract(h);
            debug_assert!(res.is_ok(), "histogram subtract failed: {res:?}");
        }
        if self.scratch.is_empty() {
            return None;
        }
        Some(Duration::from_nanos(self.scratch.value_at_quantile(0.99)))
    }

    /// Copy the last `n` intervals (fewer if the ring holds fewer), oldest first, into `into`:
    /// a window of their own.
    pub(crate) fn copy_recent(&self, n: usize, into: &mut WindowState) {
        let skip = self.ring.len().saturating_sub(n);
        for interval in self.ring.iter().skip(skip) {
            into.push(interval.clone());
        }
    }
}

/// The fewest intervals with samples the window's p99 is trimmed from.
const TRIM_FROM: usize = 3;

/// `scratch` = the two histograms of `pair` merged.
fn merge(pair: &[Histogram<u64>; 2], scratch: &mut Histogram<u64>) {
    scratch.reset();
    for h in pair {
        let res = scratch.add(h);
        debug_assert!(res.is_ok(), "histogram add failed: {res:?}");
    }
}

fn split(pair: &[Histogram<u64>; 2], scratch: &mut Histogram<u64>) -> Split {
    merge(pair, scratch);
    Split {
        foreground: Summary::of(&pair[FOREGROUND]),
        elastic: Summary::of(&pair[ELASTIC]),
        all: Summary::of(scratch),
    }
}
