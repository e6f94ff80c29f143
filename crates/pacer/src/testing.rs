//! Test plumbing (feature `test-util`, as tokio's): a manual clock, and [`Script`], every
//! reading the governor takes from the OS and the runtime set by hand, so a test runs the whole
//! control loop deterministically with [`ElasticBuilder::manual`](crate::ElasticBuilder::manual)
//! and [`Drive::tick`]; [`Drive`], the governor's steps and faults by hand on an `Elastic`; and
//! [`GovernorEnd`], a fault that ends the governor thread ([`Drive::end_governor`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub use elastic_cpu_core::{Clock, ManualClock};
use elastic_cpu_probe::{
    cpu_quota_at, CgroupVersion, CpuQuota, CpuThrottling, IoProbeError, NoQuota, ProbeConfig,
    QuotaReading,
};
use tokio::runtime::Handle;

pub use crate::governor::GovernorEnd;
use crate::signal::readings::{
    Availability, CgroupSource, IoSource, IoWindow, NoIo, ProcessSource, RunQueueSample,
    RunQueueSource, Sources,
};
use elastic_cpu_core::decide::RunQueueWaits;

/// Every reading the governor takes from the OS and the runtime, set by the test: the I/O
/// wake-up window, the run-queue delay, the CPU quota and its throttled periods, the process's
/// CPU time and the CPUs it may use. Cheap to clone: clones script the same readings. Until set,
/// a reading is absent (no data, no quota, no process CPU time).
///
/// ```
/// use elastic_cpu_pacer::testing::{Drive, ManualClock, Script};
/// use elastic_cpu_pacer::Elastic;
/// use std::time::Duration;
///
/// let (clock, script) = (ManualClock::new(), Script::new());
/// let elastic = Elastic::builder()
///     .manual(clock.clone())
///     .script(script.clone())
///     .initial_share(0.5)
///     .build()?;
/// let rt = elastic.runtime(tokio::runtime::Builder::new_current_thread()).build()?;
/// // The run queue delays the runtime's threads 3 ms per timeslice: over the 1 ms target.
/// script.run_queue_delay(Duration::from_millis(3));
/// clock.advance(Duration::from_millis(100));
/// elastic.tick();
/// let s = elastic.snapshot();
/// assert_eq!(s.run_queue_delay, Some(Duration::from_millis(3)));
/// assert!(s.share < 0.5);
/// # drop(rt);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub struct Script(Arc<Mutex<State>>);

#[derive(Default)]
struct State {
    io_started: bool,
    io: Option<IoWindow>,
    io_quiet: bool,
    run_queue: Option<Duration>,
    bystanders: Option<Duration>,
    /// Timeslices a tick behind each run-queue delay (`None`: [`SCRIPTED_TIMESLICES`]).
    timeslices: Option<u32>,
    quota: Option<f64>,
    /// A cgroup tree on disk and the `/proc/self/cgroup` text that places the process in it.
    tree: Option<(PathBuf, String)>,
    throttled: u64,
    process_cpu: Option<Duration>,
    cpus: Option<usize>,
}

/// The scripted quota's cgroup directory (never read).
const SCRIPTED_CGROUP: &str = "/scripted-cgroup";
/// Timeslices a tick the scripted run-queue delays come from, unless set: a busy thread's.
const SCRIPTED_TIMESLICES: u32 = 1000;
/// The scripted I/O probe's canary period.
const IO_PERIOD: Duration = Duration::from_millis(2);
/// The scripted I/O probe's period while quiet.
const IO_QUIET_PERIOD: Duration = Duration::from_millis(50);

