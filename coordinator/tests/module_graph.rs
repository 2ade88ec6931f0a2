//! Structure check: the coordinator's modules (the files and directories under `src/`) use
//! each other without a cycle, so each one can be read knowing only the modules below it.
//!
//! An edge X → Y is a path in X's code (not in its comments or strings) that names module Y
//! or an item of Y: `crate::y::…`, `super::…`, `self::…`, or a path through a child module X
//! declares (`mod y;` then `y::…`). A path counts for the deepest module file it reaches:
//! `super::Item` from a child is an edge to its parent (the crate root too), and
//! `super::sibling::Item` an edge to the sibling. Inline modules (`mod tests { … }`) are part
//! of their file. Method calls are no paths: impl blocks of one type in several files add no
//! edge. `src/main.rs` is the binary, a crate of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module's path in the crate: `[]` is the crate root, `["state", "trend"]` is `state/trend.rs`.
type ModulePath = Vec<String>;

fn name(module: &[String]) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

/// The module a file under `src/` is (`None` for the binary's `main.rs` and non-Rust files).
fn module_of(relative: &Path) -> Option<ModulePath> {
    if relative.extension()? != "rs" || relative == Path::new("main.rs") {
        return None;
    }
    let mut parts: ModulePath = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop()?;
    match file.as_str() {
        "lib.rs" if parts.is_empty() => {}
        "mod.rs" => {}
        _ => parts.push(file.trim_end_matches(".rs").to_owned()),
    }
    Some(parts)
}

