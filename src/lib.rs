//! elastic-cpu: keep a tokio service's foreground latency flat while background ("elastic")
//! CPU work — backups, scans, exports, compactions — uses the CPU that is really spare.
//!
//! It measures the runtime's scheduling latency ([`elastic_cpu_probe`]), decides with a step
//! controller how much CPU elastic work may take ([`elastic_cpu_core`]), and enforces that with a
//! no-burst token bucket of CPU time ([`elastic_cpu_pacer`]).
//!
//! ```
//! use elastic_cpu::prelude::*;
//! use elastic_cpu::Elastic;
//! use futures_util::StreamExt;
//!
//! let elastic = Elastic::builder().build()?; // defaults: Profile::Default
//! let rt = elastic
//!     .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all())
//!     .build()?;
//! // A future, paced.
//! let backup = rt.spawn(async { (0..1_000_000u64).fold(0u64, |a, x| a ^ x) }.paced(&elastic));
//! // A stream of chunks, paced.
//! let chunks = futures_util::stream::iter(0..1_000u32);
//! let export = rt.spawn(chunks.paced(&elastic).for_each(|_chunk| async {}));
//! // A tight loop inside elastic work.
//! let mut pacer = elastic.pacer();
//! let encode = rt.spawn(async move {
//!     for _row in 0..100_000 {
//!         pacer.pace().await;
//!     }
//! });
//! rt.block_on(async { (backup.await, export.await, encode.await) });
//! let s = elastic.snapshot();
//! println!("limit {:.3} of {} cpus, sched p99 {:?}", s.limit, s.cpus, s.sched_p99);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

// Every type the API hands out or takes is nameable from here.
pub use elastic_cpu_core::{
    Clock, ControllerConfig, GateStats, ManualClock, QueueOrder, QueueSnapshot, SettingError,
};
#[cfg(feature = "metrics")]
pub use elastic_cpu_pacer::METRICS;
pub use elastic_cpu_pacer::{
    Admission, Availability, BuildError, ConnectionGate, CpusSource, Elastic, ElasticBuilder,
    GateSettings, GateSnapshot, GatedListener, IdlePriority, IdleRuntime, Pace, Paced, PacedExt,
    PacedStream, PacedStreamExt, Pacer, Profile, RejectReason, Rejected, RuntimeBuilder, SetupPace,
    SetupPermit, SignalSource, Snapshot, SpawnError, BRAKE_FACTOR, BRAKE_MAX, DEFAULT_BRAKE_HOLD,
    DEFAULT_QUANTUM, DEFAULT_SLICE, IO_TARGET_FACTOR, RETRY_AFTER_MAX, RETRY_AFTER_MIN,
};
pub use elastic_cpu_probe::{
    cpu_affinity, cpu_quota, CgroupVersion, CpuQuota, CpuThrottling, IoCanary, IoProbe,
    IoProbeConfig, IoProbeError, NoQuota, Probe, ProbeConfig, QuotaReading, QuotaSource,
    RunQueueStats, RunQueueTick, RunQueueUnavailable, Sampler, Source, Split, Summary,
    ThreadRegistration, ThreadRegistry, ThreadRole, ThreadWait, Window,
};

/// The three crates, for what the facade does not re-export.
pub use {elastic_cpu_core, elastic_cpu_pacer, elastic_cpu_probe};

/// `use elastic_cpu::prelude::*;` brings `.paced(&elastic)` for futures and streams.
pub mod prelude {
    pub use elastic_cpu_pacer::{PacedExt, PacedStreamExt};
}

/// The README's code blocks, compiled as doc tests so the quick start cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
