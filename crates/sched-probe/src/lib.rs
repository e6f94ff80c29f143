//! Measure: scheduling latency and poll time of tokio tasks.
