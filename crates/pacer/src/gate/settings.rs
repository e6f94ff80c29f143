//! [`GateSettings`]: what a connection gate is built from, validated by
//! [`Elastic::connection_gate`](crate::Elastic::connection_gate).

use std::sync::Arc;
use std::time::Duration;

use elastic_cpu_core::{QueueOrder, SettingError};

/// Settings of a [`ConnectionGate`](crate::gate::ConnectionGate); every one is checked when the gate
/// is made, and a bad one comes back as a [`SettingError`] naming it.
///
/// ```
/// use elastic_cpu_pacer::{gate::GateSettings, Elastic};
/// use std::time::Duration;
///
/// let elastic = Elastic::builder().build()?;
/// let gate = elastic.connection_gate(
///     GateSettings::new()
///         .name("tls")
///         .deadline(Duration::from_millis(500))
///         .max_queue(256)
///         .setup_cost(Duration::from_millis(2)),
/// )?;
/// assert_eq!((gate.name(), gate.snapshot().queue_len), ("tls", 0));
/// // A bad setting names itself.
/// let err = elastic.connection_gate(GateSettings::new().max_queue(0)).unwrap_err();
/// assert_eq!(err.setting, "max_queue");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct GateSettings {
    pub(crate) deadline: Option<Duration>,
    pub(crate) max_queue: Option<usize>,
    pub(crate) setup_cost: Option<Duration>,
    pub(crate) min_share: Option<f64>,
    pub(crate) max_share: Option<f64>,
    pub(crate) initial_share: Option<f64>,
    pub(crate) order: Option<QueueOrder>,
    pub(crate) cap_concurrency: Option<bool>,
    pub(crate) setup_timeout: Option<Duration>,
    pub(crate) max_in_flight: Option<usize>,
    pub(crate) name: Option<String>,
}

/// The longest gate name: it is a metrics label.
const NAME_MAX: usize = 64;

/// Default longest wait for admission ([`GateSettings::deadline`]).
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_secs(1);
/// Default bound on waiting attempts ([`GateSettings::max_queue`]).
pub(crate) const DEFAULT_MAX_QUEUE: usize = 1024;
/// Default first estimate of CPU per setup ([`GateSettings::setup_cost`]).
pub(crate) const DEFAULT_SETUP_COST: Duration = Duration::from_millis(1);
/// Default floor of the setup class's share of the CPUs.
pub(crate) const DEFAULT_MIN_SHARE: f64 = 0.05;
/// Default ceiling of the setup class's share.
pub(crate) const DEFAULT_MAX_SHARE: f64 = 0.9;
/// Default share a gate starts at (and decays back to while idle).
pub(crate) const DEFAULT_INITIAL_SHARE: f64 = 0.5;
/// Default longest time from admission to the end of a setup ([`GateSettings::setup_timeout`]).
pub(crate) const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound on setups in flight, running or waiting on their clients
/// ([`GateSettings::max_in_flight`]).
pub(crate) const DEFAULT_MAX_IN_FLIGHT: usize = 1024;

/// The settings, checked and with the defaults filled in.
#[derive(Clone, Debug)]
pub(crate) struct Resolved {
    /// The gate's name, its `gate` label in the metrics.
    pub(crate) name: Arc<str>,
    pub(crate) deadline: Duration,
    pub(crate) max_queue: usize,
    pub(crate) setup_cost: Duration,
    pub(crate) min_share: f64,
    pub(crate) max_share: f64,
    pub(crate) initial_share: f64,
    pub(crate) order: QueueOrder,
    pub(crate) cap_concurrency: bool,
    pub(crate) setup_timeout: Duration,
    pub(crate) max_in_flight: usize,
}

