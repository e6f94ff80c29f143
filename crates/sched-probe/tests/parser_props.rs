//! Arbitrary bytes through every parser of `/proc` and cgroup files: each gives a reading or
//! "none" (a typed reason for the quota), never a panic, and what a kernel would write parses
//! to what it says. The same parsers have cargo-fuzz targets in `fuzz/`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use elastic_cpu_probe::fuzzing::{schedstat, worker_state, MAX_WORKER_CPU};
use elastic_cpu_probe::{
    cpu_affinity_in, cpu_quota_at, parse_cpu_list, CpuThrottling, QuotaReading, QuotaSource,
};
use proptest::prelude::*;

/// A fake cgroup tree in its own temp directory, removed on drop.
struct Tree(PathBuf);

impl Tree {
    fn new() -> Tree {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "elastic-cpu-parser-props-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        Tree(root)
    }

    fn write(&self, path: &str, bytes: impl AsRef<[u8]>) {
        let path = self.0.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// What any reading must be, whatever the files said: a limit the kernel could enforce, found
/// inside the tree, or no quota.
fn check_reading(root: &Path, reading: &QuotaReading) -> Result<(), TestCaseError> {
    if let Some(dir) = reading.cgroup_dir() {
        prop_assert!(dir.starts_with(root), "outside the tree: {}", dir.display());
        prop_assert!(
            dir.components()
                .all(|c| matches!(c, Component::Normal(_) | Component::RootDir)),
            "not a plain path: {}",
            dir.display()
        );
    }
    match reading {
        QuotaReading::Limited(q) => {
            prop_assert!(q.cpus.is_finite() && q.cpus > 0.0 && q.cpus <= 1_048_576.0);
            prop_assert!(
                (Duration::from_millis(1)..=Duration::from_secs(1)).contains(&q.period),
                "{}",
                reading
            );
            prop_assert!(q.quota >= Duration::from_millis(1), "{}", reading);
        }
        QuotaReading::NoQuota(_) => prop_assert_eq!(reading.source(), QuotaSource::None),
    }
    let _ = reading.to_string();
    Ok(())
}

/// Bytes a fuzzer would start from: arbitrary, or text made of the characters these files hold.
fn file_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        "[0-9 max\\-\n\t.]{0,24}".prop_map(String::into_bytes),
    ]
}

/// A CPU list the way the kernel prints a set: ascending, runs of three or more as ranges.
fn cpu_list_of(set: &BTreeSet<usize>) -> String {
    let mut parts = Vec::new();
    let mut it = set.iter().copied().peekable();
    while let Some(first) = it.next() {
        let mut last = first;
        while it.peek() == Some(&(last + 1)) {
            last = it.next().unwrap();
        }
        parts.push(match last - first {
            0 => first.to_string(),
            1 => format!("{first},{last}"),
            _ => format!("{first}-{last}"),
        });
    }
    parts.join(",")
}

/// A thread `stat` line (52 fields) with this name, state and CPU.
fn stat_line(comm: &str, state: char, cpu: u32) -> String {
    let mut rest: Vec<String> = (4..=52).map(|f| (f * 10).to_string()).collect();
    rest[39 - 4] = cpu.to_string();
    format!("4242 ({comm}) {state} {}\n", rest.join(" "))
}

proptest! {
    #[test]
    fn worker_state_takes_any_bytes(line in prop::collection::vec(any::<u8>(), 0..600)) {
        if let Some((_, cpu)) = worker_state(&line) {
            prop_assert!(cpu <= MAX_WORKER_CPU);
        }
    }

    #[test]
    fn worker_state_reads_what_the_kernel_writes(
        comm in "[ -~]{0,16}",
        state in prop::sample::select(vec!['R', 'S', 'D', 'Z', 'T', 'I']),
        cpu in 0..=MAX_WORKER_CPU,
    ) {
        let line = stat_line(&comm, state, cpu);
        prop_assert_eq!(worker_state(line.as_bytes()), Some((state == 'R', cpu)));
    }

    #[test]
    fn schedstat_takes_any_text(text in any::<String>()) {
        let _ = schedstat(&text);
    }

    #[test]
    fn schedstat_reads_its_three_counters(
        counters in any::<(u64, u64, u64)>(),
        tail in "( [0-9]{1,5}){0,2}\n?",
    ) {
        let (a, b, c) = counters;
        prop_assert_eq!(schedstat(&format!("{a} {b} {c}{tail}")), Some(counters));
    }

    #[test]
    fn cpu_stat_takes_any_text(text in any::<String>()) {
        if let Some(t) = CpuThrottling::parse(&text) {
            prop_assert_eq!(t.since(&t), CpuThrottling::default());
        }
    }

    #[test]
    fn cpu_stat_reads_v1_and_v2(
        periods in any::<u64>(),
        throttled in any::<u64>(),
        time in any::<u64>(),
        v2 in any::<bool>(),
        other in prop::collection::vec(("[a-z_]{1,12}", "[ -~]{0,12}"), 0..4),
    ) {
        let mut text: String = other.iter().map(|(k, v)| format!("{k}x {v}\n")).collect();
        let (key, throttled_time) = if v2 {
            ("throttled_usec", Duration::from_micros(time))
        } else {
            ("throttled_time", Duration::from_nanos(time))
        };
        text += &format!("nr_periods {periods}\nnr_throttled {throttled}\n{key} {time}\n");
        prop_assert_eq!(
            CpuThrottling::parse(&text),
            Some(CpuThrottling { periods, throttled_periods: throttled, throttled_time })
        );
    }

    #[test]
    fn cpu_list_takes_any_text(text in any::<String>()) {
        if let Some(n) = parse_cpu_list(&text) {
            prop_assert!((1..=1 << 20).contains(&n));
        }
        let _ = cpu_affinity_in(&text);
    }

    #[test]
    fn a_cpu_list_printed_from_a_set_counts_the_set(
        set in prop::collection::btree_set(0usize..4096, 1..64),
    ) {
        let list = cpu_list_of(&set);
        prop_assert_eq!(parse_cpu_list(&list), Some(set.len()), "{}", list);
        let status = format!("Name:\tsvc\nCpus_allowed_list:\t{list}\n");
        prop_assert_eq!(cpu_affinity_in(&status), Some(set.len()));
    }
}

