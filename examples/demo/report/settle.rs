//! The controller settle-time analysis of the low / high / step phases.

use super::{PhaseResult, Report, HIGH_START, LOW_START};
use crate::args::Kind;
use elastic_cpu_examples::latency::fmt_us;
use elastic_cpu_examples::stats::mean;

/// Settle analysis of one controlled phase.
pub struct Settle {
    pub phase: String,
    pub kind: Kind,
    pub start_limit: Option<f64>,
    /// Mean over the last quarter of the phase (or of the segment, for step phases).
    pub end_limit: Option<f64>,
    /// Seconds from the phase start (low/high) or from the step (step) until the limit stays
    /// within the band of `end_limit` for good; None if it never did.
    pub settle_s: Vec<Option<f64>>,
    /// Limit peak-to-peak over the second half of the phase (or segment).
    pub tail_p2p: f64,
    /// Direction changes of the limit (moves larger than 0.01) in the second half.
    pub reversals: usize,
    /// Mean limit before the load step and at the end of the stepped segment (step phases).
    pub step_levels: Vec<Option<f64>>,
    /// Step phases: seconds from each load step until the limit first moved toward the level its
    /// segment ends at (by at least 0.02); None when it never did, or had no need to
    /// (already within the band of that level at the step).
    pub move_s: Vec<Option<f64>>,
    /// Max foreground p99 in the 5 s after the (up) step.
    pub fg_p99_after_step_us: Option<f64>,
    /// Step phases: seconds from the up step until the signal was at or under its target again
    /// (the first sample after the step that is; 0 when none was over), None if it never was
    /// in the stepped segment.
    pub under_target_s: Option<f64>,
    /// Step phases: seconds from the down step until elastic work ran at 0.9 of its mean rate
    /// before the up step again, None if it never did.
    pub recovered_s: Option<f64>,
    /// Mean limit at the end of the sibling phase (low <-> high) of the same profile.
    pub sibling_end: Option<f64>,
}

fn band(v: f64) -> f64 {
    (0.2 * v).max(0.05)
}

/// Time from `from_s` until the limit first comes within the band of `level` (the controller
/// dithers around its resting level by design; how much is `tail_p2p`).
fn settle_time(pts: &[(f64, f64)], from_s: f64, level: f64) -> Option<f64> {
    let b = band(level);
    pts.iter()
        .find(|p| p.0 >= from_s && (p.1 - level).abs() <= b)
        .map(|p| (p.0 - from_s).max(0.0))
}

/// Time from `from_s` until the limit has moved at least `MOVE` toward `level` from where it was
/// at `from_s`; None when it was already within the band of `level`, or never moved.
fn move_time(pts: &[(f64, f64)], from_s: f64, level: f64) -> Option<f64> {
    const MOVE: f64 = 0.02;
    let start = pts.iter().find(|p| p.0 >= from_s)?.1;
    if (start - level).abs() <= band(level) {
        return None;
    }
    let dir = (level - start).signum();
    pts.iter()
        .find(|p| p.0 >= from_s && (p.1 - start) * dir >= MOVE - 1e-9)
        .map(|p| p.0 - from_s)
}

fn tail_stats(pts: &[(f64, f64)]) -> (f64, usize) {
    let half = &pts[pts.len() / 2..];
    let mx = half.iter().map(|p| p.1).fold(f64::MIN, f64::max);
    let mn = half.iter().map(|p| p.1).fold(f64::MAX, f64::min);
    let mut rev = 0;
    let mut dir = 0i8;
    let mut anchor = half.first().map(|p| p.1).unwrap_or(0.0);
    for p in half {
        let d = p.1 - anchor;
        if d.abs() > 0.01 {
            let nd = if d > 0.0 { 1 } else { -1 };
            if dir != 0 && nd != dir {
                rev += 1;
            }
            dir = nd;
            anchor = p.1;
        }
    }
    (if half.is_empty() { 0.0 } else { mx - mn }, rev)
}

fn mean_last(pts: &[(f64, f64)], frac: f64) -> Option<f64> {
    if pts.is_empty() {
        return None;
    }
    let n = ((pts.len() as f64 * frac).ceil() as usize).max(1);
    mean(&pts[pts.len() - n..].iter().map(|p| p.1).collect::<Vec<_>>())
}

impl Settle {
    pub fn profile(&self) -> &str {
        let name = self.phase.split(' ').next().unwrap_or("");
        name.split_once('@').map(|x| x.1).unwrap_or("default")
    }

