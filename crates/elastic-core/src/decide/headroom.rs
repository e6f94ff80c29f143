//! Inside a CPU quota, elastic work gets at most what the foreground leaves of it.
//!
//! The controller and the throttle signal react after the fact: when the cgroup's counters show
//! a throttled period, the foreground has already waited out the rest of it, and between two
//! throttles the share climbs back until the next. So inside a quota the governor also caps
//! elastic work feed-forward: each tick it takes the process's CPU time less the running time
//! charged to elastic grants (what the rest of the process spent, elastic work's scheduler
//! overhead included), per second. Over the last [`HISTORY`] ticks, the point
//! [`BURST_SHARE`] of the way from their mean to the busiest of them stands for the
//! foreground, and elastic work may take [`MARGIN`] of what that leaves of the quota, every
//! class together (the governor hands it to the classes in order).

use std::collections::VecDeque;
use std::time::Duration;

/// The share of the quota the foreground leaves that elastic work may take: the rest absorbs
/// the foreground's bursts within a tick.
pub(crate) const MARGIN: f64 = 0.9;

/// Ticks whose foreground CPU the cap remembers.
pub(crate) const HISTORY: usize = 5;

/// How far from the recent ticks' mean towards the busiest of them the foreground is taken to
/// be. The busiest alone overstates the next tick and leaves part of the spare unused; a burst
/// beyond the estimate is what the margin, and the quota brake once armed, absorb.
pub(crate) const BURST_SHARE: f64 = 0.5;

/// The feed-forward cap: off without a quota, and without process CPU time. The quota is the
/// governor's current one, passed in at each call, so a quota that changes at run time
/// resizes the cap at once while the foreground's history carries on.
#[derive(Debug, Default)]
pub(crate) struct Headroom {
    /// Process CPU time and running time charged to elastic work, at the last tick.
    last: Option<(Duration, Duration)>,
    /// CPUs the rest of the process spent in each recent tick, newest last.
    foreground: VecDeque<f64>,
}

