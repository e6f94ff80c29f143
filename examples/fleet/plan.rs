//! The run's phases, in whole seconds of one run clock, and the windows the report's figures
//! are taken over.

use std::ops::Range;

/// What a phase does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Every node's foreground at a trial rate, to measure its CPU per request.
    Calibrate,
    /// Every node's foreground at its rate, no scan.
    Baseline,
    /// Every node's scan on.
    Paced,
    /// One node's foreground times the step factor.
    Step,
    /// That node's foreground back to its rate.
    Back,
    /// Node `.0`'s (0-based) scan off, the other nodes' on: its own-scan baseline.
    OwnOff(usize),
}

/// The own-scan phases' names, by node (1-based as the report names nodes).
const OWN_OFF_NAMES: [&str; crate::args::MAX_NODES] = [
    "own-off 1",
    "own-off 2",
    "own-off 3",
    "own-off 4",
    "own-off 5",
    "own-off 6",
    "own-off 7",
    "own-off 8",
];

impl Kind {
    /// The phase's name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Calibrate => "calibrate",
            Kind::Baseline => "baseline",
            Kind::Paced => "paced",
            Kind::Step => "step",
            Kind::Back => "back",
            Kind::OwnOff(k) => OWN_OFF_NAMES.get(k).copied().unwrap_or("own-off"),
        }
    }
}

/// One phase: what, and its stretch of the run clock in seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase {
    pub kind: Kind,
    pub secs: Range<usize>,
}

/// The lengths the flags give, in seconds.
#[derive(Clone, Copy, Debug)]
pub struct Lengths {
    /// 0: no calibration (rates given).
    pub calibrate: usize,
    pub baseline: usize,
    pub paced: usize,
    pub rest: usize,
    pub step: usize,
    pub warmup: usize,
    /// Each own-scan phase (0: none).
    pub own_off: usize,
}

/// Seconds of the calibration phase (its first 2 left out).
pub const CALIBRATE_SECS: usize = 5;
/// The calibration's seconds left out (the trial rate's start).
pub const CALIBRATE_SKIP: usize = 2;

/// The phases and the windows of a run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub phases: Vec<Phase>,
    pub lengths: Lengths,
}

/// Seconds `[a, b)` of the run clock.
pub type Window = Range<usize>;

impl Plan {
    /// The phases back to back, each as long as `l` says (calibration only when `l.calibrate`
    /// is not 0), then an own-scan phase for each of `own_off` (0-based nodes) when
    /// `l.own_off` is not 0. They come last so that the other nodes' scans run at their settled
    /// levels, and the step's figures are not disturbed.
    pub fn new(l: Lengths, own_off: &[usize]) -> Plan {
        let mut phases = Vec::new();
        let mut t = 0;
        for (kind, secs) in [
            (Kind::Calibrate, l.calibrate),
            (Kind::Baseline, l.baseline),
            (Kind::Paced, l.paced),
            (Kind::Step, l.step),
            (Kind::Back, l.step),
        ]
        .into_iter()
        .chain(own_off.iter().map(|&k| (Kind::OwnOff(k), l.own_off)))
        {
            if secs > 0 {
                phases.push(Phase {
                    kind,
                    secs: t..t + secs,
                });
                t += secs;
            }
        }
        Plan { phases, lengths: l }
    }

    /// The stretch of phase `kind` (empty when it does not run).
    pub fn span(&self, kind: Kind) -> Window {
        self.phases
            .iter()
            .find(|p| p.kind == kind)
            .map_or(0..0, |p| p.secs.clone())
    }

    /// The run's length in seconds.
    pub fn total(&self) -> usize {
        self.phases.last().map_or(0, |p| p.secs.end)
    }

    /// The phase second `t` is in.
    pub fn kind_at(&self, t: usize) -> Option<Kind> {
        self.phases
            .iter()
            .find(|p| p.secs.contains(&t))
            .map(|p| p.kind)
    }

    /// The calibration's measured seconds.
    pub fn calibration(&self) -> Window {
        let s = self.span(Kind::Calibrate);
        (s.start + CALIBRATE_SKIP).min(s.end)..s.end
    }

