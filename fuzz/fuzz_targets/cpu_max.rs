//! A cgroup v2 `cpu.max` file, read as `cpu_quota_at` reads it on a fake tree.
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
        let root = scratch("cpu_max");
        fs::create_dir_all(root.join("svc")).unwrap();
        fs::write(root.join("cgroup.controllers"), "cpu memory\n").unwrap();
        root
    })
}

fuzz_target!(|cpu_max: &[u8]| {
    let root = root();
    fs::write(root.join("svc/cpu.max"), cpu_max).unwrap();
    check_reading(root, &cpu_quota_at(root, "0::/svc\n"));
});
