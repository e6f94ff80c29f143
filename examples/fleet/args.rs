//! Command-line flags of the fleet example (clap, derive API), and the per-node mix they give.

use crate::cpus::{self, CpuPlanError};
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use elastic_cpu_examples::cli::{at_least_1, parse_or_exit, positive};
use elastic_cpu_examples::report::ReportArgs;

/// The default mix, node by node (cycled for more nodes): different quotas, and foreground
/// shares of them chosen so that the spare quota's order is not the quota's.
pub const DEFAULT_QUOTAS: [f64; 3] = [0.5, 0.6, 0.8];
/// See [`DEFAULT_QUOTAS`].
pub const DEFAULT_FG_SHARES: [f64; 3] = [0.2, 0.6, 0.4];

/// Most nodes a run takes (the charts draw one line per node).
pub const MAX_NODES: usize = 8;

const ABOUT: &str = "\
The fleet: nodes that differ find their own elastic CPU levels. One command starts N node
processes (this binary again), each in a cgroup of its own with its own CPU quota, each the
demo's loopback service on a runtime built through elastic-cpu with every setting at its
default, plus a paced scan. One open-loop load generator per node runs here, outside the
quotas (real-time priority: clients on other machines). Phases: every node's baseline (no
scan), all scans on until they settle, a foreground step (x1.5) on one node, and back, then
each node in turn with its own scan off and the others' on (its own-scan baseline). The nodes
share every core unless --cpus-per-node gives each node and its load generator CPUs of its
own. Prints a line a second and a summary, writes a JSON and an HTML report. Needs a writable
cgroup `cpu` controller (v1 or v2; otherwise it says why in one line and exits 0). About 3
minutes at the defaults (2.5 pinned), 55 s with --quick (40 s pinned).";

