//! Container-aware CPU count: the CPU quota of the process's cgroup, and its throttling counters.
//!
//! A service in a container usually runs under CFS bandwidth control: its cgroup may use `quota`
//! of CPU time per `period`, e.g. 150 ms per 100 ms = 1.5 CPUs, however many cores the machine
//! shows. [`std::thread::available_parallelism`] counts cores (and the affinity mask), not this
//! quota, so a controller that sizes elastic work by it overestimates the CPU it may use.
//!
//! [`cpu_quota`] reads the quota for the current process; [`cpu_quota_at`] does the same on an
//! injected filesystem root and `/proc/self/cgroup` text (that is how the tests run on fake trees).
//! The figure is fractional ([`CpuQuota::cpus`]) and says where it came from
//! ([`QuotaReading::source`]); anything missing, unreadable or implausible gives "no quota" with
//! the reason ([`NoQuota`]), never a panic.
//!
//! # Where the numbers are
//!
//! * **cgroup v1**: the line of `/proc/self/cgroup` whose controller list holds `cpu`
//!   (`4:cpu,cpuacct:/svc`) names the cgroup path within the `cpu` hierarchy, mounted at
//!   `<root>/cpu` (or `<root>/cpu,cpuacct` when co-mounted). Each level has `cpu.cfs_quota_us`
//!   (`-1`: no limit) and `cpu.cfs_period_us`.
//! * **cgroup v2**: the line `0::/svc` names the cgroup path under `<root>` (or `<root>/unified`
//!   on a hybrid system). Each level may have `cpu.max`: `max 100000` (no limit) or
//!   `150000 100000`. The root cgroup, and cgroups whose parent does not enable the `cpu`
//!   controller, have no `cpu.max`: no limit there.
//!
//! When `/proc/self/cgroup` has a v1 `cpu` line, v1 is used (the `cpu` controller is attached to
//! one hierarchy only; a hybrid system also lists a v2 line without it).
//!
//! # Nested limits
//!
//! A cgroup's tasks can use no more than any of its ancestors allows, so the effective quota is
//! the *smallest* quota / period among the cgroup and its ancestors up to the mount root. A level
//! that cannot be read is skipped; if no level has a limit but one could not be read, the reading
//! is that failure (a limit may hide there) rather than "unlimited".
//!
//! # Containers
//!
//! Inside a container without its own cgroup namespace, `/proc/self/cgroup` shows the host's
//! path (`/docker/<id>`) while the container's cgroup is mounted as the mount root itself. When
//! the named directory does not exist under the mount, the mount root is taken as the process's
//! cgroup: in that setup it is the container's cgroup, and elsewhere it is the root cgroup, which
//! has no limit.
//!
//! # Throttling
//!
//! [`CpuThrottling`] holds the counters of `cpu.stat`: periods elapsed, periods in which the
//! cgroup was throttled (it ran out of quota before the period ended) and the total time it
//! spent throttled. A cgroup's counters count its *own* quota running out, so
//! [`QuotaReading::throttling`] reads them at the level whose limit is the tightest.
//!
//! # Affinity
//!
//! [`cpu_affinity`] counts the CPUs the process may run on (its affinity mask, e.g. restricted by
//! `taskset` or a cpuset), from the `Cpus_allowed_list:` line of `/proc/self/status`;
//! [`cpu_affinity_in`] reads the same from injected text. Together with the quota it bounds the
//! CPU a process can use: a 1.5-CPU quota on a process pinned to one core still gets one.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the real system mounts the cgroup filesystems.
const SYS_FS_CGROUP: &str = "/sys/fs/cgroup";
/// Where the kernel lists the current process's cgroups.
const PROC_SELF_CGROUP: &str = "/proc/self/cgroup";
/// Where the kernel lists the current process's status, `Cpus_allowed_list:` among it.
const PROC_SELF_STATUS: &str = "/proc/self/status";
/// CPU numbers at or above this are not CPUs a kernel has (`NR_CPUS` is at most 8192): a list
/// naming one is garbage.
const MAX_CPU_ID: usize = 1 << 20;

/// The kernel refuses periods outside 1 ms ..= 1 s and quotas below 1 ms (in µs, as in the files);
/// a file saying otherwise is not a quota the kernel enforces.
const MIN_PERIOD_US: u64 = 1_000;
const MAX_PERIOD_US: u64 = 1_000_000;
const MIN_QUOTA_US: u64 = 1_000;
/// More CPUs than any Linux kernel supports (`NR_CPUS` is at most 8192); a quota worth more is
/// garbage, not a limit.
const MAX_PLAUSIBLE_CPUS: f64 = 1_048_576.0;
/// The files read here are a few lines; reading at most this much keeps a bogus path (a device,
/// a huge file) from costing memory.
const READ_LIMIT: u64 = 64 * 1024;

