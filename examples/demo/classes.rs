//! The `classes` phase: three scans at once in three classes of elastic work (`backup` of
//! weight 3, `export` of weight 1, `tenant-b` of weight 1 capped at 0.1 of the CPUs), beside
//! the usual foreground; `backup` finishes midway. Each sample reads what every class was
//! charged; the report sets it against what the weights and caps entitle each to of what the
//! classes ran together, computed here (not read from the library's split).

use crate::ctl::Control;
use crate::scan::{self, Consume, Counters, ScanStream, Table};
use elastic_cpu::prelude::*;
use elastic_cpu::settings::ClassSettings;
use elastic_cpu::Elastic;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One class of the phase.
pub struct ClassSpec {
    pub name: &'static str,
    pub weight: f64,
    pub cap: Option<f64>,
}

/// The phase's classes; the first one stops midway.
pub const CLASSES: [ClassSpec; 3] = [
    ClassSpec {
        name: "backup",
        weight: 3.0,
        cap: None,
    },
    ClassSpec {
        name: "export",
        weight: 1.0,
        cap: None,
    },
    ClassSpec {
        name: "tenant-b",
        weight: 1.0,
        cap: Some(0.1),
    },
];
const N: usize = CLASSES.len();

/// The scans running, one class each.
pub struct Running {
    /// The classes' handles: a class lives while its handle or paced work does.
    _classes: Vec<Elastic>,
    /// Set to stop `backup`'s scan ("it finished its table").
    pub stop_first: Arc<AtomicBool>,
}

/// Make the classes and spawn `tasks` scans of `table` in each, on the runtime under test.
pub fn spawn(
    ctl: &Control,
    table: &Arc<Table>,
    chunk_rows: usize,
    tasks: usize,
    stop: &Arc<AtomicBool>,
    counters: &Arc<Counters>,
) -> Result<Running, String> {
    let stop_first = Arc::new(AtomicBool::new(false));
    let mut classes = Vec::new();
    for (i, spec) in CLASSES.iter().enumerate() {
        let mut settings = ClassSettings::new(spec.name).weight(spec.weight);
        if let Some(cap) = spec.cap {
            settings = settings.cap(cap);
        }
        let class = ctl.class(settings)?;
        let stop = if i == 0 { &stop_first } else { stop };
        for (from, to) in scan::ranges(table.rows.len(), tasks) {
            let s = ScanStream::new(table.clone(), from, to, chunk_rows, stop.clone());
            ctl.rt.spawn(scan::drive(
                s.paced(&class),
                counters.clone(),
                Consume::Plain,
            ));
        }
        classes.push(class);
    }
    Ok(Running {
        _classes: classes,
        stop_first,
    })
}

impl Running {
    /// Stop every scan.
    pub fn stop(&self) {
        self.stop_first.store(true, Ordering::SeqCst);
    }
}

/// One reading of the classes.
#[derive(Clone, Debug)]
pub struct ClassSample {
    pub t_ms: u64,
    pub phase: String,
    /// CPU time charged to each class so far, seconds.
    pub cpu_s: [f64; N],
    /// Each class's longest wait over the probe window, ms.
    pub longest_wait_ms: [f64; N],
    /// Each class's part of the share as the library's split gave it at the last tick.
    pub part: [f64; N],
    /// The CPUs the shares are of.
    pub cpus: f64,
    /// Which classes had work.
    pub busy: [bool; N],
    /// CPUs each class ran since the last sample (for the chart).
    pub cpus_used: [Option<f64>; N],
}

impl elastic_cpu_examples::report::plot::Sample for ClassSample {
    fn t_ms(&self) -> u64 {
        self.t_ms
    }
    fn phase(&self) -> &str {
        &self.phase
    }
}

/// Read the classes from `s`, at `t_ms` of the run; `first_busy`: backup still scans.
pub fn sample(
    s: &elastic_cpu::Snapshot,
    t_ms: u64,
    phase: &str,
    first_busy: bool,
    last: Option<&ClassSample>,
) -> ClassSample {
    let mut cpu_s = [0.0; N];
    let mut longest_wait_ms = [0.0; N];
    let mut part = [0.0; N];
    for (i, spec) in CLASSES.iter().enumerate() {
        if let Some(c) = s.classes.iter().find(|c| &*c.name == spec.name) {
            cpu_s[i] = c.cpu.as_secs_f64();
            longest_wait_ms[i] = c.longest_wait.as_secs_f64() * 1e3;
            part[i] = c.share;
        }
    }
    let mut cpus_used = [None; N];
    if let Some(l) = last {
        let dt = (t_ms.saturating_sub(l.t_ms)) as f64 / 1e3;
        if dt > 0.0 {
            for i in 0..N {
                cpus_used[i] = Some((cpu_s[i] - l.cpu_s[i]) / dt);
            }
        }
    }
    ClassSample {
        t_ms,
        phase: phase.to_string(),
        cpu_s,
        longest_wait_ms,
        part,
        cpus: s.cpus,
        busy: [first_busy, true, true],
        cpus_used,
    }
}

