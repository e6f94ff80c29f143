//! The [`Probe`] itself: created from a [`ProbeConfig`], installed on a runtime, rotated and read.

use std::fmt;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::Thread;
use std::time::Duration;

use elastic_cpu_core::SettingError;
use hdrhistogram::Histogram;

use crate::config::ProbeConfig;
#[cfg(tokio_unstable)]
use crate::hooks;
use crate::outliers::{Outliers, TrapWindow};
use crate::sampler::Sampler;
use crate::shared::{nanos, ProbeState, SLOTS};
use crate::slot::Layout;
use crate::threads::ThreadRegistry;
use crate::window::{Window, WindowState};

/// Where the probe's queue latency comes from in this build.
///
/// ```
/// use elastic_cpu_probe::{Probe, Source};
/// match Probe::source() {
///     Source::Hooks => println!("every poll is measured by tokio task hooks"),
///     Source::Sampler => println!("call Probe::start_sampler for a sampled signal"),
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// tokio task poll hooks (`--cfg tokio_unstable`): every poll, exact schedule latency and
    /// poll time.
    Hooks,
    /// The sampling fallback ([`Probe::start_sampler`]): ~1000 probe tasks a second, each
    /// timing one wait at the back of a worker's run queue; queue latency only.
    Sampler,
}

/// The scheduling-latency probe. Cheap to clone (an `Arc`); every clone records into and reads
/// from the same histograms.
///
/// See the [crate docs](crate) for an end-to-end example.
///
/// ```
/// use elastic_cpu_probe::{Probe, ProbeConfig};
/// use std::time::Duration;
///
/// let probe = Probe::new(ProbeConfig::default()).unwrap();
/// probe.record_poll(Some(Duration::from_millis(3)), Some(Duration::from_micros(50)), true);
/// probe.rotate();
/// let w = probe.window();
/// assert_eq!(w.queue_latency.elastic.count, 1);
/// assert_eq!(w.queue_latency.foreground.count, 0);
/// ```
#[derive(Clone)]
pub struct Probe {
    shared: Arc<ProbeState>,
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probe")
            .field("config", &self.shared.config)
            .field("source", &Probe::source())
            .finish_non_exhaustive()
    }
}

impl Probe {
    /// Creates a probe; fails with the first bad setting.
    ///
    /// ```
    /// use elastic_cpu_probe::{Probe, ProbeConfig};
    /// use std::time::Duration;
    ///
    /// assert!(Probe::new(ProbeConfig::default()).is_ok());
    /// let short = ProbeConfig { window: Duration::from_millis(10), ..ProbeConfig::default() };
    /// assert_eq!(Probe::new(short).unwrap_err().setting, "window");
    /// ```
    pub fn new(config: ProbeConfig) -> Result<Probe, SettingError> {
        config.validate()?;
        let template = Histogram::<u64>::new_with_bounds(
            config.lowest_ns(),
            config.highest_ns(),
            config.significant_figures,
        )
        .expect("validated bounds make a histogram");
        let layout = Layout::new(
            &template,
            config.lowest_ns(),
            config.highest_ns(),
            config.significant_figures,
        );
        let slots = (0..=SLOTS).map(|_| OnceLock::new()).collect();
        let window = Mutex::new(WindowState::new(&template, config.intervals()));
        let quiet = Mutex::new(WindowState::new(&template, config.intervals()));
        // `alarm_at` > 0 (validated): `nanos(at) - 1` cannot underflow.
        let alarm_above = config.alarm_at.map_or(u64::MAX, |at| nanos(at) - 1);
        let outliers = Mutex::new(TrapWindow::new(config.intervals()));
        let threshold = config.outlier_threshold;
        let probe = Probe {
            shared: Arc::new(ProbeState {
                id: crate::shared::next_id(),
                config,
                layout,
                slots,
                window,
                quiet,
                alarm_above,
                alarms: AtomicU64::new(0),
                raised: AtomicBool::new(false),
                listener: Mutex::new(None),
                outlier_above: AtomicU64::new(u64::MAX),
                hooked: AtomicBool::new(false),
                born: quanta::Instant::now(),
                outliers,
            }),
        };
        probe.set_outlier_threshold(threshold);
        Ok(probe)
    }

