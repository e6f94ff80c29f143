//! CPU time of a process and of the whole machine. This process's comes from the library's
//! process CPU clock; another process's and the machine's from /proc (Linux; None elsewhere),
//! in clock ticks of the rate the kernel reports.

use std::time::Duration;

/// CPU time of this whole process (user + system, every thread).
pub fn process_cpu() -> Option<Duration> {
    elastic_cpu_core::ProcessCpuClock::now()
}

/// CPU time of process `pid` ("self" for this one), from its /proc `stat`.
pub fn cpu_of(pid: &str) -> Option<Duration> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    ticks(utime + stime)
}

/// CPU time of the machine across all processes: (busy = total - idle - iowait, total), from
/// /proc/stat.
pub fn machine_busy() -> Option<(Duration, Duration)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    machine_busy_in(&s, ticks_per_second()?)
}

/// [`machine_busy`] from the text of /proc/stat, at `hz` ticks a second.
fn machine_busy_in(stat: &str, hz: u64) -> Option<(Duration, Duration)> {
    let line = stat.lines().next()?;
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
        of_ticks(total.saturating_sub(idle), hz),
        of_ticks(total, hz),
    ))
}

/// The clock ticks a second of the /proc interface (`USER_HZ`), as the kernel reports it.
#[cfg(unix)]
fn ticks_per_second() -> Option<u64> {
    Some(rustix::param::clock_ticks_per_second()).filter(|&hz| hz > 0)
}

/// The clock ticks a second of the /proc interface (none without one).
#[cfg(not(unix))]
fn ticks_per_second() -> Option<u64> {
    None
}

/// `n` clock ticks of /proc as a duration.
fn ticks(n: u64) -> Option<Duration> {
    Some(of_ticks(n, ticks_per_second()?))
}

fn of_ticks(n: u64, hz: u64) -> Duration {
    Duration::from_nanos((n as u128 * 1_000_000_000 / hz as u128).min(u64::MAX as u128) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_become_durations_at_the_given_rate() {
        assert_eq!(of_ticks(250, 100), Duration::from_millis(2500));
        assert_eq!(of_ticks(3, 1000), Duration::from_millis(3));
        let stat = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5\n";
        let (busy, total) = machine_busy_in(stat, 100).unwrap();
        assert_eq!(
            (busy, total),
            (Duration::from_millis(1500), Duration::from_secs(10))
        );
        assert!(machine_busy_in("cpu 1 2 3\n", 100).is_none());
    }

    #[test]
    fn this_process_reads_its_own_cpu_both_ways() {
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(process_cpu().unwrap() > Duration::ZERO, "{x}");
        if cfg!(target_os = "linux") {
            assert!(cpu_of("self").is_some());
            assert!(machine_busy().is_some());
        }
    }
}
