//! The overhead correction (docs/design.md §5, "Running time: what is charged") reads the
//! process's real CPU clock, so it is off on a manual clock: there the rate stays exactly
//! `limit × cpus` and grants are charged exactly the running time, whatever the process spends.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::time::{Duration, Instant};

use common::*;
use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::PacedExt;

#[test]
fn on_a_manual_clock_the_rate_is_the_limit_and_only_running_time_is_charged() {
    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.3, 2.0);
    let burn = Burn {
        clock: clock.clone(),
        per_poll: Duration::from_millis(10),
        polls: 200,
    };
    let mut fut = Box::pin(burn.paced(&elastic));
    let (_counter, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    let mut polls = 0;
    loop {
        // Real CPU the process spends that no grant is charged for: a correction reading the
        // process clock would see a large overhead here.
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_micros(200) {
            std::hint::spin_loop();
        }
        polls += 1;
        if Pin::new(&mut fut).poll(&mut cx).is_ready() {
            break;
        }
        if polls % 5 == 0 {
            clock.advance(Duration::from_millis(50));
            elastic.tick();
            assert_eq!(elastic.snapshot().queue.rate_nanos_per_sec, 600_000_000);
        }
        assert!(polls < 10_000, "the paced future never finished");
    }
    drop(fut);
    let s = elastic.snapshot();
    assert!(
        s.ticks >= 20,
        "enough ticks for several windows: {}",
        s.ticks
    );
    assert_eq!(s.queue.rate_nanos_per_sec, 600_000_000);
    assert_eq!(s.used, 2000 * MS, "exactly the 200 polls of 10 ms");
    assert_ledger_balanced(&s);
}
