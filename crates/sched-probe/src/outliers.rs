//! The outlier trap's report: the polls and waits over the threshold, as records in each
//! worker's ring (`trap`), collected once per tick into a window of their own, grouped by spawn
//! site.

use std::collections::{HashMap, VecDeque};
use std::panic::Location;
use std::time::Duration;

use crate::sites::{self, OTHER};

/// Slowest polls and longest waits a window keeps.
pub const KEEP: usize = 8;

/// Spawn sites the long-poll totals name (metrics labels); the rest count as `"other"`.
pub const NAMED_SITES: usize = 8;

/// A poll or a wait over the threshold, as [`Outliers`] reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outlier {
    /// Where the task was spawned (with task hooks, tokio's spawn location; without them, where
    /// the elastic adapter was made). `None`: a site the probe had no room left to name.
    pub site: Option<&'static Location<'static>>,
    /// The poll was marked elastic (waits are always foreground's).
    pub elastic: bool,
    /// tokio's id of the task, when known.
    pub task: Option<u64>,
    /// How long the poll ran, or the task waited in a run queue.
    pub duration: Duration,
    /// When the poll or the wait ended, from the probe's creation.
    pub at: Duration,
    /// For a wait: the spawn sites of the outlier polls that ran on the same worker while it
    /// waited (the polls that held the worker), most recent first.
    pub held_by: Vec<Option<&'static Location<'static>>>,
}

/// One spawn site's outlier polls over the window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SiteOutliers {
    /// Where the tasks were spawned (`None`: a site the probe had no room left to name).
    pub site: Option<&'static Location<'static>>,
    /// Its polls were marked elastic.
    pub elastic: bool,
    /// Polls over the threshold.
    pub count: u64,
    /// The longest of them.
    pub worst: Duration,
    /// Their total time: how long this site held workers in polls over the threshold.
    pub held: Duration,
    /// Foreground waits over the threshold that these polls held up (see
    /// [`Outlier::held_by`]).
    pub waits_held: u64,
}

impl SiteOutliers {
    /// The site as `path:line` (`"other"` when unnamed).
    ///
    /// ```
    /// let s = elastic_cpu_probe::SiteOutliers {
    ///     site: Some(std::panic::Location::caller()),
    ///     ..Default::default()
    /// };
    /// assert!(s.spawned_at().contains(".rs:"));
    /// assert_eq!(elastic_cpu_probe::SiteOutliers::default().spawned_at(), "other");
    /// ```
    pub fn spawned_at(&self) -> String {
        site_label(self.site)
    }
}

/// A site as `path:line`, or `"other"`.
pub fn site_label(site: Option<&'static Location<'static>>) -> String {
    match site {
        Some(l) => format!("{}:{}", l.file(), l.line()),
        None => "other".into(),
    }
}

/// The window's outliers, as returned by [`Probe::outliers`](crate::Probe::outliers).
///
/// ```
/// use elastic_cpu_probe::{Probe, ProbeConfig};
/// use std::time::Duration;
///
/// let config = ProbeConfig { outlier_threshold: Some(Duration::from_millis(1)), ..Default::default() };
/// let probe = Probe::new(config)?;
/// let line = line!() + 1;
/// probe.record_poll(None, Some(Duration::from_millis(3)), false); // this line is the site
/// probe.record_poll(None, Some(Duration::from_micros(50)), false); // under: not an outlier
/// probe.rotate();
/// let o = probe.outliers();
/// assert_eq!(o.sites.len(), 1);
/// assert_eq!((o.sites[0].count, o.sites[0].worst), (1, Duration::from_millis(3)));
/// assert_eq!(o.sites[0].site.unwrap().line(), line);
/// # Ok::<(), elastic_cpu_probe::SettingError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outliers {
    /// The threshold polls and waits were compared with (`None`: the trap is off).
    pub threshold: Option<Duration>,
    /// Per spawn site (and kind), the window's polls over the threshold: most time held first.
    pub sites: Vec<SiteOutliers>,
    /// The window's slowest polls, slowest first (at most 8).
    pub slowest_polls: Vec<Outlier>,
    /// The window's longest foreground waits in a run queue, longest first (at most 8).
    pub longest_waits: Vec<Outlier>,
    /// Records a worker overwrote before they were collected (a flood of outliers: more than a
    /// worker's ring holds in one tick) in the window.
    pub missed: u64,
    /// Polls over the threshold since the probe started, by spawn site: the first 8 sites seen
    /// by name (`path:line`), every later one under `"other"`. A bounded, stable label set for
    /// a metrics counter.
    pub polls_by_site: Vec<(String, u64)>,
}

