//! Enforce: run elastic work on CPU tokens so it takes only the CPU that is really spare.
//!
//! ```
//! use futures_util::StreamExt;
//! use elastic_cpu_pacer::{Elastic, PacedExt, PacedStreamExt};
//!
//! let elastic = Elastic::builder().build()?;
//! let rt = elastic
//!     .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2))
//!     .build()?;
//! // A future and a stream of chunks, both paced.
//! let backup = rt.spawn(async { (0..100_000u64).sum::<u64>() }.paced(&elastic));
//! let export = rt.spawn(futures_util::stream::iter(0..64u32).paced(&elastic).count());
//! // A tight loop.
//! let mut pacer = elastic.pacer();
//! let encode = rt.spawn(async move {
//!     for _row in 0..10_000 {
//!         pacer.pace().await;
//!     }
//! });
//! rt.block_on(async { (backup.await, export.await, encode.await) });
//! println!("{:?}", elastic.snapshot());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The pieces: [`Paced`] / [`PacedStream`] (`.paced(&elastic)`, or [`Elastic::spawn`]) hold a
//! grant of CPU time before each poll and measure what each poll used; [`Pacer`] does the same
//! for one long loop; the governor thread turns the probe's scheduling latency into a limit
//! (the elastic share of the CPUs, by the step controller) and the limit into a token rate,
//! hands out at most `ceil(limit × cpus)` grants at a time, and stops all grants (the backlog
//! brake) the moment a foreground task is seen waiting 4× the target; [`Elastic::snapshot`]
//! and the `metrics` facade report it all. [`Elastic`] says when the token bucket starts full
//! and how long the governor thread lives. See `docs/design.md` in the repository (§5 for this
//! crate) for how the pieces fit.
//!
//! Features: `metrics` (default) exports the snapshot through the `metrics` facade every tick
//! (the names are in `METRICS`); `test-util` adds the test plumbing (a manual clock
//! and hand-made ticks), for tests only.
#![forbid(unsafe_code)]

mod brake;
mod config;
mod elastic;
mod ext;
mod gate;
mod governor;
mod grant;
mod headroom;
mod idle_class;
mod idle_pool;
mod idle_thread;
#[cfg(feature = "metrics")]
mod metrics;
mod paced;
mod pacer;
mod quantum;
mod running;
mod share;
mod shared;
mod signal;
mod snapshot;
mod throttle;

pub use crate::brake::{BRAKE_MAX, DEFAULT_BRAKE_HOLD};
pub use crate::config::{
    BuildError, ElasticBuilder, Profile, BRAKE_FACTOR, DEFAULT_QUANTUM, DEFAULT_SLICE,
};
pub use crate::elastic::{Elastic, RuntimeBuilder, SpawnError};
pub use crate::ext::{PacedExt, PacedStreamExt};
pub use crate::gate::{
    Admission, ConnectionGate, GateSettings, GateSnapshot, GatedListener, RejectReason, Rejected,
    SetupPace, SetupPermit, RETRY_AFTER_MAX, RETRY_AFTER_MIN,
};
pub use crate::idle_pool::{IdlePriority, IdleRuntime};
#[cfg(feature = "metrics")]
pub use crate::metrics::METRICS;
pub use crate::paced::{Paced, PacedStream};
pub use crate::pacer::{Pace, Pacer};
pub use crate::signal::{Availability, SignalSource, IO_TARGET_FACTOR};
pub use crate::snapshot::{CpusSource, Snapshot};

// Every type the API above hands out or takes, nameable from here.
/// The clocks `ElasticBuilder::manual` and `ElasticBuilder::running_clock` take (feature
/// `test-util`).
pub use elastic_cpu_core::{Clock, ManualClock};
pub use elastic_cpu_core::{ControllerConfig, GateStats, QueueOrder, QueueSnapshot, SettingError};
/// The cgroup version a [`CpusSource::Quota`] was read from.
pub use elastic_cpu_probe::CgroupVersion;
pub use elastic_cpu_probe::{Probe, ProbeConfig, Sampler, Source, Split, Summary, Window};