/// A cgroup hierarchy version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CgroupVersion {
    /// cgroup v1: one hierarchy per controller (or per set of co-mounted controllers).
    V1,
    /// cgroup v2: the single unified hierarchy.
    V2,
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CgroupVersion::V1 => "cgroup v1",
            CgroupVersion::V2 => "cgroup v2",
        })
    }
}

/// Where a CPU-count figure came from: a cgroup quota, or none (count the cores instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaSource {
    /// The cgroup v1 CFS quota (`cpu.cfs_quota_us` / `cpu.cfs_period_us`).
    CgroupV1,
    /// The cgroup v2 CPU limit (`cpu.max`).
    CgroupV2,
    /// No quota applies or none could be read.
    None,
}

impl From<CgroupVersion> for QuotaSource {
    fn from(version: CgroupVersion) -> Self {
        match version {
            CgroupVersion::V1 => QuotaSource::CgroupV1,
            CgroupVersion::V2 => QuotaSource::CgroupV2,
        }
    }
}

impl fmt::Display for QuotaSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuotaSource::CgroupV1 => "the cgroup v1 quota",
            QuotaSource::CgroupV2 => "the cgroup v2 quota",
            QuotaSource::None => "no quota",
        })
    }
}

/// An effective CPU limit: the tightest quota of the cgroup and its ancestors.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuQuota {
    /// CPUs the limit allows: `quota / period`, fractional (150 ms per 100 ms = 1.5).
    pub cpus: f64,
    /// CPU time the cgroup may use per period.
    pub quota: Duration,
    /// The enforcement period.
    pub period: Duration,
    /// The hierarchy it was read from.
    pub version: CgroupVersion,
    /// The directory of the level whose limit this is (the cgroup itself or an ancestor).
    pub cgroup_dir: PathBuf,
}

/// Why a reading has no quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoQuota {
    /// Not Linux: there are no cgroups to read.
    Unsupported,
    /// The cgroup list names neither a v1 `cpu` cgroup nor a v2 cgroup (empty or garbage).
    NoCgroup,
    /// The hierarchy the process is in is not mounted under the root.
    NotMounted {
        /// The hierarchy looked for.
        version: CgroupVersion,
    },
    /// The cgroup and all its ancestors have no limit.
    Unlimited {
        /// The hierarchy read.
        version: CgroupVersion,
        /// The process's cgroup directory.
        cgroup_dir: PathBuf,
    },
    /// A file could not be read (other than missing, which means "no limit at that level"), and
    /// no other level has a limit.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        error: io::ErrorKind,
    },
    /// A file did not hold a quota the kernel would enforce (not numbers, a zero or negative
    /// value, a period outside 1 ms ..= 1 s, an absurd ratio, not UTF-8), and no other level has
    /// a limit.
    Malformed {
        /// The file.
        path: PathBuf,
    },
}

/// The result of looking for the process's CPU quota: a limit, or why there is none.
#[derive(Debug, Clone, PartialEq)]
pub enum QuotaReading {
    /// A CPU limit applies.
    Limited(CpuQuota),
    /// No limit applies, or none could be read.
    NoQuota(NoQuota),
}

impl QuotaReading {
    /// CPUs the quota allows, fractional; `None` without a quota.
    pub fn cpus(&self) -> Option<f64> {
        match self {
            QuotaReading::Limited(q) => Some(q.cpus),
            QuotaReading::NoQuota(_) => None,
        }
    }

    /// Where [`cpus`](Self::cpus) came from; [`QuotaSource::None`] without a quota.
    pub fn source(&self) -> QuotaSource {
        match self {
            QuotaReading::Limited(q) => q.version.into(),
            QuotaReading::NoQuota(_) => QuotaSource::None,
        }
    }

    /// The cgroup directory whose counters tell about throttling: the level of the tightest
    /// limit, or the process's cgroup when no level has one; `None` when no cgroup was found.
    pub fn cgroup_dir(&self) -> Option<&Path> {
        match self {
            QuotaReading::Limited(q) => Some(&q.cgroup_dir),
            QuotaReading::NoQuota(NoQuota::Unlimited { cgroup_dir, .. }) => Some(cgroup_dir),
            QuotaReading::NoQuota(_) => None,
        }
    }