/// Words of one outlier record in a worker's ring.
pub(crate) const WORDS: usize = 5;

/// An outlier record: what, whose, how long, when, and for a wait who held the worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) wait: bool,
    pub(crate) elastic: bool,
    pub(crate) site: u32,
    pub(crate) nanos: u64,
    /// End of the poll or the wait, in ns from the probe's creation.
    pub(crate) at: u64,
    /// tokio's task id, 0 unknown.
    pub(crate) task: u64,
    /// Up to two holders: (site, elastic).
    pub(crate) holders: [Option<(u32, bool)>; 2],
}

impl Record {
    pub(crate) fn encode(&self) -> [u64; WORDS] {
        let holder = |h: Option<(u32, bool)>| match h {
            None => 0u64,
            Some((site, elastic)) => {
                (u64::from(site.min(0x7fff_fffe)) + 1) | (u64::from(elastic) << 31)
            }
        };
        [
            u64::from(self.site) | (u64::from(self.wait) << 32) | (u64::from(self.elastic) << 33),
            self.nanos,
            self.at,
            self.task,
            holder(self.holders[0]) | (holder(self.holders[1]) << 32),
        ]
    }

    pub(crate) fn decode(w: [u64; WORDS]) -> Record {
        let holder = |h: u64| {
            let h = h & 0xffff_ffff;
            (h != 0).then(|| {
                let site = (h & 0x7fff_ffff) as u32 - 1;
                let site = if site == 0x7fff_fffe { OTHER } else { site };
                (site, h >> 31 != 0)
            })
        };
        Record {
            site: w[0] as u32,
            wait: (w[0] >> 32) & 1 != 0,
            elastic: (w[0] >> 33) & 1 != 0,
            nanos: w[1],
            at: w[2],
            task: w[3],
            holders: [holder(w[4]), holder(w[4] >> 32)],
        }
    }

    fn outlier(&self) -> Outlier {
        Outlier {
            site: sites::location(self.site),
            elastic: self.elastic,
            task: (self.task != 0).then_some(self.task),
            duration: Duration::from_nanos(self.nanos),
            at: Duration::from_nanos(self.at),
            held_by: self
                .holders
                .iter()
                .flatten()
                .map(|&(site, _)| sites::location(site))
                .collect(),
        }
    }
}

/// A site's tally in one interval: (count, worst, held, waits held), in ns.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    count: u64,
    worst: u64,
    held: u64,
    waits_held: u64,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.count += other.count;
        self.worst = self.worst.max(other.worst);
        self.held += other.held;
        self.waits_held += other.waits_held;
    }
}

/// One tick's outliers.
#[derive(Default)]
struct Interval {
    sites: HashMap<(u32, bool), Tally>,
    polls: Vec<Record>,
    waits: Vec<Record>,
    missed: u64,
}

/// Keep the `KEEP` longest of `records`, longest first.
fn keep_longest(records: &mut Vec<Record>) {
    records.sort_by(|a, b| b.nanos.cmp(&a.nanos).then(a.at.cmp(&b.at)));
    records.truncate(KEEP);
}

impl Interval {
    fn add(&mut self, r: Record) {
        if r.wait {
            for &(site, elastic) in r.holders.iter().flatten() {
                self.sites.entry((site, elastic)).or_default().waits_held += 1;
            }
            self.waits.push(r);
            if self.waits.len() > 4 * KEEP {
                keep_longest(&mut self.waits);
            }
        } else {
            let t = self.sites.entry((r.site, r.elastic)).or_default();
            t.count += 1;
            t.worst = t.worst.max(r.nanos);
            t.held += r.nanos;
            self.polls.push(r);
            if self.polls.len() > 4 * KEEP {
                keep_longest(&mut self.polls);
            }
        }
    }

    fn close(&mut self) {
        keep_longest(&mut self.polls);
        keep_longest(&mut self.waits);
    }
}