impl GateSettings {
    /// The defaults: deadline 1 s, queue of 1024, setups first estimated at 1 ms of CPU,
    /// share 0.05 ..= 0.9 starting at 0.5, newest-first order, at most `ceil(share × cpus)`
    /// setups running at once and 1024 in flight, each given 10 s to finish.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long an attempt may wait for admission by default (the [`GatedListener`]'s
    /// deadline; [`ConnectionGate::admit`] takes its own). Default 1 s; valid 1 ms ..= 1 h.
    ///
    /// [`GatedListener`]: crate::gate::GatedListener
    /// [`ConnectionGate::admit`]: crate::gate::ConnectionGate::admit
    pub fn deadline(mut self, wait: Duration) -> Self {
        self.deadline = Some(wait);
        self
    }

    /// The most attempts waiting at once. Default 1024; valid 1 ..= 1 000 000.
    pub fn max_queue(mut self, n: usize) -> Self {
        self.max_queue = Some(n);
        self
    }

    /// The CPU one setup is assumed to take until setups have been measured (then the
    /// measured average is used). Default 1 ms; valid 1 µs ..= 10 s.
    pub fn setup_cost(mut self, cpu: Duration) -> Self {
        self.setup_cost = Some(cpu);
        self
    }

    /// Bounds of the setup class's share of the CPUs, which the controller steers by the
    /// scheduling latency. Default 0.05 ..= 0.9; valid: min 0.01 ..= 1.0, max 0.05 ..= 1.0,
    /// `min ≤ max`.
    pub fn share(mut self, min: f64, max: f64) -> Self {
        self.min_share = Some(min);
        self.max_share = Some(max);
        self
    }

    /// The share the gate starts at, and decays back to while no attempt waits. Default 0.5
    /// (clamped into the bounds); valid 0.01 ..= 1.0.
    pub fn initial_share(mut self, share: f64) -> Self {
        self.initial_share = Some(share);
        self
    }

    /// Which waiting attempt goes first. Default [`QueueOrder::Lifo`] (newest first): under
    /// overload it completes more setups within their deadlines (docs/design.md §5).
    pub fn order(mut self, order: QueueOrder) -> Self {
        self.order = Some(order);
        self
    }

    /// Whether at most `ceil(share × cpus)` setups run at once (default on). Setups that wait on
    /// their clients inside [`SetupPermit::run`](crate::gate::SetupPermit::run) do not count;
    /// a permit held by hand counts until it is dropped.
    pub fn cap_concurrency(mut self, on: bool) -> Self {
        self.cap_concurrency = Some(on);
        self
    }

    /// How long a setup may take from admission to its end before its connection is closed.
    /// Default 10 s; valid 1 ms ..= 1 h.
    ///
    /// [`SetupListener`](crate::gate::SetupListener) enforces it (closing the connection);
    /// with a [`GatedListener`](crate::gate::GatedListener) or [`ConnectionGate::admit`]
    /// wrap the setup in `tokio::time::timeout(gate.setup_timeout(), ...)`.
    ///
    /// A setup waiting on its client holds no place a running setup needs (see
    /// [`max_in_flight`](Self::max_in_flight)), so this bounds how long a client that never
    /// finishes (a silent or slow-loris socket) holds a connection, a task and its tokens. 10 s
    /// is far beyond a healthy handshake's few round trips, with room for a lossy link's
    /// retransmissions (TCP's first retransmission waits 1 s); PostgreSQL's
    /// `authentication_timeout` is 60 s, for people typing passwords, which a service's
    /// clients do not.
    ///
    /// [`ConnectionGate::admit`]: crate::gate::ConnectionGate::admit
    pub fn setup_timeout(mut self, limit: Duration) -> Self {
        self.setup_timeout = Some(limit);
        self
    }

