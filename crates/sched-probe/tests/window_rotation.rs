//! Window rotation, merge and percentiles on manually driven ticks (no wall-clock assertions).

use elastic_cpu_probe::{Probe, ProbeConfig, Summary, Window};
use std::time::Duration;

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// `got` is within the histogram precision of `want`: 2 significant figures (1 %), or `lowest`
/// (1 µs) in absolute terms for small values.
fn close(got: Option<Duration>, want: Duration) {
    let got = got.expect("a value").as_nanos() as f64;
    let want = want.as_nanos() as f64;
    let tolerance = (want * 0.01).max(1000.0);
    assert!(
        (got - want).abs() <= tolerance,
        "got {got} ns, want {want} ns (tolerance {tolerance} ns)"
    );
}

fn probe(intervals: u32) -> Probe {
    Probe::new(ProbeConfig {
        tick: Duration::from_millis(100),
        window: Duration::from_millis(100) * intervals,
        ..ProbeConfig::default()
    })
    .unwrap()
}

#[test]
fn values_land_in_the_right_split() {
    let p = probe(25);
    for _ in 0..3 {
        p.record_poll(Some(us(10)), Some(us(20)), false);
    }
    for _ in 0..5 {
        p.record_poll(Some(us(1000)), Some(us(2000)), true);
    }
    p.record_poll(None, Some(us(30)), false);
    p.record_poll(Some(us(40)), None, true);
    p.rotate();
    let w = p.window();
    assert_eq!(w.intervals, 1);

    assert_eq!(w.queue_latency.foreground.count, 3);
    assert_eq!(w.queue_latency.elastic.count, 6);
    assert_eq!(w.queue_latency.all.count, 9);
    assert_eq!(w.poll_time.foreground.count, 4);
    assert_eq!(w.poll_time.elastic.count, 5);
    assert_eq!(w.poll_time.all.count, 9);

    close(w.queue_latency.foreground.max, us(10));
    close(w.queue_latency.elastic.max, us(1000));
    close(w.poll_time.foreground.max, us(30));
    close(w.poll_time.elastic.p50, us(2000));
    close(w.poll_time.all.max, us(2000));
    close(w.queue_latency.all.p50, us(1000)); // 6 of 9 samples are elastic and >= 40 µs
}

#[test]
fn percentiles_within_precision() {
    let p = probe(25);
    // 1..=10_000 µs, each once, spread over 10 intervals.
    for interval in 0..10u64 {
        for i in 1..=1000u64 {
            p.record_poll(Some(us(interval * 1000 + i)), None, false);
        }
        p.rotate();
    }
    let s = p.window().queue_latency.foreground;
    assert_eq!(s.count, 10_000);
    close(s.p50, us(5000));
    close(s.p99, us(9900));
    close(s.p999, us(9990));
    close(s.max, us(10_000));
    assert!(s.p50 <= s.p99 && s.p99 <= s.p999 && s.p999 <= s.max);
}

#[test]
fn old_intervals_leave_after_window_over_tick_rotations() {
    let n = 5;
    let p = probe(n);
    assert_eq!(p.config().intervals(), 5);
    // Interval k holds k+1 samples of (k+1) ms.
    for k in 0..n as u64 {
        for _ in 0..=k {
            p.record_poll(Some(Duration::from_millis(k + 1)), None, false);
        }
        p.rotate();
    }
    let w = p.window();
    assert_eq!(w.intervals, 5);
    assert_eq!(w.queue_latency.all.count, 1 + 2 + 3 + 4 + 5);
    close(w.queue_latency.all.max, Duration::from_millis(5));

    // Each empty rotation evicts the oldest interval, in order.
    let mut left = 15;
    for k in 0..n as u64 {
        p.rotate();
        left -= k + 1;
        let w = p.window();
        assert_eq!(w.intervals, 5, "the ring stays full");
        assert_eq!(w.queue_latency.all.count, left);
        if left > 0 {
            // The smallest samples left first: the median moves up.
            assert!(w.queue_latency.all.p50.unwrap() >= Duration::from_millis(k + 2));
            close(w.queue_latency.all.max, Duration::from_millis(5));
        } else {
            assert_eq!(w.queue_latency.all, Summary::default());
        }
    }
}

