//! MEASURE: scheduling (queue) latency and poll time of tokio tasks, as windowed percentiles.
//!
//! ```
//! use elastic_cpu_probe::{Probe, ProbeConfig, Source};
//! use std::time::Duration;
//!
//! let probe = Probe::new(ProbeConfig::default()).unwrap();
//! let mut builder = tokio::runtime::Builder::new_multi_thread();
//! builder.worker_threads(2);
//! probe.instrument(&mut builder); // task hooks with `--cfg tokio_unstable`, else a no-op
//! let rt = builder.build().unwrap();
//! // Without tokio_unstable the hooks are not there: sample the runtime from outside instead.
//! let _sampler = (Probe::source() == Source::Sampler).then(|| probe.start_sampler(rt.handle()));
//! // (`Some(Err(_))`: the OS refused the sampler's thread.)
//!
//! rt.block_on(async {
//!     for _ in 0..100 {
//!         tokio::spawn(async { tokio::task::yield_now().await }).await.unwrap();
//!     }
//! });
//! probe.rotate(); // normally every `tick` (100 ms), from a thread outside the runtime
//! let w = probe.window();
//! if let Some(p99) = w.queue_latency.all.p99 {
//!     println!("p99 scheduling latency over {} ticks: {p99:?}", w.intervals);
//! }
//! ```
//!
//! # What is measured
//!
//! * **Queue latency** (scheduling latency): time from a task becoming runnable (spawned or
//!   woken) to the start of its poll. This is what CPU-heavy background work inflates and what a
//!   controller steers by.
//! * **Poll time**: how long one poll of a task ran.
//!
//! Each is kept separately for *foreground* and *elastic* polls ([`Split`]).
//!
//! * **Outliers** (with [`ProbeConfig::outlier_threshold`]): polls and foreground waits over a
//!   threshold, each with its task's spawn site, task id, duration and time, and for a wait the
//!   spawn sites of the polls that held its worker meanwhile; [`Probe::outliers`] groups the
//!   window's by spawn site. Kept per worker in a bounded ring without a lock; below the
//!   threshold a poll pays a comparison.
//!
//! # Sources and their precision
//!
//! [`Probe::source`] tells which one this build uses.
//!
//! * [`Source::Hooks`] (built with `--cfg tokio_unstable`): [`Probe::instrument`] installs
//!   tokio's `on_before_task_poll` / `on_after_task_poll` hooks and turns on
//!   `track_task_schedule_latency`. **Every** poll of every task on the runtime is a sample.
//!   Queue latency is tokio's own `TaskMeta::schedule_latency()`: from the task's latest
//!   transition to *scheduled* to just before the poll, whichever queue it waited in (LIFO slot,
//!   local queue, injection queue, stolen). Poll time is measured between the two hooks. Both are
//!   exact up to the clock read cost (tens of ns) and the histogram precision.
//! * [`Source::Sampler`] (without `tokio_unstable`): [`Probe::start_sampler`] runs a thread
//!   that spawns a tiny probe task onto the runtime every ~1 ms. Once running on a worker, the
//!   task wakes itself and returns `Pending` once, which puts it at the back of that worker's
//!   local run queue, and records the time until its next poll as a foreground queue latency:
//!   the same quantity the hooks measure for a task re-scheduled from a worker. It is a *sample*
//!   (up to ~1000/s, independent of the real load; fewer when the sampler thread itself is
//!   starved of CPU), so spikes shorter than a few ms can be missed and the p99 of a 2.5 s window
//!   rests on a few thousand samples at most. It does not see the LIFO slot (tasks woken by a task
//!   on the same worker usually wait less), and it lands on whichever worker picks it from the
//!   injection queue, which may be idle while another is backed up. The spawn → first poll time
//!   is deliberately *not* recorded: in an idle runtime it is dominated by the OS waking a parked
//!   worker for the sampler's own task (milliseconds on a loaded machine), which a task made
//!   runnable on an awake worker does not pay. There is no poll time from the sampler: elastic
//!   wrappers report the poll times they measure themselves through [`Probe::record_poll`]. If
//!   every worker is blocked, probe tasks do not run and the window gets *no* new samples (the
//!   stall is reported late, when they finally run).
//!
//! # Elastic vs foreground: a thread-local flag, not a set of task ids
//!
//! A poll is *elastic* when the elastic wrapper (the `pacer` crate's `Paced`) calls
//! [`mark_elastic_poll`] while it is being polled; the after-poll hook takes (reads and clears)
//! that thread-local flag. The alternative, looking up the polled task's `tokio::task::Id` in a
//! shared set of elastic ids, would put a lock or a shared cache line on every poll of every task
//! on the runtime; the flag is one thread-local write in the elastic poll and one thread-local
//! read in the hook, and costs foreground polls nothing. A task is elastic per poll: a task that
//! is only sometimes polled through an elastic wrapper is only sometimes elastic.
//!
//! # Cost and concurrency
//!
//! Per poll (hooks): one thread-local access in each hook, one histogram bucket increment for
//! the queue latency (tokio reads the clock twice for it, at schedule and at poll, on its own),
//! no lock, no atomic read-modify-write, no allocation in steady state. Poll time is measured on
//! one poll in [`ProbeConfig::poll_time_every`] (8 by default): two reads of the TSC (through
//! `quanta`) and a second bucket increment on that poll.
//!
//! Samples go to a per-worker slot (`tokio::runtime::worker_index() % 64`), allocated on the
//! worker's first sample. A slot is owned by the first thread that records into it (released
//! when that thread exits): only its owner writes it, so a bucket increment is a relaxed load and
//! store of a counter in a cache line no other worker writes. [`Probe::rotate`] never writes a
//! slot and never waits for a worker: it reads the cumulative counters and records the
//! difference since its previous read into the interval (every sample is counted exactly once;
//! one recorded during a rotation lands in that interval or the next). Threads that own no slot
//! (callers outside a runtime, workers of a second runtime whose index collides) share an
//! overflow slot with `fetch_add` counters: correct, only slower. The counters use
//! `hdrhistogram`'s own bucket layout, and the intervals and the window are bounded
//! `hdrhistogram::Histogram`s ([`ProbeConfig`] bounds): out-of-range values are clamped, never
//! resized.
//!
//! # Windows
//!
//! [`Probe::rotate`] is called once per `tick` by whoever drives the probe (the pacer's governor
//! thread, a test by hand): it closes the current interval of every slot, merges them into one
//! interval and pushes it into a ring of `ceil(window / tick)` intervals, subtracting the interval
//! that falls out from a running window sum. [`Probe::window`] summarises that sum: cheap (a few
//! histogram scans) and always available. An empty window answers `count == 0` and `None`
//! percentiles, never 0 or NaN.
//!
//! # Waits tokio's clock does not see
//!
//! * [`IoProbe`]: from a canary becoming readable until the reader task is polled, through the
//!   runtime's own I/O driver (a timer expiry or a datagram every ~1 ms), in a window rotated
//!   like the probe's.
//! * [`RunQueueStats`]: time the threads of a [`ThreadRegistry`] spent runnable in the OS run
//!   queue (Linux per-thread `schedstat`), per tick, per thread and summed.
//! * [`WorkerStacking`]: whether two or more of a registry's workers are runnable on one CPU
//!   (Linux per-thread `stat`), read on demand by idle-priority threads.