impl Script {
    /// No reading set yet.
    pub fn new() -> Script {
        Script::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From the next tick, the I/O wake-up window holds `canaries` canaries with this p99 (once
    /// the probe is started: [`Elastic::runtime`](crate::Elastic::runtime) or
    /// [`Elastic::start_io_probe`](crate::Elastic::start_io_probe)).
    pub fn io_wakeup(&self, p99: Duration, canaries: u64) {
        self.state().io = Some(IoWindow {
            p99: Some(p99),
            count: canaries,
        });
    }

    /// From the next tick, the runtime's threads wait this long for a CPU per timeslice.
    pub fn run_queue_delay(&self, per_timeslice: Duration) {
        self.state().run_queue = Some(per_timeslice);
    }

    /// From the next tick, the process's threads beside the runtime (a client library's,
    /// another runtime's) wait this long for a CPU per timeslice.
    pub fn bystander_delay(&self, per_timeslice: Duration) {
        self.state().bystanders = Some(per_timeslice);
    }

    /// From the next tick, each scripted run-queue delay comes from this many timeslices a tick
    /// (1000 unless set): a window with too few is not read.
    pub fn run_queue_timeslices(&self, per_tick: u32) {
        self.state().timeslices = Some(per_tick);
    }

    /// The process's cgroup has a CPU quota of `cpus` per 100 ms: the next
    /// [`Elastic::attach`](crate::Elastic::attach) finds it, and after attach the governor's
    /// next re-read ([`ElasticBuilder::quota_reread`](crate::ElasticBuilder::quota_reread)).
    pub fn quota(&self, cpus: f64) {
        self.state().quota = Some(cpus);
    }

    /// Read the quota and the throttling counters from a cgroup tree on disk instead of
    /// [`quota`](Self::quota): the cgroup file systems mounted under `root` (a fake
    /// `/sys/fs/cgroup`), the process placed by `proc_self_cgroup` (the text of
    /// `/proc/self/cgroup`, e.g. `"0::/svc\n"`), parsed as on a real system. Rewrite the tree's
    /// `cpu.max` or `cpu.cfs_quota_us` mid-run to change the quota.
    ///
    /// ```
    /// use elastic_cpu_pacer::testing::{Drive, ManualClock, Script};
    /// use elastic_cpu_pacer::Elastic;
    /// use std::{fs, time::Duration};
    ///
    /// let root = std::env::temp_dir().join(format!("elastic-cpu-script-{}", std::process::id()));
    /// fs::create_dir_all(root.join("svc"))?;
    /// fs::write(root.join("cgroup.controllers"), "cpu\n")?; // marks a v2 mount
    /// fs::write(root.join("svc/cpu.max"), "150000 100000\n")?;
    /// let (clock, script) = (ManualClock::new(), Script::new());
    /// script.cgroup_tree(&root, "0::/svc\n");
    /// script.cpus(8);
    /// let elastic = Elastic::builder()
    ///     .manual(clock.clone())
    ///     .script(script.clone())
    ///     .quota_reread(Duration::from_millis(100))
    ///     .build()?;
    /// let mut four = tokio::runtime::Builder::new_multi_thread();
    /// four.worker_threads(4);
    /// let rt = elastic.runtime(four).build()?;
    /// assert_eq!(elastic.snapshot().cpus, 1.5);
    /// fs::write(root.join("svc/cpu.max"), "300000 100000\n")?;
    /// clock.advance(Duration::from_millis(100));
    /// elastic.tick();
    /// assert_eq!(elastic.snapshot().cpus, 3.0);
    /// # drop(rt);
    /// # fs::remove_dir_all(&root)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cgroup_tree(&self, root: impl Into<PathBuf>, proc_self_cgroup: impl Into<String>) {
        self.state().tree = Some((root.into(), proc_self_cgroup.into()));
    }

    /// The quota's cgroup was throttled in `periods` more CFS periods.
    pub fn throttle(&self, periods: u64) {
        self.state().throttled += periods;
    }

    /// The process spent `cpu` more CPU time, every thread together.
    pub fn spend(&self, cpu: Duration) {
        let mut s = self.state();
        s.process_cpu = Some(s.process_cpu.unwrap_or_default() + cpu);
    }

    /// The process may run on `cpus` CPUs (its affinity mask and available parallelism).
    pub fn cpus(&self, cpus: usize) {
        self.state().cpus = Some(cpus);
    }

    /// Whether the I/O wake-up canaries are at their quiet period (nothing steers by them).
    pub fn io_quiet(&self) -> bool {
        self.state().io_quiet
    }

    /// The governor's readers, all from this script (`io`, `run_queue`: whether those inputs
    /// are on).
    pub(crate) fn sources(&self, io: bool, run_queue: bool) -> Sources {
        Sources {
            io: if io {
                Box::new(self.clone())
            } else {
                Box::new(NoIo)
            },
            run_queue: run_queue.then(|| Box::new(self.clone()) as Box<dyn RunQueueSource>),
            cgroup: Box::new(self.clone()),
            process: Box::new(self.clone()),
        }
    }
}

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("Script")
            .field("io", &s.io)
            .field("run_queue", &s.run_queue)
            .field("bystanders", &s.bystanders)
            .field("quota", &s.quota)
            .field("tree", &s.tree)
            .field("throttled", &s.throttled)
            .field("process_cpu", &s.process_cpu)
            .finish()
    }
}