impl Headroom {
    /// Fold in one tick inside a quota of `quota` CPUs (`None`: no quota, nothing is kept): the
    /// process's CPU time now (`None`: unreadable, the cap lifts), the running time charged so
    /// far to elastic work (every class the cap holds), and the tick's length.
    pub(crate) fn tick(
        &mut self,
        quota: Option<f64>,
        process_cpu: Option<Duration>,
        elastic: Duration,
        period: Duration,
    ) {
        if usable(quota).is_none() {
            // Out of a quota the history goes: one that appears later starts afresh.
            self.last = None;
            self.foreground.clear();
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

    /// CPUs elastic work may take now within a quota of `quota` CPUs, every class together
    /// (`None`: no cap).
    pub(crate) fn cap_cpus(&self, quota: Option<f64>) -> Option<f64> {
        let quota = usable(quota)?;
        let busiest = self.foreground.iter().copied().reduce(f64::max)?;
        let mean = self.foreground.iter().sum::<f64>() / self.foreground.len() as f64;
        let foreground = mean + BURST_SHARE * (busiest - mean);
        Some((MARGIN * (quota - foreground)).max(0.0))
    }
}

/// A quota figure the cap can use: positive and finite.
fn usable(quota: Option<f64>) -> Option<f64> {
    quota.filter(|q| q.is_finite() && *q > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(100);
    const MS: Duration = Duration::from_millis(1);

    /// Feeds ticks in which the process spends `spent` ms and elastic work is charged `elastic`
    /// ms.
    fn feed(h: &mut Headroom, quota: Option<f64>, ticks: &[(u32, u32)]) {
        let (mut cpu, mut charged) = h.last.unwrap_or_default();
        for &(spent, elastic) in ticks {
            cpu += MS * spent;
            charged += MS * elastic;
            h.tick(quota, Some(cpu), charged, TICK);
        }
    }

    #[test]
    fn no_quota_no_cap() {
        let mut h = Headroom::default();
        feed(&mut h, None, &[(0, 0), (150, 50), (150, 50)]);
        assert_eq!(h.cap_cpus(None), None);
    }

    #[test]
    fn the_cap_is_a_margin_of_what_the_foreground_leaves() {
        let mut h = Headroom::default();
        let q = Some(1.5);
        feed(&mut h, q, &[(0, 0)]);
        assert_eq!(h.cap_cpus(q), None, "no tick measured yet");
        // 140 ms of process CPU in a 100 ms tick, 80 of it charged to elastic work: the rest of
        // the process took 0.6 CPUs, leaving 0.9 of the quota.
        feed(&mut h, q, &[(140, 80)]);
        let cap = h.cap_cpus(q).unwrap();
        assert!((cap - MARGIN * 0.9).abs() < 1e-9, "{cap}");
    }

    #[test]
    fn a_foreground_burst_holds_the_cap_down_for_the_history() {
        let mut h = Headroom::default();
        let q = Some(2.0);
        feed(&mut h, q, &[(0, 0), (100, 50), (180, 50)]);
        // The rest took 0.5 and 1.3 CPUs: the foreground is taken at 0.9 + 0.5 × 0.4 = 1.1.
        let after_burst = h.cap_cpus(q).unwrap();
        assert!((after_burst - MARGIN * 0.9).abs() < 1e-9, "{after_burst}");
        // Quiet ticks pull the estimate down while the burst is remembered, above the mean's cap.
        feed(&mut h, q, &[(100, 50); HISTORY - 2]);
        let remembered = h.cap_cpus(q).unwrap();
        assert!(remembered > after_burst, "{remembered} {after_burst}");
        // 0.5 × 4 + 1.3 over 5 ticks: mean 0.66, busiest 1.3, foreground 0.98.
        assert!(
            (remembered - MARGIN * (2.0 - 0.98)).abs() < 1e-9,
            "{remembered}"
        );
        assert!(remembered < MARGIN * 1.5, "the burst still counts");
        // Once it leaves the history (two ticks on), the quiet ticks alone set the cap.
        feed(&mut h, q, &[(100, 50)]);
        assert!(h.cap_cpus(q).unwrap() < MARGIN * 1.5);
        feed(&mut h, q, &[(100, 50)]);
        assert!((h.cap_cpus(q).unwrap() - MARGIN * 1.5).abs() < 1e-9);
    }

    #[test]
    fn the_estimate_lies_between_the_mean_and_the_busiest_tick() {
        let mut h = Headroom::default();
        let q = Some(1.5);
        // The rest of the process: 0.6, 0.8, 0.7, 1.0, 0.6 CPUs.
        feed(
            &mut h,
            q,
            &[(0, 0), (60, 0), (80, 0), (70, 0), (100, 0), (60, 0)],
        );
        let cap = h.cap_cpus(q).unwrap();
        let of = |fg: f64| MARGIN * (1.5 - fg);
        assert!(cap < of(0.74) && cap > of(1.0), "{cap}");
        assert!((cap - of(0.74 + BURST_SHARE * 0.26)).abs() < 1e-9, "{cap}");
    }

    #[test]
    fn a_foreground_over_the_quota_leaves_nothing() {
        let mut h = Headroom::default();
        feed(&mut h, Some(1.0), &[(0, 0), (160, 10)]);
        assert_eq!(h.cap_cpus(Some(1.0)), Some(0.0));
    }

    #[test]
    fn unreadable_process_cpu_lifts_the_cap_until_two_readings() {
        let mut h = Headroom::default();
        let q = Some(1.5);
        feed(&mut h, q, &[(0, 0), (100, 0)]);
        assert!(h.cap_cpus(q).is_some());
        let zero = Duration::ZERO;
        h.tick(q, None, zero, TICK);
        assert_eq!(h.cap_cpus(q), None);
        h.tick(q, Some(Duration::from_secs(5)), zero, TICK);
        assert_eq!(h.cap_cpus(q), None);
        h.tick(q, Some(Duration::from_secs(5) + 50 * MS), zero, TICK);
        assert!((h.cap_cpus(q).unwrap() - MARGIN * 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_new_quota_resizes_the_cap_at_once() {
        let mut h = Headroom::default();
        // The rest of the process takes 0.5 CPUs a tick.
        feed(&mut h, Some(1.0), &[(0, 0), (70, 20)]);
        assert!((h.cap_cpus(Some(1.0)).unwrap() - MARGIN * 0.5).abs() < 1e-9);
        // The same history under a larger quota.
        assert!((h.cap_cpus(Some(3.0)).unwrap() - MARGIN * 2.5).abs() < 1e-9);
        // Out of the quota the history goes; one that comes back needs two readings again.
        feed(&mut h, None, &[(70, 20)]);
        assert_eq!(h.cap_cpus(Some(1.0)), None);
        feed(&mut h, Some(1.0), &[(70, 20)]);
        assert_eq!(h.cap_cpus(Some(1.0)), None);
        feed(&mut h, Some(1.0), &[(70, 20)]);
        assert!(h.cap_cpus(Some(1.0)).is_some());
    }

    #[test]
    fn bad_quota_figures_are_ignored() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let mut h = Headroom::default();
            feed(&mut h, Some(bad), &[(0, 0), (100, 0)]);
            assert_eq!(h.cap_cpus(Some(bad)), None, "{bad}");
        }
    }
}
