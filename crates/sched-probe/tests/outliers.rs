//! The outlier trap, fed by hand: planted polls and waits over the threshold come back grouped
//! by their site, in order of time held; the per-worker rings stay bounded under a flood.
//! Durations are given, never measured.

use std::panic::Location;
use std::time::Duration;

use elastic_cpu_probe::{Probe, ProbeConfig};

const MS: Duration = Duration::from_millis(1);

fn probe() -> Probe {
    Probe::new(ProbeConfig {
        outlier_threshold: Some(MS),
        ..ProbeConfig::default()
    })
    .unwrap()
}

#[test]
fn planted_long_polls_come_back_grouped_by_site_most_held_first() {
    let p = probe();
    let a = Location::caller();
    let b = Location::caller();
    let c = Location::caller();
    for _ in 0..3 {
        p.record_poll_from(a, None, Some(2 * MS), false); // 6 ms held
    }
    p.record_poll_from(b, None, Some(10 * MS), true); // 10 ms held, one poll
    for _ in 0..5 {
        p.record_poll_from(c, None, Some(MS + Duration::from_micros(100)), false); // 5.5 ms
        p.record_poll_from(c, None, Some(MS), false); // at the threshold: not over it
    }
    p.record_poll_from(a, Some(Duration::from_micros(900)), Some(MS / 2), false); // neither
    p.rotate();
    let o = p.outliers();
    assert_eq!(o.threshold, Some(MS));
    let got: Vec<_> = o
        .sites
        .iter()
        .map(|s| (s.site.unwrap().line(), s.elastic, s.count, s.worst, s.held))
        .collect();
    assert_eq!(
        got,
        vec![
            (b.line(), true, 1, 10 * MS, 10 * MS),
            (a.line(), false, 3, 2 * MS, 6 * MS),
            (
                c.line(),
                false,
                5,
                MS + Duration::from_micros(100),
                Duration::from_micros(5500)
            ),
        ]
    );
    assert_eq!(o.slowest_polls.len(), 8);
    assert_eq!(o.slowest_polls[0].duration, 10 * MS);
    assert!(o
        .slowest_polls
        .windows(2)
        .all(|w| w[0].duration >= w[1].duration));
    assert_eq!(o.polls_by_site.iter().map(|(_, n)| n).sum::<u64>(), 9);
    assert_eq!(o.missed, 0);
}

#[test]
fn the_window_forgets_what_left_it() {
    let p = probe(); // 25 intervals
    p.record_poll(None, Some(3 * MS), false);
    p.rotate();
    for _ in 0..24 {
        p.rotate();
    }
    assert_eq!(p.outliers().sites.len(), 1);
    p.rotate();
    let o = p.outliers();
    assert!(o.sites.is_empty() && o.slowest_polls.is_empty());
    // The running total since start keeps it.
    assert_eq!(o.polls_by_site.len(), 1);
    assert_eq!(o.polls_by_site[0].1, 1);
}

#[test]
fn a_long_wait_names_the_long_polls_that_held_its_worker() {
    let p = probe();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let holder = Location::caller();
    let (p2, h) = (p.clone(), holder);
    rt.block_on(async move {
        // On a worker: a 5 ms poll, then a foreground task that waited 4 ms behind it.
        p2.record_poll_from(h, None, Some(5 * MS), false);
        p2.record_poll(Some(4 * MS), Some(Duration::from_micros(10)), false);
    });
    p.rotate();
    let o = p.outliers();
    assert_eq!(o.longest_waits.len(), 1);
    assert_eq!(o.longest_waits[0].duration, 4 * MS);
    assert_eq!(o.longest_waits[0].held_by, vec![Some(holder)]);
    assert_eq!(o.sites[0].site, Some(holder));
    assert_eq!(o.sites[0].waits_held, 1);
}

#[test]
fn elastic_waits_are_pacing_not_outliers() {
    let p = probe();
    p.record_poll(Some(50 * MS), None, true);
    p.rotate();
    assert!(p.outliers().longest_waits.is_empty());
}

#[test]
fn a_flood_of_long_polls_stays_bounded_and_is_counted_as_missed() {
    let p = probe();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let p2 = p.clone();
    rt.block_on(async move {
        for _ in 0..100_000 {
            p2.record_poll(None, Some(2 * MS), false);
        }
    });
    p.rotate();
    let o = p.outliers();
    // One worker ring's worth was collected, the rest counted as missed.
    let kept = o.sites[0].count;
    assert!(kept > 0 && kept <= 128, "kept {kept}");
    assert_eq!(kept + o.missed, 100_000);
    assert_eq!(o.slowest_polls.len(), 8);
}

#[test]
fn the_trap_is_off_without_a_threshold() {
    let p = Probe::new(ProbeConfig::default()).unwrap();
    p.record_poll(Some(9 * MS), Some(9 * MS), false);
    p.rotate();
    let o = p.outliers();
    assert_eq!(o.threshold, None);
    assert!(o.sites.is_empty() && o.longest_waits.is_empty());
}
