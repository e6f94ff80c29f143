//! Latency histograms (ns, 1 µs .. 100 s) and latencies written for people.

use crate::report::json;
use hdrhistogram::Histogram;
use serde::Serialize;

/// Latency histogram in nanoseconds, 1 µs .. 100 s, 3 significant digits.
pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// Record `ns`, clamped into the histogram's range.
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

/// Format microseconds for humans.
pub fn fmt_us(us: Option<f64>) -> String {
    match us {
        None => "-".into(),
        Some(u) if u >= 10_000.0 => format!("{:.0}ms", u / 1e3),
        Some(u) if u >= 1_000.0 => format!("{:.1}ms", u / 1e3),
        Some(u) => format!("{u:.0}us"),
    }
}

/// Latencies in µs (each round's p99, say) as [`fmt_us`] writes them, joined by `sep`.
pub fn fmt_us_list(us: &[f64], sep: &str) -> String {
    us.iter()
        .map(|&u| fmt_us(Some(u)))
        .collect::<Vec<_>>()
        .join(sep)
}

/// A window's request latencies: how many requests, and their percentiles in µs (None when
/// there were none). Serializes as the JSON reports write it.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Latency {
    /// Requests in the window.
    pub requests: u64,
    /// The median.
    #[serde(serialize_with = "json::opt_num")]
    pub p50_us: Option<f64>,
    /// The 99th percentile.
    #[serde(serialize_with = "json::opt_num")]
    pub p99_us: Option<f64>,
    /// The 99.9th percentile.
    #[serde(serialize_with = "json::opt_num")]
    pub p999_us: Option<f64>,
    /// The slowest.
    #[serde(serialize_with = "json::opt_num")]
    pub max_us: Option<f64>,
}

impl Latency {
    /// The latencies recorded in `h`.
    pub fn of(h: &Histogram<u64>) -> Latency {
        Latency {
            requests: h.len(),
            p50_us: q_us(h, 0.50),
            p99_us: q_us(h, 0.99),
            p999_us: q_us(h, 0.999),
            max_us: q_us(h, 1.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_latencies_reads_as_each_one_does() {
        assert_eq!(
            fmt_us_list(&[250.4, 1_500.0, 12_000.0], ", "),
            "250us, 1.5ms, 12ms"
        );
        assert_eq!(fmt_us_list(&[], " "), "");
    }
}
