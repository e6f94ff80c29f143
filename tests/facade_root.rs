//! The facade's root stays small enough to learn: at most 25 public items (modules, types,
//! traits), and the clocks only in `testing` (feature `test-util`), never at the root.

const LIB: &str = include_str!("../src/lib.rs");

/// The names `src/lib.rs` makes public at the crate root: `pub use a::b;`, `pub use a::{b, c};`
/// and `pub mod m` (not what an inline module holds), whatever their `cfg`. Doc-test plumbing (`#[cfg(doctest)]`) is left out.
fn root_items() -> Vec<String> {
    let mut items = Vec::new();
    let mut lines = LIB.lines().peekable();
    let mut doctest = false;
    while let Some(line) = lines.next() {
        let line = line.trim();
        if line == "#[cfg(doctest)]" {
            doctest = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("pub use ") {
            // Gather a grouped `use` over several lines, up to its `;`.
            let mut stmt = rest.to_string();
            while !stmt.contains(';') {
                stmt.push_str(lines.next().expect("a `use` ends with `;`").trim());
            }
            let stmt = stmt.trim_end_matches(';');
            match stmt.split_once('{') {
                Some((_, group)) => items.extend(
                    group
                        .trim_end_matches('}')
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from),
                ),
                None => items.push(stmt.rsplit("::").next().unwrap().trim().to_string()),
            }
        } else if let Some(rest) = line.strip_prefix("pub mod ") {
            items.push(rest.split([' ', '{', ';']).next().unwrap().to_string());
            // An inline module's own items are not the root's.
            if rest.ends_with('{') {
                for inner in lines.by_ref() {
                    if inner.trim_end() == "}" {
                        break;
                    }
                }
            }
        } else if line.starts_with("pub ") && !doctest {
            panic!("a root item the parser does not know: {line}");
        }
        if !line.starts_with("#[") && !line.starts_with("///") {
            doctest = false;
        }
    }
    items
}

#[test]
fn the_root_holds_at_most_25_items() {
    let items = root_items();
    assert!(items.len() >= 10, "the parser found the items: {items:?}");
    assert!(items.len() <= 25, "{} root items: {items:?}", items.len());
    for wanted in [
        "Elastic",
        "ElasticBuilder",
        "Paced",
        "Pacer",
        "Snapshot",
        "prelude",
    ] {
        assert!(items.iter().any(|i| i == wanted), "{wanted} in {items:?}");
    }
}

#[test]
fn the_clocks_are_not_at_the_root() {
    let items = root_items();
    for clock in ["Clock", "ManualClock"] {
        assert!(!items.iter().any(|i| i == clock), "{clock} in {items:?}");
    }
}
