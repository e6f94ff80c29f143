//! [`ConnectionGate`]: the handle a server holds.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::admission::Admission;
use super::shared::GateShared;
use super::snapshot::GateSnapshot;

/// Admits connection setups while they can start within their deadlines, and paces the setups
/// as their own class of CPU time, with a share of the CPUs steered by the scheduling latency
/// (the same signal and governor tick as the elastic share). Cheap to clone; `Send + Sync`.
///
/// ```
/// use elastic_cpu_pacer::{gate::GateSettings, Elastic};
/// use std::time::Duration;
///
/// let elastic = Elastic::builder().build()?;
/// let rt = elastic.runtime(tokio::runtime::Builder::new_current_thread()).build()?;
/// let gate = elastic.connection_gate(GateSettings::new())?;
/// rt.block_on(async {
///     match gate.admit(Duration::from_millis(500)).await {
///         Ok(mut permit) => {
///             for _round in 0..100 {
///                 // ... a chunk of the handshake's CPU work ...
///                 permit.pace().await;
///             }
///         } // dropping the permit settles the setup's CPU
///         Err(rejected) => println!("busy: retry in {:?}", rejected.retry_after()),
///     }
/// });
/// assert_eq!(gate.snapshot().admitted, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// The gate does not keep its [`Elastic`](crate::Elastic) alive: once the governor is gone,
/// waiting and later admissions are refused with
/// [`RejectReason::Closed`](crate::gate::RejectReason::Closed) and permits no longer yield.
#[derive(Clone)]
pub struct ConnectionGate {
    pub(crate) shared: Arc<GateShared>,
}

impl ConnectionGate {
    /// One connection attempt. `deadline`: how long this attempt may wait before its setup
    /// starts (say, the client's connect timeout less the setup's own time).
    ///
    /// The future resolves to a [`SetupPermit`](crate::gate::SetupPermit) once the setup may
    /// start, or to [`Rejected`](crate::gate::Rejected): at its first poll if the queue is full or
    /// the attempt could not start in time at the current admission rate, later if it waited
    /// past its deadline (within a governor tick of it; it is never admitted late). Dropping it
    /// at any point leaves no queue entry and loses no tokens.
    pub fn admit(&self, deadline: Duration) -> Admission {
        Admission::new(self.shared.clone(), deadline)
    }

    /// The gate's name, its `gate` label in the metrics
    /// ([`GateSettings::name`](crate::gate::GateSettings::name)).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The deadline the settings gave (what [`GatedListener`](crate::gate::GatedListener) uses).
    pub fn default_deadline(&self) -> Duration {
        self.shared.deadline
    }

    /// How long a setup may take from admission to its end
    /// ([`GateSettings::setup_timeout`](crate::gate::GateSettings::setup_timeout)).
    pub fn setup_timeout(&self) -> Duration {
        self.shared.setup_timeout
    }

    /// The counters, the share and the longest wait.
    pub fn snapshot(&self) -> GateSnapshot {
        let record = self.shared.record();
        GateSnapshot::new(
            self.shared.queue.snapshot(),
            record.share,
            record.longest_wait,
            self.shared.os_yields.load(Ordering::Relaxed),
            self.shared.timed_out.load(Ordering::Relaxed),
        )
    }
}

impl fmt::Debug for ConnectionGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionGate")
            .field("share", &self.shared.record().share)
            .field("deadline", &self.shared.deadline)
            .finish_non_exhaustive()
    }
}

/// Handles, admissions and permits move between tasks and threads.
const _: () = {
    const fn is<T: Send + Sync + 'static>() {}
    is::<ConnectionGate>();
    is::<Admission>();
    is::<super::permit::SetupPermit>();
};
