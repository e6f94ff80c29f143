//! What the governor reads from the OS and the runtime besides the scheduling probe, each
//! behind a small trait with a real implementation (here) and a scripted one
//! ([`testing::Script`](crate::testing::Script), feature `test-util`), so that the whole
//! control loop, every input on, runs on a manual clock.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use elastic_cpu_core::decide::RunQueueWaits;
use elastic_cpu_core::ProcessCpuClock;
use elastic_cpu_probe::{
    cpu_affinity, cpu_quota, CpuThrottling, IoProbe, IoProbeConfig, IoProbeError, ProbeConfig,
    QuotaReading, RunQueueStats, ThreadRegistry, ThreadRole,
};
use tokio::runtime::Handle;

/// Whether a component of the signal is measured, and if not, why.
///
/// ```
/// use elastic_cpu_pacer::snapshot::Availability;
/// assert!(Availability::On.is_on());
/// assert_eq!(Availability::Off.to_string(), "off (builder setting)");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Availability {
    /// Measured and in the signal.
    On,
    /// Turned off by a builder setting (or a manual clock: tests steer by hand).
    #[default]
    Off,
    /// Not started yet: no runtime attached.
    NotStarted,
    /// Not available here; why.
    Unavailable(String),
}

impl Availability {
    /// Whether it is measured.
    pub fn is_on(&self) -> bool {
        *self == Availability::On
    }
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Availability::On => f.write_str("on"),
            Availability::Off => f.write_str("off (builder setting)"),
            Availability::NotStarted => f.write_str("not started (no runtime attached)"),
            Availability::Unavailable(why) => write!(f, "unavailable: {why}"),
        }
    }
}

/// The I/O wake-up probe's window at one tick.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct IoWindow {
    pub(crate) p99: Option<Duration>,
    /// Canaries in the window.
    pub(crate) count: u64,
}

/// The I/O wake-up probe: canaries through a runtime's I/O driver.
pub(crate) trait IoSource: Send {
    /// Start on `handle`'s runtime, replacing a probe started before.
    fn start(&mut self, handle: &Handle, probe: &ProbeConfig) -> Result<(), IoProbeError>;
    /// Rotate the window and read it (`None`: not running).
    fn read(&mut self) -> Option<IoWindow>;
    /// Canaries at the quiet period (nothing steers by them) or following the runtime's load;
    /// returns the period they come at now (`None`: not running).
    fn set_quiet(&mut self, quiet: bool) -> Option<Duration>;
    /// Whether it runs, and if not, why.
    fn availability(&self) -> Availability;
    /// Stop it (its reader task, and its writer thread where it has one).
    fn stop(&mut self);
}

/// One tick of the OS run-queue delay of the runtime's threads and of the threads beside them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct RunQueueSample {
    /// Summed waits and timeslices over the tick.
    pub(crate) waits: RunQueueWaits,
    /// Their wait as a fraction of the tick (`None`: no such thread measured).
    pub(crate) foreground_fraction: Option<f64>,
    /// The same for the threads running elastic work (`pace_blocking`).
    pub(crate) elastic_fraction: Option<f64>,
}

/// The OS run-queue delay of the runtime's threads.
pub(crate) trait RunQueueSource: Send {
    /// One tick's sample, or why there is none.
    fn sample(&mut self) -> Result<RunQueueSample, String>;
}

/// The process's cgroup: its CPU quota, and the throttling counters of a cgroup directory.
pub(crate) trait CgroupSource: Send + Sync {
    /// The quota that applies to the process now.
    fn quota(&self) -> QuotaReading;
    /// The cumulative throttling counters of the cgroup in `dir` (`None`: unreadable).
    fn throttling(&self, dir: &Path) -> Option<CpuThrottling>;
}

/// The process: its CPU time and the CPUs it may run on.
pub(crate) trait ProcessSource: Send + Sync {
    /// CPU time of every thread of the process, user and system (`None`: unreadable).
    fn cpu_time(&self) -> Option<Duration>;
    /// CPUs in the affinity mask (`None`: unknown).
    fn affinity(&self) -> Option<usize>;
    /// `std::thread::available_parallelism` (`None`: unknown).
    fn available_parallelism(&self) -> Option<usize>;
}

/// Every reader the governor uses.
pub(crate) struct Sources {
    pub(crate) io: Box<dyn IoSource>,
    /// `None`: the run-queue input is off.
    pub(crate) run_queue: Option<Box<dyn RunQueueSource>>,
    pub(crate) cgroup: Box<dyn CgroupSource>,
    pub(crate) process: Box<dyn ProcessSource>,
}

impl Sources {
    /// The OS and the runtime. `threads`: the runtime's threads, for the run-queue delay.
    pub(crate) fn os(io: bool, run_queue: bool, threads: &ThreadRegistry) -> Sources {
        Sources {
            io: if io {
                Box::new(OsIo::default())
            } else {
                Box::new(NoIo)
            },
            run_queue: run_queue.then(|| {
                Box::new(OsRunQueue(
                    RunQueueStats::new(threads).read_bystanders(MAX_BYSTANDERS),
                )) as Box<dyn RunQueueSource>
            }),
            cgroup: Box::new(OsCgroup),
            process: Box::new(OsProcess),
        }
    }

