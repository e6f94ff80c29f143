//! The one place the demo touches the library: building the runtime under test through
//! `Elastic::runtime` (so every phase measures scheduling latency the same way), reading the
//! snapshot, pacing a stream.

use elastic_cpu::prelude::*;
use elastic_cpu::settings::{Brake, Enforcement, Inputs, OutlierThreshold, Placement};
use elastic_cpu::snapshot::SignalSource;
use elastic_cpu::{Elastic, ElasticBuilder, Profile};
use elastic_cpu_examples::fg;
use futures_util::stream::Stream;
use std::time::Duration;
use tokio::runtime::Runtime;

use crate::args::ProfileSpec;

/// How the phase's runtime is governed.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Probe only: nothing is paced.
    Unpaced,
    /// Controller off, static share.
    Fixed(f64),
    /// Controller on.
    Controlled {
        profile: ProfileSpec,
        initial: Option<f64>,
    },
    /// Every library setting at its default, as the README's quick start builds it.
    Library,
}

/// The probe window of a phase in `mode`: its profile's window.
pub fn probe_window(mode: Mode) -> Duration {
    match mode {
        Mode::Controlled {
            profile: ProfileSpec::Cockroach,
            ..
        } => Profile::Cockroach.steps().window,
        _ => Profile::Default.steps().window,
    }
}

/// Library settings the flags can override (None: the library's default).
#[derive(Clone, Copy, Debug, Default)]
pub struct Tuning {
    pub target_us: Option<u64>,
    pub slice_ms: Option<u64>,
    pub quantum_us: Option<u64>,
    pub brake_us: Option<Option<u64>>,
    /// The outlier trap's threshold (None: the library's).
    pub outlier_us: Option<u64>,
    /// The library's cgroup throttling signal (on by default).
    pub throttle_signal: bool,
    /// The library's quota headroom cap (on by default).
    pub quota_headroom: bool,
    /// The library's I/O wake-up and run-queue signals (on by default).
    pub io_signal: bool,
    pub run_queue_signal: bool,
    /// The library's OS yield at each quantum (on by default).
    pub os_yield: bool,
    /// The idle pool's moving of stacked workers (on by default).
    pub unstack: bool,
    /// Build the service's runtime as plain tokio (as `#[tokio::main]` does) and `attach` it,
    /// instead of building it through `elastic.runtime(..)`.
    pub attach: bool,
}

/// What the monitor reads every sample.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snap {
    /// The elastic limit (None in phases that pace nothing).
    pub limit: Option<f64>,
    /// Window p99 of scheduling latency, all tasks (what the governor steers by).
    pub sched_p99_us: Option<f64>,
    /// The same, foreground tasks only / elastic polls only.
    pub sched_fg_p99_us: Option<f64>,
    pub sched_elastic_p99_us: Option<f64>,
    /// Inside a CPU quota: the headroom cap on elastic work, as a share of the bucket's CPUs
    /// (same scale as `limit`; None without a quota or a reading).
    pub headroom_share: Option<f64>,
    /// Both classes' limits whatever the phase's work ran in (None where nothing is paced or
    /// there is no idle pool): the elastic mix runs in both.
    pub own_share: Option<f64>,
    pub idle_share: Option<f64>,
    /// The governor's signal and its components.
    pub signal: SignalSnap,
    /// What the controller compares the signal with (with a measured target, the latency
    /// elastic work may add).
    pub target_us: Option<f64>,
}

