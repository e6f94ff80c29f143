//! Inside a CPU quota, elastic work gets at most what the foreground leaves of it.
//!
//! The controller and the throttle signal react after the fact: when the cgroup's counters show
//! a throttled period, the foreground has already waited out the rest of it, and between two
//! throttles the share climbs back until the next. So inside a quota the governor also caps
//! elastic work feed-forward: each tick it takes the process's CPU time less the running time
//! charged to elastic grants (what the rest of the process spent, elastic work's scheduler
//! overhead included), per second; the largest of the last [`HISTORY`] ticks stands for the
//! foreground, and elastic work may take [`MARGIN`] of what that leaves of the quota, every
//! class together (the governor hands it to the classes in order).

use std::collections::VecDeque;
use std::time::Duration;

/// The share of the quota the foreground leaves that elastic work may take: the rest absorbs
/// the foreground's bursts within a tick.
pub(crate) const MARGIN: f64 = 0.9;

/// Ticks whose foreground CPU the cap remembers (the largest counts).
pub(crate) const HISTORY: usize = 5;

/// The feed-forward cap: off until a quota is seen, and without process CPU time.
#[derive(Debug, Default)]
pub(crate) struct Headroom {
    /// CPUs the quota allows (`None`: no quota seen, no cap).
    quota: Option<f64>,
    /// Process CPU time and running time charged to elastic work, at the last tick.
    last: Option<(Duration, Duration)>,
    /// CPUs the rest of the process spent in each recent tick, newest last.
    foreground: VecDeque<f64>,
}

impl Headroom {
    /// Cap elastic work within a quota of `cpus` from now on.
    pub(crate) fn watch(&mut self, cpus: f64) {
        self.quota = (cpus.is_finite() && cpus > 0.0).then_some(cpus);
    }

    /// Fold in one tick: the process's CPU time now (`None`: unreadable, the cap lifts), the
    /// running time charged so far to elastic work (every class the cap holds), and the tick's
    /// length.
    pub(crate) fn tick(
        &mut self,
        process_cpu: Option<Duration>,
        elastic: Duration,
        period: Duration,
    ) {
        if self.quota.is_none() {
            return;
        }
        let Some(cpu) = process_cpu else {
            self.last = None;
            self.foreground.clear();
            return;
        };
        let secs = period.as_secs_f64();
        if let (Some((cpu0, elastic0)), true) = (self.last, secs > 0.0) {
            let rest = cpu
                .saturating_sub(cpu0)
                .saturating_sub(elastic.saturating_sub(elastic0));
            self.foreground.push_back(rest.as_secs_f64() / secs);
            while self.foreground.len() > HISTORY {
                self.foreground.pop_front();
            }
        }
        self.last = Some((cpu, elastic));
    }

    /// CPUs elastic work may take now, every class together (`None`: no cap).
    pub(crate) fn cap_cpus(&self) -> Option<f64> {
        let quota = self.quota?;
        let foreground = self.foreground.iter().copied().reduce(f64::max)?;
        Some((MARGIN * (quota - foreground)).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(100);
    const MS: Duration = Duration::from_millis(1);

    /// Feeds ticks in which the process spends `spent` ms and elastic work is charged `elastic`
    /// ms.
    fn feed(h: &mut Headroom, ticks: &[(u32, u32)]) {
        let (mut cpu, mut charged) = h.last.unwrap_or_default();
        for &(spent, elastic) in ticks {
            cpu += MS * spent;
            charged += MS * elastic;
            h.tick(Some(cpu), charged, TICK);
        }
    }

    #[test]
    fn no_quota_no_cap() {
        let mut h = Headroom::default();
        feed(&mut h, &[(0, 0), (150, 50), (150, 50)]);
        assert_eq!(h.cap_cpus(), None);
    }

    #[test]
    fn the_cap_is_a_margin_of_what_the_foreground_leaves() {
        let mut h = Headroom::default();
        h.watch(1.5);
        feed(&mut h, &[(0, 0)]);
        assert_eq!(h.cap_cpus(), None, "no tick measured yet");
        // 140 ms of process CPU in a 100 ms tick, 80 of it charged to elastic work: the rest of
        // the process took 0.6 CPUs, leaving 0.9 of the quota.
        feed(&mut h, &[(140, 80)]);
        let cap = h.cap_cpus().unwrap();
        assert!((cap - MARGIN * 0.9).abs() < 1e-9, "{cap}");
    }

    #[test]
    fn a_foreground_burst_holds_the_cap_down_for_the_history() {
        let mut h = Headroom::default();
        h.watch(2.0);
        feed(&mut h, &[(0, 0), (100, 50), (180, 50)]);
        let after_burst = h.cap_cpus().unwrap();
        assert!((after_burst - MARGIN * 0.7).abs() < 1e-9, "{after_burst}");
        // The burst is the largest for HISTORY ticks, then the quiet ticks set the cap.
        feed(&mut h, &[(100, 50); HISTORY - 1]);
        assert!((h.cap_cpus().unwrap() - after_burst).abs() < 1e-9);
        feed(&mut h, &[(100, 50)]);
        assert!((h.cap_cpus().unwrap() - MARGIN * 1.5).abs() < 1e-9);
    }

    #[test]
    fn a_foreground_over_the_quota_leaves_nothing() {
        let mut h = Headroom::default();
        h.watch(1.0);
        feed(&mut h, &[(0, 0), (160, 10)]);
        assert_eq!(h.cap_cpus(), Some(0.0));
    }

    #[test]
    fn unreadable_process_cpu_lifts_the_cap_until_two_readings() {
        let mut h = Headroom::default();
        h.watch(1.5);
        feed(&mut h, &[(0, 0), (100, 0)]);
        assert!(h.cap_cpus().is_some());
        let zero = Duration::ZERO;
        h.tick(None, zero, TICK);
        assert_eq!(h.cap_cpus(), None);
        h.tick(Some(Duration::from_secs(5)), zero, TICK);
        assert_eq!(h.cap_cpus(), None);
        h.tick(Some(Duration::from_secs(5) + 50 * MS), zero, TICK);
        assert!((h.cap_cpus().unwrap() - MARGIN * 1.0).abs() < 1e-9);
    }

    #[test]
    fn bad_quota_figures_are_ignored() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let mut h = Headroom::default();
            h.watch(bad);
            feed(&mut h, &[(0, 0), (100, 0)]);
            assert_eq!(h.cap_cpus(), None, "{bad}");
        }
    }
}