    /// The baseline after its warm-up.
    pub fn baseline(&self) -> Window {
        let s = self.span(Kind::Baseline);
        s.start + self.lengths.warmup..s.end
    }

    /// The paced phase after its warm-up (the controllers' climb included).
    pub fn paced_whole(&self) -> Window {
        let s = self.span(Kind::Paced);
        s.start + self.lengths.warmup..s.end
    }

    /// The paced phase's last `rest` seconds: the nodes at rest, and the level before the step.
    pub fn rest(&self) -> Window {
        let s = self.span(Kind::Paced);
        s.end - self.lengths.rest..s.end
    }

    /// The step phase's second half: the stepped node's new level.
    pub fn during(&self) -> Window {
        second_half(self.span(Kind::Step))
    }

    /// The phase back's second half: where the nodes came back to.
    pub fn after(&self) -> Window {
        second_half(self.span(Kind::Back))
    }

    /// Every second the scans ran (every scan, before the own-scan phases).
    pub fn scanning(&self) -> Window {
        self.span(Kind::Paced).start..self.span(Kind::Back).end
    }

    /// Node `k`'s own-scan phase's second half (empty when it has none): the node before it
    /// turned its scan back on as the phase started, and that scan climbs back meanwhile.
    pub fn own_off(&self, k: usize) -> Window {
        second_half(self.span(Kind::OwnOff(k)))
    }
}

fn second_half(s: Window) -> Window {
    s.start + s.len() / 2..s.end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lengths(calibrate: usize) -> Lengths {
        Lengths {
            calibrate,
            baseline: 20,
            paced: 70,
            rest: 20,
            step: 25,
            warmup: 4,
            own_off: 0,
        }
    }

    #[test]
    fn phases_run_back_to_back_and_windows_sit_inside_them() {
        let p = Plan::new(lengths(5), &[]);
        let kinds: Vec<Kind> = p.phases.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            [
                Kind::Calibrate,
                Kind::Baseline,
                Kind::Paced,
                Kind::Step,
                Kind::Back
            ]
        );
        assert_eq!(p.total(), 5 + 20 + 70 + 25 + 25);
        assert_eq!(p.calibration(), 2..5);
        assert_eq!(p.baseline(), 9..25);
        assert_eq!(p.paced_whole(), 29..95);
        assert_eq!(p.rest(), 75..95);
        assert_eq!(p.span(Kind::Step), 95..120);
        assert_eq!(p.during(), 107..120);
        assert_eq!(p.after(), 132..145);
        assert_eq!(p.scanning(), 25..145);
        assert_eq!(p.kind_at(95), Some(Kind::Step));
        assert_eq!(p.kind_at(94), Some(Kind::Paced));
        assert_eq!(p.kind_at(145), None);
    }

    #[test]
    fn without_calibration_the_run_starts_at_the_baseline() {
        let p = Plan::new(lengths(0), &[]);
        assert_eq!(p.phases[0].kind, Kind::Baseline);
        assert_eq!(p.span(Kind::Calibrate), 0..0);
        assert!(p.calibration().is_empty());
        assert_eq!(p.baseline(), 4..20);
    }

    #[test]
    fn own_scan_phases_come_last_one_node_after_the_other() {
        let l = Lengths {
            own_off: 12,
            ..lengths(5)
        };
        let p = Plan::new(l, &[0, 2]);
        assert_eq!(p.span(Kind::Back), 120..145);
        assert_eq!(p.span(Kind::OwnOff(0)), 145..157);
        assert_eq!(p.span(Kind::OwnOff(2)), 157..169);
        assert_eq!(p.total(), 169);
        assert_eq!(p.own_off(0), 151..157);
        assert_eq!(p.own_off(2), 163..169);
        assert!(p.own_off(1).is_empty(), "node 2 has none");
        assert_eq!(p.kind_at(150), Some(Kind::OwnOff(0)));
        assert_eq!(p.kind_at(160), Some(Kind::OwnOff(2)));
        assert_eq!(Kind::OwnOff(2).name(), "own-off 3");
        assert_eq!(p.scanning(), 25..145);
        // No length: no phase, whatever the nodes.
        let p = Plan::new(lengths(5), &[0, 1]);
        assert_eq!(p.total(), 145);
        assert!(p.own_off(0).is_empty());
    }
}
