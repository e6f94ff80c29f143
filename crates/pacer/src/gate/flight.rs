//! [`Flight`]: how long setups on an idle pool stay in flight for each unit of time they run,
//! which raises the holder cap there.
//!
//! The holder cap bounds how many setups run at once: as many as the CPUs the gate's share pays
//! for. On an idle pool the OS cuts a long setup call whenever the foreground wants the core, and
//! the setup keeps its place while it is cut, so at that cap the CPUs it pays for sit idle; nor
//! can more setups in flight hold a runtime worker there. So there the cap is multiplied by the
//! measured time in flight ÷ time running, at most [`MAX_FLIGHT`] (time waiting on the client
//! counts too, though a setup run by `SetupPermit::run` holds no place then). Admission stays closed-loop (a setup holds its place until it ends), so what
//! the pool cannot run waits in the gate's queue, where its deadline applies. Setups that end
//! on the runtime keep the plain cap: there each call that cannot be cut holds a worker.

use std::sync::Mutex;
use std::time::Duration;

/// The most the cap is multiplied by: bounds how much setup work can be in flight beyond what
/// the share pays for when setups wait on the CPU rather than on their clients (the pool busy),
/// which reads the same from here.
pub(crate) const MAX_FLIGHT: f64 = 4.0;

/// Setups that must have ended on an idle pool since the last reading for it to move the
/// multiplier: fewer say little about the ratio.
const MIN_SETUPS: u64 = 4;

/// Setups ended since the last reading, and the multiplier.
#[derive(Debug)]
pub(crate) struct Flight(Mutex<State>);

#[derive(Debug)]
struct State {
    /// Admission to end, summed over setups that ended on an idle pool.
    in_flight: Duration,
    /// Their running time.
    running: Duration,
    idle_setups: u64,
    /// Setups that ended elsewhere (a runtime worker).
    other_setups: u64,
    factor: f64,
}

impl Default for Flight {
    fn default() -> Self {
        Flight(Mutex::new(State {
            in_flight: Duration::ZERO,
            running: Duration::ZERO,
            idle_setups: 0,
            other_setups: 0,
            factor: 1.0,
        }))
    }
}

impl Flight {
    /// A setup ended `in_flight` after its admission, having run `running` of it, on an idle
    /// pool's thread or not.
    pub(crate) fn record(&self, in_flight: Duration, running: Duration, on_idle_pool: bool) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if on_idle_pool {
            s.in_flight = s.in_flight.saturating_add(in_flight);
            s.running = s.running.saturating_add(running);
            s.idle_setups += 1;
        } else {
            s.other_setups += 1;
        }
    }

    /// Folds in the setups that ended since the last call and returns the multiplier: 1 while
    /// most setups end on the runtime; else half way from the last one to the window's ratio
    /// of time in flight to time running (1 to [`MAX_FLIGHT`]); unchanged on too few setups.
    pub(crate) fn update(&self) -> f64 {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (idle, other) = (s.idle_setups, s.other_setups);
        if other > idle {
            s.factor = 1.0;
        } else if idle >= MIN_SETUPS && !s.running.is_zero() {
            let ratio = s.in_flight.as_secs_f64() / s.running.as_secs_f64();
            let ratio = if ratio.is_finite() {
                ratio.clamp(1.0, MAX_FLIGHT)
            } else {
                MAX_FLIGHT
            };
            s.factor = (s.factor + ratio) / 2.0;
        }
        if other > idle || idle >= MIN_SETUPS {
            s.in_flight = Duration::ZERO;
            s.running = Duration::ZERO;
            s.idle_setups = 0;
            s.other_setups = 0;
        }
        s.factor
    }

    /// `cap` holders raised by the multiplier (after [`update`](Self::update)), rounded up.
    pub(crate) fn raise(&self, cap: usize) -> usize {
        let raised = (cap as f64 * self.update()).ceil();
        if raised.is_finite() && raised >= 1.0 {
            raised.min(usize::MAX as f64) as usize
        } else {
            cap.max(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn ended(f: &Flight, n: u32, in_flight: Duration, running: Duration, idle: bool) {
        for _ in 0..n {
            f.record(in_flight, running, idle);
        }
    }

    #[test]
    fn setups_waiting_on_their_clients_raise_the_cap_half_way_each_reading() {
        let f = Flight::default();
        assert_eq!(f.raise(2), 2, "nothing measured: the plain cap");
        // In flight 3 ms for each 1 ms run: half way from 1 to 3.
        ended(&f, 8, 3 * MS, MS, true);
        assert_eq!(f.update(), 2.0);
        ended(&f, 8, 3 * MS, MS, true);
        assert_eq!(f.raise(2), 5, "2 × 2.5");
    }

    #[test]
    fn the_multiplier_is_bounded_and_never_below_one() {
        let f = Flight::default();
        for _ in 0..20 {
            ended(&f, 8, 100 * MS, MS, true);
            f.update();
        }
        assert!(f.update() <= MAX_FLIGHT);
        assert_eq!(f.raise(2), 8);
        let g = Flight::default();
        // Charged more than its time in flight (another thread's clock): read as 1.
        ended(&g, 8, MS, 3 * MS, true);
        assert_eq!(g.update(), 1.0);
        // Nothing ran: no ratio, nothing moves.
        ended(&g, 8, MS, Duration::ZERO, true);
        assert_eq!(g.update(), 1.0);
    }

    #[test]
    fn setups_on_the_runtime_keep_the_plain_cap() {
        let f = Flight::default();
        ended(&f, 8, 4 * MS, MS, true);
        assert!(f.update() > 1.0);
        ended(&f, 8, 4 * MS, MS, false);
        ended(&f, 2, 4 * MS, MS, true);
        assert_eq!(f.update(), 1.0);
        assert_eq!(f.raise(1), 1);
    }

    #[test]
    fn too_few_setups_leave_it_and_are_kept_for_the_next_reading() {
        let f = Flight::default();
        ended(&f, 3, 3 * MS, MS, true);
        assert_eq!(f.update(), 1.0);
        ended(&f, 1, 3 * MS, MS, true);
        assert_eq!(f.update(), 2.0, "the four setups of both readings");
    }
}
