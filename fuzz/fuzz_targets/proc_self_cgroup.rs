//! `/proc/self/cgroup`: the cgroup paths, resolved by `cpu_quota_at` on a fake tree that has
//! both hierarchies (v1 `cpu,cpuacct` and a v2 mount), limits at a few levels. Whatever the
//! text, the reading stays inside the tree.
#![no_main]

use std::fs;
use std::path::PathBuf;
use std::sync::OnceLock;

use elastic_cpu_fuzz::{check_reading, scratch};
use elastic_cpu_probe::cpu_quota_at;
use libfuzzer_sys::fuzz_target;

fn root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let root = scratch("proc_self_cgroup");
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        };
        // v2 at the root (and a hybrid system's `unified` beside it).
        write("cgroup.controllers", "cpu memory\n");
        write("svc/cpu.max", "150000 100000\n");
        write("svc/app/cpu.max", "max 100000\n");
        write("svc/bad/cpu.max", "x y\n");
        write("unified/cgroup.controllers", "cpu\n");
        // v1, co-mounted, with `cpu` beside it.
        write("cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
        write("cpu,cpuacct/svc/cpu.cfs_quota_us", "50000\n");
        write("cpu,cpuacct/svc/cpu.cfs_period_us", "100000\n");
        write("cpu,cpuacct/svc/app/cpu.cfs_quota_us", "-1\n");
        write("cpu/docker/cpu.cfs_quota_us", "200000\n");
        write("cpu/docker/cpu.cfs_period_us", "100000\n");
        root
    })
}

fuzz_target!(|proc_self_cgroup: &str| {
    let root = root();
    check_reading(root, &cpu_quota_at(root, proc_self_cgroup));
});
