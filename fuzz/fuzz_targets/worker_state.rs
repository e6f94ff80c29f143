//! A thread's `/proc/<pid>/task/<tid>/stat` line, as the worker-stacking read parses it.
#![no_main]

use elastic_cpu_probe::fuzzing::{worker_state, MAX_WORKER_CPU};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|line: &[u8]| {
    if let Some((_, cpu)) = worker_state(line) {
        assert!(cpu <= MAX_WORKER_CPU, "cpu {cpu}");
    }
});