    /// A manual clock without a script: no I/O probe, no run-queue delay, no process CPU time
    /// (the tests' signal is the probe they drive), but the real cgroup and affinity.
    #[cfg(feature = "test-util")]
    pub(crate) fn manual() -> Sources {
        Sources {
            io: Box::new(NoIo),
            run_queue: None,
            cgroup: Box::new(OsCgroup),
            process: Box::new(NoProcessCpu),
        }
    }
}

/// The I/O input turned off.
pub(crate) struct NoIo;

impl IoSource for NoIo {
    fn start(&mut self, _: &Handle, _: &ProbeConfig) -> Result<(), IoProbeError> {
        Ok(())
    }
    fn read(&mut self) -> Option<IoWindow> {
        None
    }
    fn set_quiet(&mut self, _: bool) -> Option<Duration> {
        None
    }
    fn availability(&self) -> Availability {
        Availability::Off
    }
    fn stop(&mut self) {}
}

/// The real I/O wake-up probe, once started.
#[derive(Default)]
struct OsIo {
    probe: Option<IoProbe>,
    state: Availability,
}

impl IoSource for OsIo {
    fn start(&mut self, handle: &Handle, probe: &ProbeConfig) -> Result<(), IoProbeError> {
        self.probe = None;
        let config = IoProbeConfig {
            probe: probe.clone(),
            ..IoProbeConfig::default()
        };
        match IoProbe::start(handle, config) {
            Ok(p) => {
                self.probe = Some(p);
                self.state = Availability::On;
                Ok(())
            }
            Err(e) => {
                self.state = Availability::Unavailable(e.to_string());
                Err(e)
            }
        }
    }

    fn read(&mut self) -> Option<IoWindow> {
        let probe = self.probe.as_ref()?;
        if !probe.is_running() {
            self.state = Availability::Unavailable("the runtime has shut down".into());
            return None;
        }
        probe.rotate();
        let w = probe.window();
        Some(IoWindow {
            p99: w.p99,
            count: w.count,
        })
    }

    fn set_quiet(&mut self, quiet: bool) -> Option<Duration> {
        let probe = self.probe.as_ref()?;
        probe.set_quiet(quiet);
        Some(probe.period())
    }

    fn availability(&self) -> Availability {
        match self.state {
            Availability::Off => Availability::NotStarted,
            ref other => other.clone(),
        }
    }

    fn stop(&mut self) {
        if self.probe.take().is_some() {
            self.state = Availability::Unavailable("stopped by Elastic::shutdown".into());
        }
    }
}

/// The most threads beside the runtime read per tick: bounds the tick's cost in a process with
/// many threads (each is a small procfs read).
const MAX_BYSTANDERS: usize = 64;

/// The kernel's per-thread scheduler statistics of the runtime's threads and of the threads
/// beside them.
struct OsRunQueue(RunQueueStats);

impl RunQueueSource for OsRunQueue {
    fn sample(&mut self) -> Result<RunQueueSample, String> {
        let tick = self.0.sample().map_err(|why| why.to_string())?;
        let fg = ThreadRole::serves_foreground;
        let by = |role| role == ThreadRole::Bystander;
        let sum = |include: &dyn Fn(ThreadRole) -> bool| {
            let slices = tick.threads.iter().filter(|t| include(t.role));
            (tick.total_wait(include), slices.map(|t| t.timeslices).sum())
        };
        Ok(RunQueueSample {
            waits: RunQueueWaits {
                runtime: sum(&fg),
                bystanders: sum(&by),
            },
            foreground_fraction: tick.wait_fraction(fg),
            elastic_fraction: tick.wait_fraction(|role| role == ThreadRole::Elastic),
        })
    }
}

/// The process's cgroup, from `/proc` and the cgroup file systems.
struct OsCgroup;

impl CgroupSource for OsCgroup {
    fn quota(&self) -> QuotaReading {
        cpu_quota()
    }
    fn throttling(&self, dir: &Path) -> Option<CpuThrottling> {
        CpuThrottling::read(dir)
    }
}

/// The process, from the OS.
struct OsProcess;

impl ProcessSource for OsProcess {
    fn cpu_time(&self) -> Option<Duration> {
        ProcessCpuClock::now()
    }
    fn affinity(&self) -> Option<usize> {
        cpu_affinity()
    }
    fn available_parallelism(&self) -> Option<usize> {
        std::thread::available_parallelism().ok().map(|n| n.get())
    }
}

/// A manual clock without a script: the process's CPU time is not read (no overhead correction,
/// no headroom), the CPUs are.
#[cfg(feature = "test-util")]
struct NoProcessCpu;

#[cfg(feature = "test-util")]
impl ProcessSource for NoProcessCpu {
    fn cpu_time(&self) -> Option<Duration> {
        None
    }
    fn affinity(&self) -> Option<usize> {
        OsProcess.affinity()
    }
    fn available_parallelism(&self) -> Option<usize> {
        OsProcess.available_parallelism()
    }
}
