//! A CPU quota that changes at run time (an in-place pod resize, a vertical autoscaler): the
//! governor reads it again every `quota_reread`, and the CPUs, the rates, the holder caps, the
//! headroom and the quota's fields of the snapshot follow from that tick on. Fake cgroup trees
//! (v2 and v1) on disk, rewritten mid-run, read through the script on the manual clock.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use elastic_cpu_pacer::gate::{ConnectionGate, GateSettings};
use elastic_cpu_pacer::snapshot::CpusSource;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::testing::{ManualClock, Script};
use elastic_cpu_pacer::{BuildError, Elastic};
use elastic_cpu_probe::CgroupVersion;

/// The governor's tick (the default).
const TICK: Duration = Duration::from_millis(100);
/// The re-read period in these tests: five ticks.
const REREAD: Duration = Duration::from_millis(500);
const REREAD_TICKS: usize = 5;
/// The elastic share, fixed: the own class's rate is `SHARE × cpus`.
const SHARE: f64 = 0.5;
/// The gate's share, fixed: its holder cap is `ceil(GATE_SHARE × cpus)`.
const GATE_SHARE: f64 = 0.9;
/// The runtime's workers, and the CPUs in the scripted affinity mask.
const WORKERS: usize = 4;
const MASK: usize = 8;

/// A fake cgroup file system root (removed on drop), the process in its `/svc` cgroup.
struct Tree {
    root: PathBuf,
    version: CgroupVersion,
}

