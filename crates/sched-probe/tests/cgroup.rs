//! The cgroup CPU quota reader on fake cgroup trees (v1, v2, nested, broken), `cpu.stat`, and
//! the affinity count of `/proc/self/status`.

use elastic_cpu_probe::{
    cpu_affinity, cpu_affinity_in, cpu_quota, cpu_quota_at, parse_cpu_list, CgroupVersion,
    CpuThrottling, NoQuota, QuotaReading, QuotaSource,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A fake `/sys/fs/cgroup` in its own temp directory, removed on drop.
struct FakeRoot {
    root: PathBuf,
}

impl FakeRoot {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "elastic-cpu-cgroup-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        FakeRoot { root }
    }

    /// A fake v2 mount: the root marked by `cgroup.controllers`.
    fn v2() -> Self {
        let fake = Self::new();
        fake.write("cgroup.controllers", "cpuset cpu io memory pids\n");
        fake
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn dir(&self, rel: &str) -> PathBuf {
        let dir = self.path(rel);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write(&self, rel: &str, contents: impl AsRef<[u8]>) {
        let path = self.path(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, contents).unwrap();
    }

    /// A v1 cgroup directory (relative to the root) with its quota and period files.
    fn v1_level(&self, dir: &str, quota: &str, period: &str) {
        self.write(&format!("{dir}/cpu.cfs_quota_us"), format!("{quota}\n"));
        self.write(&format!("{dir}/cpu.cfs_period_us"), format!("{period}\n"));
    }

    fn read(&self, proc_self_cgroup: &str) -> QuotaReading {
        cpu_quota_at(&self.root, proc_self_cgroup)
    }
}

impl Drop for FakeRoot {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// A hybrid-style v1 list with the cpu controller at `cpu_line`.
fn v1_list(cpu_line: &str) -> String {
    format!(
        "9:name=systemd:/user.slice\n8:pids:/user.slice\n4:memory:/x\n{cpu_line}\n0::/user.slice\n"
    )
}

fn limited(reading: &QuotaReading) -> &elastic_cpu_probe::CpuQuota {
    match reading {
        QuotaReading::Limited(q) => q,
        other => panic!("expected a limit, got {other:?}"),
    }
}

fn no_quota(reading: &QuotaReading) -> &NoQuota {
    assert_eq!(reading.cpus(), None, "{reading}");
    assert_eq!(reading.source(), QuotaSource::None, "{reading}");
    match reading {
        QuotaReading::NoQuota(why) => why,
        other => panic!("expected no quota, got {other:?}"),
    }
}

fn assert_malformed(reading: &QuotaReading, file: &Path) {
    assert_eq!(
        no_quota(reading),
        &NoQuota::Malformed {
            path: file.to_path_buf()
        },
        "{reading}"
    );
}

#[test]
fn v1_cpu_cpuacct_comounted() {
    let fake = FakeRoot::new();
    fake.v1_level("cpu,cpuacct", "-1", "100000");
    fake.v1_level("cpu,cpuacct/svc/app", "50000", "100000");
    let reading = fake.read(&v1_list("3:cpu,cpuacct:/svc/app"));
    let q = limited(&reading);
    assert_eq!(q.cpus, 0.5);
    assert_eq!(q.quota, Duration::from_millis(50));
    assert_eq!(q.period, Duration::from_millis(100));
    assert_eq!(q.version, CgroupVersion::V1);
    assert_eq!(q.cgroup_dir, fake.path("cpu,cpuacct/svc/app"));
    assert_eq!(reading.source(), QuotaSource::CgroupV1);
    assert_eq!(reading.cpus(), Some(0.5));
    let text = reading.to_string();
    assert!(
        text.starts_with("0.5 CPUs from the cgroup v1 quota"),
        "{text}"
    );

    // The other order of the list, mounted under that name.
    let fake = FakeRoot::new();
    fake.v1_level("cpuacct,cpu/svc", "250000", "100000");
    assert_eq!(fake.read("2:cpuacct,cpu:/svc\n").cpus(), Some(2.5));
}

#[test]
fn v1_cpu_alone() {
    let fake = FakeRoot::new();
    fake.v1_level("cpu", "-1", "100000");
    fake.v1_level("cpu/svc", "150000", "100000");
    // Another hierarchy's line mentioning cpuacct must not be taken for cpu.
    let list = "2:cpuacct:/other\n1:cpu:/svc\n0::/\n";
    assert_eq!(fake.read(list).cpus(), Some(1.5));
}

#[test]
fn v1_minus_one_is_unlimited() {
    let fake = FakeRoot::new();
    fake.v1_level("cpu", "-1", "100000");
    fake.v1_level("cpu/svc", "-1", "100000");
    let reading = fake.read(&v1_list("1:cpu:/svc"));
    assert_eq!(
        no_quota(&reading),
        &NoQuota::Unlimited {
            version: CgroupVersion::V1,
            cgroup_dir: fake.path("cpu/svc"),
        }
    );
    assert_eq!(reading.cgroup_dir(), Some(fake.path("cpu/svc").as_path()));
}

#[test]
fn v2_max_is_unlimited() {
    let fake = FakeRoot::v2();
    fake.write("svc/cpu.max", "max 100000\n");
    let reading = fake.read("0::/svc\n");
    assert_eq!(
        no_quota(&reading),
        &NoQuota::Unlimited {
            version: CgroupVersion::V2,
            cgroup_dir: fake.path("svc"),
        }
    );
}

#[test]
fn v2_fractional_quota() {
    let fake = FakeRoot::v2();
    fake.write("svc/cpu.max", "150000 100000\n");
    let reading = fake.read("0::/svc\n");
    let q = limited(&reading);
    assert_eq!(q.cpus, 1.5);
    assert_eq!(q.quota, Duration::from_millis(150));
    assert_eq!(q.version, CgroupVersion::V2);
    assert_eq!(reading.source(), QuotaSource::CgroupV2);
    assert!(reading
        .to_string()
        .starts_with("1.5 CPUs from the cgroup v2 quota"));
}

#[test]
fn v2_under_unified_on_a_hybrid_layout() {
    let fake = FakeRoot::new();
    fake.write("unified/cgroup.controllers", "cpu\n");
    fake.write("unified/svc/cpu.max", "300000 100000");
    assert_eq!(fake.read("0::/svc").cpus(), Some(3.0));
}

#[test]
fn v1_wins_over_the_v2_line_of_a_hybrid_system() {
    let fake = FakeRoot::v2();
    fake.write("svc/cpu.max", "400000 100000\n");
    fake.v1_level("cpu", "-1", "100000");
    fake.v1_level("cpu/svc", "100000", "100000");
    let reading = fake.read("0::/svc\n1:cpu:/svc\n");
    assert_eq!(reading.cpus(), Some(1.0));
    assert_eq!(reading.source(), QuotaSource::CgroupV1);
}

#[test]
fn nested_limits_take_the_smallest() {
    // v2: parent 1.0, child 2.0 → 1.0, from the parent.
    let fake = FakeRoot::v2();
    fake.write("parent/cpu.max", "100000 100000\n");
    fake.write("parent/child/cpu.max", "200000 100000\n");
    let reading = fake.read("0::/parent/child\n");
    assert_eq!(reading.cpus(), Some(1.0));
    assert_eq!(limited(&reading).cgroup_dir, fake.path("parent"));

    // v2: parent max, child 0.5 → 0.5, from the child.
    let fake = FakeRoot::v2();
    fake.write("parent/cpu.max", "max 100000\n");
    fake.write("parent/child/cpu.max", "50000 100000\n");
    let reading = fake.read("0::/parent/child\n");
    assert_eq!(reading.cpus(), Some(0.5));
    assert_eq!(limited(&reading).cgroup_dir, fake.path("parent/child"));

    // v1, three levels, different periods: 0.75 (grandparent) < 1.0 < 2.0.
    let fake = FakeRoot::new();
    fake.v1_level("cpu", "-1", "100000");
    fake.v1_level("cpu/a", "37500", "50000");
    fake.v1_level("cpu/a/b", "200000", "200000");
    fake.v1_level("cpu/a/b/c", "400000", "200000");
    let reading = fake.read("1:cpu:/a/b/c\n");
    assert_eq!(reading.cpus(), Some(0.75));
    assert_eq!(limited(&reading).cgroup_dir, fake.path("cpu/a"));

    // Equal limits: the nearest level is reported.
    let fake = FakeRoot::v2();
    fake.write("p/cpu.max", "100000 100000\n");
    fake.write("p/c/cpu.max", "50000 50000\n");
    let reading = fake.read("0::/p/c\n");
    assert_eq!(limited(&reading).cgroup_dir, fake.path("p/c"));
}

#[test]
fn missing_pieces() {
    let fake = FakeRoot::v2();
    // Nothing listed, or no cpu controller and no v2 line.
    assert_eq!(no_quota(&fake.read("")), &NoQuota::NoCgroup);
    assert_eq!(
        no_quota(&fake.read("4:memory:/x\n2:cpuacct:/x\n")),
        &NoQuota::NoCgroup
    );

    // Listed in v1 but no cpu hierarchy mounted.
    assert_eq!(
        no_quota(&fake.read("1:cpu:/svc\n")),
        &NoQuota::NotMounted {
            version: CgroupVersion::V1
        }
    );
    // Listed in v2 but no v2 mount (no cgroup.controllers), like the tmpfs of a hybrid system.
    let bare = FakeRoot::new();
    bare.dir("svc");
    assert_eq!(
        no_quota(&bare.read("0::/svc\n")),
        &NoQuota::NotMounted {
            version: CgroupVersion::V2
        }
    );
    // A root that does not exist at all.
    assert_eq!(
        no_quota(&cpu_quota_at(
            Path::new("/nonexistent/elastic-cpu"),
            "0::/\n"
        )),
        &NoQuota::NotMounted {
            version: CgroupVersion::V2
        }
    );

    // v2 with no cpu.max anywhere (controller not enabled): unlimited.
    fake.dir("svc/app");
    let reading = fake.read("0::/svc/app\n");
    assert_eq!(
        no_quota(&reading),
        &NoQuota::Unlimited {
            version: CgroupVersion::V2,
            cgroup_dir: fake.path("svc/app"),
        }
    );

    // v1 without the CFS bandwidth files: unlimited.
    let fake = FakeRoot::new();
    fake.dir("cpu/svc");
    assert!(matches!(
        no_quota(&fake.read("1:cpu:/svc\n")),
        NoQuota::Unlimited { .. }
    ));

    // v1 quota without its period: cannot be turned into CPUs.
    let fake = FakeRoot::new();
    fake.write("cpu/svc/cpu.cfs_quota_us", "50000\n");
    assert_malformed(
        &fake.read("1:cpu:/svc\n"),
        &fake.path("cpu/svc/cpu.cfs_period_us"),
    );
}

#[test]
fn a_container_sees_its_own_cgroup_as_the_mount_root() {
    // The host path is listed, but only the container's cgroup is mounted, at the root.
    let fake = FakeRoot::new();
    fake.v1_level("cpu", "200000", "100000");
    let reading = fake.read("1:cpu:/docker/0123abcd\n");
    assert_eq!(reading.cpus(), Some(2.0));
    assert_eq!(limited(&reading).cgroup_dir, fake.path("cpu"));

    let fake = FakeRoot::v2();
    fake.write("cpu.max", "50000 100000\n");
    assert_eq!(
        fake.read("0::/system.slice/docker-0123.scope\n").cpus(),
        Some(0.5)
    );

    // A path climbing out of the mount is not followed.
    let fake = FakeRoot::v2();
    fake.write("escape/cpu.max", "50000 100000\n");
    fake.write("svc/cpu.max", "50000 100000\n");
    let reading = fake.read("0::/../escape\n");
    assert!(matches!(no_quota(&reading), NoQuota::Unlimited { .. }));
    assert_eq!(reading.cgroup_dir(), Some(fake.root.as_path()));
}

#[test]
fn malformed_v2_files() {
    let cases: &[&[u8]] = &[
        b"lots 100000\n",
        b"150000 lots\n",
        b"",
        b"\n",
        b"150000\n",
        b"max\n",
        b"150000 100000 7\n",
        b"150000 0\n",
        b"0 100000\n",
        b"-150000 100000\n",
        b"max -1\n",
        b"150000 1\n",                // period below the kernel's 1 ms
        b"150000 5000000\n",          // period above 1 s
        b"500 100000\n",              // quota below 1 ms
        b"18446744073709551615 1000", // ~1.8e16 CPUs
        b"99999999999999999999999 100000\n",
        "1,5 100000\n".as_bytes(),
        "１５００００ １０００００\n".as_bytes(),
        b"\xff\xfe\x00garbage\n",
        b"\x00\x00\x00\x00",
    ];
    for &contents in cases {
        let fake = FakeRoot::v2();
        fake.write("svc/cpu.max", contents);
        let reading = fake.read("0::/svc\n");
        assert_malformed(&reading, &fake.path("svc/cpu.max"));
        assert!(reading.to_string().contains("malformed"), "{reading}");
    }
}

#[test]
fn malformed_v1_files() {
    let cases = [
        ("lots", "100000", "cpu.cfs_quota_us"),
        ("", "100000", "cpu.cfs_quota_us"),
        ("150000 100000", "100000", "cpu.cfs_quota_us"),
        ("0", "100000", "cpu.cfs_quota_us"),
        ("-2", "100000", "cpu.cfs_quota_us"),
        ("1.5", "100000", "cpu.cfs_quota_us"),
        ("150000", "0", "cpu.cfs_quota_us"),
        ("150000", "2000000", "cpu.cfs_quota_us"),
        ("150000", "-100000", "cpu.cfs_period_us"),
        ("150000", "lots", "cpu.cfs_period_us"),
        ("150000", "", "cpu.cfs_period_us"),
        ("150000", "ünïcödé", "cpu.cfs_period_us"),
    ];
    for (quota, period, bad) in cases {
        let fake = FakeRoot::new();
        fake.v1_level("cpu/svc", quota, period);
        let reading = fake.read("1:cpu:/svc\n");
        assert_malformed(&reading, &fake.path(&format!("cpu/svc/{bad}")));
    }
}

#[test]
fn a_bad_level_does_not_hide_a_good_one() {
    let fake = FakeRoot::v2();
    fake.write("parent/cpu.max", "100000 100000\n");
    fake.write("parent/child/cpu.max", "garbage\n");
    assert_eq!(fake.read("0::/parent/child\n").cpus(), Some(1.0));

    // A bad level with only unlimited ones around: a limit may hide there, so say so.
    let fake = FakeRoot::v2();
    fake.write("parent/cpu.max", "garbage\n");
    fake.write("parent/child/cpu.max", "max 100000\n");
    assert_malformed(
        &fake.read("0::/parent/child\n"),
        &fake.path("parent/cpu.max"),
    );
}

#[cfg(unix)]
#[test]
fn an_unreadable_file_is_reported() {
    // A directory where the file should be: opening succeeds, reading fails.
    let fake = FakeRoot::v2();
    fake.dir("svc/cpu.max");
    let reading = fake.read("0::/svc\n");
    assert!(
        matches!(no_quota(&reading), NoQuota::Unreadable { path, .. } if path == &fake.path("svc/cpu.max")),
        "{reading:?}"
    );
}

#[test]
fn garbage_cgroup_lists_do_not_panic() {
    let fake = FakeRoot::v2();
    fake.v1_level("cpu", "-1", "100000");
    let lists = [
        "garbage",
        ":::",
        "0::",
        "0::relative/path",
        "1:cpu:",
        "1:cpu:no-slash",
        "::/",
        "\u{0}\u{1}:\u{fffd}:/\u{1F600}/ünï",
        "1:cpu:/a/../../..\n",
        "1:cpu:/a\\b\n",
        "1:cpu,../../etc:/x\n",
        "0::/a:b:c\n",
        "0::/svc (deleted)\n",
        &"9".repeat(100_000),
        &"0::/".repeat(10_000),
        &"/a".repeat(10_000),
    ];
    for list in lists {
        let reading = fake.read(list);
        let _ = reading.to_string();
        let _ = reading.throttling();
    }
    // Unicode path components are fine where they exist.
    fake.v1_level("cpu/ünï/😀", "100000", "100000");
    assert_eq!(fake.read("1:cpu:/ünï/😀\n").cpus(), Some(1.0));
}

#[test]
fn cpu_stat_v1() {
    let text =
        "nr_periods 120\nnr_throttled 7\nthrottled_time 123456789\nnr_bursts 0\nburst_time 0\n";
    assert_eq!(
        CpuThrottling::parse(text),
        Some(CpuThrottling {
            periods: 120,
            throttled_periods: 7,
            throttled_time: Duration::from_nanos(123_456_789),
        })
    );
}

#[test]
fn cpu_stat_v2() {
    let text = "usage_usec 9000\nuser_usec 6000\nsystem_usec 3000\nnr_periods 40\n\
                nr_throttled 3\nthrottled_usec 25000\nnr_bursts 0\nburst_usec 0\n";
    assert_eq!(
        CpuThrottling::parse(text),
        Some(CpuThrottling {
            periods: 40,
            throttled_periods: 3,
            throttled_time: Duration::from_millis(25),
        })
    );
}

#[test]
fn cpu_stat_incomplete_or_garbage() {
    // v2 without the cpu controller enabled: usage only.
    assert_eq!(
        CpuThrottling::parse("usage_usec 9000\nuser_usec 6000\nsystem_usec 3000\n"),
        None
    );
    assert_eq!(CpuThrottling::parse(""), None);
    assert_eq!(
        CpuThrottling::parse("nr_periods 1\nnr_throttled x\nthrottled_usec 5\n"),
        None
    );
    assert_eq!(
        CpuThrottling::parse("nr_periods -1\nnr_throttled 0\nthrottled_usec 5\n"),
        None
    );
    assert_eq!(
        CpuThrottling::parse("nr_periods\nnr_throttled 0\nthrottled_usec 5\n"),
        None
    );
    assert_eq!(CpuThrottling::parse("\u{0}ünï 😀\n\u{fffd}"), None);
    // Other keys may be anything; the largest counters fit.
    let max = u64::MAX;
    let text = format!("nr_periods {max}\nnr_throttled {max}\nthrottled_time {max}\nwait_sum x\n");
    let t = CpuThrottling::parse(&text).unwrap();
    assert_eq!(t.throttled_time, Duration::from_nanos(max));
    let text = format!("nr_periods 1\nnr_throttled 0\nthrottled_usec {max}\n");
    assert_eq!(
        CpuThrottling::parse(&text).unwrap().throttled_time,
        Duration::from_micros(max)
    );
}

#[test]
fn throttling_is_read_where_the_limit_is() {
    let fake = FakeRoot::v2();
    fake.write("parent/cpu.max", "100000 100000\n");
    fake.write(
        "parent/cpu.stat",
        "usage_usec 1\nnr_periods 10\nnr_throttled 4\nthrottled_usec 2000\n",
    );
    fake.write("parent/child/cpu.max", "max 100000\n");
    fake.write(
        "parent/child/cpu.stat",
        "usage_usec 1\nnr_periods 10\nnr_throttled 0\nthrottled_usec 0\n",
    );
    let reading = fake.read("0::/parent/child\n");
    let t = reading.throttling().unwrap();
    assert_eq!((t.periods, t.throttled_periods), (10, 4));
    assert_eq!(t.throttled_time, Duration::from_millis(2));

    // Unlimited: the process's own cgroup; v1 counters in ns.
    let fake = FakeRoot::new();
    fake.v1_level("cpu/svc", "-1", "100000");
    fake.write(
        "cpu/svc/cpu.stat",
        "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
    );
    assert_eq!(
        fake.read("1:cpu:/svc\n").throttling(),
        Some(CpuThrottling::default())
    );
    // No cpu.stat, or no cgroup at all.
    let fake = FakeRoot::v2();
    fake.write("svc/cpu.max", "100000 100000\n");
    assert_eq!(fake.read("0::/svc\n").throttling(), None);
    assert_eq!(fake.read("").throttling(), None);
}

#[test]
fn throttling_since() {
    let earlier = CpuThrottling {
        periods: 10,
        throttled_periods: 2,
        throttled_time: Duration::from_millis(5),
    };
    let later = CpuThrottling {
        periods: 25,
        throttled_periods: 6,
        throttled_time: Duration::from_millis(12),
    };
    assert_eq!(
        later.since(&earlier),
        CpuThrottling {
            periods: 15,
            throttled_periods: 4,
            throttled_time: Duration::from_millis(7),
        }
    );
    // Counters restarted (cgroup recreated): zeros, no wrap or panic.
    assert_eq!(earlier.since(&later), CpuThrottling::default());
}

#[test]
fn the_real_system_does_not_panic() {
    let reading = cpu_quota();
    if let Some(cpus) = reading.cpus() {
        assert!(cpus.is_finite() && cpus > 0.0, "{reading}");
        assert_ne!(reading.source(), QuotaSource::None);
    }
    let throttling = reading.throttling();
    println!("{reading}; throttling: {throttling:?}");
}

#[test]
fn cpu_lists_are_counted() {
    let cases = [
        ("0", 1),
        ("0-1", 2),
        ("0-3,8,10-11", 7),
        ("  0-3,8,10-11\n", 7),
        ("5", 1),
        ("1,3,5,7", 4),
        ("0-1048575", 1_048_576),
    ];
    for (list, count) in cases {
        assert_eq!(parse_cpu_list(list), Some(count), "{list:?}");
    }
}

#[test]
fn malformed_cpu_lists_are_none() {
    for list in [
        "",
        " ",
        "\n",
        ",",
        "0,",
        ",0",
        "0-",
        "-3",
        "3-1",
        "0-3,2",
        "0,0",
        "1,0",
        "a",
        "0-x",
        "0--3",
        "0-3-5",
        "+1",
        "-1",
        "0x3",
        "1 2",
        "0;1",
        "1048576",
        "0-1048576",
        "99999999999999999999999",
        "٣",
    ] {
        assert_eq!(parse_cpu_list(list), None, "{list:?}");
    }
}

#[test]
fn affinity_from_status_text() {
    let status = "Name:\tsvc\nState:\tR (running)\nCpus_allowed:\tf0f\n\
                  Cpus_allowed_list:\t0-3,8,10-11\nMems_allowed_list:\t0\n";
    assert_eq!(cpu_affinity_in(status), Some(7));
    // Missing line, empty or garbage value, empty text: no count.
    assert_eq!(cpu_affinity_in("Name:\tsvc\nCpus_allowed:\t3\n"), None);
    assert_eq!(cpu_affinity_in("Cpus_allowed_list:\n"), None);
    assert_eq!(cpu_affinity_in("Cpus_allowed_list:\tgarbage\n"), None);
    assert_eq!(cpu_affinity_in(""), None);
    // `Mems_allowed_list` is not mistaken for it.
    assert_eq!(cpu_affinity_in("Mems_allowed_list:\t0-3\n"), None);
}

#[test]
fn the_real_affinity_is_sane() {
    let affinity = cpu_affinity();
    if cfg!(target_os = "linux") {
        let n = affinity.expect("Cpus_allowed_list in /proc/self/status");
        // available_parallelism counts the same mask, then rounds a quota down.
        let available = std::thread::available_parallelism().unwrap().get();
        assert!(n >= 1 && n >= available, "{n} < {available}");
    }
    println!("affinity: {affinity:?} CPUs");
}
