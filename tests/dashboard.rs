//! The Grafana dashboard in docs/ queries only what the library emits: every `elastic_cpu_*`
//! name in its PromQL is in `METRICS`, counters are read through `rate()` and only counters
//! are, and every panel reads the templated Prometheus data source.
#![cfg(feature = "metrics")]

use serde_json::Value;

const DASHBOARD: &str = include_str!("../docs/grafana-dashboard.json");

/// Every PromQL expression of the dashboard: its panels' (rows' nested panels too) and its
/// variables' queries, each with where it was found.
fn expressions(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = stack.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            stack.extend(nested);
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("?").to_string();
            out.push((title, target["expr"].as_str().unwrap().to_string()));
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if var["type"] == "query" {
            let name = var["name"].as_str().unwrap_or("?").to_string();
            out.push((name, var["query"]["query"].as_str().unwrap().to_string()));
        }
    }
    out
}

/// The metric names in `expr`, each with the text before it.
fn metric_names(expr: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = 0;
    while let Some(at) = expr[rest..].find("elastic_cpu_") {
        let start = rest + at;
        let len = expr[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(expr.len() - start);
        out.push((&expr[..start], &expr[start..start + len]));
        rest = start + len;
    }
    out
}

#[test]
fn the_dashboard_queries_only_emitted_metrics() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let emitted: Vec<&str> = elastic_cpu::metrics::METRICS
        .iter()
        .map(|(name, _, _)| *name)
        .collect();
    let exprs = expressions(&dashboard);
    let mut queried = Vec::new();
    for (place, expr) in &exprs {
        let names = metric_names(expr);
        assert!(
            !names.is_empty(),
            "{place}: `{expr}` queries no metric of the library"
        );
        for (before, name) in names {
            assert!(
                emitted.contains(&name),
                "{place}: `{expr}` queries {name}, which the library does not emit"
            );
            // A counter's level means nothing (it counts since the process started): rate it.
            let rated = before.ends_with("rate(") || before.ends_with("increase(");
            let label_query = before.ends_with("label_values(");
            assert!(
                label_query || rated == name.ends_with("_total"),
                "{place}: `{expr}`: {name} is a {}",
                if rated {
                    "gauge, not to be rated"
                } else {
                    "counter, to be rated"
                }
            );
            queried.push(name);
        }
    }
    // What the dashboard is for: the share and its bounds, signal against target, elastic CPU, brakes and
    // waits, the gate.
    for name in [
        "elastic_cpu_share_ratio",
        "elastic_cpu_min_share_ratio",
        "elastic_cpu_max_share_ratio",
        "elastic_cpu_signal_p99_seconds",
        "elastic_cpu_target_seconds",
        "elastic_cpu_used_microseconds_total",
        "elastic_cpu_brakes_total",
        "elastic_cpu_wait_microseconds_total",
        "elastic_cpu_gate_admitted_total",
        "elastic_cpu_gate_rejected_total",
        "elastic_cpu_gate_expired_total",
        "elastic_cpu_gate_waiting_on_peer",
        "elastic_cpu_gate_timed_out_total",
    ] {
        assert!(
            queried.contains(&name),
            "the dashboard does not show {name}"
        );
    }
}

#[test]
fn every_panel_reads_the_templated_data_source() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).unwrap();
    let vars = dashboard["templating"]["list"].as_array().unwrap();
    assert!(vars.iter().any(|v| v["name"] == "datasource"
        && v["type"] == "datasource"
        && v["query"] == "prometheus"));
    let mut stack: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    let mut panels = 0;
    while let Some(panel) = stack.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            stack.extend(nested);
        }
        if panel["type"] == "row" {
            continue;
        }
        panels += 1;
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{}",
            panel["title"]
        );
        for target in panel["targets"].as_array().unwrap() {
            assert_eq!(
                target["datasource"]["uid"], "${datasource}",
                "{}",
                panel["title"]
            );
        }
    }
    assert!(panels >= 5, "{panels} panels");
}

#[test]
fn the_name_finder_finds_names_and_what_precedes_them() {
    assert_eq!(
        metric_names("rate(elastic_cpu_brakes_total{job=\"a\"}[1m]) / elastic_cpu_cpus"),
        vec![
            ("rate(", "elastic_cpu_brakes_total"),
            (
                "rate(elastic_cpu_brakes_total{job=\"a\"}[1m]) / ",
                "elastic_cpu_cpus"
            ),
        ]
    );
    assert!(metric_names("vector(0.05)").is_empty());
}
