//! Structure check: no module import cycle in any crate of the workspace (each library
//! under `<crate>/src`, the members the root `Cargo.toml` lists).
//!
//! A small checker, no external tool: it reads every module file under `src/` (not
//! `main.rs`, the binary's own crate root), builds the graph of module → module edges and
//! looks for strongly connected components. A module is a file (`a.rs`, or `a/mod.rs` for a
//! directory module `a`); its path is `a::b` for `src/a/b.rs`. The edges of module `m`:
//! - `use` trees, nested groups expanded (`use crate::{a, b::{c, d}}`), and paths in code,
//!   that start with `crate::`, `super::` (a child using its parent's items is a child →
//!   parent edge), `self::`, or the name of a child module `m` declares (`mod c;` → `c::x`);
//! - a path goes to the longest module prefix it names (`crate::a::b::Item` → `a::b` when
//!   `a/b.rs` exists, else `a`); an item the target only re-exports (`pub use x::Item`) is
//!   followed to the module it comes from.
//!
//! Not edges: `mod` declarations and re-exports themselves, and a module's uses of its own
//! descendants. A parent declares, wires and re-exports its children (`routes/mod.rs` merges
//! each child's router; the crate root, `lib.rs`, is the parent of every module and builds
//! the application from them), so counting those uses would make every child that reads an
//! item of its parent (`use super::json`, `crate::AppState`) one cycle with it. What is
//! caught: modules that are not each other's ancestors depending on each other both ways,
//! directly or through ancestors (`a → b::c → b → a`). Ignored text: comments, string and
//! char literals, and `#[cfg(test)]` modules (inline `mod tests { .. }` blocks and
//! `mod tests;` files). An inline module that is not a test module counts as part of its
//! file's module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The modules of one crate and the edges between them, with where each edge comes from.
#[derive(Debug, Default)]
struct ModuleGraph {
    /// Module path (`""` for the crate root) → the edges out of it: target → first evidence.
    edges: BTreeMap<String, BTreeMap<String, String>>,
}

/// One module file before resolution.
struct ModuleSource {
    path: String,
    /// File name relative to `src/`, for evidence.
    file: String,
    /// Cleaned text: comments, literals and test modules blanked, line breaks kept.
    text: String,
}

impl ModuleGraph {
    /// The graph of the crate whose sources are under `src` (read from disk).
    fn of_crate(src: &Path) -> ModuleGraph {
        let mut files = Vec::new();
        collect_rust_files(src, src, &mut files);
        let sources: Vec<(String, String)> = files
            .into_iter()
            .map(|relative| {
                let text = std::fs::read_to_string(src.join(&relative))
                    .unwrap_or_else(|error| panic!("reading {}: {error}", src.join(&relative).display()));
                (relative, text)
            })
            .collect();
        ModuleGraph::from_sources(sources.iter().map(|(file, text)| (file.as_str(), text.as_str())))
    }

    /// The graph of in-memory sources: `(path relative to src/, text)`.
    fn from_sources<'a>(sources: impl IntoIterator<Item = (&'a str, &'a str)>) -> ModuleGraph {
        let mut modules = Vec::new();
        let mut test_modules = BTreeSet::new();
        for (file, text) in sources {
            let Some(path) = module_path_of(file) else { continue };
            let (text, tests) = blank_test_modules(&clean(text));
            test_modules.extend(tests.into_iter().map(|name| join(&path, &name)));
            modules.push(ModuleSource {
                path,
                file: file.to_owned(),
                text,
            });
        }
        modules.retain(|module| !test_modules.contains(&module.path));
        let known: BTreeSet<String> = modules.iter().map(|module| module.path.clone()).collect();
        let reexports: BTreeMap<String, BTreeMap<String, Vec<String>>> = modules
            .iter()
            .map(|module| (module.path.clone(), reexports_of(module, &known)))
            .collect();
        let mut graph = ModuleGraph::default();
        for module in &modules {
            let out = graph.edges.entry(module.path.clone()).or_default();
            let children = declared_children(&module.text);
            for (line, path) in referenced_paths(&module.text, &children) {
                let Some(target) = resolve(&module.path, &path, &known, &reexports) else {
                    continue;
                };
                if target != module.path && !is_descendant(&target, &module.path) {
                    out.entry(target)
                        .or_insert_with(|| format!("{}:{line}: {}", module.file, path.join("::")));
                }
            }
        }
        graph
    }

    /// Every cycle: the strongly connected components of more than one module, each as its
    /// sorted module names and one closed walk through it with the evidence of each edge.
    fn cycles(&self) -> Vec<(Vec<String>, Vec<String>)> {
        strongly_connected(&self.edges)
            .into_iter()
            .filter(|component| component.len() > 1)
            .map(|component| {
                let walk = walk_through(&self.edges, &component);
                (component.into_iter().map(|module| display(&module)).collect(), walk)
            })
            .collect()
    }
}