proptest! {
    // Each case writes and reads a few files.
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn cpu_max_takes_any_bytes(cpu_max in file_bytes()) {
        let tree = Tree::new();
        tree.write("cgroup.controllers", "cpu\n");
        tree.write("svc/cpu.max", &cpu_max);
        check_reading(&tree.0, &cpu_quota_at(&tree.0, "0::/svc\n"))?;
    }

    #[test]
    fn cpu_max_reads_a_limit(quota in 1_000u64..=100_000_000, period in 1_000u64..=1_000_000) {
        let tree = Tree::new();
        tree.write("cgroup.controllers", "cpu\n");
        tree.write("svc/cpu.max", format!("{quota} {period}\n"));
        let reading = cpu_quota_at(&tree.0, "0::/svc\n");
        prop_assert_eq!(reading.cpus(), Some(quota as f64 / period as f64));
        prop_assert_eq!(reading.source(), QuotaSource::CgroupV2);
    }

    #[test]
    fn cfs_quota_takes_any_bytes(quota in file_bytes(), period in prop::option::of(file_bytes())) {
        let tree = Tree::new();
        tree.write("cpu,cpuacct/svc/cpu.cfs_quota_us", &quota);
        if let Some(period) = &period {
            tree.write("cpu,cpuacct/svc/cpu.cfs_period_us", period);
        }
        check_reading(&tree.0, &cpu_quota_at(&tree.0, "4:cpu,cpuacct:/svc\n"))?;
    }

    #[test]
    fn cfs_quota_reads_a_limit(quota in 1_000u64..=100_000_000, period in 1_000u64..=1_000_000) {
        let tree = Tree::new();
        tree.write("cpu/svc/cpu.cfs_quota_us", format!("{quota}\n"));
        tree.write("cpu/svc/cpu.cfs_period_us", format!("{period}\n"));
        let reading = cpu_quota_at(&tree.0, "7:cpu:/svc\n");
        prop_assert_eq!(reading.cpus(), Some(quota as f64 / period as f64));
        prop_assert_eq!(reading.source(), QuotaSource::CgroupV1);
    }

    #[test]
    fn proc_self_cgroup_never_leaves_the_tree(
        text in prop_oneof![
            any::<String>(),
            // Lines of the right shape, with paths that climb, repeat and jump.
            prop::collection::vec(
                (
                    prop::sample::select(vec!["0:", "4:cpu,cpuacct:", "3:cpu:", "2:memory:", "x"]),
                    prop::collection::vec(
                        prop::sample::select(vec!["svc", "..", ".", "", "app", "a:b", "\\", "docker"]),
                        0..6,
                    ),
                ),
                0..4,
            )
            .prop_map(|lines| {
                lines
                    .into_iter()
                    .map(|(head, parts)| format!("{head}:/{}\n", parts.join("/")))
                    .collect()
            }),
        ],
    ) {
        let tree = Tree::new();
        tree.write("cgroup.controllers", "cpu\n");
        tree.write("svc/cpu.max", "150000 100000\n");
        tree.write("svc/app/cpu.max", "max 100000\n");
        tree.write("cpu,cpuacct/svc/cpu.cfs_quota_us", "50000\n");
        tree.write("cpu,cpuacct/svc/cpu.cfs_period_us", "100000\n");
        tree.write("cpu/docker/cpu.cfs_quota_us", "-1\n");
        check_reading(&tree.0, &cpu_quota_at(&tree.0, &text))?;
    }
}