impl IoSource for Script {
    fn start(&mut self, _: &Handle, _: &ProbeConfig) -> Result<(), IoProbeError> {
        self.state().io_started = true;
        Ok(())
    }

    fn read(&mut self) -> Option<IoWindow> {
        let s = self.state();
        s.io_started.then(|| s.io.clone().unwrap_or_default())
    }

    fn set_quiet(&mut self, quiet: bool) -> Option<Duration> {
        let mut s = self.state();
        if !s.io_started {
            return None;
        }
        s.io_quiet = quiet;
        Some(if quiet { IO_QUIET_PERIOD } else { IO_PERIOD })
    }

    fn availability(&self) -> Availability {
        if self.state().io_started {
            Availability::On
        } else {
            Availability::NotStarted
        }
    }

    fn stop(&mut self) {
        self.state().io_started = false;
    }
}

impl RunQueueSource for Script {
    fn sample(&mut self) -> Result<RunQueueSample, String> {
        let s = self.state();
        if s.run_queue.is_none() && s.bystanders.is_none() {
            return Err("no run-queue delay scripted".to_string());
        }
        let n = s.timeslices.unwrap_or(SCRIPTED_TIMESLICES);
        let one = |d: Option<Duration>| {
            d.map_or((Duration::ZERO, 0), |d| (d.saturating_mul(n), u64::from(n)))
        };
        Ok(RunQueueSample {
            waits: RunQueueWaits {
                runtime: one(s.run_queue),
                bystanders: one(s.bystanders),
            },
            foreground_fraction: None,
            elastic_fraction: None,
        })
    }
}

impl CgroupSource for Script {
    fn quota(&self) -> QuotaReading {
        let s = self.state();
        if let Some((root, text)) = &s.tree {
            return cpu_quota_at(root, text);
        }
        match s.quota {
            Some(cpus) => QuotaReading::Limited(CpuQuota {
                cpus,
                // A quota no `Duration` holds (negative, NaN, huge) reads as none at all.
                quota: Duration::try_from_secs_f64(cpus * 0.1).unwrap_or_default(),
                period: Duration::from_millis(100),
                version: CgroupVersion::V2,
                cgroup_dir: PathBuf::from(SCRIPTED_CGROUP),
            }),
            None => QuotaReading::NoQuota(NoQuota::Unsupported),
        }
    }

    fn throttling(&self, dir: &Path) -> Option<CpuThrottling> {
        let s = self.state();
        if s.tree.is_some() {
            return CpuThrottling::read(dir);
        }
        (dir == Path::new(SCRIPTED_CGROUP) && s.quota.is_some()).then(|| CpuThrottling {
            periods: 1000 + s.throttled,
            throttled_periods: s.throttled,
            throttled_time: Duration::from_millis(20) * u32::try_from(s.throttled).unwrap_or(0),
        })
    }
}

impl ProcessSource for Script {
    fn cpu_time(&self) -> Option<Duration> {
        self.state().process_cpu
    }
    fn affinity(&self) -> Option<usize> {
        self.state().cpus
    }
    fn available_parallelism(&self) -> Option<usize> {
        self.state().cpus
    }
}