    pub fn text(&self) -> String {
        let f = |x: Option<f64>| x.map(|x| format!("{x:.3}")).unwrap_or("-".into());
        let s = |x: &Option<f64>| {
            x.map(|x| format!("{x:.1}s"))
                .unwrap_or("not settled".into())
        };
        let m = |x: &Option<f64>| x.map(|x| format!("{x:.1}s")).unwrap_or("-".into());
        match self.kind {
            Kind::Step => format!(
                "{:<18} before {} -> stepped {} -> after {}; moves after up {}, after down {}; settle after up {}, after down {}; fg p99 max 5s after up {}; under target after up {}, elastic back to 0.9 after down {}; tail p-p {:.3}, reversals {}",
                self.phase,
                f(self.step_levels.first().copied().flatten()),
                f(self.step_levels.get(1).copied().flatten()),
                f(self.end_limit),
                m(self.move_s.first().unwrap_or(&None)),
                m(self.move_s.get(1).unwrap_or(&None)),
                s(self.settle_s.first().unwrap_or(&None)),
                s(self.settle_s.get(1).unwrap_or(&None)),
                fmt_us(self.fg_p99_after_step_us),
                m(&self.under_target_s),
                m(&self.recovered_s),
                self.tail_p2p,
                self.reversals
            ),
            _ => format!(
                "{:<18} start {} -> end {} (other side ended at {}); settle {}; tail p-p {:.3}, reversals {}",
                self.phase,
                f(self.start_limit),
                f(self.end_limit),
                f(self.sibling_end),
                s(self.settle_s.first().unwrap_or(&None)),
                self.tail_p2p,
                self.reversals
            ),
        }
    }
}

impl Report {
    /// A step phase's reaction: seconds from the up step until the signal is at or under its
    /// target, and from the down step until elastic work runs at 0.9 of its mean rate before
    /// the up step.
    fn reaction(&self, p: &PhaseResult) -> (Option<f64>, Option<f64>) {
        let samples: Vec<_> = self
            .timeline
            .iter()
            .filter(|x| x.phase == p.label() && x.t_ms >= p.start_ms && x.t_ms <= p.end_ms)
            .collect();
        let (Some(&up), down) = (p.step_ms.first(), p.step_ms.get(1).copied()) else {
            return (None, None);
        };
        let secs = |t: u64, from: u64| t.saturating_sub(from) as f64 / 1e3;
        let until = down.unwrap_or(p.end_ms);
        let under = samples
            .iter()
            .filter(|x| x.t_ms >= up && x.t_ms < until)
            .find(|x| match (x.signal.signal_p99_us, x.target_us) {
                (Some(s), Some(t)) => s <= t,
                _ => false,
            })
            .map(|x| secs(x.t_ms, up));
        let before: Vec<f64> = samples
            .iter()
            .filter(|x| x.t_ms < up)
            .map(|x| x.elastic_rows_per_sec)
            .collect();
        let recovered = down.zip(mean(&before)).and_then(|(down, level)| {
            samples
                .iter()
                .filter(|x| x.t_ms >= down)
                .find(|x| x.elastic_rows_per_sec >= 0.9 * level)
                .map(|x| secs(x.t_ms, down))
        });
        (under, recovered)
    }

    fn points_of(&self, p: &PhaseResult) -> Vec<(f64, f64)> {
        self.points3_of(p).into_iter().map(|x| (x.0, x.1)).collect()
    }

    /// (seconds into the phase, limit, sched p99 us) of a phase's samples that have a limit.
    fn points3_of(&self, p: &PhaseResult) -> Vec<(f64, f64, Option<f64>)> {
        self.timeline
            .iter()
            .filter(|x| x.phase == p.label() && x.t_ms >= p.start_ms && x.t_ms <= p.end_ms)
            .filter_map(|x| {
                x.limit.map(|l| {
                    (
                        (x.t_ms.saturating_sub(p.start_ms)) as f64 / 1e3,
                        l,
                        x.sched_p99_us,
                    )
                })
            })
            .collect()
    }

    /// Whether the last `frac` of these samples look like the controller's resting state:
    /// the latency signal on both sides of the target (the controller dithers around it), or
    /// the limit pinned at the floor with latency above target / at the ceiling below it.
    fn at_rest(&self, pts: &[(f64, f64, Option<f64>)], frac: f64) -> bool {
        let Some(target) = self.machine.target_us.map(|t| t as f64) else {
            return false;
        };
        if pts.is_empty() {
            return false;
        }
        let n = ((pts.len() as f64 * frac).ceil() as usize).clamp(1, pts.len());
        let tail = &pts[pts.len() - n..];
        let above = tail
            .iter()
            .filter(|x| x.2.is_some_and(|s| s > target))
            .count();
        let below = tail
            .iter()
            .filter(|x| x.2.is_some_and(|s| s <= target))
            .count();
        let floor = tail.iter().all(|x| x.1 <= LOW_START + 0.01);
        let ceiling = tail.iter().all(|x| x.1 >= HIGH_START - 0.01);
        (above > 0 && below > 0) || (floor && below == 0) || (ceiling && above == 0)
    }

