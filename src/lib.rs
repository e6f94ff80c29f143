//! elastic-cpu: keep a tokio service's foreground latency flat while background ("elastic")
//! CPU work — backups, scans, exports, compactions — uses the CPU that is really spare.
//!
//! It measures what foreground work waits for (the runtime's scheduling latency, I/O wake-ups,
//! the OS run queue, a container's CPU throttling), decides with a step controller how much CPU
//! elastic work may take, and enforces that with a no-burst token bucket of CPU time.
//!
//! ```
//! use elastic_cpu::prelude::*;
//! use elastic_cpu::Elastic;
//! use futures_util::StreamExt;
//!
//! let elastic = Elastic::builder().build()?; // every setting at its default
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
//! println!("share {:.3} of {} cpus, sched p99 {:?}", s.share, s.cpus, s.sched_p99);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! At the root: what the quick start and the common cases need. In modules: the groups of
//! settings ([`settings`]), the snapshot's parts ([`snapshot`]), the connection gate ([`gate`],
//! feature `gate`), the idle-priority pool ([`idle`], feature `idle-pool`), the metric names
//! ([`metrics`], feature `metrics`), a `tower` layer (`tower`, feature `tower`) and the test
//! plumbing (`testing`, feature `test-util`).
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "gate")]
#[cfg_attr(docsrs, doc(cfg(feature = "gate")))]
pub use elastic_cpu_pacer::gate;
#[cfg(feature = "idle-pool")]
#[cfg_attr(docsrs, doc(cfg(feature = "idle-pool")))]
pub use elastic_cpu_pacer::idle;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use elastic_cpu_pacer::metrics;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use elastic_cpu_pacer::testing;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use elastic_cpu_pacer::tower;
pub use elastic_cpu_pacer::{
    settings, snapshot, BuildError, Elastic, ElasticBuilder, IoProbeError, Pace, Paced, PacedExt,
    PacedStream, PacedStreamExt, Pacer, Profile, RuntimeBuilder, SettingError, Snapshot,
    SpawnError,
};

/// `use elastic_cpu::prelude::*;` brings `.paced(&elastic)` for futures and streams.
pub mod prelude {
    pub use elastic_cpu_pacer::{PacedExt, PacedStreamExt};
}

/// The README's code blocks, compiled as doc tests so the quick start cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
