//! Arbitrary values through every `Elastic::builder()` setter: `Ok` (and a few ticks run) or a
//! `BuildError::Setting` naming the setting, never a panic.
#![no_main]

use elastic_cpu_fuzz::BuilderInput;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: BuilderInput| input.run());