/// `src/`-relative `.rs` files, sorted.
fn collect_rust_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_rust_files(root, &path, out);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            let relative = path.strip_prefix(root).expect("under the root");
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// `lib.rs` → `""`, `a.rs` and `a/mod.rs` → `a`, `a/b.rs` → `a::b`; `None` for the binary's
/// root (`main.rs`) and `bin/`.
fn module_path_of(file: &str) -> Option<String> {
    if file == "main.rs" || file.starts_with("bin/") {
        return None;
    }
    if file == "lib.rs" {
        return Some(String::new());
    }
    let stem = file.strip_suffix(".rs")?;
    let stem = stem.strip_suffix("/mod").unwrap_or(stem);
    Some(stem.replace('/', "::"))
}

fn join(parent: &str, child: &str) -> String {
    match parent.is_empty() {
        true => child.to_owned(),
        false => format!("{parent}::{child}"),
    }
}

/// Whether `module` lies under `ancestor` (every module lies under the crate root).
fn is_descendant(module: &str, ancestor: &str) -> bool {
    match ancestor.is_empty() {
        true => !module.is_empty(),
        false => module.strip_prefix(ancestor).is_some_and(|rest| rest.starts_with("::")),
    }
}

fn display(module: &str) -> String {
    match module.is_empty() {
        true => "crate".to_owned(),
        false => module.to_owned(),
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The source with comments, string and char literals replaced by spaces (line breaks kept,
/// so line numbers stay right).
fn clean(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        let next = chars.get(index + 1).copied();
        let previous_is_ident = index > 0 && is_ident_char(chars[index - 1]);
        if c == '/' && next == Some('/') {
            while index < chars.len() && chars[index] != '\n' {
                out.push(' ');
                index += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while index < chars.len() {
                if chars[index] == '/' && chars.get(index + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    index += 2;
                } else if chars[index] == '*' && chars.get(index + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    index += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[index]));
                    index += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == Some('r'))) && !previous_is_ident && raw_string_at(&chars, index) {
            // r"..", r#".."#, br".."
            let mut start = index + if c == 'b' { 2 } else { 1 };
            let hashes = chars[start..].iter().take_while(|c| **c == '#').count();
            start += hashes + 1;
            out.extend(std::iter::repeat_n(' ', start - index));
            index = start;
            let closing: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            while index < chars.len() && !chars[index..].starts_with(&closing) {
                out.push(blank(chars[index]));
                index += 1;
            }
            out.extend(std::iter::repeat_n(' ', closing.len().min(chars.len() - index)));
            index += closing.len();
        } else if c == '"' {
            out.push(' ');
            index += 1;
            while index < chars.len() && chars[index] != '"' {
                let skip = if chars[index] == '\\' { 2 } else { 1 };
                for offset in 0..skip {
                    if let Some(c) = chars.get(index + offset) {
                        out.push(blank(*c));
                    }
                }
                index += skip;
            }
            out.push(' ');
            index += 1;
        } else if c == '\'' && char_literal_length(&chars, index).is_some() {
            let length = char_literal_length(&chars, index).expect("checked");
            out.extend(std::iter::repeat_n(' ', length));
            index += length;
        } else {
            out.push(c);
            index += 1;
        }
    }
    out
}

fn raw_string_at(chars: &[char], index: usize) -> bool {
    let start = index + if chars[index] == 'b' { 2 } else { 1 };
    let hashes = chars[start.min(chars.len())..]
        .iter()
        .take_while(|c| **c == '#')
        .count();
    chars.get(start + hashes) == Some(&'"')
}

/// The length of the char literal starting at `index` (`'a'`, `'\n'`, `'\u{1F600}'`), or
/// `None` for a lifetime.
fn char_literal_length(chars: &[char], index: usize) -> Option<usize> {
    match chars.get(index + 1)? {
        '\\' => {
            let end = chars[index + 2..].iter().position(|c| *c == '\'')?;
            Some(end + 3)
        }
        _ if chars.get(index + 2) == Some(&'\'') => Some(3),
        _ => None,
    }
}

/// Blanks every `#[cfg(test)] mod NAME { .. }` block; returns the text and the names of
/// `#[cfg(test)] mod NAME;` file modules.
fn blank_test_modules(text: &str) -> (String, Vec<String>) {
    let mut chars: Vec<char> = text.chars().collect();
    let mut file_modules = Vec::new();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut search = 0;
    while let Some(offset) = chars[search..]
        .windows(marker.len())
        .position(|window| window == marker)
    {
        let start = search + offset;
        let mut cursor = start + marker.len();
        // Other attributes and visibility between the cfg and `mod`.
        loop {
            while cursor < chars.len() && chars[cursor].is_whitespace() {
                cursor += 1;
            }
            if chars.get(cursor) == Some(&'#') {
                while cursor < chars.len() && chars[cursor] != ']' {
                    cursor += 1;
                }
                cursor += 1;
            } else {
                break;
            }
        }
        let rest: String = chars[cursor..chars.len().min(cursor + 200)].iter().collect();
        let rest = rest
            .strip_prefix("pub(crate) ")
            .or_else(|| rest.strip_prefix("pub "))
            .unwrap_or(&rest);
        let Some(after_mod) = rest.strip_prefix("mod ") else {
            search = cursor;
            continue;
        };
        let name: String = after_mod
            .trim_start()
            .chars()
            .take_while(|c| is_ident_char(*c))
            .collect();
        let after_name = after_mod.trim_start()[name.len()..].trim_start();
        if after_name.starts_with(';') {
            file_modules.push(name);
            search = cursor;
            continue;
        }
        let Some(open) = chars[cursor..]
            .iter()
            .position(|c| *c == '{')
            .map(|position| cursor + position)
        else {
            break;
        };
        let mut depth = 0;
        let mut end = open;
        for (index, c) in chars.iter().enumerate().skip(open) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = index;
                        break;
                    }
                }
                _ => {}
            }
        }
        for c in &mut chars[start..=end.max(start)] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        search = end.max(start) + 1;
    }
    (chars.into_iter().collect(), file_modules)
}