    /// The most setups in flight at once: admitted and not yet ended, counting those that wait
    /// on their clients. Default 1024; valid 1 ..= 1 000 000.
    ///
    /// Only setups that run (are being polled or ready to be) count against the running cap
    /// ([`cap_concurrency`](Self::cap_concurrency)): a setup run by
    /// [`SetupPermit::run`](crate::gate::SetupPermit::run) gives up its place whenever it waits
    /// on its client and takes it back when it runs again. This bound, with
    /// [`setup_timeout`](Self::setup_timeout), is what clients that never finish can hold.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = Some(n);
        self
    }

    /// The gate's name: its `gate` label in the metrics. Default `gate0`, `gate1`, ... in the
    /// order this `Elastic`'s gates were made; valid: 1 to 64 bytes, no control characters.
    /// Give each gate its own: two gates of one name would report into the same series.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Check every setting, for the gate made `id`-th (its default name); the error names the
    /// first bad one.
    pub(crate) fn resolve(&self, id: usize) -> Result<Resolved, SettingError> {
        let name: Arc<str> = match &self.name {
            Some(name) => {
                if name.is_empty() || name.len() > NAME_MAX || name.chars().any(char::is_control) {
                    return Err(SettingError::new(
                        "name",
                        format!("{name:?}"),
                        "1 to 64 bytes, no control characters",
                    ));
                }
                name.as_str().into()
            }
            None => format!("gate{id}").into(),
        };
        let up_to_an_hour = Duration::from_millis(1)..=Duration::from_secs(3600);
        let deadline = within(
            "deadline",
            self.deadline.unwrap_or(DEFAULT_DEADLINE),
            up_to_an_hour.clone(),
            "1 ms ..= 1 h",
        )?;
        let max_queue = count("max_queue", self.max_queue.unwrap_or(DEFAULT_MAX_QUEUE))?;
        let setup_cost = within(
            "setup_cost",
            self.setup_cost.unwrap_or(DEFAULT_SETUP_COST),
            Duration::from_micros(1)..=Duration::from_secs(10),
            "1 µs ..= 10 s",
        )?;
        let share = |setting, v: f64, lo: f64, expected| {
            if v.is_finite() && (lo..=1.0).contains(&v) {
                Ok(v)
            } else {
                Err(SettingError::new(setting, v, expected))
            }
        };
        let min_share = share(
            "min_share",
            self.min_share.unwrap_or(DEFAULT_MIN_SHARE),
            0.01,
            "0.01 ..= 1.0",
        )?;
        let max_share = share(
            "max_share",
            self.max_share.unwrap_or(DEFAULT_MAX_SHARE),
            0.05,
            "0.05 ..= 1.0",
        )?;
        if max_share < min_share {
            return Err(SettingError::new(
                "max_share",
                max_share,
                "at least min_share",
            ));
        }
        let initial_share = share(
            "initial_share",
            self.initial_share.unwrap_or(DEFAULT_INITIAL_SHARE),
            0.01,
            "0.01 ..= 1.0",
        )?
        .clamp(min_share, max_share);
        let setup_timeout = within(
            "setup_timeout",
            self.setup_timeout.unwrap_or(DEFAULT_SETUP_TIMEOUT),
            up_to_an_hour,
            "1 ms ..= 1 h",
        )?;
        let max_in_flight = count(
            "max_in_flight",
            self.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT),
        )?;
        Ok(Resolved {
            name,
            deadline,
            setup_timeout,
            max_in_flight,
            max_queue,
            setup_cost,
            min_share,
            max_share,
            initial_share,
            order: self.order.unwrap_or_default(),
            cap_concurrency: self.cap_concurrency.unwrap_or(true),
        })
    }
}

/// `value` if it lies in `range`, else the error naming `setting`.
fn within(
    setting: &'static str,
    value: Duration,
    range: std::ops::RangeInclusive<Duration>,
    expected: &'static str,
) -> Result<Duration, SettingError> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(SettingError::new(setting, format!("{value:?}"), expected))
    }
}

/// A count of `1 ..= 1 000 000`, else the error naming `setting`.
fn count(setting: &'static str, n: usize) -> Result<usize, SettingError> {
    if (1..=1_000_000).contains(&n) {
        Ok(n)
    } else {
        Err(SettingError::new(setting, n, "1 ..= 1000000"))
    }
}
