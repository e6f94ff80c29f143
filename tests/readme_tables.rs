//! The reference tables say what the code has: docs/metrics.md lists every name in `METRICS`,
//! in its order, and the README's metrics to watch are among them; the README's settings table
//! lists every setter of `ElasticBuilder` (the test plumbing of feature `test-util` aside), each
//! once.

const README: &str = include_str!("../README.md");
#[cfg(feature = "metrics")]
const METRICS_DOC: &str = include_str!("../docs/metrics.md");

/// The first cell of every row of the README's first table under `## {section}`.
fn first_cells(section: &str) -> Vec<String> {
    first_cells_of(README, section)
}

/// The first cell of every row of `doc`'s first table under the heading `## {section}`, header
/// and rule left out.
fn first_cells_of(doc: &str, section: &str) -> Vec<String> {
    let heading = format!("## {section}\n");
    let start = doc.find(&heading).expect("the section") + heading.len();
    let body = &doc[start..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    body.lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.split('|').nth(1).unwrap_or("").trim().to_string())
        .collect()
}

/// The name in a cell's code span: `` `elastic_cpu_waiters{kind}` `` → `elastic_cpu_waiters`,
/// `` `share(min, max)` `` → `share`.
fn code_name(cell: &str) -> String {
    cell.trim_matches('`')
        .split(['{', '('])
        .next()
        .unwrap_or("")
        .to_string()
}

#[cfg(feature = "metrics")]
#[test]
fn the_metrics_table_is_metrics() {
    let table: Vec<String> = first_cells_of(METRICS_DOC, "Metrics")
        .iter()
        .map(|c| code_name(c))
        .collect();
    let metrics: Vec<String> = elastic_cpu::metrics::METRICS
        .iter()
        .map(|(name, _, _)| name.to_string())
        .collect();
    assert_eq!(table, metrics);
    let watched = first_cells("Is it working?");
    assert_eq!(watched.len(), 4);
    for name in watched.iter().map(|c| code_name(c)) {
        assert!(metrics.contains(&name), "{name} is not a metric");
    }
}

/// The public setters of `ElasticBuilder` outside the test plumbing.
fn builder_setters() -> Vec<String> {
    let src = include_str!("../crates/pacer/src/builder.rs");
    let lines: Vec<&str> = src.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("pub fn ") else {
            continue;
        };
        let attrs = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.trim_start().starts_with("#[") || l.trim_start().starts_with("///"));
        if attrs.clone().any(|l| l.contains("test-util")) {
            continue;
        }
        out.push(rest.split('(').next().unwrap().to_string());
    }
    out
}

#[test]
fn the_settings_table_lists_every_builder_setter() {
    let mut table: Vec<String> = first_cells("Settings")
        .iter()
        .map(|c| code_name(c))
        .collect();
    let mut setters = builder_setters();
    assert!(
        setters.len() >= 9,
        "the parser found the setters: {setters:?}"
    );
    table.sort();
    setters.sort();
    assert_eq!(table, setters);
}

#[test]
fn the_parsers_read_what_they_should() {
    assert_eq!(
        code_name("`elastic_cpu_gate_share_ratio{gate}`"),
        "elastic_cpu_gate_share_ratio"
    );
    assert_eq!(code_name("`share(min, max)`"), "share");
    assert!(first_cells("Settings").len() >= 9);
}

#[test]
fn the_docs_stay_short() {
    // A user reads the README and the design; the measurements go to docs/results.md, which
    // keeps the latest figures of each experiment (earlier runs stay in git history).
    assert!(
        README.len() <= 15_000,
        "README.md is {} bytes",
        README.len()
    );
    let design = include_str!("../docs/design.md");
    assert!(
        design.len() <= 50_000,
        "docs/design.md is {} bytes",
        design.len()
    );
    let results = include_str!("../docs/results.md");
    assert!(
        results.len() <= 60_000,
        "docs/results.md is {} bytes",
        results.len()
    );
}