    /// The settings this probe was built with.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// assert_eq!(probe.config(), &ProbeConfig::default());
    /// ```
    pub fn config(&self) -> &ProbeConfig {
        &self.shared.config
    }

    /// Where queue latency comes from in this build: [`Source::Hooks`] when compiled with
    /// `--cfg tokio_unstable`, [`Source::Sampler`] otherwise. See the [crate docs](crate) for
    /// the precision of each.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, Source};
    /// if Probe::source() == Source::Sampler {
    ///     println!("no task hooks in this build: use Probe::start_sampler");
    /// }
    /// ```
    pub const fn source() -> Source {
        if cfg!(tokio_unstable) {
            Source::Hooks
        } else {
            Source::Sampler
        }
    }

    /// Installs the probe on a runtime builder (multi-thread or current-thread).
    ///
    /// With `--cfg tokio_unstable`: turns on `track_task_schedule_latency` and sets
    /// `on_before_task_poll` / `on_after_task_poll` (replacing poll hooks set before; set yours
    /// after this call and you replace the probe's). Without it: does nothing — use
    /// [`Probe::start_sampler`] on the built runtime instead.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// let rt = probe
    ///     .instrument(&mut tokio::runtime::Builder::new_current_thread())
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(async { tokio::spawn(async {}).await.unwrap() });
    /// ```
    pub fn instrument<'a>(
        &self,
        builder: &'a mut tokio::runtime::Builder,
    ) -> &'a mut tokio::runtime::Builder {
        #[cfg(tokio_unstable)]
        {
            // Calibrate the poll-time clock here, not in the first poll's hook.
            let _ = quanta::Instant::now();
            self.shared.hooked.store(true, Ordering::Relaxed);
            let shared = self.shared.clone();
            builder
                .track_task_schedule_latency()
                .on_before_task_poll({
                    let every = self.shared.config.poll_time_every;
                    move |_meta| hooks::before_poll(every)
                })
                .on_after_task_poll(move |meta| hooks::after_poll(&shared, meta))
        }
        #[cfg(not(tokio_unstable))]
        {
            builder
        }
    }

    /// Whether [`instrument`](Self::instrument) has installed the task hooks on a builder:
    /// never without `tokio_unstable`. A runtime built without them (`#[tokio::main]`, a
    /// framework's) is measured by [`start_sampler`](Self::start_sampler) instead.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig, Source};
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// assert!(!probe.has_hooks());
    /// probe.instrument(&mut tokio::runtime::Builder::new_current_thread());
    /// assert_eq!(probe.has_hooks(), Probe::source() == Source::Hooks);
    /// ```
    pub fn has_hooks(&self) -> bool {
        self.shared.hooked.load(Ordering::Relaxed)
    }

    /// Starts the sampling fallback on the runtime behind `handle`: a dedicated OS thread spawns
    /// a tiny probe task every ~1 ms; the task re-queues itself once at the back of its worker's
    /// run queue and records the wait as a foreground queue latency (see the [crate docs](crate)
    /// for why and how precise).
    ///
    /// Never blocks a worker (the probe task only re-queues once and records). Stops when the returned [`Sampler`]
    /// is dropped, or by itself once the runtime has shut down. With hooks it still works (an
    /// extra signal; its tasks' polls are then also seen by the hooks, as tiny foreground polls).
    ///
    /// Fails with the OS's error where it refuses the thread (a pids or thread limit in a
    /// container: `EAGAIN`, [`WouldBlock`](std::io::ErrorKind::WouldBlock)).
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build()?;
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// let sampler = probe.start_sampler(rt.handle())?;
    /// assert!(sampler.is_running());
    /// drop(sampler);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn start_sampler(&self, handle: &tokio::runtime::Handle) -> std::io::Result<Sampler> {
        Sampler::start(&self.shared, handle, None)
    }

    /// [`start_sampler`](Self::start_sampler), which also registers each worker its probe
    /// tasks run on in `registry` as a [`ThreadRole::Worker`](crate::ThreadRole::Worker)
    /// ([`ThreadRegistry::register_current_worker`]), so a
    /// [`RunQueueStats`](crate::RunQueueStats) reads the run-queue wait of a runtime built
    /// without [`ThreadRegistry::instrument`]. A worker is registered once a probe task has run
    /// on it (under load every worker takes from the shared queue; on an idle runtime one may
    /// do all the sampling), and unregistered when the sampler sees the runtime gone.
    ///
    /// ```
    /// use elastic_cpu_probe::{Probe, ProbeConfig, ThreadRegistry};
    ///
    /// let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// let registry = ThreadRegistry::new();
    /// let sampler = probe.start_sampler_registering(rt.handle(), &registry)?;
    /// while sampler.samples() == 0 {
    ///     std::thread::sleep(std::time::Duration::from_millis(1));
    /// }
    /// assert_eq!(registry.len(), usize::from(elastic_cpu_probe::current_tid().is_ok()));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn start_sampler_registering(
        &self,
        handle: &tokio::runtime::Handle,
        registry: &ThreadRegistry,
    ) -> std::io::Result<Sampler> {
        Sampler::start(&self.shared, handle, Some(registry))
    }

    /// Records one poll sample into the calling thread's slot: its worker's slot on a runtime
    /// worker, else the shared overflow slot. Lock-free. `None` leaves that measure out. Values are clamped
    /// to the configured `highest`.
    ///
    /// Used by the hooks and by the sampler; elastic wrappers without hooks and tests call it
    /// directly.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// # use std::time::Duration;
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// probe.record_poll(None, Some(Duration::from_micros(300)), true); // poll time only
    /// probe.rotate();
    /// assert_eq!(probe.window().poll_time.elastic.count, 1);
    /// assert_eq!(probe.window().queue_latency.all.count, 0);
    /// ```
    ///
    /// A poll over the [outlier threshold](ProbeConfig::outlier_threshold) is also kept as an
    /// outlier, with the caller's location as its spawn site ([`record_poll_from`] names
    /// another).
    ///
    /// [`record_poll_from`]: Self::record_poll_from
    #[track_caller]
    pub fn record_poll(
        &self,
        queue_latency: Option<Duration>,
        poll_time: Option<Duration>,
        elastic: bool,
    ) {
        self.record_poll_from(Location::caller(), queue_latency, poll_time, elastic);
    }

    /// [`record_poll`](Self::record_poll) for a poll of a task spawned at `site`: an outlier
    /// is kept under that site. Elastic adapters without task hooks report their polls here,
    /// with the site they were made at.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// # use std::time::Duration;
    /// let config = ProbeConfig { outlier_threshold: Some(Duration::from_millis(1)), ..Default::default() };
    /// let probe = Probe::new(config).unwrap();
    /// let site = std::panic::Location::caller();
    /// probe.record_poll_from(site, None, Some(Duration::from_millis(2)), true);
    /// probe.rotate();
    /// assert_eq!(probe.outliers().sites[0].site, Some(site));
    /// assert!(probe.outliers().sites[0].elastic);
    /// ```
    pub fn record_poll_from(
        &self,
        site: &'static Location<'static>,
        queue_latency: Option<Duration>,
        poll_time: Option<Duration>,
        elastic: bool,
    ) {
        self.shared.record_from(
            site,
            queue_latency.map(nanos),
            poll_time.map(nanos),
            elastic,
        );
    }

    /// Keeps a poll of a task spawned at `site` that ran `poll_time` as an outlier if that is
    /// past the threshold; records nothing in the histograms. Elastic adapters without task
    /// hooks report every poll they time here (one comparison when it is not an outlier).
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// # use std::time::Duration;
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// probe.set_outlier_threshold(Some(Duration::from_millis(1)));
    /// probe.trap_poll(std::panic::Location::caller(), Duration::from_millis(4), true);
    /// probe.trap_poll(std::panic::Location::caller(), Duration::from_micros(4), true);
    /// probe.rotate();
    /// assert_eq!(probe.outliers().sites[0].count, 1);
    /// assert_eq!(probe.window().poll_time.all.count, 0);
    /// ```
    #[inline]
    pub fn trap_poll(&self, site: &'static Location<'static>, poll_time: Duration, elastic: bool) {
        let poll_ns = Some(nanos(poll_time));
        if self.shared.is_outlier(None, poll_ns, elastic) {
            self.shared.trap_poll(site, poll_ns, elastic);
        }
    }

    /// The window's outliers: the polls over the threshold grouped by spawn site (most time
    /// held first), the slowest polls and the longest foreground waits with what held their
    /// worker meanwhile. Collected by [`rotate`](Self::rotate), like the window.
    ///
    /// With task hooks every poll's queue latency is compared with the threshold; its poll
    /// time is compared where it was timed: on one poll in
    /// [`poll_time_every`](ProbeConfig::poll_time_every), and on every poll of a worker thread
    /// for one window after it saw an outlier (a wait or a poll), so a task that holds workers
    /// again and again is caught whole once it is seen. Without hooks the elastic adapters
    /// report the polls they time ([`record_poll_from`](Self::record_poll_from)).
    pub fn outliers(&self) -> Outliers {
        self.shared
            .outliers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .report(self.outlier_threshold())
    }

    /// Changes the outlier threshold (`None`: the trap is off; see
    /// [`ProbeConfig::outlier_threshold`]). Takes effect at the next poll.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// # use std::time::Duration;
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// assert_eq!(probe.outlier_threshold(), None);
    /// probe.set_outlier_threshold(Some(Duration::from_micros(200)));
    /// assert_eq!(probe.outlier_threshold(), Some(Duration::from_micros(200)));
    /// ```
    pub fn set_outlier_threshold(&self, threshold: Option<Duration>) {
        self.shared.set_outlier_threshold(threshold);
    }

    /// The outlier threshold now (`None`: the trap is off).
    pub fn outlier_threshold(&self) -> Option<Duration> {
        self.shared.outlier_threshold()
    }

    /// Closes the current interval: collects what every slot recorded since the last rotation
    /// into one interval, pushes it into the window and evicts the interval that falls out of it.
    ///
    /// Call once per `tick` from outside the runtime (the pacer's governor thread does). It never
    /// blocks a worker: it only reads the slots' counters. Concurrent calls are serialised.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// # use std::time::Duration;
    /// let probe = Probe::new(ProbeConfig::default()).unwrap(); // 25 intervals
    /// probe.record_poll(Some(Duration::from_micros(10)), None, false);
    /// for _ in 0..25 {
    ///     probe.rotate();
    /// }
    /// assert_eq!(probe.window().queue_latency.all.count, 1);
    /// probe.rotate(); // the first interval leaves the window
    /// assert_eq!(probe.window().queue_latency.all.count, 0);
    /// ```
    pub fn rotate(&self) {
        let shared = &*self.shared;
        let mut state = shared.window.lock().unwrap_or_else(PoisonError::into_inner);
        let mut interval = None;
        for (index, slot) in shared.slots.iter().enumerate() {
            if let Some(slot) = slot.get() {
                state.collect_from(index, slot, &shared.layout, &mut interval);
            }
        }
        state.push(interval);
        drop(state);
        shared.collect_outliers();
    }

    /// The window's statistics: a snapshot of the intervals closed by [`Probe::rotate`] (samples
    /// recorded since the last rotation are not in it yet). Computed at the first call after a
    /// rotation; later calls before the next one return a copy.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// let w = probe.window();
    /// assert_eq!(w.intervals, 0);
    /// assert_eq!(w.queue_latency.all.count, 0);
    /// assert_eq!(w.queue_latency.all.p99, None); // no data, not 0
    /// ```
    pub fn window(&self) -> Window {
        self.shared
            .window
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .window()
    }

    /// Mark the last `n` intervals closed by [`Probe::rotate`] as *quiet* (a governor held its
    /// elastic work back over them, or had none): they join the quiet window, a second window
    /// as long as the first made of quiet intervals only, so that the latency without elastic
    /// work is read from as many samples as the latency with it.
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// # use std::time::Duration;
    /// let probe = Probe::new(ProbeConfig::default()).unwrap();
    /// probe.record_poll(Some(Duration::from_millis(5)), None, false);
    /// probe.rotate();
    /// probe.record_poll(Some(Duration::from_micros(50)), None, false);
    /// probe.rotate();
    /// probe.mark_quiet(1);
    /// assert_eq!(probe.window().queue_latency.all.count, 2);
    /// let quiet = probe.quiet_window();
    /// assert_eq!((quiet.intervals, quiet.queue_latency.all.count), (1, 1));
    /// assert!(quiet.queue_latency.all.p99.unwrap() < Duration::from_micros(60));
    /// ```
    pub fn mark_quiet(&self, n: usize) {
        let window = self
            .shared
            .window
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut quiet = self
            .shared
            .quiet
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        window.copy_recent(n, &mut quiet);
    }

    /// The statistics of the quiet window ([`mark_quiet`](Self::mark_quiet)).
    pub fn quiet_window(&self) -> Window {
        self.shared
            .quiet
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .window()
    }
}

