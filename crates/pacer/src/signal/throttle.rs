//! The cgroup's CPU throttling as a component of the signal.
//!
//! Inside a CPU quota (CFS bandwidth control) the kernel stops every thread of the cgroup once
//! the quota of a period is spent, foreground included, for the rest of that period. The probe
//! hardly sees it: a throttled stretch holds up few task polls but every request in flight. So
//! the governor reads the cgroup's `cpu.stat` counters once per tick, and a tick that saw a
//! throttled period counts as over the target for a whole window after it, as if the window's
//! p99 had seen the wait.

use std::path::{Path, PathBuf};

use elastic_cpu_probe::CpuThrottling;

/// Watches one cgroup's throttling counters, tick by tick (the counters are read by the
/// governor's [`CgroupSource`](super::readings::CgroupSource)).
#[derive(Debug, Default)]
pub(crate) struct ThrottleWatch {
    /// The cgroup directory whose `cpu.stat` is read (`None`: no quota seen, nothing to watch).
    dir: Option<PathBuf>,
    last: Option<CpuThrottling>,
    /// Ticks left during which the signal stays on.
    hold: usize,
    /// Throttled periods seen since the watch started.
    throttled_periods: u64,
}

impl ThrottleWatch {
    /// Watch the cgroup in `dir` from now on, whose counters read `now` (their past is not
    /// counted).
    pub(crate) fn watch(&mut self, dir: PathBuf, now: Option<CpuThrottling>) {
        self.last = now;
        self.dir = Some(dir);
        self.hold = 0;
    }

    /// The cgroup watched (`None`: none yet).
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// One tick on the counters read `now`. Returns true while the signal is on: throttled in
    /// this tick or in the `hold_ticks − 1` ticks before it.
    pub(crate) fn step(&mut self, now: Option<CpuThrottling>, hold_ticks: usize) -> bool {
        let throttled = match (now, self.last) {
            (Some(now), Some(last)) => now.since(&last).throttled_periods,
            _ => 0,
        };
        if now.is_some() {
            self.last = now;
        }
        self.throttled_periods += throttled;
        if throttled > 0 {
            self.hold = hold_ticks.max(1);
        }
        let on = self.hold > 0;
        self.hold = self.hold.saturating_sub(1);
        on
    }

    /// Throttled periods seen since the watch started.
    pub(crate) fn throttled_periods(&self) -> u64 {
        self.throttled_periods
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn reading(throttled: u64) -> Option<CpuThrottling> {
        Some(CpuThrottling {
            periods: 100 + throttled,
            throttled_periods: throttled,
            throttled_time: Duration::from_millis(throttled * 20),
        })
    }

    #[test]
    fn a_throttled_tick_holds_the_signal_for_the_window() {
        let mut w = ThrottleWatch::default();
        assert!(
            !w.step(reading(5), 3),
            "the first reading is a baseline, not a throttle"
        );
        assert!(!w.step(reading(5), 3));
        assert!(w.step(reading(6), 3));
        assert!(w.step(reading(6), 3));
        assert!(w.step(reading(6), 3));
        assert!(!w.step(reading(6), 3), "held exactly 3 ticks");
        assert!(w.step(reading(9), 3));
        assert_eq!(w.throttled_periods(), 4);
    }

    #[test]
    fn unreadable_counters_are_no_signal_and_keep_the_last_reading() {
        let mut w = ThrottleWatch::default();
        assert!(!w.step(reading(2), 1));
        assert!(!w.step(None, 1));
        assert!(w.step(reading(3), 1), "compared with the last good reading");
        assert!(!w.step(None, 1));
        // Counters restarted (cgroup recreated): no wrap, no signal.
        assert!(!w.step(reading(0), 1));
    }

    #[test]
    fn what_happened_before_the_watch_is_not_counted() {
        let mut w = ThrottleWatch::default();
        assert_eq!(w.dir(), None);
        w.watch(PathBuf::from("/sys/fs/cgroup/svc"), reading(7));
        assert!(!w.step(reading(7), 2));
        assert!(w.step(reading(8), 2));
        assert_eq!(w.throttled_periods(), 1);
        assert_eq!(w.dir(), Some(Path::new("/sys/fs/cgroup/svc")));
    }
}
