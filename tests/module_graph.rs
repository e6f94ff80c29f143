//! No module of any crate in the workspace imports a module that imports it back: the modules
//! of each crate form a graph without cycles, so each can be read (and tested) from the bottom
//! up. A module "imports" another when its source names `crate::other` (in a `use`, a path, or a
//! grouped `use crate::{other, ..}`); the crate root's re-exports are not edges. A module with a
//! folder (the pacer's `grant/`, `signal/`, `gate/`, ..., the probe's `io_probe/`) is one node
//! with the source of every file in it, and the files of a folder form a graph of their own, by
//! `super::sibling`. The pacer's files also stay short enough to read at once, and no two types
//! visible outside their module share a name anywhere in the workspace.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const CRATES: &[&str] = &[
    "crates/sched-probe/src",
    "crates/elastic-core/src",
    "crates/pacer/src",
    "crates/plant/src",
    "src",
];

/// Module name → source, for the modules of one folder (`lib.rs` and `mod.rs` left out): a
/// file `x.rs` and a folder `x/` are the one module `x`, its source every file of both.
fn modules(dir: &Path) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for entry in fs::read_dir(dir).expect("crate source folder") {
        let path: PathBuf = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            out.entry(name).or_default().push_str(&all_sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "mod" {
            out.entry(name)
                .or_default()
                .push_str(&fs::read_to_string(&path).unwrap());
        }
    }
    out
}

/// Every `.rs` file below `dir`, concatenated.
fn all_sources(dir: &Path) -> String {
    let mut out = String::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.push_str(&all_sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push_str(&fs::read_to_string(&path).unwrap());
            out.push('\n');
        }
    }
    out
}

/// Every folder below `dir` (module folders), `dir` left out.
fn folders(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(folders(&path));
            out.push(path);
        }
    }
    out
}

/// Code without `//` comments (doc links name items, not imports).
fn code(src: &str) -> String {
    src.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segments after every `crate::` in `src`.
fn crate_paths(src: &str) -> BTreeSet<String> {
    paths_after(src, "crate::")
}

/// The first path segments after every `prefix` in `src`.
fn paths_after(src: &str, prefix: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for (i, _) in src.match_indices(prefix) {
        let rest = &src[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                out.insert(ident(item));
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out
}

fn edges(dir: &Path, prefix: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(dir);
    mods.iter()
        .map(|(name, src)| {
            let deps = paths_after(&code(src), prefix)
                .into_iter()
                .filter(|d| d != name && mods.contains_key(d))
                .collect();
            (name.clone(), deps)
        })
        .collect()
}

/// A cycle in `graph`, if there is one, as the list of modules around it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut done, &mut Vec::new()))
}

#[test]
fn no_crate_has_a_module_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in CRATES {
        let src = root.join(dir);
        let graph = edges(&src, "crate::");
        if let Some(cycle) = find_cycle(&graph) {
            panic!(
                "{dir}: modules import each other in a circle: {}",
                cycle.join(" → ")
            );
        }
        for folder in folders(&src) {
            let graph = edges(&folder, "super::");
            if let Some(cycle) = find_cycle(&graph) {
                panic!(
                    "{}: modules import each other in a circle: {}",
                    folder.display(),
                    cycle.join(" → ")
                );
            }
        }
    }
}

/// The longest a pacer source file may be, in lines, and the longest in `governor/`.
const MAX_LINES: usize = 500;
const MAX_GOVERNOR_LINES: usize = 400;

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

#[test]
fn no_pacer_file_is_too_long() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/pacer/src");
    for path in rust_files(&src) {
        let rel = path.strip_prefix(&src).unwrap();
        let lines = fs::read_to_string(&path).unwrap().lines().count();
        let max = if rel.starts_with("governor") {
            MAX_GOVERNOR_LINES
        } else {
            MAX_LINES
        };
        assert!(
            lines <= max,
            "crates/pacer/src/{}: {lines} lines, more than {max}",
            rel.display()
        );
    }
}

/// The names of the `pub` and `pub(crate)` structs, enums, unions, traits and type aliases
/// declared in `src`, one per declaration.
fn visible_type_names(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in code(src).lines() {
        let line = line.trim_start();
        let Some(rest) = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub "))
        else {
            continue;
        };
        for keyword in ["struct ", "enum ", "union ", "trait ", "type "] {
            if let Some(rest) = rest.strip_prefix(keyword) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push(name);
            }
        }
    }
    out
}

/// Names declared in more than one place, with the places: `(name, file)` pairs in.
fn repeated(declared: &[(String, String)]) -> BTreeMap<&str, Vec<&str>> {
    let mut at: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, file) in declared {
        at.entry(name).or_default().push(file);
    }
    at.retain(|_, files| files.len() > 1);
    at
}

/// A stub that stands in for a feature's module when the feature is off (`no_idle_pool.rs`)
/// declares the same types as the module it replaces, by design: the two never build together.
fn is_feature_stub(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("no_"))
}

#[test]
fn no_two_visible_types_share_a_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut declared = Vec::new();
    for dir in CRATES {
        for path in rust_files(&root.join(dir)) {
            if is_feature_stub(&path) {
                continue;
            }
            let file = path.strip_prefix(root).unwrap().display().to_string();
            for name in visible_type_names(&fs::read_to_string(&path).unwrap()) {
                declared.push((name, file.clone()));
            }
        }
    }
    assert!(
        declared.len() > 50,
        "the scan found too few types: {declared:?}"
    );
    let repeated = repeated(&declared);
    assert!(
        repeated.is_empty(),
        "types that share a name (give each one that says what it is): {repeated:?}"
    );
}

#[test]
fn the_checker_finds_a_planted_repeat() {
    let src =
        "pub struct A;\npub(crate) enum B {}\n    pub(crate) type C<T> = T;\nstruct Hidden;\n\
               pub(super) struct Near;\n// pub struct Commented;\npub trait D {}\npub fn e() {}";
    assert_eq!(
        visible_type_names(src),
        ["A", "B", "C", "D"].map(String::from)
    );
    let declared =
        [("A", "x.rs"), ("B", "x.rs"), ("A", "y.rs")].map(|(n, f)| (n.to_string(), f.to_string()));
    assert_eq!(
        repeated(&declared),
        BTreeMap::from([("A", vec!["x.rs", "y.rs"])])
    );
    assert!(is_feature_stub(Path::new("src/grant/no_idle_pool.rs")));
    assert!(!is_feature_stub(Path::new("src/grant/unstack.rs")));
}

#[test]
fn the_checker_finds_a_planted_cycle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", &["b"][..]),
        ("b", &["c"][..]),
        ("c", &["a"][..]),
        ("d", &[][..]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
    .collect();
    assert_eq!(
        find_cycle(&graph).unwrap(),
        ["a", "b", "c", "a"].map(String::from)
    );
    let src = "use crate::{alpha, beta::X};\nfn f() { crate::gamma::g(); }";
    assert_eq!(
        crate_paths(src),
        ["alpha", "beta", "gamma"].map(String::from).into()
    );
}