/// What the governor stepped on, and each component of it (which one held the elastic work
/// back).
#[derive(Clone, Copy, Debug, Default)]
pub struct SignalSnap {
    /// The largest component: what the controller compared with its target.
    pub signal_p99_us: Option<f64>,
    /// Which component that was (sched, io, run-queue, throttled, none).
    pub source: &'static str,
    /// The I/O wake-up probe's window p99.
    pub io_p99_us: Option<f64>,
    /// Mean OS run-queue wait per timeslice of the runtime's threads, over the window.
    pub rq_delay_us: Option<f64>,
    /// The same for the process's threads beside the runtime (the load generator's here).
    pub bystander_delay_us: Option<f64>,
    /// The quiet readings of both (elastic work held): what the library measures the
    /// additions from.
    pub quiet_rq_delay_us: Option<f64>,
    pub quiet_bystander_delay_us: Option<f64>,
    /// Run-queue wait over the last tick as a share of it: the runtime's threads, and the
    /// threads running elastic work (`pace_blocking`).
    pub rq_wait: Option<f64>,
    pub elastic_rq_wait: Option<f64>,
}

/// The runtime under test plus its elastic-CPU handle.
pub struct Control {
    pub rt: Runtime,
    elastic: Elastic,
    paced: bool,
}

impl Control {
    pub fn new(workers: usize, mode: Mode, tune: Tuning) -> Result<Control, String> {
        let mut b = Elastic::builder();
        if let Some(us) = tune.outlier_us {
            b = b.outlier_threshold(OutlierThreshold::At(Duration::from_micros(us)));
        }
        if let Mode::Library = mode {
            if !tune.unstack {
                b = b.enforcement(Enforcement::default().unstack_workers(false));
            }
            return Control::with(workers, b, true, tune.attach);
        }
        match mode {
            Mode::Unpaced | Mode::Library => {}
            Mode::Fixed(l) => b = b.fixed_share(l),
            Mode::Controlled { profile, initial } => {
                b = b.profile(match profile {
                    ProfileSpec::Default => Profile::Default,
                    ProfileSpec::Cockroach => Profile::Cockroach,
                    ProfileSpec::Delta(d) => {
                        Profile::Custom(Profile::Default.steps().delta_per_sec(d))
                    }
                });
                if let Some(i) = initial {
                    b = b.initial_share(i);
                }
            }
        }
        if let Some(t) = tune.target_us {
            b = b.target_p99(Duration::from_micros(t));
        }
        match tune.brake_us {
            Some(Some(us)) => b = b.brake(Brake::At(Duration::from_micros(us))),
            Some(None) => b = b.brake(Brake::Off),
            None => {}
        }
        let defaults = Enforcement::default();
        b = b
            .enforcement(
                defaults
                    .slice(tune.slice_ms.map_or(defaults.slice, Duration::from_millis))
                    .quantum(
                        tune.quantum_us
                            .map_or(defaults.quantum, Duration::from_micros),
                    )
                    .os_yield(tune.os_yield)
                    .unstack_workers(tune.unstack),
            )
            .inputs(
                Inputs::default()
                    .io_wakeup(tune.io_signal)
                    .run_queue(tune.run_queue_signal)
                    .throttling(tune.throttle_signal)
                    .quota_headroom(tune.quota_headroom),
            );
        Control::with(workers, b, !matches!(mode, Mode::Unpaced), tune.attach)
    }

    fn with(
        workers: usize,
        b: ElasticBuilder,
        paced: bool,
        attach: bool,
    ) -> Result<Control, String> {
        let elastic = b.build().map_err(|e| format!("elastic: {e}"))?;
        let rt = if attach {
            let rt = (fg::runtime_builder(workers).build()).map_err(|e| format!("runtime: {e}"))?;
            (elastic.attach(rt.handle())).map_err(|e| format!("attach: {e}"))?;
            (elastic.start_io_probe(rt.handle())).map_err(|e| format!("I/O probe: {e}"))?;
            rt
        } else {
            (elastic.runtime(fg::runtime_builder(workers)).build())
                .map_err(|e| format!("runtime: {e}"))?
        };
        Ok(Control { rt, elastic, paced })
    }

