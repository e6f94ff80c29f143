//! The governor as its thread and the `Elastic`'s handles share it.

#[cfg(feature = "test-util")]
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use elastic_cpu_core::SettingError;
use elastic_cpu_probe::{ProbeConfig, Window};
use tokio::runtime::Handle;

use super::Governor;
#[cfg(feature = "test-util")]
use super::GovernorEnd;
use crate::grant::class_state::ClassState;
use crate::record::TickRecord;
use crate::snapshot::{GovernorState, ProbeSource, Snapshot};

/// The governor as its thread and the `Elastic` handles share it: behind a lock, with the
/// record it published last readable without it, so a snapshot never waits for a tick.
pub(crate) struct Control {
    governor: Mutex<Governor>,
    record: Mutex<Arc<TickRecord>>,
    /// The idle class while it lives: the one `idle_class` hands out again, and what snapshots
    /// read (without the governor's lock). Always empty without the idle pool.
    idle: Mutex<Weak<ClassState>>,
    /// The governor thread, until it is joined.
    pub(super) thread: Mutex<Option<JoinHandle<()>>>,
    /// Set by [`shutdown`](Self::shutdown): the thread ends at its next wake-up.
    stop: AtomicBool,
    /// [`GovernorState`] as a number: `Running` until the governor stops, then why.
    state: AtomicU8,
    /// Ticks whose metrics export panicked.
    recorder_panics: AtomicU64,
    /// A fault the governor thread is to end with at its next wake-up (test plumbing).
    #[cfg(feature = "test-util")]
    fault: Mutex<Option<GovernorEnd>>,
}

/// [`GovernorState`] to and from the number [`Control::state`] holds.
fn state_code(state: GovernorState) -> u8 {
    match state {
        GovernorState::Running => 0,
        GovernorState::ShutDown => 1,
        GovernorState::Exited => 2,
        GovernorState::Panicked => 3,
    }
}

fn state_of(code: u8) -> GovernorState {
    match code {
        0 => GovernorState::Running,
        1 => GovernorState::ShutDown,
        2 => GovernorState::Exited,
        _ => GovernorState::Panicked,
    }
}

impl Control {
    pub(crate) fn new(governor: Governor) -> Control {
        let record = Arc::new(governor.record());
        Control {
            governor: Mutex::new(governor),
            record: Mutex::new(record),
            idle: Mutex::new(Weak::new()),
            thread: Mutex::new(None),
            stop: AtomicBool::new(false),
            state: AtomicU8::new(state_code(GovernorState::Running)),
            recorder_panics: AtomicU64::new(0),
            #[cfg(feature = "test-util")]
            fault: Mutex::new(None),
        }
    }