#[test]
fn a_window_read_twice_between_rotations_is_the_same_and_a_rotation_renews_it() {
    let p = probe(5);
    p.record_poll(Some(us(100)), None, false);
    p.rotate();
    let first = p.window();
    // Recorded after the read, not rotated yet: not in the window.
    p.record_poll(Some(us(9000)), None, false);
    assert_eq!(p.window(), first);
    p.rotate();
    let w = p.window();
    assert_eq!((w.intervals, w.queue_latency.all.count), (2, 2));
    close(w.queue_latency.all.max, us(9000));
}

#[test]
fn a_spike_leaves_the_window_and_p99_recovers() {
    let p = probe(25);
    for _ in 0..1000 {
        p.record_poll(Some(Duration::from_millis(50)), None, false);
    }
    p.rotate();
    for _ in 0..24 {
        for _ in 0..1000 {
            p.record_poll(Some(us(100)), None, false);
        }
        p.rotate();
    }
    // The spike is 1/25 of the window: above p99.
    close(p.window().queue_latency.all.p99, Duration::from_millis(50));
    for _ in 0..1000 {
        p.record_poll(Some(us(100)), None, false);
    }
    p.rotate(); // evicts the spike
    let w = p.window();
    assert_eq!(w.queue_latency.all.count, 25_000);
    close(w.queue_latency.all.p99, us(100));
    close(w.queue_latency.all.max, us(100));
}

#[test]
fn values_are_clamped_to_the_bounds() {
    let p = probe(25);
    p.record_poll(Some(Duration::from_secs(3600)), Some(Duration::MAX), false);
    p.record_poll(Some(Duration::ZERO), Some(Duration::from_nanos(1)), false);
    p.rotate();
    let w = p.window();
    assert_eq!(w.queue_latency.all.count, 2);
    close(w.queue_latency.all.max, Duration::from_secs(10));
    close(w.poll_time.all.max, Duration::from_secs(10));
    // Below `lowest` (1 µs) values are not told apart from 0.
    assert!(w.queue_latency.all.p50.unwrap() < us(1));
}