/// The names of the modules a file declares (`mod a;`, `pub mod a;`, `mod a { .. }`).
fn declared_children(text: &str) -> BTreeSet<String> {
    let words: Vec<&str> = text
        .split(|c: char| !is_ident_char(c) && c != ';' && c != '{')
        .flat_map(|word| split_keep(word, &[';', '{']))
        .filter(|word| !word.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|pair| pair[0] == "mod" && pair[1].chars().all(is_ident_char))
        .map(|pair| pair[1].to_owned())
        .collect()
}

fn split_keep<'a>(word: &'a str, separators: &[char]) -> Vec<&'a str> {
    let mut parts = Vec::new();
    let mut start = 0;
    for (index, c) in word.char_indices() {
        if separators.contains(&c) {
            parts.push(&word[start..index]);
            parts.push(&word[index..index + 1]);
            start = index + 1;
        }
    }
    parts.push(&word[start..]);
    parts
}

/// Every path the module's code names that may reach another module of the crate, with
/// its line: the paths of `use` trees (groups expanded) and the `a::b::c` paths in code.
fn referenced_paths(text: &str, children: &BTreeSet<String>) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let bytes = text.as_bytes();
    let mut index = 0;
    while index < text.len() {
        let c = text[index..].chars().next().expect("in bounds");
        let starts_word =
            is_ident_char(c) && (index == 0 || !is_ident_char(text[..index].chars().next_back().unwrap_or(' ')));
        if !starts_word {
            index += c.len_utf8();
            continue;
        }
        let preceded_by_path = text[..index].trim_end().ends_with("::");
        let word_end = index
            + text[index..]
                .find(|c: char| !is_ident_char(c))
                .unwrap_or(text.len() - index);
        let word = &text[index..word_end];
        if word == "use" && !preceded_by_path {
            let end = text[word_end..]
                .find(';')
                .map_or(text.len(), |position| word_end + position);
            let before = text[..index].trim_end();
            let reexport = ["pub", "pub(crate)", "pub(super)"]
                .iter()
                .any(|visibility| before.ends_with(visibility));
            if !reexport {
                for path in expand_use_tree(&text[word_end..end]) {
                    found.push((line_of(index), path));
                }
            }
            index = end;
            continue;
        }
        if !preceded_by_path && bytes.get(word_end) == Some(&b':') && bytes.get(word_end + 1) == Some(&b':') {
            let mut segments = vec![word.to_owned()];
            let mut cursor = word_end;
            while text[cursor..].starts_with("::") {
                let start = cursor + 2;
                let end = start
                    + text[start..]
                        .find(|c: char| !is_ident_char(c))
                        .unwrap_or(text.len() - start);
                if end == start {
                    break;
                }
                segments.push(text[start..end].to_owned());
                cursor = end;
            }
            if ["crate", "super", "self"].contains(&word) || children.contains(word) {
                found.push((line_of(index), segments));
            }
            index = cursor.max(word_end);
            continue;
        }
        index = word_end;
    }
    found
}