/// Parsed flags (the lists are `std::vec::Vec`, so that clap takes each as one value).
#[derive(Clone, Debug, Parser)]
#[command(name = "fleet", about = ABOUT)]
pub struct Args {
    /// nodes [default: the length of the longest of --quotas, --fg-shares, --rates; else with
    /// --cpus-per-node N the CPUs this process may use over N, else 3]
    #[arg(long, value_name = "N", value_parser = at_least_1)]
    pub nodes: Option<usize>,
    /// each node's CPU quota in CPUs, comma-separated; one value is every node's
    /// [default: 0.5,0.6,0.8]
    #[arg(long, value_name = "LIST", value_parser = list)]
    pub quotas: Option<std::vec::Vec<f64>>,
    /// each node's foreground as a share of its quota (its rate calibrated to it at the start:
    /// the node's CPU per request); one value is every node's [default: 0.2,0.6,0.4]
    #[arg(long, value_name = "LIST", value_parser = list, conflicts_with = "rates")]
    pub fg_shares: Option<std::vec::Vec<f64>>,
    /// each node's foreground in requests per second instead of --fg-shares (no calibration)
    #[arg(long, value_name = "LIST", value_parser = list)]
    pub rates: Option<std::vec::Vec<f64>>,
    /// the node whose foreground steps, 1-based [default: the last]
    #[arg(long, value_name = "K", value_parser = at_least_1)]
    pub step_node: Option<usize>,
    /// the nodes whose scan runs in the paced phase, 1-based, comma-separated (to tell what a
    /// node's own scan costs it from what the others' cost it; the bars still count every node)
    /// [default: every node]
    #[arg(long, value_name = "LIST", value_parser = node_list)]
    pub scan_nodes: Option<std::vec::Vec<usize>>,
    /// pin node K (1-based) and its load generator to the K-th N CPUs of those this process may
    /// use, so that no two nodes share a core; each node's quota must be at most N CPUs
    /// [default: off, the nodes and the load generators share every core]
    #[arg(long, value_name = "N", value_parser = at_least_1)]
    pub cpus_per_node: Option<usize>,
    /// length of each node's own-scan phase: its scan off, the other nodes' on, one node after
    /// the other at the end of the run; its second half is the baseline the node's own-scan
    /// ratio is taken against; 0: none [default: 12, 6 with --quick; 0 with --cpus-per-node]
    #[arg(long, value_name = "SECS")]
    pub own_off_secs: Option<usize>,
    /// the step's factor on that node's foreground rate
    #[arg(long, value_name = "X", default_value = "1.5", value_parser = positive)]
    pub step_factor: f64,
    /// a short run, about 55 s (40 s pinned), to see the report (its figures noisier than the
    /// default's): baseline 6 s, paced 14 s (the last 5 at rest), step and back 6 s each,
    /// warm-up 2 s, own-scan phases 6 s each; flags given beside it override these
    #[arg(long)]
    pub quick: bool,
    /// length of the baseline phase (no scan), warm-up included
    #[arg(long, value_name = "SECS", default_value = "20", default_value_if("quick", "true", Some("6")), value_parser = at_least_1)]
    pub baseline_secs: usize,
    /// length of the paced phase (every node's scan on); its last --rest-secs are "at rest"
    #[arg(long, value_name = "SECS", default_value = "70", default_value_if("quick", "true", Some("14")), value_parser = at_least_1)]
    pub paced_secs: usize,
    /// the end of the paced phase the at-rest figures are taken over
    #[arg(long, value_name = "SECS", default_value = "20", default_value_if("quick", "true", Some("5")), value_parser = at_least_1)]
    pub rest_secs: usize,
    /// length of the step phase (one node's foreground x --step-factor), and of the phase back
    #[arg(long, value_name = "SECS", default_value = "25", default_value_if("quick", "true", Some("6")), value_parser = at_least_1)]
    pub step_secs: usize,
    /// start of the baseline and paced phases left out of their latency and CPU figures
    #[arg(
        long,
        value_name = "SECS",
        default_value = "4",
        default_value_if("quick", "true", Some("2"))
    )]
    pub warmup_secs: usize,
    /// worker threads of each node's runtime
    #[arg(long, value_name = "N", default_value = "2", value_parser = at_least_1)]
    pub workers: usize,
    /// CPU work per request in microseconds
    #[arg(long, value_name = "N", default_value = "100", value_parser = positive)]
    pub work_us: f64,
    /// each load generator's connections to its node
    #[arg(long, value_name = "N", default_value = "2", value_parser = at_least_1)]
    pub conns: usize,
    /// the library's slice in ms on every node (10 ..= 100), to try smaller grants against
    /// sub-CPU quotas [default: the library's, every other setting is always its default]
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(10..=100))]
    pub slice_ms: Option<u64>,
    /// run the load generators at normal priority (on the nodes' cores, competing with them)
    /// instead of real-time
    #[arg(long)]
    pub client_normal: bool,
    #[command(flatten)]
    pub reports: ReportArgs,
    /// RNG seed
    #[arg(long, value_name = "N", default_value = "1")]
    pub seed: u64,
    /// The CPUs this process may use (read once, before any thread is pinned).
    #[arg(skip)]
    pub online: Vec<usize>,
    /// Each node's CPUs in a pinned run (empty: the nodes share every core).
    #[arg(skip)]
    pub cpu_plan: Vec<Vec<usize>>,
}

/// A comma-separated list of positive numbers.
pub fn list(v: &str) -> Result<Vec<f64>, String> {
    list_of(v, positive)
}

/// A comma-separated list of 1-based node numbers.
fn node_list(v: &str) -> Result<Vec<usize>, String> {
    list_of(v, at_least_1)
}

/// A comma-separated, non-empty list, each value read by `one`.
fn list_of<T>(v: &str, one: fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    let out: Vec<T> = v
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| one(s).map_err(|e| format!("{s:?}: {e}")))
        .collect::<Result<_, _>>()?;
    if out.is_empty() {
        return Err("an empty list".into());
    }
    Ok(out)
}

/// How a node's foreground rate is given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fg {
    /// A share of its quota: the rate is calibrated at the start.
    Share(f64),
    /// Requests per second.
    Rate(f64),
}

/// One node's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeMix {
    /// `node1`, `node2`, ...
    pub name: String,
    /// CPU quota in CPUs.
    pub quota: f64,
    /// Its foreground.
    pub fg: Fg,
}

