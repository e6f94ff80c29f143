//! Small helpers: exponential draws, calibrated CPU spin, latency histograms, process CPU time.

use hdrhistogram::Histogram;
use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Exponentially distributed with the given mean (inverse transform of a uniform in (0, 1]).
pub fn exp(rng: &mut fastrand::Rng, mean: f64) -> f64 {
    -(1.0 - rng.f64()).ln() * mean
}

/// Iterations of [`spin_iters`] per microsecond of CPU, measured once.
static SPIN_PER_US: OnceLock<f64> = OnceLock::new();

#[inline(never)]
pub fn spin_iters(n: u64) -> u64 {
    let mut x = black_box(0x1234_5678_9ABC_DEF1u64);
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    black_box(x)
}

/// Measure the spin loop: best of several tries (other processes share the cores).
pub fn calibrate_spin() -> f64 {
    *SPIN_PER_US.get_or_init(|| {
        let n = 2_000_000u64;
        let mut best = f64::MAX;
        for _ in 0..15 {
            let t = Instant::now();
            spin_iters(n);
            best = best.min(t.elapsed().as_secs_f64());
        }
        n as f64 / (best * 1e6)
    })
}

/// Burn about `us` microseconds of CPU (fixed work, not wall time).
pub fn spin_us(us: f64) {
    let per_us = calibrate_spin();
    spin_iters((us * per_us) as u64);
}

/// Latency histogram in nanoseconds, 1 µs .. 100 s, 3 significant digits.
pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 100_000_000_000, 3).expect("valid histogram bounds")
}

pub fn record(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.clamp(1_000, 100_000_000_000));
}

/// Quantile in microseconds, None when empty.
pub fn q_us(h: &Histogram<u64>, q: f64) -> Option<f64> {
    if h.is_empty() {
        None
    } else {
        Some(h.value_at_quantile(q) as f64 / 1e3)
    }
}

/// CPU time of this whole process (user + system) from /proc (Linux), None elsewhere.
pub fn process_cpu() -> Option<Duration> {
    cpu_of("self")
}

/// CPU time of process `pid` ("self" for this one), from /proc (Linux), None elsewhere.
pub fn cpu_of(pid: &str) -> Option<Duration> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    // USER_HZ of the /proc interface is 100 on Linux.
    Some(Duration::from_millis((utime + stime) * 10))
}

/// CPU time of the machine across all processes (busy = total - idle - iowait), from /proc/stat.
pub fn machine_busy() -> Option<(Duration, Duration)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let line = s.lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return None;
    }
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v[4];
    Some((
        Duration::from_millis((total - idle) * 10),
        Duration::from_millis(total * 10),
    ))
}

/// Format microseconds for humans.
pub fn fmt_us(us: Option<f64>) -> String {
    match us {
        None => "-".into(),
        Some(u) if u >= 10_000.0 => format!("{:.0}ms", u / 1e3),
        Some(u) if u >= 1_000.0 => format!("{:.1}ms", u / 1e3),
        Some(u) => format!("{u:.0}us"),
    }
}

/// Lower the calling thread to the lowest priority the OS offers: `SCHED_IDLE` on Linux, nice
/// 19 elsewhere. Returns what it got, for the output (None: refused).
#[cfg(target_os = "linux")]
pub fn lowest_priority() -> Option<&'static str> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain syscall on the calling thread with a valid, initialised parameter.
    let ok = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0;
    ok.then_some("SCHED_IDLE")
}

/// Lower the calling thread to the lowest priority the OS offers: `SCHED_IDLE` on Linux, nice
/// 19 elsewhere. Returns what it got, for the output (None: refused).
#[cfg(not(target_os = "linux"))]
pub fn lowest_priority() -> Option<&'static str> {
    // SAFETY: plain syscall with valid arguments (0: the caller).
    let ok = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) } == 0;
    ok.then_some("nice 19 (SCHED_IDLE is Linux only)")
}