/// The paths of a `use` tree (the text between `use` and `;`): `crate::{a, b::{c, d as e}, f::*}`
/// → `crate::a`, `crate::b::c`, `crate::b::d`, `crate::f`.
fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
    let compact: String = tree.chars().filter(|c| !c.is_whitespace() || *c == ' ').collect();
    let mut paths = Vec::new();
    expand_into(&[], compact.trim(), &mut paths);
    paths
}

fn expand_into(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim().trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|segment| !segment.is_empty())
            .map(str::to_owned)
            .collect();
        let close = tree.rfind('}').unwrap_or(tree.len());
        let mut base = prefix.to_vec();
        base.extend(head);
        for branch in split_top_level(&tree[open + 1..close]) {
            expand_into(&base, branch, out);
        }
        return;
    }
    let without_alias = tree.split(" as ").next().unwrap_or(tree);
    let mut path = prefix.to_vec();
    path.extend(
        without_alias
            .split("::")
            .map(str::trim)
            .filter(|segment| !segment.is_empty() && *segment != "*" && *segment != "self")
            .map(str::to_owned),
    );
    if !path.is_empty() {
        out.push(path);
    }
}

/// Splits a group's inside at its top-level commas.
fn split_top_level(group: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (index, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&group[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(&group[start..]);
    parts.into_iter().filter(|part| !part.trim().is_empty()).collect()
}

/// The names a module re-exports (`pub use` / `pub(crate) use`, not globs) → the path
/// each comes from, resolved against the module.
fn reexports_of(module: &ModuleSource, known: &BTreeSet<String>) -> BTreeMap<String, Vec<String>> {
    let mut names = BTreeMap::new();
    let children = declared_children(&module.text);
    for marker in ["pub use ", "pub(crate) use ", "pub(super) use "] {
        for (offset, _) in module.text.match_indices(marker) {
            let start = offset + marker.len();
            let end = module.text[start..]
                .find(';')
                .map_or(module.text.len(), |position| start + position);
            let tree = &module.text[start..end];
            for path in expand_use_tree(tree) {
                let Some(last) = path.last() else { continue };
                let alias = alias_in(tree, last).unwrap_or_else(|| last.clone());
                if let Some(absolute) = absolute_path(&module.path, &path, &children, known) {
                    names.insert(alias, absolute);
                }
            }
        }
    }
    names
}

/// `name as alias` in a use tree: the alias.
fn alias_in(tree: &str, name: &str) -> Option<String> {
    let pattern = format!("{name} as ");
    let start = tree.find(&pattern)? + pattern.len();
    Some(tree[start..].chars().take_while(|c| is_ident_char(*c)).collect())
}

/// The crate-absolute segments of `path` as written in `module`, or `None` when it does
/// not start inside the crate.
fn absolute_path(
    module: &str,
    path: &[String],
    children: &BTreeSet<String>,
    known: &BTreeSet<String>,
) -> Option<Vec<String>> {
    let mut base: Vec<String> = match module.is_empty() {
        true => Vec::new(),
        false => module.split("::").map(str::to_owned).collect(),
    };
    let mut rest = path;
    match rest.first()?.as_str() {
        "crate" => {
            base.clear();
            rest = &rest[1..];
        }
        "super" | "self" => {
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "super" => {
                        base.pop()?;
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        first if children.contains(first) => {}
        first if module.is_empty() && known.contains(first) => {}
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module `path` (written in `module`) reaches: its longest module prefix, following
/// re-exported items to where they come from.
fn resolve(
    module: &str,
    path: &[String],
    known: &BTreeSet<String>,
    reexports: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
) -> Option<String> {
    let children: BTreeSet<String> = known
        .iter()
        .filter_map(|candidate| {
            let rest = match module.is_empty() {
                true => Some(candidate.as_str()),
                false => candidate.strip_prefix(module).and_then(|rest| rest.strip_prefix("::")),
            }?;
            (!rest.is_empty() && !rest.contains("::")).then(|| rest.to_owned())
        })
        .collect();
    let mut absolute = absolute_path(module, path, &children, known)?;
    for _ in 0..8 {
        let (target, used) = longest_module_prefix(&absolute, known);
        let Some(next) = absolute.get(used) else {
            return Some(target);
        };
        match reexports.get(&target).and_then(|names| names.get(next)) {
            Some(origin) if *origin != absolute[..=used] => {
                let mut followed = origin.clone();
                followed.extend(absolute[used + 1..].iter().cloned());
                absolute = followed;
            }
            _ => return Some(target),
        }
    }
    Some(longest_module_prefix(&absolute, known).0)
}

/// The longest prefix of `segments` that is a module, and how many segments it takes.
fn longest_module_prefix(segments: &[String], known: &BTreeSet<String>) -> (String, usize) {
    (0..=segments.len())
        .rev()
        .map(|length| (segments[..length].join("::"), length))
        .find(|(candidate, _)| known.contains(candidate))
        .unwrap_or((String::new(), 0))
}

/// Tarjan's strongly connected components, each sorted.
fn strongly_connected(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    struct Search<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        components: Vec<Vec<String>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, node: &'a str) {
            let order = self.index.len();
            self.index.insert(node, order);
            self.low.insert(node, order);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.edges.get(node).into_iter().flat_map(BTreeMap::keys) {
                if !self.index.contains_key(next.as_str()) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next.as_str()]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next.as_str()) {
                    let low = self.low[node].min(self.index[next.as_str()]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(member) = self.stack.pop() {
                    self.on_stack.remove(member);
                    component.push(member.to_owned());
                    if member == node {
                        break;
                    }
                }
                component.sort();
                self.components.push(component);
            }
        }
    }
    let mut search = Search {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for node in edges.keys() {
        if !search.index.contains_key(node.as_str()) {
            search.visit(node);
        }
    }
    search.components.sort();
    search.components
}

/// A closed walk inside `component` from its first module back to it (breadth-first, so
/// the shortest), as `a → b (evidence)` lines.
fn walk_through(edges: &BTreeMap<String, BTreeMap<String, String>>, component: &[String]) -> Vec<String> {
    let members: BTreeSet<&str> = component.iter().map(String::as_str).collect();
    let start = component[0].as_str();
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for next in edges.get(node).into_iter().flat_map(BTreeMap::keys) {
            let next = next.as_str();
            if !members.contains(next) || came_from.contains_key(next) {
                continue;
            }
            came_from.insert(next, node);
            if next == start {
                queue.clear();
                break;
            }
            queue.push_back(next);
        }
    }
    let mut walk = Vec::new();
    let mut node = start;
    while let Some(previous) = came_from.get(node).copied() {
        let evidence = &edges[previous][node];
        walk.push(format!("{} → {} ({evidence})", display(previous), display(node)));
        node = previous;
        if node == start {
            break;
        }
    }
    walk.reverse();
    walk
}

/// Panics listing every cycle of the crate in `crate_dir`, if any.
fn assert_no_cycle(crate_dir: &str) {
    if let Some(report) = cycles_in(crate_dir) {
        panic!("{report}");
    }
}

/// The import cycles of the library under `<crate_dir>/src`, reported; `None` when there is
/// none. Every `.rs` file there (but `main.rs`) must have been read as a module.
fn cycles_in(crate_dir: &str) -> Option<String> {
    let src = e2e::repository_root().join(crate_dir).join("src");
    let graph = ModuleGraph::of_crate(&src);
    let mut files = Vec::new();
    collect_rust_files(&src, &src, &mut files);
    assert!(
        !files.is_empty()
            && graph.edges.len()
                >= files
                    .iter()
                    .filter(|file| module_path_of(file).is_some())
                    .count()
                    .min(4),
        "{} modules read under {}",
        graph.edges.len(),
        src.display()
    );
    let cycles = graph.cycles();
    let report: Vec<String> = cycles
        .iter()
        .map(|(members, walk)| {
            let inside: Vec<String> = graph
                .edges
                .iter()
                .filter(|(from, _)| members.contains(&display(from)))
                .flat_map(|(from, out)| {
                    out.iter()
                        .filter(|(to, _)| members.contains(&display(to)))
                        .map(move |(to, evidence)| format!("{} → {} ({evidence})", display(from), display(to)))
                })
                .collect();
            format!(
                "cycle among {{{}}}:\n  shortest:\n    {}\n  every edge among them:\n    {}",
                members.join(", "),
                walk.join("\n    "),
                inside.join("\n    ")
            )
        })
        .collect();
    (!cycles.is_empty()).then(|| {
        format!(
            "{crate_dir}: {} module import cycle(s)\n{}",
            cycles.len(),
            report.join("\n")
        )
    })
}

/// The workspace's member crates, as the root `Cargo.toml` lists them.
fn workspace_members() -> Vec<String> {
    let manifest = std::fs::read_to_string(e2e::repository_root().join("Cargo.toml")).expect("the root manifest");
    let members = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(members, _)| members)
        .expect("a members list");
    members
        .split(',')
        .map(|member| member.trim().trim_matches('"').to_owned())
        .filter(|member| !member.is_empty())
        .collect()
}

#[test]
fn no_crate_of_the_workspace_has_an_import_cycle() {
    let members = workspace_members();
    assert!(members.len() >= 10, "{members:?}");
    let reports: Vec<String> = members.iter().filter_map(|member| cycles_in(member)).collect();
    assert!(reports.is_empty(), "{}", reports.join("\n\n"));
}

#[test]
fn coordinator_modules_have_no_import_cycle() {
    assert_no_cycle("coordinator");
}

#[test]
fn worker_modules_have_no_import_cycle() {
    assert_no_cycle("worker");
}

// ------------------------------------------------------------------ the checker itself

fn graph_of(sources: &[(&str, &str)]) -> ModuleGraph {
    ModuleGraph::from_sources(sources.iter().copied())
}

fn edges_of(graph: &ModuleGraph, module: &str) -> Vec<String> {
    graph
        .edges
        .get(module)
        .map(|out| out.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn an_acyclic_crate_has_no_cycle() {
    let graph = graph_of(&[
        ("lib.rs", "pub mod a;\npub mod b;\nuse crate::a::A;\nfn f() { b::g(); }"),
        ("a.rs", "use crate::b::B;\npub struct A(B);"),
        ("b.rs", "pub struct B;\npub fn g() {}"),
    ]);
    assert_eq!(edges_of(&graph, "a"), ["b"]);
    assert!(edges_of(&graph, "b").is_empty());
    assert!(graph.cycles().is_empty());
}

#[test]
fn a_cycle_is_found_with_its_evidence() {
    let graph = graph_of(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;"),
        ("a.rs", "use crate::b::B;"),
        ("b.rs", "pub struct B;\nfn f() -> crate::c::C { todo() }"),
        ("c.rs", "pub struct C;\nfn g() { crate::a::h(); }"),
    ]);
    let cycles = graph.cycles();
    assert_eq!(cycles.len(), 1);
    assert_eq!(cycles[0].0, ["a", "b", "c"]);
    assert_eq!(
        cycles[0].1,
        [
            "a → b (a.rs:1: crate::b::B)",
            "b → c (b.rs:2: crate::c::C)",
            "c → a (c.rs:2: crate::a::h)"
        ]
    );
}

#[test]
fn nested_use_groups_are_expanded_to_the_longest_module_prefix() {
    let paths = expand_use_tree(" crate::{a, b::{c::{D, e as f}, self}, g::*}");
    let written: Vec<String> = paths.iter().map(|path| path.join("::")).collect();
    assert_eq!(
        written,
        ["crate::a", "crate::b::c::D", "crate::b::c::e", "crate::b", "crate::g"]
    );
    let graph = graph_of(&[
        ("lib.rs", "mod x;\nmod b;\nmod g;"),
        ("x.rs", "use crate::{b::{c::{D, E}}, g::*};"),
        ("b/mod.rs", "pub mod c;"),
        ("b/c.rs", "pub struct D;"),
        ("g.rs", ""),
    ]);
    assert_eq!(edges_of(&graph, "x"), ["b::c", "g"]);
}

#[test]
fn a_child_uses_its_parent_and_a_parent_wiring_its_children_makes_no_edge() {
    let graph = graph_of(&[
        ("lib.rs", "pub mod routes;\npub struct AppState;"),
        (
            "routes/mod.rs",
            "mod condition;\npub fn router() { condition::post(); }\npub struct Shared;",
        ),
        (
            "routes/condition.rs",
            "use super::Shared;\nuse crate::AppState;\npub fn post() {}",
        ),
    ]);
    assert_eq!(edges_of(&graph, "routes::condition"), ["", "routes"]);
    assert!(edges_of(&graph, "routes").is_empty());
    assert!(edges_of(&graph, "").is_empty());
    assert!(graph.cycles().is_empty());
}

#[test]
fn a_module_using_a_child_of_a_module_that_uses_it_is_a_cycle_through_the_parent() {
    let graph = graph_of(&[
        ("lib.rs", "mod routes;\nmod migration;"),
        (
            "routes/mod.rs",
            "mod internal;\npub use internal::current_shard;\npub fn router() { crate::migration::router(); }\nfn json() {}",
        ),
        ("routes/internal.rs", "use super::json;\npub fn current_shard() {}"),
        ("migration.rs", "use crate::routes::current_shard;\npub fn router() {}"),
    ]);
    assert_eq!(edges_of(&graph, "migration"), ["routes::internal"]);
    let cycles = graph.cycles();
    assert_eq!(cycles.len(), 1);
    assert_eq!(cycles[0].0, ["migration", "routes", "routes::internal"]);
    assert_eq!(
        cycles[0].1,
        [
            "migration → routes::internal (migration.rs:1: crate::routes::current_shard)",
            "routes::internal → routes (routes/internal.rs:1: super::json)",
            "routes → migration (routes/mod.rs:3: crate::migration::router)"
        ]
    );
}

#[test]
fn comments_literals_and_test_modules_make_no_edge() {
    let graph = graph_of(&[
        ("lib.rs", "mod a;\nmod b;"),
        (
            "a.rs",
            "// use crate::b::B;\n/* crate::b::x */\nconst S: &str = \"crate::b::B\";\nconst R: &str = r#\"crate::b\"#;\nconst C: char = '{';\n#[cfg(test)]\nmod tests {\n    use crate::b::B;\n    fn f() { let _ = '}'; }\n}\n",
        ),
        ("b.rs", "use crate::a::A;"),
    ]);
    assert!(edges_of(&graph, "a").is_empty(), "{:?}", graph.edges);
    assert!(graph.cycles().is_empty());
}

#[test]
fn a_test_module_in_its_own_file_is_left_out() {
    let graph = graph_of(&[
        ("lib.rs", "mod a;"),
        ("a.rs", "#[cfg(test)]\nmod tests;\npub fn f() {}"),
        ("a/tests.rs", "use super::f;\nuse crate::a::f as g;"),
    ]);
    assert_eq!(graph.edges.keys().cloned().collect::<Vec<_>>(), ["", "a"]);
}

#[test]
fn super_self_and_reexports_resolve_to_the_defining_module() {
    let graph = graph_of(&[
        ("lib.rs", "pub mod state;\npub mod leaf;\npub use leaf::Isu;"),
        (
            "state/mod.rs",
            "mod trend;\nmod generation;\npub use generation::Generation;\nuse self::trend::Cache;",
        ),
        (
            "state/trend.rs",
            "use super::super::Isu;\nuse crate::state::Generation;",
        ),
        ("state/generation.rs", "pub struct Generation;"),
        ("leaf.rs", "pub struct Isu;"),
    ]);
    assert_eq!(edges_of(&graph, "state::trend"), ["leaf", "state::generation"]);
    assert!(
        edges_of(&graph, "state").is_empty(),
        "a parent's use of its child is no edge"
    );
    assert!(graph.cycles().is_empty());
}