    /// Reads the throttling counters of [`cgroup_dir`](Self::cgroup_dir) now. The counters are
    /// cumulative: read them again later and take [`CpuThrottling::since`] for an interval.
    pub fn throttling(&self) -> Option<CpuThrottling> {
        CpuThrottling::read(self.cgroup_dir()?)
    }
}

impl fmt::Display for QuotaReading {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaReading::Limited(q) => write!(
                f,
                "{} CPUs from {} ({:?} per {:?} in {})",
                q.cpus,
                QuotaSource::from(q.version),
                q.quota,
                q.period,
                q.cgroup_dir.display()
            ),
            QuotaReading::NoQuota(why) => match why {
                NoQuota::Unsupported => f.write_str("no CPU quota (no cgroups on this platform)"),
                NoQuota::NoCgroup => f.write_str("no CPU quota (no cpu cgroup listed)"),
                NoQuota::NotMounted { version } => {
                    write!(f, "no CPU quota ({version} hierarchy not mounted)")
                }
                NoQuota::Unlimited {
                    version,
                    cgroup_dir,
                } => write!(
                    f,
                    "no CPU quota ({version}: no limit on {} or its ancestors)",
                    cgroup_dir.display()
                ),
                NoQuota::Unreadable { path, error } => {
                    write!(f, "no CPU quota (cannot read {}: {error})", path.display())
                }
                NoQuota::Malformed { path } => {
                    write!(f, "no CPU quota (malformed {})", path.display())
                }
            },
        }
    }
}

/// Throttling counters of a cgroup (`cpu.stat`), cumulative since the cgroup was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuThrottling {
    /// Enforcement periods that elapsed while the cgroup had runnable tasks (`nr_periods`).
    pub periods: u64,
    /// Periods in which the cgroup used up its quota and was throttled (`nr_throttled`).
    pub throttled_periods: u64,
    /// Total time the cgroup's tasks were held back (v1 `throttled_time` in ns, v2
    /// `throttled_usec`).
    pub throttled_time: Duration,
}

impl CpuThrottling {
    /// Parses the text of a `cpu.stat` file, v1 or v2 (told apart by the time key). `None` when
    /// a counter is missing or not a number: for example a v2 cgroup without the `cpu` controller
    /// enabled lists usage only.
    pub fn parse(cpu_stat: &str) -> Option<Self> {
        let (mut periods, mut throttled_periods, mut throttled_time) = (None, None, None);
        for line in cpu_stat.lines() {
            let mut fields = line.split_ascii_whitespace();
            let (Some(key), Some(value)) = (fields.next(), fields.next()) else {
                continue;
            };
            // Only the keys used here must be numbers; others (schedstats, bursts) may be anything.
            match key {
                "nr_periods" => periods = Some(value.parse::<u64>().ok()?),
                "nr_throttled" => throttled_periods = Some(value.parse::<u64>().ok()?),
                "throttled_time" => {
                    throttled_time = Some(Duration::from_nanos(value.parse().ok()?));
                }
                "throttled_usec" => {
                    throttled_time = Some(Duration::from_micros(value.parse().ok()?));
                }
                _ => {}
            }
        }
        Some(CpuThrottling {
            periods: periods?,
            throttled_periods: throttled_periods?,
            throttled_time: throttled_time?,
        })
    }

    /// Reads `cpu.stat` in a cgroup directory; `None` when it is missing, unreadable or lacks the
    /// counters.
    pub fn read(cgroup_dir: &Path) -> Option<Self> {
        match read_small(&cgroup_dir.join("cpu.stat")) {
            FileRead::Text(text) => Self::parse(&text),
            FileRead::Missing | FileRead::Failed(_) => None,
        }
    }

    /// The counts between an `earlier` reading and this one. Saturates at zero, so a cgroup
    /// recreated in between (counters restarted) gives zeros rather than a wrap.
    pub fn since(&self, earlier: &CpuThrottling) -> CpuThrottling {
        CpuThrottling {
            periods: self.periods.saturating_sub(earlier.periods),
            throttled_periods: self
                .throttled_periods
                .saturating_sub(earlier.throttled_periods),
            throttled_time: self.throttled_time.saturating_sub(earlier.throttled_time),
        }
    }
}

