//! A cgroup's `cpu.stat` (v1 or v2), as the throttling read parses it.
#![no_main]

use elastic_cpu_probe::CpuThrottling;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Some(t) = CpuThrottling::parse(text) {
        assert_eq!(t.since(&t), CpuThrottling::default());
        assert_eq!(t.since(&CpuThrottling::default()), t);
    }
});