/// What weights and caps give the busy classes of `total`: by weight, a capped class held at
/// its cap and its excess shared by weight among the rest.
pub fn entitled(total: f64, busy: &[bool; N]) -> [f64; N] {
    let mut out = [0.0; N];
    let mut free: Vec<usize> = (0..N).filter(|&i| busy[i]).collect();
    let mut left = total.max(0.0);
    loop {
        let w: f64 = free.iter().map(|&i| CLASSES[i].weight).sum();
        if w <= 0.0 {
            return out;
        }
        let over: Vec<usize> = (free.iter().copied())
            .filter(|&i| {
                CLASSES[i]
                    .cap
                    .is_some_and(|c| left * CLASSES[i].weight / w > c)
            })
            .collect();
        if over.is_empty() {
            for &i in &free {
                out[i] = left * CLASSES[i].weight / w;
            }
            return out;
        }
        for &i in &over {
            let cap = CLASSES[i].cap.unwrap_or(0.0);
            out[i] = cap;
            left -= cap;
        }
        free.retain(|i| !over.contains(i));
    }
}

/// One class over a stretch of the phase.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassStats {
    pub name: &'static str,
    pub weight: f64,
    pub cap: Option<f64>,
    /// CPU charged over the stretch / (wall time × CPUs).
    pub cpu_share: f64,
    /// What weights and caps give it of what the classes ran together, over the same stretch
    /// (mean over samples).
    pub entitled_share: f64,
    /// The part the library's split gave it (mean over samples).
    pub part_share: f64,
    pub longest_wait_ms: f64,
}

/// The classes over the samples in `[from_ms, to_ms]` (None with fewer than two).
pub fn over(samples: &[ClassSample], from_ms: u64, to_ms: u64) -> Option<Vec<ClassStats>> {
    let s: Vec<&ClassSample> = (samples.iter())
        .filter(|p| p.t_ms >= from_ms && p.t_ms <= to_ms)
        .collect();
    let (first, last) = (s.first()?, s.last()?);
    let secs = (last.t_ms - first.t_ms) as f64 / 1e3;
    if s.len() < 2 || secs <= 0.0 || last.cpus <= 0.0 {
        return None;
    }
    let mut entitled_sum = [0.0; N];
    for pair in s.windows(2) {
        let dt = (pair[1].t_ms - pair[0].t_ms) as f64 / 1e3;
        // What the classes ran together in this interval, as a share of the CPUs.
        let total: f64 = (0..N)
            .map(|i| pair[1].cpu_s[i] - pair[0].cpu_s[i])
            .sum::<f64>()
            / dt
            / pair[1].cpus.max(1e-9);
        let e = entitled(total, &pair[0].busy);
        for i in 0..N {
            entitled_sum[i] += e[i] * dt;
        }
    }
    Some(
        (CLASSES.iter().enumerate())
            .map(|(i, spec)| ClassStats {
                name: spec.name,
                weight: spec.weight,
                cap: spec.cap,
                cpu_share: (last.cpu_s[i] - first.cpu_s[i]) / secs / last.cpus,
                entitled_share: entitled_sum[i] / secs,
                part_share: s.iter().map(|p| p.part[i]).sum::<f64>() / s.len() as f64,
                longest_wait_ms: s.iter().map(|p| p.longest_wait_ms[i]).fold(0.0, f64::max),
            })
            .collect(),
    )
}