/// The CPU quota of the current process's cgroup, read from `/proc/self/cgroup` and
/// `/sys/fs/cgroup`. On other platforms than Linux (and Android): [`NoQuota::Unsupported`].
///
/// Reads a few small files; call it at startup or now and then, not per request.
pub fn cpu_quota() -> QuotaReading {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let list = Path::new(PROC_SELF_CGROUP);
        match read_small(list) {
            FileRead::Text(text) => cpu_quota_at(Path::new(SYS_FS_CGROUP), &text),
            FileRead::Missing => QuotaReading::NoQuota(NoQuota::NoCgroup),
            FileRead::Failed(why) => QuotaReading::NoQuota(why),
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        // Named so that the paths are not dead code here; there is nothing to read.
        let _ = (SYS_FS_CGROUP, PROC_SELF_CGROUP);
        QuotaReading::NoQuota(NoQuota::Unsupported)
    }
}

/// The CPU quota of the cgroup that `proc_self_cgroup` (the text of `/proc/self/cgroup`) names,
/// with the cgroup filesystems mounted under `root` (`/sys/fs/cgroup` on a real system).
///
/// The effective quota is the smallest of the cgroup's and its ancestors'. Never panics: missing
/// or bad files give [`QuotaReading::NoQuota`] with the reason.
///
/// ```
/// use elastic_cpu_probe::{cpu_quota_at, QuotaSource};
/// use std::fs;
///
/// // A fake cgroup v2 tree: /svc limited to 150 ms per 100 ms.
/// let root = std::env::temp_dir().join(format!("elastic-cpu-doctest-{}", std::process::id()));
/// fs::create_dir_all(root.join("svc")).unwrap();
/// fs::write(root.join("cgroup.controllers"), "cpu memory\n").unwrap();
/// fs::write(root.join("svc/cpu.max"), "150000 100000\n").unwrap();
///
/// let reading = cpu_quota_at(&root, "0::/svc\n");
/// assert_eq!(reading.cpus(), Some(1.5));
/// assert_eq!(reading.source(), QuotaSource::CgroupV2);
/// println!("{reading}"); // 1.5 CPUs from the cgroup v2 quota (150ms per 100ms in …/svc)
/// fs::remove_dir_all(&root).unwrap();
/// ```
pub fn cpu_quota_at(root: &Path, proc_self_cgroup: &str) -> QuotaReading {
    let Some(placement) = find_cpu_cgroup(proc_self_cgroup) else {
        return QuotaReading::NoQuota(NoQuota::NoCgroup);
    };
    let version = placement.version;
    let Some(mount) = find_mount(root, &placement) else {
        return QuotaReading::NoQuota(NoQuota::NotMounted { version });
    };

    // The levels from the mount root down to the process's cgroup.
    let mut levels = vec![mount.clone()];
    let mut dir = mount.clone();
    for part in cgroup_path_parts(placement.path) {
        match part {
            Some(part) => {
                dir.push(part);
                levels.push(dir.clone());
            }
            None => {
                // `..` or the like: not a path under the mount; see "Containers" above.
                levels.truncate(1);
                break;
            }
        }
    }
    if !levels.last().is_some_and(|d| d.is_dir()) {
        // The host's path in a container that sees its own cgroup as the mount root.
        levels.truncate(1);
    }
    let own_dir = levels.last().cloned().unwrap_or(mount);

    // Deepest first, so that of equal limits the nearest level is reported.
    let mut tightest: Option<CpuQuota> = None;
    let mut first_failure: Option<NoQuota> = None;
    for dir in levels.into_iter().rev() {
        match read_level(&dir, version) {
            Level::Unlimited => {}
            Level::Failed(why) => {
                first_failure.get_or_insert(why);
            }
            Level::Limit {
                quota_us,
                period_us,
            } => {
                let cpus = quota_us as f64 / period_us as f64;
                if tightest.as_ref().is_none_or(|t| cpus < t.cpus) {
                    tightest = Some(CpuQuota {
                        cpus,
                        quota: Duration::from_micros(quota_us),
                        period: Duration::from_micros(period_us),
                        version,
                        cgroup_dir: dir,
                    });
                }
            }
        }
    }
    match (tightest, first_failure) {
        (Some(quota), _) => QuotaReading::Limited(quota),
        (None, Some(why)) => QuotaReading::NoQuota(why),
        (None, None) => QuotaReading::NoQuota(NoQuota::Unlimited {
            version,
            cgroup_dir: own_dir,
        }),
    }
}