impl Probe {
    /// Foreground polls so far whose queue latency reached
    /// [`ProbeConfig::alarm_at`](crate::ProbeConfig::alarm_at).
    ///
    /// ```
    /// # use elastic_cpu_probe::{Probe, ProbeConfig};
    /// # use std::time::Duration;
    /// let config = ProbeConfig { alarm_at: Some(Duration::from_millis(1)), ..Default::default() };
    /// let probe = Probe::new(config).unwrap();
    /// probe.record_poll(Some(Duration::from_micros(900)), None, false); // under: no alarm
    /// probe.record_poll(Some(Duration::from_millis(2)), None, true); // elastic: never alarms
    /// probe.record_poll(Some(Duration::from_millis(2)), None, false);
    /// assert_eq!(probe.alarms(), 1);
    /// assert!(probe.take_alarm());
    /// assert!(!probe.take_alarm()); // lowered until the next alarm
    /// ```
    pub fn alarms(&self) -> u64 {
        self.shared.alarms.load(Ordering::Relaxed)
    }

    /// Whether an alarm was raised since the last call; lowers it. The next alarming poll
    /// raises it again (and unparks the [`notify_on_alarm`](Self::notify_on_alarm) thread).
    pub fn take_alarm(&self) -> bool {
        self.shared.raised.swap(false, Ordering::AcqRel)
    }

