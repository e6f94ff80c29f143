//! One set of histograms: what an interval, the window sum and the slots' collected counts are.

use hdrhistogram::Histogram;

/// Index of foreground samples in a [`Hists`] pair.
pub(crate) const FOREGROUND: usize = 0;
/// Index of elastic samples in a [`Hists`] pair.
pub(crate) const ELASTIC: usize = 1;

/// One set of histograms: queue latency and poll time, each split foreground / elastic.
/// Values are nanoseconds.
#[derive(Clone)]
pub(crate) struct Hists {
    pub(crate) queue: [Histogram<u64>; 2],
    pub(crate) poll: [Histogram<u64>; 2],
}

impl Hists {
    /// An empty set shaped like `template` (bounded: never auto-resizing).
    pub(crate) fn new(template: &Histogram<u64>) -> Hists {
        let h = || Histogram::new_from(template);
        Hists {
            queue: [h(), h()],
            poll: [h(), h()],
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.all().all(Histogram::is_empty)
    }

    fn all(&self) -> impl Iterator<Item = &Histogram<u64>> {
        self.queue.iter().chain(self.poll.iter())
    }

    fn all_mut(&mut self) -> impl Iterator<Item = &mut Histogram<u64>> {
        self.queue.iter_mut().chain(self.poll.iter_mut())
    }

    pub(crate) fn add(&mut self, other: &Hists) {
        for (dst, src) in self.all_mut().zip(other.all()) {
            // Same bounds on both sides: adding cannot exceed the range.
            let res = dst.add(src);
            debug_assert!(res.is_ok(), "histogram add failed: {res:?}");
        }
    }

    pub(crate) fn subtract(&mut self, other: &Hists) {
        for (dst, src) in self.all_mut().zip(other.all()) {
            // `other` was added before, so every count is there to take away.
            let res = dst.subtract(src);
            debug_assert!(res.is_ok(), "histogram subtract failed: {res:?}");
        }
    }

    pub(crate) fn reset(&mut self) {
        self.all_mut().for_each(Histogram::reset);
    }
}