/// The process's place in the hierarchy that holds the `cpu` controller.
struct Placement<'a> {
    version: CgroupVersion,
    /// v1: the controller list as written (`cpu,cpuacct`), a candidate mount directory name.
    controllers: &'a str,
    /// The cgroup's path within the hierarchy (`/svc/app`).
    path: &'a str,
}

/// Finds the v1 `cpu` line of `/proc/self/cgroup`, else the v2 line (`0::/path`).
fn find_cpu_cgroup(text: &str) -> Option<Placement<'_>> {
    let mut v2 = None;
    for line in text.lines() {
        // `id:controllers:path`; the path may itself contain `:`.
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        if controllers.split(',').any(|c| c == "cpu") {
            return Some(Placement {
                version: CgroupVersion::V1,
                controllers,
                path,
            });
        }
        if id == "0" && controllers.is_empty() {
            v2 = Some(Placement {
                version: CgroupVersion::V2,
                controllers,
                path,
            });
        }
    }
    v2
}

/// The directory where the placement's hierarchy is mounted under `root`.
fn find_mount(root: &Path, placement: &Placement<'_>) -> Option<PathBuf> {
    match placement.version {
        CgroupVersion::V1 => {
            // Usually `cpu`, or `cpu,cpuacct` with `cpu` a symlink to it; try the list as written
            // and the other usual order too in case the symlinks are missing.
            let names = ["cpu", placement.controllers, "cpu,cpuacct", "cpuacct,cpu"];
            names
                .into_iter()
                .filter(|name| is_plain_component(name))
                .map(|name| root.join(name))
                .find(|dir| dir.is_dir())
        }
        CgroupVersion::V2 => {
            // `cgroup.controllers` marks a v2 mount; without the check the tmpfs holding the v1
            // mounts of a hybrid system would pass for an unlimited v2 hierarchy.
            [root.to_path_buf(), root.join("unified")]
                .into_iter()
                .find(|dir| dir.join("cgroup.controllers").is_file())
        }
    }
}

/// The components of a cgroup path; `None` for one that is not a plain directory name.
fn cgroup_path_parts(path: &str) -> impl Iterator<Item = Option<&str>> {
    path.split('/')
        .filter(|part| !part.is_empty())
        .map(|part| is_plain_component(part).then_some(part))
}

