//! An empty window answers "no data": count 0 and `None` percentiles, never 0 or NaN.

use elastic_cpu_probe::{Probe, ProbeConfig, Split, Summary, Window};
use std::time::Duration;

fn assert_no_data(w: &Window) {
    for split in [&w.queue_latency, &w.poll_time] {
        for s in [&split.foreground, &split.elastic, &split.all] {
            assert_eq!(*s, Summary::default());
            assert_eq!(s.count, 0);
            assert_eq!((s.p50, s.p99, s.p999, s.max), (None, None, None, None));
        }
    }
}

#[test]
fn before_any_rotation() {
    let probe = Probe::new(ProbeConfig::default()).unwrap();
    let w = probe.window();
    assert_eq!(w.intervals, 0);
    assert_no_data(&w);
    assert_eq!(w, Window::default());
}

#[test]
fn samples_not_yet_rotated_are_not_in_the_window() {
    let probe = Probe::new(ProbeConfig::default()).unwrap();
    probe.record_poll(
        Some(Duration::from_millis(1)),
        Some(Duration::from_millis(1)),
        false,
    );
    assert_no_data(&probe.window());
}

#[test]
fn rotations_without_samples() {
    let probe = Probe::new(ProbeConfig::default()).unwrap();
    for i in 1..=30 {
        probe.rotate();
        let w = probe.window();
        assert_eq!(w.intervals, i.min(25));
        assert_no_data(&w);
    }
}

#[test]
fn window_empties_after_samples_leave() {
    let config = ProbeConfig {
        tick: Duration::from_millis(100),
        window: Duration::from_millis(300),
        ..ProbeConfig::default()
    };
    let probe = Probe::new(config).unwrap();
    probe.record_poll(
        Some(Duration::from_millis(5)),
        Some(Duration::from_micros(7)),
        true,
    );
    probe.record_poll(Some(Duration::from_millis(2)), None, false);
    probe.rotate();
    assert_eq!(probe.window().queue_latency.all.count, 2);
    probe.rotate();
    probe.rotate();
    assert_eq!(probe.window().queue_latency.all.count, 2);
    probe.rotate(); // the interval with samples is evicted
    let w = probe.window();
    assert_eq!(w.intervals, 3);
    assert_no_data(&w);
}

#[test]
fn one_side_empty_other_side_not() {
    let probe = Probe::new(ProbeConfig::default()).unwrap();
    probe.record_poll(None, Some(Duration::from_micros(100)), false);
    probe.rotate();
    let w = probe.window();
    assert_eq!(w.queue_latency, Split::default()); // no queue latency recorded at all
    assert_eq!(w.poll_time.elastic, Summary::default());
    assert_eq!(w.poll_time.foreground.count, 1);
    assert!(w.poll_time.foreground.p99.is_some());
    assert_eq!(w.poll_time.all.count, 1);
}
