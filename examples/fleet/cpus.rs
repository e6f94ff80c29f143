//! The CPU plan of a pinned run (`--cpus-per-node N`): node `i` (0-based) and its load
//! generator get the `i`-th run of `N` CPUs among those the fleet may use, so that no two nodes
//! share a core. A node's quota must fit in its CPUs.

use crate::node::NodeSpec;
use std::fmt;

/// Why the nodes cannot each have CPUs of their own.
#[derive(Clone, Debug, PartialEq)]
pub enum CpuPlanError {
    /// `nodes * per_node` is more than the CPUs the fleet may use.
    TooFew {
        nodes: usize,
        per_node: usize,
        online: usize,
    },
    /// A node's quota is more than its CPUs (it would never bind there).
    QuotaAbove {
        node: String,
        quota: f64,
        per_node: usize,
    },
    /// The CPUs the fleet may use cannot be read (not Linux).
    Unknown,
}

impl fmt::Display for CpuPlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuPlanError::TooFew {
                nodes,
                per_node,
                online,
            } => write!(
                f,
                "--cpus-per-node {per_node}: {nodes} {} of {per_node} CPUs {} {} CPUs, this \
                 process may use {online}",
                if *nodes == 1 { "node" } else { "nodes" },
                if *nodes == 1 { "needs" } else { "need" },
                nodes.saturating_mul(*per_node)
            ),
            CpuPlanError::QuotaAbove {
                node,
                quota,
                per_node,
            } => write!(
                f,
                "--cpus-per-node {per_node}: {node}'s quota of {quota} CPUs is more than its \
                 {per_node} CPUs (it would never bind); give quotas of at most {per_node}"
            ),
            CpuPlanError::Unknown => f.write_str(
                "--cpus-per-node: the CPUs this process may use cannot be read (Linux only)",
            ),
        }
    }
}

impl std::error::Error for CpuPlanError {}

/// Each node's CPUs: node `i` gets `online[i * per_node .. (i + 1) * per_node]` (`online`: the
/// CPUs the fleet may use, ascending).
pub fn plan(
    nodes: usize,
    per_node: usize,
    online: &[usize],
) -> Result<Vec<Vec<usize>>, CpuPlanError> {
    let need = nodes.checked_mul(per_node);
    if per_node == 0 || need.is_none_or(|n| n > online.len()) {
        return Err(CpuPlanError::TooFew {
            nodes,
            per_node,
            online: online.len(),
        });
    }
    Ok(online
        .chunks(per_node)
        .take(nodes)
        .map(<[usize]>::to_vec)
        .collect())
}

/// Nodes that fit when `--nodes` and the lists do not say: one per `per_node` CPUs.
pub fn default_nodes(per_node: usize, online: usize) -> usize {
    online.checked_div(per_node).unwrap_or(0)
}

/// Every node's quota fits in its `per_node` CPUs (`(name, quota)` per node).
pub fn check_quotas<'a>(
    per_node: usize,
    quotas: impl IntoIterator<Item = (&'a str, f64)>,
) -> Result<(), CpuPlanError> {
    match quotas.into_iter().find(|(_, q)| *q > per_node as f64) {
        Some((node, quota)) => Err(CpuPlanError::QuotaAbove {
            node: node.into(),
            quota,
            per_node,
        }),
        None => Ok(()),
    }
}