// One `unsafe` block: registering the I/O probe's timerfd with tokio (io_probe/timer.rs).
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// Module layering: each module uses only the modules on its right, none uses the crate root, so
// there is no import cycle.
//   probe   -> config, hooks, outliers, sampler, shared, slot, window
//   io_probe -> config, runtime_load, shared, slot, window
//   runtime_load: no crate imports
//   run_queue -> threads
//   stacking -> run_queue, threads
//   threads: no crate imports
//   hooks   -> shared
//   sampler -> shared
//   shared  -> config, outliers, sites, slot, window
//   window  -> hists, slot
//   slot    -> hists, outliers
//   outliers -> sites
//   sites: no crate imports
//   config, hists, cgroup: no crate imports
mod cgroup;
mod config;
mod hists;
#[cfg(tokio_unstable)]
mod hooks;
mod io_probe;
mod outliers;
mod poll_state;
mod probe;
mod run_queue;
mod runtime_load;
mod sampler;
mod shared;
mod sites;
mod slot;
mod stacking;
#[cfg(feature = "test-util")]
pub mod testing;
mod threads;
mod window;

pub use cgroup::{
    cpu_affinity, cpu_affinity_in, cpu_quota, cpu_quota_at, parse_cpu_list, CgroupVersion,
    CpuQuota, CpuThrottling, NoQuota, QuotaReading, QuotaSource,
};
pub use config::ProbeConfig;
pub use elastic_cpu_core::SettingError;
pub use io_probe::{IoCanary, IoProbe, IoProbeConfig, IoProbeError};
pub use outliers::{site_label, Outlier, Outliers, SiteOutliers};
pub use poll_state::mark_elastic_poll;
pub use probe::{Probe, Source};
pub use run_queue::{RunQueueStats, RunQueueTick, RunQueueUnavailable, ThreadWait};
pub use sampler::{Sampler, QUIET_SAMPLE_PERIOD};
pub use stacking::{Stacking, WorkerStacking};
pub use threads::{current_tid, ThreadRegistration, ThreadRegistry, ThreadRole};
pub use window::{Split, Summary, Window};