#[test]
fn merge_across_worker_slots() {
    // Samples recorded on different runtime workers go to different slots; rotate merges them.
    let p = probe(25);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..64u64 {
            let p = p.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..100u64 {
                    p.record_poll(Some(us(1 + (t * 100 + i) % 1000)), None, t % 2 == 0);
                    tokio::task::yield_now().await;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    p.record_poll(Some(us(5)), None, false); // off-runtime: the overflow slot
    p.rotate();
    let w = p.window();
    assert_eq!(w.queue_latency.elastic.count, 3200);
    assert_eq!(w.queue_latency.foreground.count, 3201);
    assert_eq!(w.queue_latency.all.count, 6401);
    close(w.queue_latency.all.max, us(1000));
}

#[test]
fn concurrent_record_and_rotate_lose_nothing() {
    // A window far longer than the test: nothing is evicted, so every sample must be counted once.
    let p = Probe::new(ProbeConfig {
        tick: Duration::from_millis(1),
        window: Duration::from_secs(100),
        ..ProbeConfig::default()
    })
    .unwrap();
    let threads = 4;
    let per_thread = 20_000u64;
    let done = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let p = p.clone();
            let done = &done;
            s.spawn(move || {
                for i in 0..per_thread {
                    p.record_poll(Some(us(1 + i % 500)), Some(us(2)), t % 2 == 0);
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        let mut rotations = 0;
        while done.load(std::sync::atomic::Ordering::SeqCst) < threads || rotations < 10 {
            p.rotate();
            rotations += 1;
            std::thread::yield_now();
        }
    });
    p.rotate();
    let w = p.window();
    assert_eq!(w.queue_latency.all.count, threads as u64 * per_thread);
    assert_eq!(w.poll_time.elastic.count, 2 * per_thread);
    assert_eq!(w.poll_time.foreground.count, 2 * per_thread);
}

fn record_on(rt: &tokio::runtime::Runtime, p: &Probe, tasks: u64, per_task: u64) {
    rt.block_on(async {
        let mut handles = Vec::new();
        for t in 0..tasks {
            let p = p.clone();
            handles.push(tokio::spawn(async move {
                for i in 0..per_task {
                    p.record_poll(Some(us(1 + (t + i) % 300)), Some(us(3)), i % 3 == 0);
                    tokio::task::yield_now().await;
                }
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
    });
}

#[test]
fn two_runtimes_share_one_probe() {
    // Worker indexes collide: one runtime's workers own the slots, the other's share the
    // overflow slot. Nothing is lost either way.
    let p = probe(25);
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap()
    };
    let (a, b) = (runtime(), runtime());
    std::thread::scope(|s| {
        s.spawn(|| record_on(&a, &p, 16, 300));
        s.spawn(|| record_on(&b, &p, 16, 300));
    });
    p.rotate();
    let w = p.window();
    assert_eq!(w.queue_latency.all.count, 2 * 16 * 300);
    assert_eq!(w.poll_time.all.count, 2 * 16 * 300);
    assert_eq!(w.queue_latency.elastic.count, 2 * 16 * 100);
}

#[test]
fn slots_outlive_their_runtime() {
    // A new runtime on the same probe takes over the slots of the old one's exited workers.
    let p = probe(25);
    for round in 1..=3u64 {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(3)
            .build()
            .unwrap();
        record_on(&rt, &p, 8, 50);
        drop(rt);
        p.rotate();
        assert_eq!(p.window().queue_latency.all.count, round * 8 * 50);
    }
}

#[test]
fn the_quiet_window_holds_the_marked_intervals_only_a_window_long() {
    let p = probe(3);
    assert_eq!(p.quiet_window().intervals, 0);
    // Interval 1 quiet (10 µs), interval 2 not (5 ms), interval 3 quiet (20 µs).
    for (latency, quiet) in [(us(10), true), (us(5000), false), (us(20), true)] {
        p.record_poll(Some(latency), None, false);
        p.rotate();
        if quiet {
            p.mark_quiet(1);
        }
    }
    let q = p.quiet_window();
    assert_eq!((q.intervals, q.queue_latency.all.count), (2, 2));
    close(q.queue_latency.all.max, us(20));
    // Marking more intervals than the ring holds copies what it holds; the quiet window keeps
    // its own length and drops its oldest.
    p.mark_quiet(10);
    let q = p.quiet_window();
    assert_eq!((q.intervals, q.queue_latency.all.count), (3, 3));
    close(q.queue_latency.all.max, us(5000));
    close(q.queue_latency.all.p50, us(20));
    // The running window is untouched.
    assert_eq!(p.window().queue_latency.all.count, 3);
}

/// Records 100 foreground samples: `slow` of them at 5 ms, the rest at 50 µs; then rotates.
fn interval(p: &Probe, slow: usize) {
    for i in 0..100 {
        let wait = if i < slow { us(5000) } else { us(50) };
        p.record_poll(Some(wait), None, false);
    }
    p.rotate();
}

/// The window of a fresh 10-interval probe after one [`interval`] per entry of `slow`.
fn window_of(slow: &[usize]) -> Window {
    let p = probe(10);
    for &s in slow {
        interval(&p, s);
    }
    p.window()
}

#[test]
fn a_latency_of_one_interval_is_trimmed_from_the_window() {
    // One interval of 5 ms waits (a host pause) among quiet ones.
    let w = window_of(&[0, 100, 0, 0, 0]);
    close(w.queue_latency.all.p99, us(5000));
    close(w.queue_p99_trimmed, us(50));
    // The same latency in every interval stays.
    let w = window_of(&[2; 5]);
    close(w.queue_latency.all.p99, us(5000));
    close(w.queue_p99_trimmed, us(5000));
    // In two intervals of five, one is trimmed, and the other still decides the p99.
    close(window_of(&[100, 0, 0, 100, 0]).queue_p99_trimmed, us(5000));
}

#[test]
fn a_window_of_fewer_than_three_intervals_with_samples_is_not_trimmed() {
    let p = probe(10);
    interval(&p, 0);
    interval(&p, 100);
    p.rotate();
    let w = p.window();
    assert_eq!(w.intervals, 3);
    assert_eq!(w.queue_p99_trimmed, w.queue_latency.all.p99);
    close(w.queue_p99_trimmed, us(5000));
    // Empty: no data, trimmed or not.
    assert_eq!(window_of(&[]).queue_p99_trimmed, None);
}