/// Every `.rs` file under `dir`, as (path relative to `root`, source).
fn read_sources(root: &Path, dir: &Path, files: &mut Vec<(std::path::PathBuf, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            read_sources(root, &path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            let source =
                std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
            files.push((path.strip_prefix(root).expect("under root").to_owned(), source));
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Other(char),
}

/// The source's tokens with their line numbers; comments, strings and characters dropped.
fn tokens(source: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |index: usize| chars.get(index).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                line += usize::from(chars[i] == '\n');
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' {
            if at(i + 1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1; // a lifetime: its name follows as an identifier
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw_string = matches!(word.as_str(), "r" | "br") && matches!(at(i), '"' | '#');
            if raw_string {
                let mut hashes = 0;
                while at(i) == '#' {
                    hashes += 1;
                    i += 1;
                }
                i += 1; // the opening quote
                while i < chars.len() {
                    if chars[i] == '"' && (1..=hashes).all(|offset| at(i + offset) == '#') {
                        i += 1 + hashes;
                        break;
                    }
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            } else if word == "b" && at(i) == '"' {
                // a byte string: the next turn skips it as a string
            } else if start > 0 && chars[start - 1].is_ascii_digit() {
                // a number's suffix
            } else {
                out.push((Token::Ident(word), line));
            }
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                if chars[i] == '.' && !at(i + 1).is_ascii_digit() {
                    break;
                }
                i += 1;
            }
        } else {
            let token = match c {
                ':' if at(i + 1) == ':' => {
                    i += 1;
                    Token::PathSep
                }
                '{' => Token::Open,
                '}' => Token::Close,
                ',' => Token::Comma,
                ';' => Token::Semi,
                '*' => Token::Star,
                other => Token::Other(other),
            };
            out.push((token, line));
            i += 1;
        }
    }
    out
}

/// One use of another module: the module named, and the line it is named on.
struct Reference {
    to: ModulePath,
    line: usize,
}

/// Follows a path's segments from `tokens[i]` (after its first `::`) below `prefix`; pushes
/// every full path it names (a `{…}` group names several). Returns the index after the path.
fn walk(tokens: &[(Token, usize)], mut i: usize, mut prefix: ModulePath, out: &mut Vec<ModulePath>) -> usize {
    loop {
        match tokens.get(i).map(|(token, _)| token) {
            Some(Token::Ident(segment)) if segment == "super" => {
                prefix.pop();
            }
            Some(Token::Ident(segment)) if segment == "self" => {}
            Some(Token::Ident(segment)) => prefix.push(segment.clone()),
            Some(Token::Star) => {}
            Some(Token::Open) => {
                i += 1;
                while let Some((token, _)) = tokens.get(i) {
                    match token {
                        Token::Close => return i + 1,
                        Token::Comma => i += 1,
                        Token::Ident(_) | Token::Star | Token::Open => {
                            i = walk(tokens, i, prefix.clone(), out);
                            // `as alias`: skipped up to the next item
                            while !matches!(
                                tokens.get(i).map(|(token, _)| token),
                                None | Some(Token::Comma | Token::Close)
                            ) {
                                i += 1;
                            }
                        }
                        _ => i += 1,
                    }
                }
                return i;
            }
            _ => break,
        }
        i += 1;
        if tokens.get(i).map(|(token, _)| token) != Some(&Token::PathSep) {
            break;
        }
        i += 1;
    }
    out.push(prefix);
    i
}

/// The modules `tokens` (the source of module `module`) refers to; `imported` are the
/// modules a `use` brought into scope by name (`use crate::state::{self, …}` names `state`).
fn references(module: &[String], tokens: &[(Token, usize)], imported: &BTreeMap<String, ModulePath>) -> Vec<Reference> {
    let ident = |index: usize| match tokens.get(index) {
        Some((Token::Ident(word), _)) => Some(word.as_str()),
        _ => None,
    };
    let is = |index: usize, wanted: &Token| tokens.get(index).is_some_and(|(token, _)| token == wanted);
    let children: BTreeSet<&str> = (0..tokens.len())
        .filter(|&i| ident(i) == Some("mod") && is(i + 2, &Token::Semi))
        .filter_map(|i| ident(i + 1))
        .collect();
    let mut found = Vec::new();
    // Inline modules open at brace depths: `super` inside one is its file's module.
    let (mut depth, mut inline): (usize, Vec<(String, usize)>) = (0, Vec::new());
    for i in 0..tokens.len() {
        match &tokens[i].0 {
            Token::Open => {
                depth += 1;
                if i >= 2 && ident(i - 2) == Some("mod") {
                    if let Some(name) = ident(i - 1) {
                        inline.push((name.to_owned(), depth));
                    }
                }
                continue;
            }
            Token::Close => {
                if inline.last().is_some_and(|(_, opened)| *opened == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                continue;
            }
            _ => {}
        }
        let Some(first) = ident(i) else { continue };
        let starts_path = is(i + 1, &Token::PathSep) && !(i > 0 && is(i - 1, &Token::PathSep));
        // `pub(in crate::x)` restricts visibility: it uses nothing.
        let visibility =
            i >= 3 && ident(i - 1) == Some("in") && is(i - 2, &Token::Other('(')) && ident(i - 3) == Some("pub");
        if !starts_path || visibility {
            continue;
        }
        let mut current: ModulePath = module.to_vec();
        current.extend(inline.iter().map(|(name, _)| name.clone()));
        let base = match first {
            "crate" => Vec::new(),
            "self" => current,
            "super" => current[..current.len().saturating_sub(1)].to_vec(),
            child if children.contains(child) => {
                let mut base = module.to_vec();
                base.push(child.to_owned());
                base
            }
            other => match imported.get(other) {
                Some(base) => base.clone(),
                None => continue,
            },
        };
        let mut paths = Vec::new();
        walk(tokens, i + 2, base, &mut paths);
        found.extend(paths.into_iter().map(|to| Reference { to, line: tokens[i].1 }));
    }
    found
}

/// The module graph: for each module, the modules it uses (with one line that does, per edge).
struct Graph {
    files: BTreeMap<ModulePath, String>,
    edges: BTreeMap<ModulePath, BTreeMap<ModulePath, usize>>,
}

impl Graph {
    /// The graph of the crate whose sources are `files` (paths relative to `src/`).
    fn of(files: &[(std::path::PathBuf, String)]) -> Graph {
        let modules: BTreeMap<ModulePath, (String, &str)> = files
            .iter()
            .filter_map(|(path, source)| Some((module_of(path)?, (path.display().to_string(), source.as_str()))))
            .collect();
        let mut edges: BTreeMap<ModulePath, BTreeMap<ModulePath, usize>> = BTreeMap::new();
        for (module, (_, source)) in &modules {
            let tokens = tokens(source);
            // A path that ends at a module (not an item) brings it into scope by its name.
            let imported: BTreeMap<String, ModulePath> = references(module, &tokens, &BTreeMap::new())
                .into_iter()
                .filter(|reference| modules.contains_key(&reference.to))
                .filter_map(|reference| Some((reference.to.last()?.clone(), reference.to)))
                .collect();
            let targets = edges.entry(module.clone()).or_default();
            for reference in references(module, &tokens, &imported) {
                // The deepest module file the path reaches (the rest names items).
                let to = (0..=reference.to.len())
                    .rev()
                    .map(|length| reference.to[..length].to_vec())
                    .find(|prefix| modules.contains_key(prefix))
                    .expect("the crate root is a module");
                if to != *module {
                    targets.entry(to).or_insert(reference.line);
                }
            }
        }
        let files = modules.into_iter().map(|(module, (file, _))| (module, file)).collect();
        Graph { files, edges }
    }

    fn reachable_from(&self, start: &ModulePath) -> BTreeSet<ModulePath> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start.clone()];
        while let Some(module) = stack.pop() {
            for next in self.edges.get(&module).into_iter().flat_map(|targets| targets.keys()) {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    }

    /// The groups of modules that reach each other (each group one cycle or more).
    fn cycles(&self) -> Vec<BTreeSet<ModulePath>> {
        let reach: BTreeMap<&ModulePath, BTreeSet<ModulePath>> = self
            .edges
            .keys()
            .map(|module| (module, self.reachable_from(module)))
            .collect();
        let mut groups: Vec<BTreeSet<ModulePath>> = Vec::new();
        for (module, reached) in &reach {
            if !reached.contains(*module) || groups.iter().any(|group| group.contains(*module)) {
                continue;
            }
            let group = reached
                .iter()
                .filter(|other| reach[other].contains(*module))
                .cloned()
                .collect();
            groups.push(group);
        }
        groups
    }

    /// The edges inside `group`, one line each (`from -> to (file:line)`).
    fn describe(&self, group: &BTreeSet<ModulePath>) -> String {
        let mut text = String::new();
        for from in group {
            for (to, line) in &self.edges[from] {
                if group.contains(to) {
                    text += &format!("  {} -> {} ({}:{line})\n", name(from), name(to), self.files[from]);
                }
            }
        }
        text
    }

    /// Modules in layers: each uses only modules of the layers before it (the graph is acyclic).
    fn layers(&self) -> Vec<Vec<ModulePath>> {
        let mut placed: BTreeSet<ModulePath> = BTreeSet::new();
        let mut layers = Vec::new();
        while placed.len() < self.edges.len() {
            let layer: Vec<ModulePath> = self
                .edges
                .iter()
                .filter(|(module, targets)| !placed.contains(*module) && targets.keys().all(|to| placed.contains(to)))
                .map(|(module, _)| module.clone())
                .collect();
            assert!(!layer.is_empty(), "layers of a cyclic graph");
            placed.extend(layer.iter().cloned());
            layers.push(layer);
        }
        layers
    }
}

fn path(text: &str) -> ModulePath {
    match text {
        "crate" => Vec::new(),
        _ => text.split("::").map(str::to_owned).collect(),
    }
}

#[test]
fn the_coordinator_modules_have_no_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    read_sources(&src, &src, &mut files);
    let graph = Graph::of(&files);
    let cycles = graph.cycles();
    let report: String = cycles
        .iter()
        .map(|group| graph.describe(group))
        .collect::<Vec<_>>()
        .join("  --\n");
    assert!(
        cycles.is_empty(),
        "import cycles among the coordinator's modules:\n{report}"
    );
    // The checker sees the crate: edges it must find, so an empty graph cannot pass.
    for (from, to) in [
        ("state::registration", "state::generation"),
        ("state::generation", "state::trend"),
        ("routes::isu", "crate"),
        ("crate", "state"),
    ] {
        assert!(
            graph.edges[&path(from)].contains_key(&path(to)),
            "{from} -> {to} not found"
        );
    }
    for (index, layer) in graph.layers().iter().enumerate() {
        let uses = |module: &ModulePath| {
            let targets: Vec<String> = graph.edges[module].keys().map(|to| name(to)).collect();
            format!("{} (uses {})", name(module), targets.join(", "))
        };
        eprintln!(
            "layer {index}: {}",
            layer.iter().map(uses).collect::<Vec<_>>().join("; ")
        );
    }
}

#[test]
fn the_checker_finds_cycles_through_parents_groups_and_imports() {
    let source = |path: &str, text: &str| (std::path::PathBuf::from(path), text.to_owned());
    let files = [
        source("lib.rs", "mod a;\nmod b;\nmod c;\npub use a::Child;\npub struct Root;\n"),
        source("main.rs", "use crate::b::B;\n"),
        source(
            "a/mod.rs",
            "//! uses crate::c in a comment only\nmod child;\npub use child::Child;\nconst S: &str = \"crate::c::C\";\n",
        ),
        source(
            "a/child.rs",
            "pub struct Child;\nfn f() { let _ = super::super::Root; }\nuse crate::c;\npub(in crate::b) fn g() { c::inner::f(); }\n",
        ),
        source(
            "b.rs",
            "use crate::{a::{self, Child as C}, b};\npub struct B<'a>(&'a str);\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
        source("c/mod.rs", "pub mod inner;\n"),
        source("c/inner.rs", "pub fn f() {}\n"),
    ];
    let graph = Graph::of(&files);
    let edges = |from: &str| graph.edges[&path(from)].keys().map(|to| name(to)).collect::<Vec<_>>();
    assert_eq!(
        edges("crate"),
        ["a"],
        "mod declarations are no edges, paths through children are"
    );
    assert_eq!(edges("a"), ["a::child"], "comments and strings are not code");
    assert_eq!(
        edges("a::child"),
        ["crate", "c", "c::inner"],
        "c::inner::f() goes through the c that `use crate::c` imported; pub(in crate::b) uses nothing"
    );
    assert_eq!(
        edges("b"),
        ["a"],
        "a group resolves each item; super in mod tests is b itself"
    );
    assert!(!graph.edges.contains_key(&path("main")), "main.rs is the binary");
    let cycles = graph.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert_eq!(
        cycles[0],
        ["crate", "a", "a::child"]
            .map(path)
            .into_iter()
            .collect::<BTreeSet<_>>()
    );
    assert!(graph.describe(&cycles[0]).contains("a::child -> crate (a/child.rs:2)"));
}
