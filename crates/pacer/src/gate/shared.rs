//! What a gate's handles, admissions and permits share, and what the governor steers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use elastic_cpu_core::GateQueue;

use super::flight::Flight;
use super::settings::Resolved;
use crate::grant::class_queue::ClassQueue;
use crate::grant::long_polls::LongPolls;
use crate::grant::running::RunningTime;
use crate::grant::class_state::QueueClock;
use crate::record::{ClassKind, ClassRecord};

/// One gate: its admission queue (the setup class's bucket), how setups are timed, and what
/// the governor publishes for it. The governor holds it weakly.
pub(crate) struct GateShared {
    pub(crate) queue: GateQueue<QueueClock>,
    /// How a permit's running time is measured (as for elastic work).
    pub(crate) running: RunningTime,
    /// A permit yields once it has run this long since it last returned `Pending`.
    pub(crate) quantum: Duration,
    /// At the quantum's yield, also yield the thread's CPU to the OS (as elastic work does).
    pub(crate) os_yield: bool,
    /// Those OS yields so far.
    pub(crate) os_yields: AtomicU64,
    /// Setup polls too long for the quantum to cut (a handshake or password hash in one call).
    pub(crate) long_polls: LongPolls,
    /// Time in flight against time running, of setups that end on an idle pool: raises the
    /// holder cap there.
    pub(crate) flight: Flight,
    /// The listener's deadline.
    pub(crate) deadline: Duration,
    /// How long a setup may take from admission ([`GateSettings::setup_timeout`]).
    ///
    /// [`GateSettings::setup_timeout`]: crate::gate::GateSettings::setup_timeout
    pub(crate) setup_timeout: Duration,
    /// Setups a [`SetupListener`](crate::gate::SetupListener) ended at their timeout.
    pub(crate) timed_out: AtomicU64,
    /// The gate's number among this `Elastic`'s gates.
    pub(crate) id: usize,
    /// Its name ([`GateSettings::name`](crate::gate::GateSettings::name)), the metrics label.
    pub(crate) name: std::sync::Arc<str>,
    /// What the governor decided for the gate at its last tick.
    record: Mutex<ClassRecord>,
    /// The governor is gone: permits no longer yield, admissions are refused.
    closed: AtomicBool,
}

impl GateShared {
    pub(crate) fn new(
        queue: GateQueue<QueueClock>,
        running: RunningTime,
        quantum: Duration,
        os_yield: bool,
        settings: &Resolved,
        id: usize,
    ) -> GateShared {
        let share = settings.initial_share;
        GateShared {
            queue,
            running,
            quantum,
            os_yield,
            os_yields: AtomicU64::new(0),
            long_polls: LongPolls::default(),
            flight: Flight::default(),
            deadline: settings.deadline,
            setup_timeout: settings.setup_timeout,
            timed_out: AtomicU64::new(0),
            id,
            name: settings.name.clone(),
            record: Mutex::new(ClassRecord {
                kind: ClassKind::Gate(id),
                share,
                applied: share,
                longest_wait: Duration::ZERO,
                part: None,
            }),
            closed: AtomicBool::new(false),
        }
    }

    /// What the governor decided for the gate at its last tick.
    pub(crate) fn record(&self) -> ClassRecord {
        self.record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

impl ClassQueue for GateShared {
    fn tick(&self) -> bool {
        self.queue.tick()
    }

    fn set_rate(&self, rate: u64) {
        self.queue.set_rate(rate);
    }

    fn long_polls(&self) -> Option<&LongPolls> {
        Some(&self.long_polls)
    }

    fn set_holder_cap(&self, cap: usize) {
        self.queue.set_max_in_setup(Some(self.flight.raise(cap)));
    }

    fn take_longest_wait(&self) -> Duration {
        self.queue.take_longest_wait()
    }

    fn set_held(&self, on: bool, _braked: bool) {
        if on {
            self.queue.pause();
        } else {
            self.queue.resume();
        }
    }

    fn steering(&self) -> bool {
        // A gate steers by the signal as long as it exists.
        true
    }

    fn busy(&self) -> bool {
        let s = self.queue.snapshot();
        s.in_setup > 0 || s.queue_len > 0
    }

    fn charged(&self) -> Duration {
        Duration::from_nanos(self.queue.snapshot().used_nanos)
    }

    fn publish(&self, record: &ClassRecord) {
        *self.record.lock().unwrap_or_else(|p| p.into_inner()) = record.clone();
    }

    /// The `elastic_cpu_gate_*` metrics (in `METRICS`), labelled with the gate's name.
    #[cfg(feature = "metrics")]
    fn export(&self) {
        use metrics::{counter, gauge};
        let s = self.queue.snapshot();
        let record = self.record();
        let gate = self.name.to_string();
        counter!("elastic_cpu_gate_admitted_total", "gate" => gate.clone()).absolute(s.admitted);
        counter!("elastic_cpu_gate_rejected_total", "gate" => gate.clone()).absolute(s.rejected);
        counter!("elastic_cpu_gate_expired_total", "gate" => gate.clone()).absolute(s.expired);
        gauge!("elastic_cpu_gate_share_ratio", "gate" => gate.clone()).set(record.share);
        gauge!("elastic_cpu_gate_queue_length", "gate" => gate.clone()).set(s.queue_len as f64);
        counter!("elastic_cpu_gate_setup_cpu_microseconds_total", "gate" => gate.clone())
            .absolute(s.used_nanos / 1_000);
        gauge!("elastic_cpu_gate_longest_wait_seconds", "gate" => gate.clone())
            .set(record.longest_wait.as_secs_f64());
        gauge!("elastic_cpu_gate_waiting_on_peer", "gate" => gate.clone())
            .set(s.waiting_on_peer as f64);
        counter!("elastic_cpu_gate_timed_out_total", "gate" => gate.clone())
            .absolute(self.timed_out.load(Ordering::Relaxed));
        counter!("elastic_cpu_gate_os_yields_total", "gate" => gate)
            .absolute(self.os_yields.load(Ordering::Relaxed));
    }

    /// The governor is gone: refuse everything waiting and to come.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.queue.close();
    }
}
