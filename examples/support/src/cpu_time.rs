//! CPU time of a process and of the whole machine, from /proc (Linux; None elsewhere).

use std::time::Duration;

/// CPU time of this whole process (user + system).
pub fn process_cpu() -> Option<Duration> {
    cpu_of("self")
}

/// CPU time of process `pid` ("self" for this one).
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

/// CPU time of the machine across all processes: (busy = total - idle - iowait, total), from
/// /proc/stat.
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
