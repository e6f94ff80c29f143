//! A thread's `schedstat` file, as the run-queue read parses it.
#![no_main]

use elastic_cpu_probe::fuzzing::schedstat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Some((on_cpu, wait, slices)) = schedstat(text) {
        // What parsed prints back to the same counters.
        assert_eq!(
            schedstat(&format!("{on_cpu} {wait} {slices}\n")),
            Some((on_cpu, wait, slices))
        );
    }
});
