//! loom model of the event ring: one thread pushes while another reads. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p elastic-cpu-core --release --test loom_ring`.
//!
//! Every record a reader keeps must be one the writer pushed, whole (no word from another
//! record), in order, and every record must be either read or counted as missed.
#![cfg(loom)]

use elastic_cpu_core::EventRing;
use loom::sync::Arc;
use loom::thread;

/// Record `n`'s words: each one names `n`, so a torn read shows.
fn record(n: u64) -> [u64; 2] {
    [n, n + 100]
}

fn check_read(ring: &EventRing<2>, from: u64) -> u64 {
    let mut last = None;
    let mut kept = 0;
    let read = ring.read_from(from, |n, words| {
        assert_eq!(words, record(n), "a torn or misplaced record");
        assert!(last.is_none_or(|l| l < n), "out of order");
        last = Some(n);
        kept += 1;
    });
    assert_eq!(
        kept + read.missed,
        read.next - from,
        "every record read or missed"
    );
    read.next
}

#[test]
fn a_reader_never_keeps_a_torn_record() {
    loom::model(|| {
        // Two entries, three records: the third overwrites the first while it may be read.
        let ring = Arc::new(EventRing::<2>::new(2));
        let writer = {
            let ring = ring.clone();
            thread::spawn(move || {
                for n in 0..3 {
                    ring.push(record(n));
                }
            })
        };
        let next = check_read(&ring, 0);
        writer.join().unwrap();
        let end = check_read(&ring, next);
        assert_eq!(end, 3);
    });
}

#[test]
fn get_sees_a_record_whole_or_not_at_all() {
    loom::model(|| {
        let ring = Arc::new(EventRing::<2>::new(1));
        let writer = {
            let ring = ring.clone();
            thread::spawn(move || {
                ring.push(record(0));
                ring.push(record(1));
            })
        };
        for n in 0..2 {
            if let Some(words) = ring.get(n) {
                assert_eq!(words, record(n));
            }
        }
        writer.join().unwrap();
        assert_eq!(ring.get(1), Some(record(1)));
        assert_eq!(ring.get(0), None);
    });
}