/// CPUs as a short list: `0`, `0,1`, `2,3`.
pub fn fmt_cpus(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The CPUs the library should compute a node's rates for: the least of its workers, its
/// quota and the CPUs it may run on (as the library's `CpusSource` lists them).
pub fn expected_lib_cpus(workers: usize, quota: f64, allowed: usize) -> f64 {
    (workers.max(1) as f64)
        .min(quota)
        .min(allowed.max(1) as f64)
}

/// What is wrong with a started node's CPUs, from its first line: not on the CPUs it was
/// given, or the library computing for other CPUs than its workers, quota and CPUs give. None:
/// nothing (or nothing to tell from).
pub fn check_node(
    spec: &NodeSpec,
    allowed: Option<&[usize]>,
    lib_cpus: Option<f64>,
) -> Option<String> {
    let allowed = allowed?;
    if !spec.cpus.is_empty() && allowed != spec.cpus.as_slice() {
        return Some(format!(
            "{} runs on CPUs {}, not on its {}",
            spec.name,
            fmt_cpus(allowed),
            fmt_cpus(&spec.cpus)
        ));
    }
    let want = expected_lib_cpus(spec.workers, spec.quota, allowed.len());
    let lib = lib_cpus?;
    ((lib - want).abs() > 1e-6).then(|| {
        format!(
            "{}: the library computes for {lib:.2} CPUs, not the {want:.2} its {} workers, quota \
             and {} CPUs give",
            spec.name,
            spec.workers,
            allowed.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_gets_its_own_run_of_cpus() {
        assert_eq!(plan(2, 1, &[0, 1]), Ok(vec![vec![0], vec![1]]));
        assert_eq!(
            plan(2, 2, &[0, 1, 2, 3, 4]),
            Ok(vec![vec![0, 1], vec![2, 3]])
        );
        // The CPUs the process may use, not 0..n: a mask of 2, 5, 6, 7.
        assert_eq!(plan(2, 2, &[2, 5, 6, 7]), Ok(vec![vec![2, 5], vec![6, 7]]));
        assert_eq!(plan(1, 1, &[3]), Ok(vec![vec![3]]));
    }

    #[test]
    fn too_few_cpus_is_an_error_that_says_how_many() {
        let e = plan(3, 1, &[0, 1]).unwrap_err();
        assert_eq!(
            e,
            CpuPlanError::TooFew {
                nodes: 3,
                per_node: 1,
                online: 2
            }
        );
        assert!(
            e.to_string().contains("3 nodes of 1 CPUs need 3 CPUs"),
            "{e}"
        );
        assert!(plan(2, 2, &[0, 1, 2]).is_err());
        assert!(plan(1, 0, &[0, 1]).is_err());
        assert!(plan(usize::MAX, 2, &[0, 1]).is_err());
    }

    #[test]
    fn default_nodes_fill_the_cpus() {
        assert_eq!(default_nodes(1, 2), 2);
        assert_eq!(default_nodes(2, 5), 2);
        assert_eq!(default_nodes(3, 2), 0);
        assert_eq!(default_nodes(0, 2), 0);
    }

    #[test]
    fn a_quota_above_a_nodes_cpus_is_refused() {
        assert_eq!(check_quotas(1, [("node1", 0.5), ("node2", 1.0)]), Ok(()));
        let e = check_quotas(1, [("node1", 0.5), ("node2", 1.5)]).unwrap_err();
        assert!(e.to_string().contains("node2's quota of 1.5"), "{e}");
        assert_eq!(check_quotas(2, [("node1", 1.5)]), Ok(()));
        assert_eq!(fmt_cpus(&[2, 3]), "2,3");
    }

    fn spec(quota: f64, cpus: &[usize]) -> NodeSpec {
        NodeSpec {
            name: "node1".into(),
            quota,
            workers: 2,
            work_us: 100.0,
            slice_ms: None,
            cpus: cpus.to_vec(),
        }
    }

    #[test]
    fn a_node_is_checked_against_its_cpus_and_the_librarys_count() {
        assert_eq!(expected_lib_cpus(2, 0.5, 1), 0.5);
        assert_eq!(expected_lib_cpus(2, 1.0, 1), 1.0);
        assert_eq!(expected_lib_cpus(4, 3.0, 2), 2.0);
        assert_eq!(expected_lib_cpus(1, 3.0, 2), 1.0);
        let s = spec(0.5, &[1]);
        assert_eq!(check_node(&s, Some(&[1]), Some(0.5)), None);
        assert_eq!(check_node(&s, None, Some(0.5)), None);
        let e = check_node(&s, Some(&[0, 1]), Some(0.5)).unwrap();
        assert!(e.contains("runs on CPUs 0,1, not on its 1"), "{e}");
        let e = check_node(&s, Some(&[1]), Some(2.0)).unwrap();
        assert!(e.contains("computes for 2.00 CPUs, not the 0.50"), "{e}");
        // Shared cores: the whole mask counts.
        assert_eq!(check_node(&spec(1.5, &[]), Some(&[0, 1]), Some(1.5)), None);
    }
}
