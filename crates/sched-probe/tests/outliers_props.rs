//! Properties of the outlier trap's report, against a model: whatever polls are recorded, the
//! sites come back most time held first, each with the count, worst and total of its polls over
//! the threshold; the slowest polls are the longest of them, in order; nothing is lost or made
//! up (a record is kept or counted as missed).

use std::collections::HashMap;
use std::panic::Location;
use std::time::Duration;

use elastic_cpu_probe::{Probe, ProbeConfig};
use proptest::prelude::*;

const THRESHOLD: Duration = Duration::from_millis(1);

fn sites() -> [&'static Location<'static>; 4] {
    [
        Location::caller(),
        Location::caller(),
        Location::caller(),
        Location::caller(),
    ]
}

proptest! {
    #[test]
    fn the_report_is_the_model(
        polls in prop::collection::vec((0usize..4, 0u64..5_000, any::<bool>()), 0..300),
    ) {
        let probe = Probe::new(ProbeConfig {
            outlier_threshold: Some(THRESHOLD),
            ..ProbeConfig::default()
        })
        .unwrap();
        let sites = sites();
        // The model: per (site, kind), (count, worst, held) of the polls over the threshold.
        let mut model: HashMap<(u32, bool), (u64, Duration, Duration)> = HashMap::new();
        let mut over = Vec::new();
        for &(site, us, elastic) in &polls {
            let d = Duration::from_micros(us);
            probe.record_poll_from(sites[site], None, Some(d), elastic);
            if d > THRESHOLD {
                let m = model.entry((sites[site].line(), elastic)).or_default();
                m.0 += 1;
                m.1 = m.1.max(d);
                m.2 += d;
                over.push(d);
            }
        }
        probe.rotate();
        let o = probe.outliers();
        let kept: u64 = o.sites.iter().map(|s| s.count).sum();
        prop_assert_eq!(kept + o.missed, over.len() as u64);
        prop_assert!(o.sites.windows(2).all(|w| w[0].held >= w[1].held));
        if o.missed == 0 {
            prop_assert_eq!(o.sites.len(), model.len());
            for s in &o.sites {
                let m = model[&(s.site.unwrap().line(), s.elastic)];
                prop_assert_eq!((s.count, s.worst, s.held), m);
            }
            over.sort_by(|a, b| b.cmp(a));
            over.truncate(8);
            let slowest: Vec<_> = o.slowest_polls.iter().map(|p| p.duration).collect();
            prop_assert_eq!(slowest, over);
        }
    }
}