/// `list` for `n` nodes: one value for every node, `n` values one each; `default` cycled
/// without a list. `flag` names it in the error.
fn per_node(
    flag: &str,
    list: Option<&[f64]>,
    n: usize,
    default: &[f64],
) -> Result<Vec<f64>, String> {
    match list {
        None => Ok((0..n).map(|i| default[i % default.len()]).collect()),
        Some([one]) => Ok(vec![*one; n]),
        Some(l) if l.len() == n => Ok(l.to_vec()),
        Some(l) => Err(format!(
            "{flag} has {} values for {n} nodes: give one, or one per node",
            l.len()
        )),
    }
}

impl Args {
    /// Parse the process's flags, or exit (see [`parse_or_exit`]).
    pub fn from_env() -> Args {
        let online = elastic_cpu_examples::affinity::allowed();
        parse_or_exit(|a: Args| a.finish(online))
    }

    /// Check the flags together, with `online` the CPUs this process may use (None: unknown),
    /// and make the CPU plan of a pinned run.
    fn finish(mut self, online: Option<Vec<usize>>) -> Result<Args, clap::Error> {
        let err = |msg: String| Args::command().error(ErrorKind::ValueValidation, msg);
        if let Some(per_node) = self.cpus_per_node {
            self.online = online.ok_or_else(|| err(CpuPlanError::Unknown.to_string()))?;
            let mix = self.mix().map_err(err)?;
            cpus::check_quotas(per_node, mix.iter().map(|m| (m.name.as_str(), m.quota)))
                .map_err(|e| err(e.to_string()))?;
            self.cpu_plan =
                cpus::plan(mix.len(), per_node, &self.online).map_err(|e| err(e.to_string()))?;
        }
        let mix = self.mix().map_err(err)?;
        if let Some(k) = self.step_node {
            if k > mix.len() {
                return Err(err(format!(
                    "--step-node {k}: there are {} nodes",
                    mix.len()
                )));
            }
        }
        if let Some(k) = self.scan_nodes.iter().flatten().find(|&&k| k > mix.len()) {
            return Err(err(format!(
                "--scan-nodes {k}: there are {} nodes",
                mix.len()
            )));
        }
        if self.rest_secs + self.warmup_secs > self.paced_secs {
            return Err(err(
                "--rest-secs and --warmup-secs together must fit in --paced-secs".into(),
            ));
        }
        if self.warmup_secs + 2 > self.baseline_secs {
            return Err(err(
                "--baseline-secs must be at least --warmup-secs + 2".into()
            ));
        }
        if self.step_secs < 2 {
            return Err(err("--step-secs must be at least 2".into()));
        }
        if (1..4).contains(&self.own_off_secs()) {
            return Err(err("--own-off-secs must be 0 or at least 4".into()));
        }
        Ok(self)
    }

    /// The length of each node's own-scan phase (0: none).
    pub fn own_off_secs(&self) -> usize {
        match (self.own_off_secs, self.cpus_per_node, self.quick) {
            (Some(s), _, _) => s,
            (None, Some(_), _) => 0,
            (None, None, true) => 6,
            (None, None, false) => 12,
        }
    }

    /// How many nodes run.
    pub fn node_count(&self) -> usize {
        self.nodes.unwrap_or_else(|| {
            [&self.quotas, &self.fg_shares, &self.rates]
                .iter()
                .filter_map(|l| l.as_ref().map(Vec::len))
                .max()
                .or_else(|| {
                    // At least one: too few CPUs for it is the plan's error.
                    (self.cpus_per_node).map(|n| cpus::default_nodes(n, self.online.len()).max(1))
                })
                .unwrap_or(DEFAULT_QUOTAS.len())
        })
    }

    /// Every node's settings, or why the flags do not give them.
    pub fn mix(&self) -> Result<Vec<NodeMix>, String> {
        let n = self.node_count();
        if n > MAX_NODES {
            return Err(format!("{n} nodes: at most {MAX_NODES}"));
        }
        let quotas = per_node("--quotas", self.quotas.as_deref(), n, &DEFAULT_QUOTAS)?;
        let fg: Vec<Fg> = match &self.rates {
            Some(r) => per_node("--rates", Some(r), n, &[])?
                .into_iter()
                .map(Fg::Rate)
                .collect(),
            None => per_node(
                "--fg-shares",
                self.fg_shares.as_deref(),
                n,
                &DEFAULT_FG_SHARES,
            )?
            .into_iter()
            .map(Fg::Share)
            .collect(),
        };
        if let Some((i, s)) = fg.iter().enumerate().find_map(|(i, f)| match f {
            Fg::Share(s) if *s >= 1.0 => Some((i, *s)),
            _ => None,
        }) {
            return Err(format!(
                "--fg-shares: node{}'s {s} leaves nothing of its quota (shares are below 1)",
                i + 1
            ));
        }
        Ok(quotas
            .into_iter()
            .zip(fg)
            .enumerate()
            .map(|(i, (quota, fg))| NodeMix {
                name: format!("node{}", i + 1),
                quota,
                fg,
            })
            .collect())
    }