    /// Settle analysis of the low / high / step phases.
    pub fn settles(&self) -> Vec<Settle> {
        let mut out = Vec::new();
        let rounds = self.rounds();
        for p in &self.segments {
            if !matches!(p.kind, Kind::Low | Kind::High | Kind::Step) || p.skipped.is_some() {
                continue;
            }
            let pts = self.points_of(p);
            let pts3 = self.points3_of(p);
            if pts.len() < 4 {
                continue;
            }
            let mut st = Settle {
                phase: if rounds > 1 {
                    format!("{} #{}", p.name, p.round + 1)
                } else {
                    p.name.clone()
                },
                kind: p.kind,
                start_limit: pts.first().map(|x| x.1),
                end_limit: mean_last(&pts, 0.25),
                settle_s: Vec::new(),
                tail_p2p: 0.0,
                reversals: 0,
                step_levels: Vec::new(),
                move_s: Vec::new(),
                fg_p99_after_step_us: None,
                under_target_s: None,
                recovered_s: None,
                sibling_end: None,
            };
            match p.kind {
                Kind::Low | Kind::High => {
                    let sib_name = {
                        let other = if p.kind == Kind::Low { "high" } else { "low" };
                        match p.name.split_once('@') {
                            Some((_, prof)) => format!("{other}@{prof}"),
                            None => other.to_string(),
                        }
                    };
                    let sib = self
                        .segments
                        .iter()
                        .find(|q| q.name == sib_name && q.round == p.round && q.skipped.is_none());
                    st.sibling_end = sib.and_then(|q| mean_last(&self.points_of(q), 0.25));
                    // The resting level: where both sides (from the floor and from the
                    // ceiling) end, when they end at the same level; not settled when they end
                    // apart. Without the other side: where this one ends, if it ends at rest.
                    let level = match (st.end_limit, st.sibling_end) {
                        (Some(a), Some(b)) if (a - b).abs() <= band((a + b) / 2.0) => {
                            Some((a + b) / 2.0)
                        }
                        (Some(_), Some(_)) => None,
                        (a, None) if self.at_rest(&pts3, 0.3) => a,
                        _ => None,
                    };
                    st.settle_s
                        .push(level.and_then(|t| settle_time(&pts, 0.0, t)));
                    let (pp, rev) = tail_stats(&pts);
                    st.tail_p2p = pp;
                    st.reversals = rev;
                }
                Kind::Step => {
                    let steps: Vec<f64> = p
                        .step_ms
                        .iter()
                        .map(|&t| t.saturating_sub(p.start_ms) as f64 / 1e3)
                        .collect();
                    let end = pts.last().map(|x| x.0).unwrap_or(0.0);
                    let mut bounds = vec![0.0];
                    bounds.extend(steps.iter().copied());
                    bounds.push(end + 1.0);
                    let segs: Vec<Vec<(f64, f64)>> = bounds
                        .windows(2)
                        .map(|w| {
                            pts.iter()
                                .copied()
                                .filter(|x| x.0 >= w[0] && x.0 < w[1])
                                .collect()
                        })
                        .collect();
                    for (i, seg) in segs.iter().enumerate() {
                        let lvl = mean_last(seg, 0.3);
                        st.step_levels.push(lvl);
                        if i > 0 {
                            st.settle_s
                                .push(lvl.and_then(|l| settle_time(seg, bounds[i], l)));
                            st.move_s
                                .push(lvl.and_then(|l| move_time(&pts, bounds[i], l)));
                        }
                    }
                    if let Some(last) = segs.last() {
                        let (pp, rev) = tail_stats(last);
                        st.tail_p2p = pp;
                        st.reversals = rev;
                    }
                    if let Some(&up) = p.step_ms.first() {
                        st.fg_p99_after_step_us = self
                            .timeline
                            .iter()
                            .filter(|x| x.phase == p.label() && x.t_ms >= up && x.t_ms < up + 5000)
                            .filter_map(|x| x.fg_p99_us)
                            .reduce(f64::max);
                    }
                    (st.under_target_s, st.recovered_s) = self.reaction(p);
                    st.end_limit = st.step_levels.last().copied().flatten();
                }
                _ => {}
            }
            out.push(st);
        }
        out
    }
}
