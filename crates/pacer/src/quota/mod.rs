//! The CPUs the rates are computed for: the builder's figure, or the least of the runtime's
//! workers, the cgroup CPU quota (kept fractional) and the affinity mask.

use std::fmt;

use elastic_cpu_probe::{CgroupVersion, QuotaReading};

/// Where [`Snapshot::cpus`](crate::Snapshot::cpus) came from: the builder, or the least of the runtime's worker
/// threads, the cgroup CPU quota and the CPUs the process may run on.
///
/// Without [`ElasticBuilder::cpus`](crate::ElasticBuilder::cpus), attaching a runtime sets
/// `cpus` (and the governor resets it every
/// [`quota_reread`](crate::ElasticBuilder::quota_reread), as the quota or the mask change) to
/// the least of
///
/// * its worker threads ([`Workers`](Self::Workers));
/// * the cgroup CPU quota, fractional: a 1.5-CPU quota gives 1.5 ([`Quota`](Self::Quota)), where
///   [`std::thread::available_parallelism`] would round it down to 1;
/// * the CPUs in the process's affinity mask ([`Affinity`](Self::Affinity)), or, when that
///   cannot be read (or off Linux), [`available_parallelism`](std::thread::available_parallelism)
///   ([`AvailableParallelism`](Self::AvailableParallelism)).
///
/// On a tie the first in that order is named. Before a runtime is attached, `cpus` is
/// `available_parallelism` ([`AvailableParallelism`](Self::AvailableParallelism)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CpusSource {
    /// Set by [`ElasticBuilder::cpus`](crate::ElasticBuilder::cpus); nothing else is read.
    Builder,
    /// The runtime's worker threads.
    Workers,
    /// The CPU quota of the process's cgroup (the tightest of it and its ancestors), in that
    /// hierarchy version: v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` or v2 `cpu.max`.
    Quota(CgroupVersion),
    /// The CPUs in the process's affinity mask (`Cpus_allowed_list:` of `/proc/self/status`).
    Affinity,
    /// [`std::thread::available_parallelism`] (1 if even that is unknown): before a runtime is
    /// attached, or when the affinity mask cannot be read.
    #[default]
    AvailableParallelism,
}

impl fmt::Display for CpusSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpusSource::Builder => f.write_str("the builder"),
            CpusSource::Workers => f.write_str("the worker threads"),
            CpusSource::Quota(version) => write!(f, "the {version} CPU quota"),
            CpusSource::Affinity => f.write_str("the affinity mask"),
            CpusSource::AvailableParallelism => f.write_str("available_parallelism"),
        }
    }
}

/// What decides the CPUs the rate is computed for; read when a runtime is attached, and again
/// every [`ElasticBuilder::quota_reread`](crate::ElasticBuilder::quota_reread).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpusInputs<'a> {
    /// [`ElasticBuilder::cpus`](crate::ElasticBuilder::cpus), validated by the builder.
    pub(crate) builder: Option<f64>,
    /// The runtime's worker threads.
    pub(crate) workers: usize,
    /// The cgroup CPU quota.
    pub(crate) quota: &'a QuotaReading,
    /// CPUs in the affinity mask; `None`: unknown.
    pub(crate) affinity: Option<usize>,
    /// `std::thread::available_parallelism`; `None`: unknown.
    pub(crate) available: Option<usize>,
}