    /// Lock the governor; a panic in an earlier tick leaves its state usable.
    fn lock(&self) -> MutexGuard<'_, Governor> {
        self.governor.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, record: TickRecord) {
        *self.record.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(record);
    }

    /// Run `f` on the governor, then publish its record (outside the lock).
    fn change<T>(&self, f: impl FnOnce(&mut Governor) -> T) -> T {
        let mut g = self.lock();
        let out = f(&mut g);
        let record = g.record();
        drop(g);
        self.publish(record);
        out
    }

    /// The record published last.
    pub(crate) fn record(&self) -> Arc<TickRecord> {
        self.record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One governor tick, then the metrics export (outside the lock: an exporter may call back
    /// into the handle).
    pub(crate) fn tick(&self, shared: &ClassState, period: Duration) {
        let mut g = self.lock();
        let record = g.tick(period);
        let steering = g.steering();
        #[cfg(feature = "metrics")]
        let queues = g.classes.queues();
        drop(g);
        // Like the I/O canaries, the sampler's tasks matter only while something steers.
        shared.set_samplers_quiet(!steering);
        self.publish(record);
        #[cfg(feature = "metrics")]
        {
            let snapshot = self.snapshot(shared, shared.probe.window());
            self.export(|| {
                crate::metrics::emit(&snapshot);
                for queue in &queues {
                    queue.export();
                }
            });
        }
    }

    /// Run `f`, which calls the application's `metrics` recorder: a panic there costs this
    /// export, not the governor, and is counted ([`Snapshot::recorder_panics`]). Unwind safe
    /// enough: `f` reads a snapshot and the queues' counters, each under its own short lock,
    /// and holds none of them while it calls the recorder. A program built with
    /// `panic = "abort"` aborts there, as on any panic.
    #[cfg(feature = "metrics")]
    fn export(&self, f: impl FnOnce()) {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
            self.recorder_panics.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether the governor still steers, and if not, why it stopped.
    pub(crate) fn state(&self) -> GovernorState {
        state_of(self.state.load(Ordering::Acquire))
    }

    /// The governor has stopped, for `why` (the first reason stays): close every class (each
    /// waiter ends, no brake holds from now on, classes made later are closed as they are
    /// made), then say so (the snapshot's state, so one that says it has stopped finds
    /// everything closed; `elastic_cpu_governor_up` at 0). Runs on the governor thread as it
    /// ends, a panic's unwinding included, and at [`shutdown`](Self::shutdown).
    pub(crate) fn end(&self, why: GovernorState) {
        self.change(Governor::close);
        let _ = self.state.compare_exchange(
            state_code(GovernorState::Running),
            state_code(why),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        #[cfg(feature = "metrics")]
        self.export(crate::metrics::governor_down);
    }

    /// Make the governor thread end at its next wake-up, after that wake-up's tick or brake
    /// step (test plumbing: `testing::Drive::end_governor`).
    #[cfg(feature = "test-util")]
    pub(crate) fn inject(&self, end: GovernorEnd) {
        *self.fault.lock().unwrap_or_else(|p| p.into_inner()) = Some(end);
    }

    /// The fault injected for the thread to end with, if any.
    #[cfg(feature = "test-util")]
    pub(crate) fn fault(&self) -> Option<GovernorEnd> {
        *self.fault.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Governor::brake_step`]: returns when to look again before the next tick.
    pub(crate) fn brake_step(&self) -> Option<Duration> {
        let mut g = self.lock();
        let was = g.holding();
        let recheck = g.brake_step();
        if was != g.holding() {
            let record = g.record();
            drop(g);
            self.publish(record);
        }
        recheck
    }

    /// [`Governor::recheck`].
    pub(crate) fn recheck(&self) -> Option<Duration> {
        self.lock().recheck()
    }

    /// A runtime of `workers` threads is attached: size the rates for the CPUs it gives
    /// (unless the builder fixed them) and, with a quota, watch it; re-read both every
    /// `quota_reread` from now on.
    pub(crate) fn attach(&self, workers: usize) {
        let quota = self.change(|g| {
            g.attach(workers);
            g.host.quota_cpus().is_some()
        });
        if quota {
            // The quota brake may want its first reading before the next tick.
            let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(handle) = thread.as_ref() {
                handle.thread().unpark();
            }
        }
    }

    /// Driven by hand: no governor thread, the test drives the probe.
    pub(crate) fn is_manual(&self) -> bool {
        self.lock().clock.is_manual()
    }

    /// Whether the I/O wake-up input is on.
    pub(crate) fn io_input(&self) -> bool {
        self.lock().sources.io.availability() != crate::signal::readings::Availability::Off
    }

    /// Treat the cgroup in `dir` as the process's, with a quota of `cpus`.
    #[cfg(feature = "test-util")]
    pub(crate) fn watch_quota(&self, dir: PathBuf, cpus: f64, period: Duration) {
        self.lock().watch_quota(dir, cpus, period);
    }

    /// Watch the cgroup in `dir` for throttling only.
    #[cfg(feature = "test-util")]
    pub(crate) fn watch_throttling(&self, dir: PathBuf) {
        self.change(|g| g.watch_throttling(dir));
    }

    /// Start the I/O wake-up probe on `handle`'s runtime.
    pub(crate) fn start_io_probe(
        &self,
        handle: &Handle,
        probe: &ProbeConfig,
    ) -> Result<(), elastic_cpu_probe::IoProbeError> {
        self.change(|g| {
            let started = g.sources.io.start(handle, probe);
            g.last_signal.reading.io = g.sources.io.availability();
            started
        })
    }

    cfg_idle_pool! {
        /// The idle class of `parent`: the one made before while it lives, else a new one
        /// ([`Governor::idle_class`]).
        pub(crate) fn idle_class(
            &self,
            parent: &Arc<ClassState>,
        ) -> Result<Arc<ClassState>, SettingError> {
            self.change(|g| {
                let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(class) = idle.upgrade() {
                    return Ok(class);
                }
                let class = g.idle_class(parent)?;
                *idle = Arc::downgrade(&class);
                Ok(class)
            })
        }
    }

    cfg_gate! {
        /// [`Governor::add_gate`].
        pub(crate) fn add_gate(
            &self,
            shared: &ClassState,
            settings: &crate::gate::GateSettings,
        ) -> Result<Arc<crate::gate::shared::GateShared>, SettingError> {
            self.change(|g| g.add_gate(shared, settings))
        }
    }

    /// [`Governor::set_share`].
    pub(crate) fn set_share(&self, min: f64, max: f64) -> Result<(), SettingError> {
        self.change(|g| g.set_share(min, max))
    }

    /// [`Governor::set_paused`].
    pub(crate) fn set_paused(&self, on: bool) {
        self.change(|g| g.set_paused(on));
    }

    /// [`Governor::add_member`].
    pub(crate) fn add_member(
        &self,
        root: &Arc<ClassState>,
        settings: &crate::settings::ClassSettings,
    ) -> Result<Arc<ClassState>, SettingError> {
        self.change(|g| g.add_member(root, settings))
    }

    /// Everything at once: the record, the probe `window`, the queue ledgers.
    pub(crate) fn snapshot(&self, shared: &ClassState, window: Window) -> Snapshot {
        let idle = (self.idle.lock().unwrap_or_else(|p| p.into_inner())).upgrade();
        let (idle_queue, idle_unstacked) = idle.map_or((None, 0), |class| {
            let moved = class.unstack.as_ref().map_or(0, |u| u.moved());
            (Some(class.queue.snapshot()), moved)
        });
        let mut s = Snapshot::new(
            &self.record(),
            window,
            shared.queue.snapshot(),
            idle_queue,
            shared.braked(),
            shared.os_yields.load(Ordering::Relaxed),
            shared.long_polls.count(),
        );
        s.outliers = shared.probe.outliers();
        s.probe_source = if shared.probe.has_hooks() {
            ProbeSource::TaskHooks
        } else if shared.has_sampler() {
            ProbeSource::Sampler
        } else {
            ProbeSource::None
        };
        s.idle_unstacked = idle_unstacked;
        s.governor = self.state();
        s.recorder_panics = self.recorder_panics.load(Ordering::Relaxed);
        s
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Stop the governor thread and join it, close every class, stop the I/O probe.
    pub(crate) fn shutdown(&self) {
        self.stop.store(true, Ordering::Release);
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            // An exporter called from the governor's own tick cannot join itself.
            if t.thread().id() != std::thread::current().id() {
                t.thread().unpark();
                let _ = t.join();
            }
        }
        self.end(GovernorState::ShutDown);
    }
}
