//! `Elastic::shutdown` stops and joins the threads the `Elastic` started (the governor, and
//! without `tokio_unstable` the sampling probe), stops the I/O probe and closes every queue and
//! gate: work paced after it runs unpaced, admissions are refused. One test in this file: it
//! counts the process's threads.

mod common;

use std::time::Duration;

use common::eventually;
use elastic_cpu_pacer::gate::{GateSettings, RejectReason};
use elastic_cpu_pacer::{Elastic, PacedExt};

#[test]
fn shutdown_joins_its_threads_and_closes_everything() {
    #[cfg(target_os = "linux")]
    let before = common::threads();
    let elastic = Elastic::builder().build().unwrap();
    // A current-thread runtime starts no thread of its own; the I/O probe's timer canaries none.
    let rt = elastic
        .runtime(tokio::runtime::Builder::new_current_thread())
        .build()
        .unwrap();
    let gate = elastic.connection_gate(GateSettings::new()).unwrap();
    #[cfg(target_os = "linux")]
    {
        let sampler = usize::from(!cfg!(tokio_unstable));
        assert_eq!(
            common::threads(),
            before + 1 + sampler,
            "governor (+ sampler)"
        );
    }
    let sum = rt.block_on(async { (0..1000u64).sum::<u64>() }.paced(&elastic));
    assert_eq!(sum, 499_500);
    assert!(elastic.snapshot().io_probe.is_on());

    elastic.clone().shutdown();
    // Joined: the kernel removes a joined thread's entry a moment after the join returns.
    #[cfg(target_os = "linux")]
    eventually("the threads are gone", Duration::from_secs(30), || {
        common::threads() == before
    });
    let s = elastic.snapshot();
    assert!(s.queue.closed);
    assert!(!s.io_probe.is_on(), "{}", s.io_probe);
    // Paced work runs unpaced rather than wait for a grant that cannot come.
    let sum = rt.block_on(async { (0..1000u64).sum::<u64>() }.paced(&elastic));
    assert_eq!(sum, 499_500);
    let refused = rt
        .block_on(gate.admit(Duration::from_millis(100)))
        .unwrap_err();
    assert_eq!(refused.reason(), RejectReason::Closed);
    // Again: nothing happens.
    elastic.shutdown();
    let ticks = elastic.snapshot().ticks;
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(elastic.snapshot().ticks, ticks, "no governor ticks on");
}