    /// Unpark `thread` whenever the alarm goes from lowered to raised (at most once per
    /// [`take_alarm`](Self::take_alarm)), so a controller can react within the poll that saw
    /// the backlog instead of at its next tick. Replaces an earlier listener.
    pub fn notify_on_alarm(&self, thread: Thread) {
        *self
            .shared
            .listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(thread);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::token;
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn worker_slots_are_owned_then_released_when_workers_exit() {
        let probe = Probe::new(ProbeConfig::default()).unwrap();
        let slot0_owner = |p: &Probe| p.shared.slots[0].get().map(|s| s.owner.load(Relaxed));
        let record_in_task = |rt: &tokio::runtime::Runtime| {
            let p = probe.clone();
            rt.block_on(async move {
                tokio::spawn(
                    async move { p.record_poll(Some(Duration::from_micros(5)), None, false) },
                )
                .await
                .unwrap()
            });
        };

        // A multi-thread worker claims slot 0 ...
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        record_in_task(&rt);
        let worker = slot0_owner(&probe).unwrap();
        assert_ne!(worker, 0);
        assert_ne!(worker, token());
        // ... and releases it when it exits (dropping the runtime joins its threads).
        drop(rt);
        assert_eq!(slot0_owner(&probe), Some(0));

        // A current-thread runtime runs on this thread, as worker 0: it takes slot 0 over.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        record_in_task(&rt);
        assert_eq!(slot0_owner(&probe), Some(token()));

        // Another thread that is worker 0 meanwhile falls back to the overflow slot.
        let p = probe.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(async move { p.record_poll(Some(Duration::from_micros(7)), None, true) });
        })
        .join()
        .unwrap();
        assert_eq!(slot0_owner(&probe), Some(token()));

        probe.rotate();
        let w = probe.window();
        assert_eq!(w.queue_latency.foreground.count, 2);
        assert_eq!(w.queue_latency.elastic.count, 1);
    }
}
