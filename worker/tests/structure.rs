//! The worker's module structure: no import cycle among the modules under `src/` (the
//! layout and the order are in `src/lib.rs`'s module doc).
//!
//! A module is a file (`store.rs`, `routes/mod.rs` is `routes`, `routes/device.rs` is
//! `routes::device`; `lib.rs` is the crate root). Module X depends on module Y when X's
//! code (comments left out, and each file's `#[cfg(test)] mod tests` at its end) names Y or
//! an item of Y by a `crate::`, `super::` or `self::` path, in a `use` group too, or names
//! its own child `y::` by a relative path. A child naming an item of its parent depends on
//! its parent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name (`routes::device`, "" for the root) -> the file's code.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut modules = BTreeMap::new();
    let mut directories = vec![src.to_path_buf()];
    while let Some(directory) = directories.pop() {
        for entry in std::fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                directories.push(path);
                continue;
            }
            if path.extension().is_none_or(|extension| extension != "rs") || path == src.join("main.rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = relative
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            modules.insert(parts.join("::"), code_of(&std::fs::read_to_string(&path).unwrap()));
        }
    }
    modules
}

/// The file's code: without comments and without its unit tests.
fn code_of(source: &str) -> String {
    let source = source
        .find("#[cfg(test)]\nmod tests")
        .map_or(source, |start| &source[..start]);
    source
        .lines()
        .map(|line| match line.find("//") {
            Some(comment) if !line[..comment].contains('"') => &line[..comment],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a file's code names from its module: `crate::a::b`, `super::a`, `self::a`,
/// each member of a `{...}` group after one of them.
fn named_paths(code: &str) -> Vec<(&'static str, Vec<String>)> {
    let mut paths = Vec::new();
    for head in ["crate", "super", "self"] {
        let pattern = format!("{head}::");
        let mut rest = code;
        while let Some(found) = rest.find(&pattern) {
            let before = rest[..found].chars().next_back();
            rest = &rest[found + pattern.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for member in group.split(',') {
                    let segments = segments_of(member.trim());
                    if !segments.is_empty() {
                        paths.push((head, segments));
                    }
                }
            } else {
                paths.push((head, segments_of(rest)));
            }
        }
    }
    paths
}

/// `a::b::C` at the start of `text`, split.
fn segments_of(text: &str) -> Vec<String> {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    text[..end]
        .split("::")
        .filter(|segment| !segment.is_empty() && *segment != "self")
        .map(str::to_owned)
        .collect()
}

/// The longest module that `segments`, from module `base`, name.
fn resolve(modules: &BTreeMap<String, String>, base: &[String], segments: &[String]) -> String {
    let full: Vec<String> = base.iter().chain(segments).cloned().collect();
    (0..=full.len())
        .rev()
        .map(|length| full[..length].join("::"))
        .find(|name| modules.contains_key(name))
        .unwrap_or_default()
}

fn dependencies(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for (module, code) in modules {
        let parts: Vec<String> = if module.is_empty() {
            Vec::new()
        } else {
            module.split("::").map(str::to_owned).collect()
        };
        let mut targets = BTreeSet::new();
        for (head, segments) in named_paths(code) {
            let base = match head {
                "crate" => &parts[..0],
                "super" => &parts[..parts.len().saturating_sub(1)],
                _ => &parts[..],
            };
            targets.insert(resolve(modules, base, &segments));
        }
        // Relative paths to its own children: `child::item`.
        for child in modules.keys() {
            let Some(name) = child.strip_prefix(&if module.is_empty() {
                String::new()
            } else {
                format!("{module}::")
            }) else {
                continue;
            };
            if name.is_empty() || name.contains("::") {
                continue;
            }
            let pattern = format!("{name}::");
            let named = code.match_indices(&pattern).any(|(at, _)| {
                let before = code[..at].chars().next_back();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            });
            if named {
                targets.insert(child.clone());
            }
        }
        targets.remove(module);
        graph.insert(module.clone(), targets);
    }
    graph
}

/// A cycle of `graph`, if it has one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        module: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|on_path| on_path == module) {
            let mut cycle = path[start..].to_vec();
            cycle.push(module.to_owned());
            return Some(cycle);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(graph, module, &mut Vec::new(), &mut done))
}

#[test]
fn the_worker_modules_have_no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    let graph = dependencies(&modules);
    // The checker sees the edges that matter (else it would pass on anything).
    for (module, dependency) in [
        ("write_path", "store"),
        ("write_path", "migration"),
        ("state", "write_path"),
        ("routes", "routes::device"),
        ("routes::device", "routes::condition"),
        ("", "app"),
    ] {
        assert!(
            graph[module].contains(dependency),
            "{module} -> {dependency} not found: {graph:#?}"
        );
    }
    let shown = |module: &str| {
        if module.is_empty() {
            "lib".to_owned()
        } else {
            module.to_owned()
        }
    };
    if let Some(cycle) = find_cycle(&graph) {
        let cycle: Vec<String> = cycle.iter().map(|module| shown(module)).collect();
        panic!("import cycle among the worker's modules: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_checker_finds_a_cycle_through_a_parent() {
    let modules: BTreeMap<String, String> = [
        ("", "mod routes;"),
        ("routes", "mod device; pub use device::Service;"),
        (
            "routes::device",
            "use super::helper; use crate::{store, routes::Other};",
        ),
        ("store", "use crate::error::WorkerError; // crate::routes in a comment"),
        ("error", ""),
    ]
    .into_iter()
    .map(|(name, code)| (name.to_owned(), code_of(code)))
    .collect();
    let graph = dependencies(&modules);
    assert_eq!(graph["store"], BTreeSet::from(["error".to_owned()]));
    assert_eq!(
        graph["routes::device"],
        BTreeSet::from(["routes".to_owned(), "store".to_owned()])
    );
    let cycle = find_cycle(&graph).expect("routes -> routes::device -> routes");
    assert!(cycle.contains(&"routes".to_owned()) && cycle.contains(&"routes::device".to_owned()));
}