/// The text report's table of a `classes` phase.
pub fn table_text(p: &crate::report::PhaseResult) -> String {
    let mut s = format!(
        "classes ({}): share of the CPUs, entitled / charged (the library's part), all busy | after backup stopped",
        p.label()
    );
    let Some(c) = &p.classes else {
        return s;
    };
    for (i, b) in c.busy.iter().enumerate() {
        let after = c.after_first.as_ref().and_then(|a| a.get(i));
        s.push_str(&format!(
            "\n  {:<9} weight {:<3} cap {:<4} {:.3} / {:.3} ({:.3}) | {} / {}   longest wait {:.0} ms",
            b.name,
            b.weight,
            b.cap.map_or("-".into(), |c| c.to_string()),
            b.entitled_share,
            b.cpu_share,
            b.part_share,
            after.map_or("-".into(), |a| format!("{:.3}", a.entitled_share)),
            after.map_or("-".into(), |a| format!("{:.3}", a.cpu_share)),
            b.longest_wait_ms
        ));
    }
    s.push_str(&format!(
        "\n  export reached its new part {} after backup stopped",
        c.rise_ms.map_or("never".into(), |ms| format!("{ms} ms"))
    ));
    s
}

/// How long after `stop_ms` class `i`'s CPU over `window` first reached 90 % of `share` (of
/// the CPUs), in ms; None if it never did.
pub fn rise_ms(
    samples: &[ClassSample],
    i: usize,
    stop_ms: u64,
    share: f64,
    window: Duration,
) -> Option<u64> {
    let w = window.as_millis() as u64;
    let after: Vec<&ClassSample> = samples.iter().filter(|p| p.t_ms >= stop_ms).collect();
    for (k, a) in after.iter().enumerate() {
        let Some(b) = after[k..].iter().find(|p| p.t_ms >= a.t_ms + w) else {
            break;
        };
        let secs = (b.t_ms - a.t_ms) as f64 / 1e3;
        let used = (b.cpu_s[i] - a.cpu_s[i]) / secs / b.cpus.max(1e-9);
        if used >= 0.9 * share {
            return Some(b.t_ms - stop_ms);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_split_and_the_cap_holds() {
        let e = entitled(0.75, &[true, true, true]);
        // 0.15 each by weight for the weight-1 classes: tenant-b is held at 0.1.
        assert!((e[2] - 0.1).abs() < 1e-12);
        assert!((e[0] - 0.65 * 0.75).abs() < 1e-12 && (e[1] - 0.65 * 0.25).abs() < 1e-12);
        let after = entitled(0.75, &[false, true, true]);
        assert_eq!(after[0], 0.0);
        assert!((after[1] - 0.65).abs() < 1e-12 && (after[2] - 0.1).abs() < 1e-12);
        let small = entitled(0.2, &[true, true, true]);
        assert!((small[2] - 0.04).abs() < 1e-12, "under its cap: by weight");
    }

    fn at(t_ms: u64, cpu_s: [f64; N], busy: [bool; N]) -> ClassSample {
        ClassSample {
            t_ms,
            phase: "classes".into(),
            cpu_s,
            longest_wait_ms: [1.0, 2.0, 3.0],
            part: [0.3, 0.1, 0.1],
            cpus: 2.0,
            busy,
            cpus_used: [None; N],
        }
    }

    #[test]
    fn shares_over_a_stretch_and_the_rise() {
        let all = [true; N];
        let samples = vec![
            at(0, [0.0, 0.0, 0.0], all),
            at(1000, [0.9, 0.3, 0.2], all),
            at(2000, [1.8, 0.6, 0.4], [false, true, true]),
            at(2500, [1.8, 0.9, 0.5], [false, true, true]),
            at(3000, [1.8, 1.55, 0.6], [false, true, true]),
        ];
        let s = over(&samples, 0, 2000).unwrap();
        assert!((s[0].cpu_share - 0.45).abs() < 1e-12);
        assert!((s[1].cpu_share - 0.15).abs() < 1e-12);
        // Together they ran 0.7 of the CPUs: tenant-b is held at 0.1, the rest goes 3 : 1.
        assert!((s[0].entitled_share - 0.45).abs() < 1e-12);
        assert!((s[2].entitled_share - 0.1).abs() < 1e-12);
        assert_eq!(s[2].longest_wait_ms, 3.0);
        assert!(over(&samples, 0, 0).is_none());
        // Export's 0.65 of 2 CPUs: reached over the half second from 2.5 s.
        assert_eq!(
            rise_ms(&samples, 1, 2000, 0.65, Duration::from_millis(500)),
            Some(1000)
        );
        assert_eq!(
            rise_ms(&samples, 1, 2000, 0.9, Duration::from_millis(500)),
            None
        );
    }
}