    /// Spawn elastic work as the README's quick start does: `elastic.spawn`, which places it.
    pub fn spawn<F>(&self, fut: F) -> Result<(), String>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let _in_rt = self.rt.enter();
        self.elastic.spawn(fut).map(drop).map_err(|e| e.to_string())
    }

    /// Blocking elastic work where `spawn` puts elastic work.
    pub fn spawn_blocking(&self, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
        let _in_rt = self.rt.enter();
        (self.elastic.spawn_blocking(f).map(drop)).map_err(|e| e.to_string())
    }

    pub fn snapshot(&self) -> Snap {
        self.snap_of(&self.elastic.snapshot())
    }

    /// [`snapshot`](Self::snapshot) from a library snapshot already taken.
    pub fn snap_of(&self, s: &elastic_cpu::Snapshot) -> Snap {
        let us = |d: Option<Duration>| d.map(|d| d.as_nanos() as f64 / 1e3);
        Snap {
            // On the idle pool the scan runs in its class: its limit is the one that paces it.
            limit: self.paced.then_some(match s.placement {
                Placement::IdlePool => s.idle_share.unwrap_or(s.share),
                Placement::Runtime => s.share,
                // Not placed by `spawn`: the pool is the one the demo made, if any.
                _ => s.idle_share.unwrap_or(s.share),
            }),
            sched_p99_us: us(s.sched_p99),
            sched_fg_p99_us: us(s.window.queue_latency.foreground.p99),
            sched_elastic_p99_us: us(s.window.queue_latency.elastic.p99),
            headroom_share: (s.quota_headroom)
                .filter(|_| self.paced && s.cpus > 0.0)
                .map(|cap| (cap / s.cpus).min(1.0)),
            own_share: self.paced.then_some(s.share),
            idle_share: s.idle_share.filter(|_| self.paced),
            signal: SignalSnap {
                signal_p99_us: us(s.signal_p99.filter(|d| *d != Duration::MAX)),
                source: SignalSource::name(s.signal_source),
                io_p99_us: us(s.io_p99),
                rq_delay_us: us(s.run_queue_delay),
                bystander_delay_us: us(s.bystander_delay),
                quiet_rq_delay_us: us(s.quiet_run_queue_delay),
                quiet_bystander_delay_us: us(s.quiet_bystander_delay),
                rq_wait: s.run_queue_wait,
                elastic_rq_wait: s.elastic_run_queue_wait,
            },
            target_us: self.paced.then(|| s.target.as_nanos() as f64 / 1e3),
        }
    }

    /// The full library snapshot.
    pub fn full_snapshot(&self) -> elastic_cpu::Snapshot {
        self.elastic.snapshot()
    }

    /// CPU time paced work ran: the own class, the idle pool's and the classes made with
    /// `class` (charged so far).
    pub fn used(&self) -> Duration {
        let s = self.elastic.snapshot();
        let classes: Duration = (s.classes.iter())
            .filter(|c| &*c.name != elastic_cpu::settings::DEFAULT_CLASS)
            .map(|c| c.cpu)
            .sum();
        s.used + Duration::from_nanos(s.idle_queue.map_or(0, |q| q.used_nanos)) + classes
    }

    /// Wrap a stream so it is paced by this runtime's elastic handle.
    pub fn paced<S>(&self, s: S) -> elastic_cpu::PacedStream<S>
    where
        S: Stream,
    {
        s.paced(&self.elastic)
    }

    /// A class of elastic work of this runtime's elastic handle.
    pub fn class(&self, settings: elastic_cpu::settings::ClassSettings) -> Result<Elastic, String> {
        self.elastic
            .class(settings)
            .map_err(|e| format!("class: {e}"))
    }

    /// A `Pacer` for one loop of elastic work, paced by this runtime's elastic handle.
    pub fn pacer(&self) -> elastic_cpu::Pacer {
        self.elastic.pacer()
    }

    /// The library's idle-priority pool for this runtime's elastic handle.
    pub fn idle_runtime(&self, workers: usize) -> Result<elastic_cpu::idle::IdleRuntime, String> {
        self.elastic
            .idle_runtime(workers)
            .map_err(|e| format!("idle runtime: {e}"))
    }

    pub fn shutdown(self) {
        self.rt.shutdown_timeout(Duration::from_secs(3));
        drop(self.elastic);
    }
}