/// The window over the collected records, and where each worker's ring was read up to.
pub(crate) struct TrapWindow {
    capacity: usize,
    ring: VecDeque<Interval>,
    /// Per slot: the number of the next record to read.
    next: Vec<u64>,
    /// Polls over the threshold since start, by site and kind.
    totals: HashMap<u32, u64>,
    /// The sites named in `polls_by_site`, in the order they were first seen.
    named: Vec<u32>,
}

impl TrapWindow {
    pub(crate) fn new(capacity: usize) -> TrapWindow {
        TrapWindow {
            capacity: capacity.max(1),
            ring: VecDeque::new(),
            next: Vec::new(),
            totals: HashMap::new(),
            named: Vec::new(),
        }
    }

    /// Reads what slot `index`'s ring holds since the last call into `into`.
    pub(crate) fn collect_from(
        &mut self,
        index: usize,
        ring: &elastic_cpu_core::EventRing<WORDS>,
        into: &mut Vec<Record>,
    ) -> u64 {
        if self.next.len() <= index {
            self.next.resize(index + 1, 0);
        }
        let read = ring.read_from(self.next[index], |_, w| into.push(Record::decode(w)));
        self.next[index] = read.next;
        read.missed
    }

    /// Closes an interval of `records` (`missed` lost to overwrites) and evicts what falls out
    /// of the window.
    pub(crate) fn push(&mut self, records: Vec<Record>, missed: u64) {
        let mut interval = Interval {
            missed,
            ..Interval::default()
        };
        for r in records {
            if !r.wait {
                *self.totals.entry(r.site).or_default() += 1;
                if !self.named.contains(&r.site)
                    && self.named.len() < NAMED_SITES
                    && r.site != OTHER
                {
                    self.named.push(r.site);
                }
            }
            interval.add(r);
        }
        interval.close();
        self.ring.push_back(interval);
        while self.ring.len() > self.capacity {
            self.ring.pop_front();
        }
    }

    /// The window's report.
    pub(crate) fn report(&self, threshold: Option<Duration>) -> Outliers {
        let mut sites: HashMap<(u32, bool), Tally> = HashMap::new();
        let (mut polls, mut waits, mut missed) = (Vec::new(), Vec::new(), 0);
        for iv in &self.ring {
            for (key, t) in &iv.sites {
                sites.entry(*key).or_default().add(t);
            }
            polls.extend_from_slice(&iv.polls);
            waits.extend_from_slice(&iv.waits);
            missed += iv.missed;
        }
        keep_longest(&mut polls);
        keep_longest(&mut waits);
        let mut sites: Vec<SiteOutliers> = sites
            .into_iter()
            // A holder seen only in waits (its own poll fell out of the window) still counts.
            .map(|((site, elastic), t)| SiteOutliers {
                site: sites::location(site),
                elastic,
                count: t.count,
                worst: Duration::from_nanos(t.worst),
                held: Duration::from_nanos(t.held),
                waits_held: t.waits_held,
            })
            .collect();
        sites.sort_by(|a, b| {
            (b.held, b.count, b.waits_held)
                .cmp(&(a.held, a.count, a.waits_held))
                .then_with(|| site_label(a.site).cmp(&site_label(b.site)))
        });
        let mut polls_by_site: Vec<(String, u64)> = self
            .named
            .iter()
            .map(|&s| (site_label(sites::location(s)), self.totals[&s]))
            .collect();
        let other: u64 = self
            .totals
            .iter()
            .filter(|(s, _)| !self.named.contains(s))
            .map(|(_, n)| n)
            .sum();
        if other > 0 {
            polls_by_site.push(("other".into(), other));
        }
        Outliers {
            threshold,
            sites,
            slowest_polls: polls.iter().map(Record::outlier).collect(),
            longest_waits: waits.iter().map(Record::outlier).collect(),
            missed,
            polls_by_site,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_its_encoding() {
        for r in [
            Record {
                wait: true,
                elastic: false,
                site: 7,
                nanos: 2_000_000,
                at: 5,
                task: 42,
                holders: [Some((3, true)), Some((OTHER, false))],
            },
            Record {
                wait: false,
                elastic: true,
                site: OTHER,
                nanos: u64::MAX,
                at: 0,
                task: 0,
                holders: [None, None],
            },
        ] {
            assert_eq!(Record::decode(r.encode()), r);
        }
    }
}