/// A single directory name: nothing that climbs out of or jumps past the directory joined to.
fn is_plain_component(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// The limit one level of the hierarchy sets.
enum Level {
    Unlimited,
    Limit { quota_us: u64, period_us: u64 },
    Failed(NoQuota),
}

/// Reads the limit set at one cgroup directory.
fn read_level(dir: &Path, version: CgroupVersion) -> Level {
    match version {
        CgroupVersion::V1 => {
            let quota_path = dir.join("cpu.cfs_quota_us");
            let quota = match read_small(&quota_path) {
                // No CFS bandwidth control in this kernel: nothing limits.
                FileRead::Missing => return Level::Unlimited,
                FileRead::Failed(why) => return Level::Failed(why),
                FileRead::Text(text) => match text.trim().parse::<i64>() {
                    Ok(-1) => return Level::Unlimited,
                    Ok(quota) => quota,
                    Err(_) => return malformed(quota_path),
                },
            };
            let period_path = dir.join("cpu.cfs_period_us");
            let period = match read_small(&period_path) {
                FileRead::Text(text) => match text.trim().parse::<u64>() {
                    Ok(period) => period,
                    Err(_) => return malformed(period_path),
                },
                // A quota without its period cannot be turned into CPUs.
                FileRead::Missing => return malformed(period_path),
                FileRead::Failed(why) => return Level::Failed(why),
            };
            match u64::try_from(quota) {
                Ok(quota) => checked_limit(quota, period, quota_path),
                Err(_) => malformed(quota_path),
            }
        }
        CgroupVersion::V2 => {
            let path = dir.join("cpu.max");
            let text = match read_small(&path) {
                // The root, or the controller not enabled here: nothing limits at this level.
                FileRead::Missing => return Level::Unlimited,
                FileRead::Failed(why) => return Level::Failed(why),
                FileRead::Text(text) => text,
            };
            let mut fields = text.split_ascii_whitespace();
            let (Some(quota), Some(period), None) = (fields.next(), fields.next(), fields.next())
            else {
                return malformed(path);
            };
            let Ok(period) = period.parse::<u64>() else {
                return malformed(path);
            };
            if quota == "max" {
                return Level::Unlimited;
            }
            match quota.parse::<u64>() {
                Ok(quota) => checked_limit(quota, period, path),
                Err(_) => malformed(path),
            }
        }
    }
}

/// A limit, if the kernel could enforce it and it is worth a plausible number of CPUs.
fn checked_limit(quota_us: u64, period_us: u64, path: PathBuf) -> Level {
    let plausible = (MIN_PERIOD_US..=MAX_PERIOD_US).contains(&period_us)
        && quota_us >= MIN_QUOTA_US
        && quota_us as f64 / period_us as f64 <= MAX_PLAUSIBLE_CPUS;
    if plausible {
        Level::Limit {
            quota_us,
            period_us,
        }
    } else {
        malformed(path)
    }
}

fn malformed(path: PathBuf) -> Level {
    Level::Failed(NoQuota::Malformed { path })
}

/// The outcome of reading one small text file.
enum FileRead {
    Text(String),
    /// Not there; what that means depends on the file.
    Missing,
    Failed(NoQuota),
}

/// Reads at most [`READ_LIMIT`] bytes of a file as UTF-8.
fn read_small(path: &Path) -> FileRead {
    let mut bytes = Vec::new();
    let read = File::open(path).and_then(|file| file.take(READ_LIMIT).read_to_end(&mut bytes));
    match read {
        Ok(_) => match String::from_utf8(bytes) {
            Ok(text) => FileRead::Text(text),
            Err(_) => FileRead::Failed(NoQuota::Malformed {
                path: path.to_path_buf(),
            }),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => FileRead::Missing,
        Err(e) => FileRead::Failed(NoQuota::Unreadable {
            path: path.to_path_buf(),
            error: e.kind(),
        }),
    }
}

/// CPUs the current process may run on: its affinity mask, counted from the
/// `Cpus_allowed_list:` line of `/proc/self/status`. `None` when the file cannot be read or the
/// line is missing or malformed, and on other platforms than Linux (and Android); then count
/// with [`std::thread::available_parallelism`] instead.
///
/// The mask is the process's main thread's as the kernel reports it; threads that changed their
/// own affinity since are not seen. Reads one small file: call it at startup, not per request.
pub fn cpu_affinity() -> Option<usize> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        match read_small(Path::new(PROC_SELF_STATUS)) {
            FileRead::Text(text) => cpu_affinity_in(&text),
            FileRead::Missing | FileRead::Failed(_) => None,
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = PROC_SELF_STATUS;
        None
    }
}

/// The CPU count of the `Cpus_allowed_list:` line in `proc_self_status` (the text of
/// `/proc/self/status`); `None` when the line is missing or malformed. Never panics.
///
/// ```
/// use elastic_cpu_probe::cpu_affinity_in;
/// let status = "Name:\tsvc\nCpus_allowed:\tf0f\nCpus_allowed_list:\t0-3,8,10-11\n";
/// assert_eq!(cpu_affinity_in(status), Some(7));
/// assert_eq!(cpu_affinity_in("Name:\tsvc\n"), None);
/// ```
pub fn cpu_affinity_in(proc_self_status: &str) -> Option<usize> {
    proc_self_status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .and_then(parse_cpu_list)
}

/// Counts the CPUs of a kernel CPU list (`0-3,8,10-11` → 7), as in `Cpus_allowed_list:` or
/// `cpuset.cpus`. Surrounding whitespace is ignored. `None` for an empty list, a reversed range,
/// a CPU named twice, a number no kernel has, or anything else that is not such a list.
///
/// ```
/// use elastic_cpu_probe::parse_cpu_list;
/// assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(7));
/// assert_eq!(parse_cpu_list(" 5\n"), Some(1));
/// assert_eq!(parse_cpu_list("3-1"), None);
/// ```
pub fn parse_cpu_list(list: &str) -> Option<usize> {
    let list = list.trim();
    if list.is_empty() {
        return None;
    }
    let mut count = 0usize;
    // The kernel writes ranges ascending and disjoint; anything else is not its list (and
    // overlapping ranges would be counted twice).
    let mut next_free = 0usize;
    for part in list.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((first, last)) => (cpu_id(first)?, cpu_id(last)?),
            None => {
                let id = cpu_id(part)?;
                (id, id)
            }
        };
        if first > last || first < next_free {
            return None;
        }
        count += last - first + 1;
        next_free = last + 1;
    }
    Some(count)
}

/// One CPU number of a CPU list: plain decimal digits, below [`MAX_CPU_ID`].
fn cpu_id(text: &str) -> Option<usize> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<usize>().ok().filter(|&id| id < MAX_CPU_ID)
}
