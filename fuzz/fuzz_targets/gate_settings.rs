//! Arbitrary `GateSettings`: a gate that ticks and answers, or a `SettingError` naming the
//! setting, never a panic.
#![no_main]

use elastic_cpu_fuzz::GateInput;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: GateInput| input.run());
