//! The lowest p99 of the last few windows: the controller's "far below the target" is measured
//! from it (docs/design.md §4, slow start).

use std::time::Duration;

/// How many windows the low spans: long enough to remember the runtime with little elastic work
/// through a climb from the floor, short enough to forget a quiet spell once load has risen.
const SLOTS: usize = 8;

/// The lowest reading of the last `SLOTS` windows, one slot per window; no allocation.
#[derive(Clone, Debug, Default)]
pub(crate) struct RecentLow {
    slots: [Option<Duration>; SLOTS],
    /// The slot readings go into now.
    slot: usize,
    /// Time since the current slot began.
    age: Duration,
}

impl RecentLow {
    /// Take one reading over `period` (a window long per slot); returns the low including it.
    pub(crate) fn record(&mut self, p99: Duration, period: Duration, window: Duration) -> Duration {
        if self.age >= window {
            self.age = Duration::ZERO;
            self.slot = (self.slot + 1) % SLOTS;
            self.slots[self.slot] = None;
        }
        self.age = self.age.saturating_add(period);
        let cur = &mut self.slots[self.slot];
        *cur = Some(cur.map_or(p99, |low| low.min(p99)));
        self.low().unwrap_or(p99)
    }

    /// The lowest reading held, if any.
    pub(crate) fn low(&self) -> Option<Duration> {
        self.slots.iter().flatten().copied().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn remembers_a_low_for_eight_windows_then_forgets_it() {
        let mut low = RecentLow::default();
        let (tick, window) = (100 * MS, 1000 * MS);
        assert_eq!(low.record(20 * MS, tick, window), 20 * MS);
        // 8 windows of 10 ticks: the first slot is reused at tick 80.
        for i in 1..80 {
            assert_eq!(low.record(50 * MS, tick, window), 20 * MS, "tick {i}");
        }
        assert_eq!(low.record(50 * MS, tick, window), 50 * MS);
        assert_eq!(low.record(40 * MS, tick, window), 40 * MS);
    }
}