    /// Whether node `i` (0-based) runs its scan in the paced phase.
    pub fn scans(&self, i: usize) -> bool {
        self.scan_nodes
            .as_ref()
            .is_none_or(|l| l.contains(&(i + 1)))
    }

    /// The stepped node, 0-based.
    pub fn step_index(&self, nodes: usize) -> usize {
        self.step_node.map_or(nodes - 1, |k| k - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parse `flags` on a machine whose process may use `online`.
    fn parse_on(flags: &[&str], online: Option<&[usize]>) -> Result<Args, String> {
        let argv = std::iter::once("fleet").chain(flags.iter().copied());
        elastic_cpu_examples::cli::parse_from::<Args, _, _>(argv)
            .and_then(|a: Args| a.finish(online.map(<[usize]>::to_vec)))
            .map_err(|e| e.to_string())
    }

    /// Parse `flags` on a machine of two CPUs.
    fn parse(flags: &[&str]) -> Result<Args, String> {
        parse_on(flags, Some(&[0, 1]))
    }

    #[test]
    fn quick_shortens_the_phases_and_flags_beside_it_win() {
        let lengths = |a: &Args| {
            (
                a.baseline_secs,
                a.paced_secs,
                a.rest_secs,
                a.step_secs,
                a.warmup_secs,
            )
        };
        assert_eq!(lengths(&parse(&[]).unwrap()), (20, 70, 20, 25, 4));
        assert_eq!(lengths(&parse(&["--quick"]).unwrap()), (6, 14, 5, 6, 2));
        let q = parse(&["--quick", "--paced-secs", "30"]).unwrap();
        assert_eq!(lengths(&q), (6, 30, 5, 6, 2));
    }

    #[test]
    fn the_defaults_are_three_different_nodes() {
        let a = parse(&[]).unwrap();
        let mix = a.mix().unwrap();
        assert_eq!(mix.len(), 3);
        assert_eq!(
            mix.iter().map(|m| m.quota).collect::<Vec<_>>(),
            vec![0.5, 0.6, 0.8]
        );
        assert_eq!(mix[1].fg, Fg::Share(0.6));
        assert_eq!(mix[2].name, "node3");
        assert_eq!(a.step_index(3), 2);
        assert!(a.cpu_plan.is_empty(), "the nodes share the cores");
        assert_eq!(a.own_off_secs(), 12);
        assert_eq!(parse(&["--quick"]).unwrap().own_off_secs(), 6);
    }

    #[test]
    fn pinned_nodes_default_to_one_per_n_cpus_with_the_first_defaults() {
        let a = parse(&["--cpus-per-node", "1"]).unwrap();
        let mix = a.mix().unwrap();
        assert_eq!(mix.len(), 2);
        assert_eq!(
            mix.iter().map(|m| (m.quota, m.fg)).collect::<Vec<_>>(),
            vec![(0.5, Fg::Share(0.2)), (0.6, Fg::Share(0.6))]
        );
        assert_eq!(a.cpu_plan, vec![vec![0], vec![1]]);
        assert_eq!(a.step_index(2), 1);
        assert_eq!(a.own_off_secs(), 0, "no own-scan phases when pinned");
        // Four CPUs, two each; a mask that is not 0..n.
        let a = parse_on(&["--cpus-per-node", "2"], Some(&[1, 2, 5, 6])).unwrap();
        assert_eq!(a.cpu_plan, vec![vec![1, 2], vec![5, 6]]);
        // Lists and --nodes still give the count; --own-off-secs runs the phases anyway.
        let a = parse_on(
            &[
                "--cpus-per-node",
                "1",
                "--nodes",
                "3",
                "--own-off-secs",
                "8",
            ],
            Some(&[0, 1, 2, 3]),
        )
        .unwrap();
        assert_eq!(a.cpu_plan, vec![vec![0], vec![1], vec![2]]);
        assert_eq!(a.own_off_secs(), 8);
    }

    #[test]
    fn pinned_nodes_that_do_not_fit_are_errors_that_say_why() {
        let e = parse(&["--cpus-per-node", "1", "--nodes", "3"]).unwrap_err();
        assert!(
            e.contains("3 nodes of 1 CPUs need 3 CPUs, this process may use 2"),
            "{e}"
        );
        let e = parse(&["--cpus-per-node", "3"]).unwrap_err();
        assert!(e.contains("1 node of 3 CPUs needs 3 CPUs"), "{e}");
        let e = parse(&["--cpus-per-node", "1", "--quotas", "0.5,1.5"]).unwrap_err();
        assert!(e.contains("node2's quota of 1.5"), "{e}");
        let e = parse_on(&["--cpus-per-node", "1"], None).unwrap_err();
        assert!(e.contains("cannot be read"), "{e}");
        let e = parse(&["--cpus-per-node", "0"]).unwrap_err();
        assert!(e.contains("\"0\"") || e.contains("at least"), "{e}");
        let e = parse(&["--own-off-secs", "3"]).unwrap_err();
        assert!(e.contains("--own-off-secs"), "{e}");
    }

    #[test]
    fn lists_give_the_node_count_and_one_value_is_every_nodes() {
        let a = parse(&["--quotas", "0.3, 0.4,0.5,0.6", "--fg-shares", "0.5"]).unwrap();
        let mix = a.mix().unwrap();
        assert_eq!(mix.len(), 4);
        assert!(mix.iter().all(|m| m.fg == Fg::Share(0.5)));
        let a = parse(&["--nodes", "5"]).unwrap();
        let mix = a.mix().unwrap();
        assert_eq!(mix[3].quota, 0.5, "defaults cycle");
        let a = parse(&["--rates", "100,200", "--step-node", "1"]).unwrap();
        let mix = a.mix().unwrap();
        assert_eq!(mix[1].fg, Fg::Rate(200.0));
        assert_eq!(mix[1].quota, 0.6);
        assert_eq!(a.step_index(2), 0);
        assert!(a.scans(1));
        let a = parse(&["--scan-nodes", "1, 3"]).unwrap();
        assert_eq!((a.scans(0), a.scans(1), a.scans(2)), (true, false, true));
    }

    #[test]
    fn bad_flags_are_errors_that_say_why() {
        let e = parse(&["--nodes", "2", "--quotas", "0.5,0.6,0.8"]).unwrap_err();
        assert!(e.contains("3 values for 2 nodes"), "{e}");
        let e = parse(&["--quotas", "0.5,x"]).unwrap_err();
        assert!(e.contains("\"x\""), "{e}");
        let e = parse(&["--quotas", "0.5,-1"]).unwrap_err();
        assert!(e.contains("positive"), "{e}");
        let e = parse(&["--fg-shares", "0.5,1.2,0.3"]).unwrap_err();
        assert!(e.contains("node2"), "{e}");
        let e = parse(&["--step-node", "4"]).unwrap_err();
        assert!(e.contains("there are 3 nodes"), "{e}");
        let e = parse(&["--scan-nodes", "1,4"]).unwrap_err();
        assert!(e.contains("--scan-nodes 4"), "{e}");
        let e = parse(&["--scan-nodes", "0"]).unwrap_err();
        assert!(e.contains("\"0\""), "{e}");
        let e = parse(&["--rates", "100", "--fg-shares", "0.2"]).unwrap_err();
        assert!(e.contains("cannot be used with"), "{e}");
        let e = parse(&["--paced-secs", "10", "--rest-secs", "8"]).unwrap_err();
        assert!(e.contains("must fit"), "{e}");
        let e = parse(&["--nodes", "9"]).unwrap_err();
        assert!(e.contains("at most 8"), "{e}");
        let e = parse(&["--quotas", ","]).unwrap_err();
        assert!(e.contains("empty"), "{e}");
    }
}