/// The governor driven by hand, on an [`Elastic`](crate::Elastic) (feature `test-util`): a tick
/// or a look at the brakes now, a quota or a throttling watch on a fake cgroup, a fault that
/// ends the governor thread, the probe to record polls into.
///
/// ```
/// use elastic_cpu_pacer::testing::{Drive, ManualClock};
/// use elastic_cpu_pacer::Elastic;
///
/// let elastic = Elastic::builder().manual(ManualClock::new()).build()?;
/// elastic.tick();
/// assert_eq!(elastic.snapshot().ticks, 1);
/// # Ok::<(), elastic_cpu_pacer::BuildError>(())
/// ```
pub trait Drive {
    /// Watch the cgroup in `cgroup_dir` for CPU throttling, as `attach` does for the process's
    /// own cgroup when it has a quota: tests point it at a fake `cpu.stat`.
    fn watch_throttling(&self, cgroup_dir: impl Into<PathBuf>);

    /// Treat the cgroup in `cgroup_dir` as the process's, with a quota of `cpus` per period of
    /// 100 ms (the kernel's default), as `attach` does when it finds one: the governor watches
    /// its throttling, caps elastic work within the quota's headroom and cuts grants to what a
    /// period refills.
    fn watch_quota(&self, cgroup_dir: impl Into<PathBuf>, cpus: f64);

    /// Run one governor tick now, with the configured tick as its period. The governor thread
    /// does this on its own; with [`ElasticBuilder::manual`](crate::ElasticBuilder::manual)
    /// tests call it by hand.
    fn tick(&self);

    /// Let the brakes look at their readings now, as the governor thread does between ticks.
    fn check_brakes(&self);

    /// Make the governor thread end (`how`) the next time it wakes up, right after that
    /// wake-up's tick or brake step: at its next tick, at the probe's alarm (the brake, which it
    /// ends with on), or at a brake's re-check. Whatever was waiting on its classes and gates
    /// then ends, and [`Snapshot::governor`](crate::Snapshot::governor) says why it stopped.
    /// Without a governor thread (a manual clock) nothing happens.
    ///
    /// ```
    /// use elastic_cpu_pacer::snapshot::GovernorState;
    /// use elastic_cpu_pacer::testing::{Drive, GovernorEnd};
    /// use elastic_cpu_pacer::{settings::Brake, Elastic};
    /// use std::time::Duration;
    ///
    /// let elastic = Elastic::builder().brake(Brake::At(Duration::from_millis(1))).build()?;
    /// elastic.end_governor(GovernorEnd::Exit);
    /// // A foreground poll that waited too long: the alarm wakes the governor; it brakes, ends.
    /// elastic.probe().record_poll(Some(Duration::from_millis(5)), None, false);
    /// while elastic.snapshot().governor.is_running() {
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// let s = elastic.snapshot();
    /// assert_eq!(s.governor, GovernorState::Exited);
    /// assert!(s.queue.closed && !s.braked);
    /// # Ok::<(), elastic_cpu_pacer::BuildError>(())
    /// ```
    fn end_governor(&self, how: GovernorEnd);

    /// The probe measuring the runtime: tests record polls into it.
    fn probe(&self) -> &elastic_cpu_probe::Probe;
}

impl Drive for crate::Elastic {
    fn watch_throttling(&self, cgroup_dir: impl Into<PathBuf>) {
        self.control.watch_throttling(cgroup_dir.into());
    }

    fn watch_quota(&self, cgroup_dir: impl Into<PathBuf>, cpus: f64) {
        let period = Duration::from_millis(100);
        self.control.watch_quota(cgroup_dir.into(), cpus, period);
    }

    fn tick(&self) {
        let root = self.shared.root_class();
        self.control.tick(root, root.probe.config().tick);
    }

    fn check_brakes(&self) {
        let _ = self.control.brake_step();
    }

    fn end_governor(&self, how: GovernorEnd) {
        self.control.inject(how);
    }

    fn probe(&self) -> &elastic_cpu_probe::Probe {
        &self.shared.probe
    }
}
