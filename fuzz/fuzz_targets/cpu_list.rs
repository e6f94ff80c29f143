//! A kernel CPU list (`Cpus_allowed_list:`, `cpuset.cpus`: `0-3,8`), alone and inside
//! `/proc/self/status`.
#![no_main]

use elastic_cpu_probe::{cpu_affinity_in, parse_cpu_list};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Some(n) = parse_cpu_list(text) {
        // At least one CPU, and no more than there are CPU numbers.
        assert!((1..=1 << 20).contains(&n), "{n}");
    }
    let status = format!("Name:\tsvc\nCpus_allowed_list:\t{text}\n");
    if !text.contains('\n') && !text.contains('\r') {
        assert_eq!(cpu_affinity_in(&status), parse_cpu_list(text));
    }
    let _ = cpu_affinity_in(text);
});
