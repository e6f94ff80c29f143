//! A cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`, read as `cpu_quota_at` reads them on
//! a fake tree (the period file sometimes missing).
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
        let root = scratch("cfs_quota");
        fs::create_dir_all(root.join("cpu,cpuacct/svc")).unwrap();
        root
    })
}

fuzz_target!(|files: (&[u8], Option<&[u8]>)| {
    let root = root();
    let dir = root.join("cpu,cpuacct/svc");
    let (quota, period) = files;
    fs::write(dir.join("cpu.cfs_quota_us"), quota).unwrap();
    match period {
        Some(period) => fs::write(dir.join("cpu.cfs_period_us"), period).unwrap(),
        None => {
            let _ = fs::remove_file(dir.join("cpu.cfs_period_us"));
        }
    }
    check_reading(root, &cpu_quota_at(root, "4:cpu,cpuacct:/svc\n"));
});