impl Tree {
    fn new(name: &str, version: CgroupVersion) -> Tree {
        let root = std::env::temp_dir().join(format!(
            "elastic-cpu-quota-change-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&root);
        let tree = Tree { root, version };
        fs::create_dir_all(tree.svc()).unwrap();
        if version == CgroupVersion::V2 {
            fs::write(tree.root.join("cgroup.controllers"), "cpu memory\n").unwrap();
        }
        tree
    }

    /// The text of `/proc/self/cgroup` that places the process in `/svc`.
    fn proc_self_cgroup(&self) -> &'static str {
        match self.version {
            CgroupVersion::V1 => "5:cpu,cpuacct:/svc\n",
            CgroupVersion::V2 => "0::/svc\n",
        }
    }

    /// The process's cgroup directory.
    fn svc(&self) -> PathBuf {
        match self.version {
            CgroupVersion::V1 => self.root.join("cpu/svc"),
            CgroupVersion::V2 => self.root.join("svc"),
        }
    }

    /// The file that holds the quota (v1: the quota's, beside the period's).
    fn quota_file(&self) -> PathBuf {
        match self.version {
            CgroupVersion::V1 => self.svc().join("cpu.cfs_quota_us"),
            CgroupVersion::V2 => self.svc().join("cpu.max"),
        }
    }

    /// Write a quota of `quota_us` per `period_us` (`None`: no limit), as the kernel shows it.
    fn set(&self, quota_us: Option<u64>, period_us: u64) {
        match self.version {
            CgroupVersion::V1 => {
                let quota = quota_us.map_or("-1".to_string(), |q| q.to_string());
                write(&self.quota_file(), &format!("{quota}\n"));
                write(
                    &self.svc().join("cpu.cfs_period_us"),
                    &format!("{period_us}\n"),
                );
            }
            CgroupVersion::V2 => {
                let quota = quota_us.map_or("max".to_string(), |q| q.to_string());
                write(&self.quota_file(), &format!("{quota} {period_us}\n"));
            }
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// Replace `path` (a file, or a directory put in its place) with `text`.
fn write(path: &Path, text: &str) {
    if path.is_dir() {
        fs::remove_dir(path).unwrap();
    }
    fs::write(path, text).unwrap();
}

/// An `Elastic` on `clock` reading `tree`, with a fixed share and a fixed-share gate, attached
/// to a runtime of `WORKERS` workers on a mask of `MASK` CPUs.
fn governed(
    clock: &ManualClock,
    tree: &Tree,
) -> (Elastic, ConnectionGate, Script, tokio::runtime::Runtime) {
    let script = Script::new();
    script.cgroup_tree(&tree.root, tree.proc_self_cgroup());
    script.cpus(MASK);
    let elastic = scripted(clock, &script)
        .fixed_share(SHARE)
        .quota_reread(REREAD)
        .build()
        .unwrap();
    let gate = elastic
        .connection_gate(
            GateSettings::new()
                .share(GATE_SHARE, GATE_SHARE)
                .initial_share(GATE_SHARE),
        )
        .unwrap();
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(WORKERS))
        .build()
        .unwrap();
    (elastic, gate, script, rt)
}

/// `n` ticks of `TICK` each.
fn ticks(clock: &ManualClock, elastic: &Elastic, n: usize) {
    for _ in 0..n {
        clock.advance(TICK);
        elastic.tick();
    }
}

/// What follows the CPUs: `snapshot().cpus`, the own class's rate and the gate's holder cap.
fn sized(elastic: &Elastic, gate: &ConnectionGate) -> (f64, u64, usize) {
    let s = elastic.snapshot();
    (
        s.cpus,
        s.queue.rate_nanos_per_sec,
        gate.snapshot().stats.max_in_setup,
    )
}

/// What the CPUs size: the rate and the holder cap for `cpus`.
fn sized_for(cpus: f64) -> (f64, u64, usize) {
    let rate = (SHARE * cpus * 1e9).round() as u64;
    let cap = (GATE_SHARE * cpus).ceil().max(1.0) as usize;
    (cpus, rate, cap)
}

/// A quota rewritten to `to`: nothing moves for `REREAD_TICKS − 1` ticks, then on the next
/// everything is sized for it.
fn rewrite_and_follow(
    clock: &ManualClock,
    elastic: &Elastic,
    gate: &ConnectionGate,
    tree: &Tree,
    quota_us: Option<u64>,
    period_us: u64,
    expected: (f64, CpusSource),
) {
    // The callers keep their ticks in step with the readings: one is due `REREAD_TICKS` on.
    let before = sized(elastic, gate);
    let changes = elastic.snapshot().quota_changes;
    tree.set(quota_us, period_us);
    ticks(clock, elastic, REREAD_TICKS - 1);
    assert_eq!(sized(elastic, gate), before, "before the re-read is due");
    ticks(clock, elastic, 1);
    let s = elastic.snapshot();
    assert_eq!(sized(elastic, gate), sized_for(expected.0), "{s:#?}");
    assert_eq!(s.cpus_source, expected.1);
    assert_eq!(s.quota_changes, changes + 1);
}

#[test]
fn a_v2_cpu_max_rewritten_mid_run_is_followed_within_the_reread_period() {
    let clock = ManualClock::new();
    let tree = Tree::new("v2", CgroupVersion::V2);
    tree.set(Some(150_000), 100_000);
    let (elastic, gate, _script, _rt) = governed(&clock, &tree);
    let quota = CpusSource::Quota(CgroupVersion::V2);
    let s = elastic.snapshot();
    assert_eq!((s.cpus, s.cpus_source), (1.5, quota));
    assert_eq!(s.quota_cpus, Some(1.5));
    assert_eq!(s.quota_period, Some(Duration::from_millis(100)));
    assert_eq!(s.quota_changes, 0);
    ticks(&clock, &elastic, REREAD_TICKS);
    assert_eq!(sized(&elastic, &gate), sized_for(1.5));
    assert_eq!(elastic.snapshot().quota_changes, 0, "read again, unchanged");

    // Resized up: 3 CPUs.
    rewrite_and_follow(
        &clock,
        &elastic,
        &gate,
        &tree,
        Some(300_000),
        100_000,
        (3.0, quota),
    );
    assert_eq!(elastic.snapshot().quota_cpus, Some(3.0));
    // The limit removed (`max`): the workers bound the CPUs.
    let workers = (WORKERS as f64, CpusSource::Workers);
    rewrite_and_follow(&clock, &elastic, &gate, &tree, None, 100_000, workers);
    let s = elastic.snapshot();
    assert_eq!((s.quota_cpus, s.quota_period), (None, None));
    // A limit that appears again, with another period: half a CPU.
    rewrite_and_follow(
        &clock,
        &elastic,
        &gate,
        &tree,
        Some(25_000),
        50_000,
        (0.5, quota),
    );
    let s = elastic.snapshot();
    assert_eq!(s.quota_cpus, Some(0.5));
    assert_eq!(s.quota_period, Some(Duration::from_millis(50)));
    assert_eq!(s.quota_changes, 3);
}

#[test]
fn a_v1_cfs_quota_rewritten_mid_run_is_followed_within_the_reread_period() {
    let clock = ManualClock::new();
    let tree = Tree::new("v1", CgroupVersion::V1);
    tree.set(Some(150_000), 100_000);
    let (elastic, gate, _script, _rt) = governed(&clock, &tree);
    let quota = CpusSource::Quota(CgroupVersion::V1);
    assert_eq!(sized(&elastic, &gate), sized_for(1.5));
    assert_eq!(elastic.snapshot().cpus_source, quota);

    // 125 ms per 50 ms: 2.5 CPUs, and the period follows.
    rewrite_and_follow(
        &clock,
        &elastic,
        &gate,
        &tree,
        Some(125_000),
        50_000,
        (2.5, quota),
    );
    let s = elastic.snapshot();
    assert_eq!(s.quota_cpus, Some(2.5));
    assert_eq!(s.quota_period, Some(Duration::from_millis(50)));
    // `-1`: no limit.
    let workers = (WORKERS as f64, CpusSource::Workers);
    rewrite_and_follow(&clock, &elastic, &gate, &tree, None, 100_000, workers);
    assert_eq!(elastic.snapshot().quota_cpus, None);
    // Back under a limit.
    rewrite_and_follow(
        &clock,
        &elastic,
        &gate,
        &tree,
        Some(100_000),
        100_000,
        (1.0, quota),
    );
    assert_eq!(elastic.snapshot().quota_changes, 3);
}

#[test]
fn an_unreadable_or_garbage_quota_file_keeps_the_last_good_quota() {
    for version in [CgroupVersion::V1, CgroupVersion::V2] {
        let clock = ManualClock::new();
        let tree = Tree::new(&format!("bad-{version:?}"), version);
        tree.set(Some(150_000), 100_000);
        let (elastic, gate, _script, _rt) = governed(&clock, &tree);
        let good = sized_for(1.5);
        assert_eq!(sized(&elastic, &gate), good);
        let garbage = [
            "garbage\n",
            "",
            "150000 100000 7\n",
            "0 100000\n",
            "\u{0}\u{1}",
        ];
        for text in garbage {
            write(&tree.quota_file(), text);
            ticks(&clock, &elastic, 2 * REREAD_TICKS);
            let s = elastic.snapshot();
            assert_eq!(sized(&elastic, &gate), good, "{version:?} {text:?}");
            assert_eq!((s.quota_cpus, s.quota_changes), (Some(1.5), 0), "{text:?}");
        }
        // A directory in the file's place: reading it fails.
        fs::remove_file(tree.quota_file()).unwrap();
        fs::create_dir(tree.quota_file()).unwrap();
        ticks(&clock, &elastic, 2 * REREAD_TICKS);
        assert_eq!(sized(&elastic, &gate), good, "{version:?} unreadable");
        // The whole hierarchy gone (not mounted, no cgroup listed).
        let moved = tree.root.with_extension("moved");
        fs::rename(&tree.root, &moved).unwrap();
        ticks(&clock, &elastic, 2 * REREAD_TICKS);
        fs::rename(&moved, &tree.root).unwrap();
        assert_eq!(sized(&elastic, &gate), good, "{version:?} not mounted");
        assert_eq!(elastic.snapshot().quota_changes, 0);
        // A good file again, with another figure: followed.
        let quota = (2.0, CpusSource::Quota(version));
        rewrite_and_follow(
            &clock,
            &elastic,
            &gate,
            &tree,
            Some(200_000),
            100_000,
            quota,
        );
    }
}

#[test]
fn a_quota_that_appears_after_attach_sizes_the_cpus_and_the_headroom() {
    let clock = ManualClock::new();
    let tree = Tree::new("appears", CgroupVersion::V2);
    // No `cpu.max` yet: no limit.
    let (elastic, gate, script, _rt) = governed(&clock, &tree);
    let workers = (WORKERS as f64, CpusSource::Workers);
    // The rest of the process spends half a CPU.
    let tick_spending = |n| {
        for _ in 0..n {
            script.spend(TICK / 2);
            ticks(&clock, &elastic, 1);
        }
    };
    tick_spending(REREAD_TICKS);
    let s = elastic.snapshot();
    assert_eq!((s.cpus, s.cpus_source), workers);
    assert_eq!((s.quota_cpus, s.quota_headroom), (None, None));
    tree.set(Some(200_000), 100_000);
    tick_spending(REREAD_TICKS);
    let s = elastic.snapshot();
    assert_eq!((s.cpus, s.quota_cpus, s.quota_changes), (2.0, Some(2.0), 1));
    assert_eq!(gate.snapshot().stats.max_in_setup, sized_for(2.0).2);
    // The headroom: 90 % of what the half CPU leaves of the quota, once two readings are in.
    tick_spending(2);
    let cap = elastic.snapshot().quota_headroom.expect("inside a quota");
    assert!((cap - 0.9 * 1.5).abs() < 1e-6, "{cap}");
    // Resized: the cap follows at the re-read, on the same readings.
    tree.set(Some(400_000), 100_000);
    tick_spending(REREAD_TICKS);
    let s = elastic.snapshot();
    assert_eq!(
        (s.cpus, s.cpus_source),
        workers,
        "the workers are fewer now"
    );
    assert_eq!(s.quota_cpus, Some(4.0));
    let cap = s.quota_headroom.expect("inside a quota");
    assert!((cap - 0.9 * 3.5).abs() < 1e-6, "{cap}");
}

#[test]
fn with_the_cpus_set_by_the_builder_only_the_quota_follows() {
    let clock = ManualClock::new();
    let tree = Tree::new("builder", CgroupVersion::V2);
    tree.set(Some(150_000), 100_000);
    let script = Script::new();
    script.cgroup_tree(&tree.root, tree.proc_self_cgroup());
    let elastic = scripted(&clock, &script)
        .fixed_share(SHARE)
        .cpus(6.0)
        .quota_reread(REREAD)
        .build()
        .unwrap();
    let _rt = attached(&elastic);
    tree.set(Some(300_000), 100_000);
    ticks(&clock, &elastic, REREAD_TICKS);
    let s = elastic.snapshot();
    assert_eq!((s.cpus, s.cpus_source), (6.0, CpusSource::Builder));
    assert_eq!((s.quota_cpus, s.quota_changes), (Some(3.0), 1));
}

#[test]
fn the_reread_period_is_checked() {
    for bad in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_secs(3601),
    ] {
        let Err(BuildError::Setting(e)) = Elastic::builder().quota_reread(bad).build() else {
            panic!("{bad:?} accepted")
        };
        assert_eq!(e.setting, "quota_reread");
    }
    for good in [Duration::from_millis(1), Duration::from_secs(3600)] {
        assert!(Elastic::builder().quota_reread(good).build().is_ok());
    }
}
