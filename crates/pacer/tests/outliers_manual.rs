//! The outlier trap through the `Elastic`, on a manual clock: polls planted at known lines come
//! back in the snapshot grouped by site, most time held first; the threshold follows the
//! setting; the long-poll totals keep a bounded set of site names. Durations are given or read
//! from the manual clock, never measured.

mod common;

use std::panic::Location;
use std::time::Duration;

use common::*;
use elastic_cpu_core::ManualClock;
use elastic_cpu_pacer::settings::OutlierThreshold;
use elastic_cpu_pacer::testing::Drive;
use elastic_cpu_pacer::Elastic;

fn manual(threshold: OutlierThreshold) -> Elastic {
    Elastic::builder()
        .manual(ManualClock::new())
        .fixed_share(0.5)
        .cpus(2.0)
        .outlier_threshold(threshold)
        .build()
        .unwrap()
}

#[test]
fn planted_long_polls_come_back_grouped_by_site_in_order_of_time_held() {
    let elastic = manual(OutlierThreshold::Target); // the 1 ms default target
    let probe = elastic.probe();
    let scan = Location::caller();
    let handshake = Location::caller();
    let export = Location::caller();
    for _ in 0..10 {
        probe.record_poll_from(scan, None, Some(2 * MS), true); // 20 ms held
    }
    for _ in 0..3 {
        probe.record_poll_from(handshake, None, Some(9 * MS), false); // 27 ms held
    }
    probe.record_poll_from(export, None, Some(5 * MS), true); // 5 ms held
    probe.record_poll_from(export, None, Some(MS / 2), true); // under the threshold
    elastic.tick();
    let o = elastic.snapshot().outliers;
    assert_eq!(o.threshold, Some(MS));
    let order: Vec<_> = o
        .sites
        .iter()
        .map(|s| (s.site.unwrap().line(), s.elastic, s.count, s.worst, s.held))
        .collect();
    assert_eq!(
        order,
        vec![
            (handshake.line(), false, 3, 9 * MS, 27 * MS),
            (scan.line(), true, 10, 2 * MS, 20 * MS),
            (export.line(), true, 1, 5 * MS, 5 * MS),
        ]
    );
    assert_eq!(
        o.sites[0].spawned_at(),
        format!("{}:{}", file!(), handshake.line())
    );
    // Slowest first, at most 8.
    let slowest: Vec<_> = o.slowest_polls.iter().map(|p| p.duration).collect();
    assert_eq!(slowest[..4], [9 * MS, 9 * MS, 9 * MS, 5 * MS]);
    assert_eq!(slowest.len(), 8);
}

#[test]
fn the_threshold_follows_the_setting() {
    let at = manual(OutlierThreshold::At(Duration::from_micros(300)));
    assert_eq!(
        at.snapshot().outliers.threshold,
        Some(Duration::from_micros(300))
    );
    let off = manual(OutlierThreshold::Off);
    off.probe().record_poll(None, Some(50 * MS), false);
    off.tick();
    let o = off.snapshot().outliers;
    assert_eq!(o.threshold, None);
    assert!(o.sites.is_empty());
    // The builder's target, but never under a millisecond.
    let target = |us| {
        Elastic::builder()
            .manual(ManualClock::new())
            .target_p99(Duration::from_micros(us))
            .build()
            .unwrap()
            .snapshot()
            .outliers
            .threshold
    };
    assert_eq!(target(60), Some(MS));
    assert_eq!(target(3000), Some(3 * MS));
}

#[track_caller]
fn plant(elastic: &Elastic) {
    elastic.probe().record_poll(None, Some(3 * MS), false);
}

#[test]
fn the_totals_by_site_name_eight_sites_and_count_the_rest_as_other() {
    let elastic = manual(OutlierThreshold::Target);
    // Ten sites, one long poll each (each call below is its own site).
    plant(&elastic);
    plant(&elastic);
    plant(&elastic);
    plant(&elastic);
    plant(&elastic);
    plant(&elastic);
    plant(&elastic);
    plant(&elastic);
    plant(&elastic);
    plant(&elastic);
    elastic.tick();
    let totals = elastic.snapshot().outliers.polls_by_site;
    assert_eq!(totals.len(), 9, "{totals:?}");
    assert_eq!(totals[8], ("other".to_string(), 2));
    assert!(totals[..8]
        .iter()
        .all(|(s, n)| s.contains("outliers_manual.rs:") && *n == 1));
    // The names stay: a later tick counts on under the same labels.
    plant(&elastic);
    elastic.tick();
    let again = elastic.snapshot().outliers.polls_by_site;
    assert_eq!(
        again.iter().map(|(s, _)| s).collect::<Vec<_>>(),
        totals.iter().map(|(s, _)| s).collect::<Vec<_>>()
    );
    assert_eq!(again[8].1, 3);
}

/// Without task hooks the adapters report their own long polls, under the line where the
/// adapter was made (`#[track_caller]`); the running time comes from the manual clock.
#[cfg(not(tokio_unstable))]
#[test]
fn without_hooks_a_paced_future_reports_its_long_polls_where_it_was_made() {
    use elastic_cpu_pacer::PacedExt;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Context;

    let clock = ManualClock::new();
    let elastic = manual_elastic(&clock, 0.5, 2.0);
    let burn = Burn {
        clock: clock.clone(),
        per_poll: 3 * MS,
        polls: 4,
    };
    let line = line!() + 1;
    let mut fut = Box::pin(burn.paced(&elastic));
    let (_count, waker) = CountingWaker::new();
    let mut cx = Context::from_waker(&waker);
    while Pin::new(&mut fut).poll(&mut cx).is_pending() {}
    elastic.tick();
    let o = elastic.snapshot().outliers;
    assert_eq!(o.sites.len(), 1, "{o:#?}");
    assert_eq!(o.sites[0].site.unwrap().line(), line);
    assert!(o.sites[0].elastic);
    assert_eq!((o.sites[0].count, o.sites[0].worst), (4, 3 * MS));
}