/// The CPUs the rate is computed for and where the figure came from: the builder's value if
/// given, else the least of the workers (at least 1), the quota (fractional) and the affinity
/// count, or available parallelism when the affinity is unknown. A figure that is not a
/// positive finite number is left out; on a tie the earlier in that order is named (see
/// [`CpusSource`]).
pub(crate) fn choose_cpus(inputs: &CpusInputs<'_>) -> (f64, CpusSource) {
    if let Some(cpus) = inputs.builder {
        return (cpus, CpusSource::Builder);
    }
    let mut best = (inputs.workers.max(1) as f64, CpusSource::Workers);
    let mut consider = |cpus: f64, source: CpusSource| {
        if cpus.is_finite() && cpus > 0.0 && cpus < best.0 {
            best = (cpus, source);
        }
    };
    if let QuotaReading::Limited(quota) = inputs.quota {
        consider(quota.cpus, CpusSource::Quota(quota.version));
    }
    match (
        inputs.affinity.filter(|&n| n > 0),
        inputs.available.filter(|&n| n > 0),
    ) {
        (Some(n), _) => consider(n as f64, CpusSource::Affinity),
        (None, Some(n)) => consider(n as f64, CpusSource::AvailableParallelism),
        (None, None) => {}
    }
    best
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use elastic_cpu_probe::{CpuQuota, NoQuota};

    use super::*;

    fn quota(cpus: f64, version: CgroupVersion) -> QuotaReading {
        QuotaReading::Limited(CpuQuota {
            cpus,
            quota: Duration::from_millis(150),
            period: Duration::from_millis(100),
            version,
            cgroup_dir: PathBuf::from("/sys/fs/cgroup/cpu/svc"),
        })
    }

    fn unlimited() -> QuotaReading {
        QuotaReading::NoQuota(NoQuota::Unlimited {
            version: CgroupVersion::V2,
            cgroup_dir: PathBuf::from("/sys/fs/cgroup"),
        })
    }

    /// No builder value; 8 CPUs in the mask and available.
    fn inputs(workers: usize, quota: &QuotaReading) -> CpusInputs<'_> {
        CpusInputs {
            builder: None,
            workers,
            quota,
            affinity: Some(8),
            available: Some(8),
        }
    }

    #[test]
    fn no_quota() {
        let q = unlimited();
        assert_eq!(choose_cpus(&inputs(2, &q)), (2.0, CpusSource::Workers));
        let few_cpus = CpusInputs {
            affinity: Some(4),
            available: Some(4),
            ..inputs(16, &q)
        };
        assert_eq!(choose_cpus(&few_cpus), (4.0, CpusSource::Affinity));
        let unsupported = QuotaReading::NoQuota(NoQuota::Unsupported);
        assert_eq!(
            choose_cpus(&inputs(3, &unsupported)),
            (3.0, CpusSource::Workers)
        );
    }

    #[test]
    fn a_fractional_quota_stays_fractional() {
        let q = quota(1.5, CgroupVersion::V1);
        assert_eq!(
            choose_cpus(&inputs(2, &q)),
            (1.5, CpusSource::Quota(CgroupVersion::V1))
        );
        // available_parallelism rounds the quota down; it is not consulted when the mask is
        // known.
        let rounded = CpusInputs {
            available: Some(1),
            ..inputs(2, &q)
        };
        assert_eq!(
            choose_cpus(&rounded),
            (1.5, CpusSource::Quota(CgroupVersion::V1))
        );
        let q = quota(0.25, CgroupVersion::V2);
        assert_eq!(
            choose_cpus(&inputs(2, &q)),
            (0.25, CpusSource::Quota(CgroupVersion::V2))
        );
    }

    #[test]
    fn fewer_workers_than_the_quota() {
        let q = quota(4.0, CgroupVersion::V2);
        assert_eq!(choose_cpus(&inputs(2, &q)), (2.0, CpusSource::Workers));
        // A tie names the workers.
        let q = quota(2.0, CgroupVersion::V2);
        assert_eq!(choose_cpus(&inputs(2, &q)), (2.0, CpusSource::Workers));
    }

    #[test]
    fn a_narrow_affinity_mask_beats_the_quota() {
        let q = quota(1.5, CgroupVersion::V2);
        let pinned = CpusInputs {
            affinity: Some(1),
            available: Some(1),
            ..inputs(2, &q)
        };
        assert_eq!(choose_cpus(&pinned), (1.0, CpusSource::Affinity));
    }

    #[test]
    fn the_builder_value_wins() {
        let q = quota(1.5, CgroupVersion::V1);
        let given = CpusInputs {
            builder: Some(6.0),
            affinity: Some(1),
            ..inputs(2, &q)
        };
        assert_eq!(choose_cpus(&given), (6.0, CpusSource::Builder));
    }

    #[test]
    fn malformed_inputs_fall_back() {
        // An unreadable affinity mask: available_parallelism (which may round a quota down).
        let q = unlimited();
        let no_mask = CpusInputs {
            affinity: None,
            available: Some(1),
            ..inputs(2, &q)
        };
        assert_eq!(
            choose_cpus(&no_mask),
            (1.0, CpusSource::AvailableParallelism)
        );
        let zero_mask = CpusInputs {
            affinity: Some(0),
            ..no_mask
        };
        assert_eq!(
            choose_cpus(&zero_mask),
            (1.0, CpusSource::AvailableParallelism)
        );
        // Nothing known but the workers; no workers counts as one.
        let nothing = CpusInputs {
            affinity: None,
            available: None,
            ..inputs(0, &q)
        };
        assert_eq!(choose_cpus(&nothing), (1.0, CpusSource::Workers));
        // A malformed quota file is no quota.
        let malformed = QuotaReading::NoQuota(NoQuota::Malformed {
            path: PathBuf::from("/sys/fs/cgroup/svc/cpu.max"),
        });
        assert_eq!(
            choose_cpus(&inputs(2, &malformed)),
            (2.0, CpusSource::Workers)
        );
        // A quota figure that is no number of CPUs is left out.
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -1.5] {
            let q = quota(bad, CgroupVersion::V1);
            assert_eq!(
                choose_cpus(&inputs(2, &q)),
                (2.0, CpusSource::Workers),
                "{bad}"
            );
        }
    }
}
