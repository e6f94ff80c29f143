//! Elastic work's overhead: the governor scales the token rate by what elastic work really costs
//! the process, scheduler work included.
//!
//! Every quantum yield costs the scheduler: with nothing else to run, the worker searches for
//! work to steal, wakes the deferred task and, as it stops searching, wakes another worker,
//! which searches and parks again (a futex wake-up and a context switch on another core). None
//! of that is in the running time charged to grants. On an otherwise idle runtime it is a
//! sizeable fraction of what is charged; with foreground work the worker has other tasks to run
//! when it yields and the cost mostly vanishes.
//!
//! So the correction is measured where it can be told apart from foreground work: over each
//! window of [`WINDOW_TICKS`] ticks the governor compares the process's CPU time (user + sys,
//! every thread) with the running time charged; while the probe sees almost no foreground
//! tasks, the excess over what was charged (less what quiet windows without elastic work spent:
//! the runtime idling, the fallback probe) is elastic work's overhead. The token rate is
//! divided by `1 + overhead` (at most [`MAX_OVERHEAD`]). While foreground runs, the overhead
//! cannot be measured; the correction then fades (halves each window), erring towards the
//! foreground.

use std::time::Duration;

/// Ticks per measurement window.
pub(crate) const WINDOW_TICKS: u32 = 5;

/// The largest overhead corrected for: the rate is never cut below `1 / (1 + MAX_OVERHEAD)`.
pub(crate) const MAX_OVERHEAD: f64 = 0.5;

/// Foreground tasks per second (scheduling samples the probe counts as foreground) below which
/// a window counts as quiet. The fallback probe itself schedules up to ~1000 a second.
pub(crate) const QUIET_FOREGROUND_PER_SEC: f64 = 2000.0;

/// Elastic work must have been charged at least this share of one CPU over a window for the
/// window to measure anything.
const MIN_CHARGED_SHARE: f64 = 0.05;

/// What one tick measured.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TickReading {
    /// The process's CPU time now (`None`: unavailable, no correction).
    pub(crate) process_cpu: Option<Duration>,
    /// Running time charged to elastic work so far.
    pub(crate) charged: Duration,
    /// Foreground scheduling samples per second the probe saw over its window.
    pub(crate) foreground_per_sec: f64,
    /// The tick's period.
    pub(crate) period: Duration,
}

/// The overhead correction: measured per window, applied to the token rate.
#[derive(Debug, Default)]
pub(crate) struct Overhead {
    /// Readings at the start of the window.
    start: Option<(Duration, Duration)>,
    /// Ticks and period in the window so far; any tick in it not quiet.
    ticks: u32,
    elapsed: Duration,
    busy: bool,
    /// Elastic work's CPU overhead over what was charged, as a fraction of it.
    overhead: f64,
    measured: bool,
    /// CPUs the process spends in quiet windows without elastic work (the runtime idling, the
    /// governor, the fallback probe): not elastic work's overhead. `None` until seen.
    idle: Option<f64>,
}

impl Overhead {
    /// Fold in one tick; at the end of a window, update the overhead.
    pub(crate) fn tick(&mut self, r: TickReading) {
        let Some(cpu) = r.process_cpu else {
            return;
        };
        let Some((cpu0, charged0)) = self.start else {
            self.start = Some((cpu, r.charged));
            return;
        };
        self.ticks += 1;
        self.elapsed += r.period;
        self.busy |= r.foreground_per_sec > QUIET_FOREGROUND_PER_SEC;
        if self.ticks < WINDOW_TICKS {
            return;
        }
        let spent = cpu.saturating_sub(cpu0).as_secs_f64();
        let charged = r.charged.saturating_sub(charged0).as_secs_f64();
        let elapsed = self.elapsed.as_secs_f64();
        if self.busy {
            self.overhead /= 2.0;
        } else if charged == 0.0 {
            let idle = spent / elapsed;
            self.idle = Some(self.idle.map_or(idle, |was| (was + idle) / 2.0));
        } else if charged > MIN_CHARGED_SHARE * elapsed {
            let overhead = spent - self.idle.unwrap_or(0.0) * elapsed - charged;
            let overhead = (overhead / charged).clamp(0.0, MAX_OVERHEAD);
            // The first measurement stands as it is; later ones are averaged in.
            self.overhead = if self.measured {
                (self.overhead + overhead) / 2.0
            } else {
                overhead
            };
            self.measured = true;
        }
        self.start = Some((cpu, r.charged));
        self.ticks = 0;
        self.elapsed = Duration::ZERO;
        self.busy = false;
    }

    /// Elastic work's measured overhead, as a fraction of the running time charged.
    pub(crate) fn overhead(&self) -> f64 {
        self.overhead
    }

