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
//! for one long loop; the governor thread reads the signal once per tick (the probe's
//! scheduling latency, the I/O wake-up latency, the OS run-queue delay, the cgroup's
//! throttling), steps each class's share on it (the `Elastic`'s own, its
//! [idle pool](idle)'s, each [connection gate](gate)'s), and turns each share into a token rate
//! and a cap on grants held at once; the backlog brake stops all grants the moment a foreground
//! task is seen waiting 4× the target; [`Elastic::snapshot`] and the `metrics` facade report it
//! all. See `docs/design.md` in the repository for how the pieces fit.
//!
//! Features: `metrics` (default) exports the snapshot through the `metrics` facade every tick
//! (the names are in [`metrics::METRICS`]); `gate` (default) the connection gate; `idle-pool`
//! (default) the idle-priority pool; `test-util` the test plumbing (module `testing`), for
//! tests only.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[macro_use]
mod macros;

mod builder;
mod elastic;
mod ext;
cfg_gate! {
    #[cfg_attr(docsrs, doc(cfg(feature = "gate")))]
    pub mod gate;
}
mod governor;
mod grant;
cfg_idle_pool! {
    #[cfg_attr(docsrs, doc(cfg(feature = "idle-pool")))]
    pub mod idle;
}
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
mod placement;
mod quota;
mod record;
pub mod settings;
mod signal;
pub mod snapshot;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod testing;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;
mod trace;

pub use crate::builder::{BuildError, ElasticBuilder};
pub use crate::elastic::{Elastic, RuntimeBuilder, SpawnError};
pub use crate::ext::{PacedExt, PacedStreamExt};
pub use crate::grant::paced::{Paced, PacedStream};
pub use crate::grant::pacer::{Pace, Pacer};
pub use crate::settings::Profile;
pub use crate::snapshot::Snapshot;
pub use elastic_cpu_core::SettingError;
pub use elastic_cpu_probe::IoProbeError;