    /// The token rate for `rate` once elastic work's overhead is paid from it.
    pub(crate) fn apply(&self, rate: u64) -> u64 {
        (rate as f64 / (1.0 + self.overhead)).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(100);

    /// Feeds whole windows: each spends `spent` of process CPU and is charged `charged`.
    struct Feed {
        correction: Overhead,
        cpu: Duration,
        charged: Duration,
    }

    impl Feed {
        fn new() -> Feed {
            let mut correction = Overhead::default();
            correction.tick(reading(Duration::ZERO, Duration::ZERO, 0.0));
            Feed {
                correction,
                cpu: Duration::ZERO,
                charged: Duration::ZERO,
            }
        }

        fn window(&mut self, spent_ms: u64, charged_ms: u64, foreground_per_sec: f64) -> f64 {
            for _ in 0..WINDOW_TICKS {
                self.cpu += Duration::from_millis(spent_ms) / WINDOW_TICKS;
                self.charged += Duration::from_millis(charged_ms) / WINDOW_TICKS;
                self.correction
                    .tick(reading(self.cpu, self.charged, foreground_per_sec));
            }
            self.correction.overhead
        }
    }

    fn reading(cpu: Duration, charged: Duration, foreground_per_sec: f64) -> TickReading {
        TickReading {
            process_cpu: Some(cpu),
            charged,
            foreground_per_sec,
            period: TICK,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_quiet_window_measures_the_overhead_then_windows_are_averaged() {
        let mut f = Feed::new();
        // 0.6 CPU charged over 500 ms, 0.69 spent: 15 % overhead, taken as it is.
        assert!(close(f.window(345, 300, 0.0), 0.15));
        assert_eq!(f.correction.apply(600_000_000), 521_739_130);
        // The next window's 25 % is averaged in.
        assert!(close(f.window(375, 300, 1000.0), 0.20));
        // Nothing changes mid-window.
        f.correction.tick(reading(f.cpu + TICK, f.charged, 0.0));
        assert!(close(f.correction.overhead, 0.20));
    }

    #[test]
    fn foreground_work_makes_the_correction_fade() {
        let mut f = Feed::new();
        assert!(close(f.window(360, 300, 0.0), 0.2));
        // Busy windows cannot tell foreground from overhead: halve, whatever they spent.
        assert!(close(f.window(900, 300, 5000.0), 0.1));
        assert!(close(f.window(300, 300, 5000.0), 0.05));
        // One busy tick makes the whole window busy.
        for i in 0..WINDOW_TICKS {
            f.cpu += Duration::from_millis(90);
            f.charged += Duration::from_millis(60);
            let fg = if i == 2 { 2500.0 } else { 0.0 };
            f.correction.tick(reading(f.cpu, f.charged, fg));
        }
        assert!(close(f.correction.overhead, 0.025));
    }

    #[test]
    fn a_window_with_little_elastic_work_measures_nothing() {
        let mut f = Feed::new();
        assert!(close(f.window(345, 300, 0.0), 0.15));
        // 20 ms charged over 500 ms is under 5 % of a CPU: the ratio would be noise.
        assert!(close(f.window(200, 20, 0.0), 0.15));
    }

    #[test]
    fn what_the_process_spends_without_elastic_work_is_not_overhead() {
        let mut f = Feed::new();
        // Idle windows: 30 ms, then 20 ms over 500 ms (the fallback probe, say): 0.05 CPU.
        assert!(close(f.window(30, 0, 900.0), 0.0));
        assert!(close(f.window(20, 0, 900.0), 0.0));
        // 300 ms charged, 370 spent: 25 of the 70 ms extra were there without elastic work.
        assert!(close(f.window(370, 300, 900.0), 0.15));
        // A window with elastic work does not move the idle figure.
        assert!(close(f.window(370, 300, 900.0), 0.15));
        // Nor does a busy one.
        f.window(900, 0, 5000.0);
        assert!(close(f.window(370, 300, 0.0), 0.1125));
    }

    #[test]
    fn the_overhead_is_clamped() {
        let mut f = Feed::new();
        assert!(close(f.window(900, 300, 0.0), MAX_OVERHEAD));
        let mut f = Feed::new();
        // Charged more than spent (wall-timed polls preempted): no negative overhead.
        assert!(close(f.window(250, 300, 0.0), 0.0));
        assert_eq!(f.correction.apply(600_000_000), 600_000_000);
    }

    #[test]
    fn no_process_clock_no_correction() {
        let mut share = Overhead::default();
        for _ in 0..3 * WINDOW_TICKS {
            share.tick(TickReading {
                process_cpu: None,
                ..reading(Duration::ZERO, Duration::from_secs(1), 0.0)
            });
        }
        assert_eq!(share.overhead, 0.0);
        assert_eq!(share.apply(123), 123);
    }
}
