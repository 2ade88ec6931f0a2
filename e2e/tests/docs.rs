//! Docs check: the documentation stays true to the tree. Cheap (it reads files only), so it
//! runs in every `cargo test --workspace`.
//!
//! - `docs/layout.md` lists every crate of the workspace (the members the root `Cargo.toml`
//!   lists) under a heading `` ## `crate/` `` and every module file under the crate's `src/`
//!   as a bullet `` - `src/path.rs`: what it is ``. A module file missing from the list, a
//!   bullet naming a file that is gone, a crate without a section and a section naming no
//!   crate all fail, each named with the line to change. Test-only module files (declared
//!   right after `#[cfg(test)]` in their parent) are not listed.
//! - Every relative link of `README.md` and `docs/*.md` resolves: its file or folder
//!   exists, and its `#fragment`, if any, is the anchor of a heading of the target (as
//!   GitHub makes anchors). Links with a scheme (`https:`, `mailto:`) are not followed.
//! - The docs index (`docs/README.md`) links every page of `docs/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The layout page and the index, relative to the repository root.
const LAYOUT: &str = "docs/layout.md";
const INDEX: &str = "docs/README.md";

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("reading {}: {error}", path.display()))
}

/// The workspace members, from the root manifest.
fn workspace_members(root: &Path) -> Vec<String> {
    let manifest: toml::Table = read(&root.join("Cargo.toml"))
        .parse()
        .expect("the root Cargo.toml parses");
    manifest["workspace"]["members"]
        .as_array()
        .expect("workspace.members is a list")
        .iter()
        .map(|member| member.as_str().expect("a member is a string").to_owned())
        .collect()
}

/// One bullet of the layout page: a module file of a crate, and the line that lists it.
#[derive(Debug)]
struct Listed {
    path: String,
    line: usize,
}

/// The layout page read: per crate (`coordinator`), the line of its heading and its bullets;
/// and the lines that follow neither form.
#[derive(Debug, Default)]
struct Layout {
    crates: BTreeMap<String, (usize, Vec<Listed>)>,
    problems: Vec<String>,
}

/// Reads the layout page: a `` ## `name/` `` heading opens a crate's section, any other
/// heading closes it; inside a section every top-level bullet must name a `src/….rs` file
/// in backticks first.
fn parse_layout(text: &str) -> Layout {
    let mut layout = Layout::default();
    let mut current: Option<String> = None;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.starts_with('#') {
            current = line
                .strip_prefix("## `")
                .and_then(|rest| rest.trim_end().strip_suffix("/`"))
                .map(str::to_owned);
            if let Some(name) = &current {
                if layout.crates.insert(name.clone(), (number, Vec::new())).is_some() {
                    layout
                        .problems
                        .push(format!("{LAYOUT}:{number}: a second section for `{name}/`"));
                }
            }
            continue;
        }
        let (Some(name), Some(bullet)) = (&current, line.strip_prefix("- ")) else {
            continue;
        };
        let path = bullet
            .strip_prefix('`')
            .and_then(|rest| rest.split_once('`'))
            .map(|(path, _)| path);
        match path {
            Some(path) if path.starts_with("src/") && path.ends_with(".rs") => {
                let entry = &mut layout.crates.get_mut(name).expect("the section was opened").1;
                entry.push(Listed {
                    path: path.to_owned(),
                    line: number,
                });
            }
            _ => layout.problems.push(format!(
                "{LAYOUT}:{number}: in `{name}/`, a bullet that names no module file \
                 (expected \"- `src/….rs`: what it is\"): {line}"
            )),
        }
    }
    layout
}

/// Every `.rs` file under `dir`, as paths relative to `base` with `/` separators, sorted.
fn rust_files(base: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(base, &path, out);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            let relative = path.strip_prefix(base).expect("under the crate");
            out.insert(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// Whether `file` (`src/a/b.rs` or `src/a/b/mod.rs`, relative to `crate_dir`) is a module
/// its parent declares right after `#[cfg(test)]`: a test-only file, not listed.
fn is_test_only(crate_dir: &Path, file: &str) -> bool {
    let path = Path::new(file);
    let (name, dir) = if path.file_name().is_some_and(|name| name == "mod.rs") {
        let module_dir = path.parent().expect("mod.rs is in a folder");
        (module_dir.file_name(), module_dir.parent())
    } else {
        (path.file_stem(), path.parent())
    };
    let (Some(name), Some(dir)) = (name.and_then(|name| name.to_str()), dir) else {
        return false;
    };
    let parents: Vec<PathBuf> = if dir == Path::new("src") {
        vec![dir.join("lib.rs"), dir.join("main.rs")]
    } else {
        vec![dir.with_extension("rs"), dir.join("mod.rs")]
    };
    let declaration = format!("mod {name};");
    parents
        .iter()
        .filter_map(|parent| std::fs::read_to_string(crate_dir.join(parent)).ok())
        .any(|text| {
            let lines: Vec<&str> = text.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
            lines
                .windows(2)
                .any(|pair| pair[0] == "#[cfg(test)]" && pair[1].ends_with(&declaration))
        })
}

/// The module files of a crate that the layout page must list.
fn module_files(root: &Path, member: &str) -> BTreeSet<String> {
    let crate_dir = root.join(member);
    let mut files = BTreeSet::new();
    rust_files(&crate_dir, &crate_dir.join("src"), &mut files);
    files.retain(|file| !is_test_only(&crate_dir, file));
    files
}

/// What differs between the layout page and the tree, one sentence each.
fn layout_problems(root: &Path, layout: &Layout, members: &[String]) -> Vec<String> {
    let mut problems = layout.problems.clone();
    for member in members {
        if !layout.crates.contains_key(member) {
            problems.push(format!(
                "{LAYOUT}: no section for the workspace member `{member}`: add \"## `{member}/`\" and a bullet per \
                 file of {member}/src"
            ));
        }
    }
    for (name, (heading, listed)) in &layout.crates {
        if !members.contains(name) {
            problems.push(format!(
                "{LAYOUT}:{heading}: section `{name}/` names no workspace member: remove it"
            ));
            continue;
        }
        let files = module_files(root, name);
        let mut seen = BTreeSet::new();
        for entry in listed {
            if !seen.insert(entry.path.as_str()) {
                problems.push(format!(
                    "{LAYOUT}:{}: {name}/{} is listed twice",
                    entry.line, entry.path
                ));
            } else if !files.contains(&entry.path) {
                problems.push(format!(
                    "{LAYOUT}:{}: stale: {name}/{} does not exist (or is test-only): remove or rename the bullet",
                    entry.line, entry.path
                ));
            }
        }
        for file in files.iter().filter(|file| !seen.contains(file.as_str())) {
            problems.push(format!(
                "{LAYOUT}:{heading}: missing: {name}/{file} is not listed: add \"- `{file}`: what it is\" under \
                 \"## `{name}/`\""
            ));
        }
    }
    problems
}

#[test]
fn the_layout_page_lists_every_module_of_every_crate() {
    let root = e2e::repository_root();
    let layout = parse_layout(&read(&root.join(LAYOUT)));
    let members = workspace_members(&root);
    assert!(members.len() >= 10, "{members:?}");
    let problems = layout_problems(&root, &layout, &members);
    assert!(
        problems.is_empty(),
        "{LAYOUT} does not match the tree ({} problems):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

/// A link of a markdown file: its target as written and the line it is on.
struct Link {
    target: String,
    line: usize,
}

/// A markdown file's links and the anchors of its headings (GitHub's: the heading's text in
/// lower case, spaces to `-`, every other character but letters, digits, `-` and `_`
/// dropped; a repeated anchor gets `-1`, `-2`, …).
#[derive(Default)]
struct Markdown {
    links: Vec<Link>,
    anchors: BTreeSet<String>,
}

fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn parse_markdown(text: &str) -> Markdown {
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut markdown = Markdown::default();
    let mut heading: Option<String> = None;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (event, range) in Parser::new_ext(text, Options::ENABLE_TABLES).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(part) | Event::Code(part) => {
                if let Some(heading) = heading.as_mut() {
                    heading.push_str(&part);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let anchor = anchor_of(&heading.take().unwrap_or_default());
                let count = counts.entry(anchor.clone()).or_insert(0);
                let unique = if *count == 0 {
                    anchor
                } else {
                    format!("{anchor}-{count}")
                };
                *count += 1;
                markdown.anchors.insert(unique);
            }
            Event::Start(Tag::Link { dest_url, .. }) | Event::Start(Tag::Image { dest_url, .. }) => {
                markdown.links.push(Link {
                    target: dest_url.to_string(),
                    line: line_of(range.start),
                })
            }
            _ => {}
        }
    }
    markdown
}

/// The markdown files whose links are checked, relative to the root: `README.md` and every
/// `.md` file of `docs/`.
fn checked_markdown(root: &Path) -> Vec<String> {
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/ exists") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|extension| extension == "md") {
            let name = path.file_name().expect("a file name").to_string_lossy().into_owned();
            files.insert(format!("docs/{name}"));
        }
    }
    std::iter::once("README.md".to_owned()).chain(files).collect()
}

/// What is wrong with one relative link of `file`, if anything.
fn link_problem(
    root: &Path,
    file: &str,
    link: &Link,
    anchors_of: &mut impl FnMut(&Path) -> BTreeSet<String>,
) -> Option<String> {
    let (path, fragment) = link.target.split_once('#').unwrap_or((&link.target, ""));
    let base = Path::new(file).parent().expect("a file has a folder");
    let target = if path.is_empty() {
        root.join(file)
    } else {
        root.join(base).join(path)
    };
    let at = format!("{file}:{}: link `{}`", link.line, link.target);
    if !target.exists() {
        return Some(format!(
            "{at}: {} does not exist",
            target.strip_prefix(root).unwrap_or(&target).display()
        ));
    }
    if fragment.is_empty() || target.extension().is_none_or(|extension| extension != "md") {
        return None;
    }
    let anchors = anchors_of(&target);
    let shown = target.strip_prefix(root).unwrap_or(&target).display();
    (!anchors.contains(fragment)).then(|| format!("{at}: no heading of {shown} has the anchor `#{fragment}`"))
}

#[test]
fn every_relative_link_of_the_docs_resolves() {
    let root = e2e::repository_root();
    let mut anchors_of = |path: &Path| parse_markdown(&read(path)).anchors;
    let mut problems = Vec::new();
    let files = checked_markdown(&root);
    for file in &files {
        for link in parse_markdown(&read(&root.join(file))).links {
            if link.target.contains(':') {
                continue; // https:, mailto: and the like: not followed
            }
            problems.extend(link_problem(&root, file, &link, &mut anchors_of));
        }
    }
    assert!(files.len() >= 5, "{files:?}");
    assert!(
        problems.is_empty(),
        "broken links ({}):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

#[test]
fn the_docs_index_links_every_page() {
    let root = e2e::repository_root();
    let linked: BTreeSet<String> = parse_markdown(&read(&root.join(INDEX)))
        .links
        .into_iter()
        .map(|link| link.target.split('#').next().unwrap_or_default().to_owned())
        .collect();
    let missing: Vec<String> = checked_markdown(&root)
        .into_iter()
        .filter_map(|file| file.strip_prefix("docs/").map(str::to_owned))
        .filter(|page| page != "README.md" && !linked.contains(page))
        .collect();
    assert!(missing.is_empty(), "{INDEX} links no entry for: {}", missing.join(", "));
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(anchor_of("The main job: `scripts/bench`"), "the-main-job-scriptsbench");
    assert_eq!(
        anchor_of("Live migration: clone → flip → redirect → forget"),
        "live-migration-clone--flip--redirect--forget"
    );
    assert_eq!(anchor_of("CI: `.ci/run`"), "ci-cirun");
    let markdown = parse_markdown("# A\n\n## A\n\n[x](b.md#c) `[y](z.md)`\n");
    assert_eq!(markdown.anchors, BTreeSet::from(["a".to_owned(), "a-1".to_owned()]));
    assert_eq!(
        markdown
            .links
            .iter()
            .map(|link| (link.target.as_str(), link.line))
            .collect::<Vec<_>>(),
        [("b.md#c", 5)]
    );
}

#[test]
fn the_layout_parser_reports_bullets_it_cannot_read() {
    let layout =
        parse_layout("# L\n\n## `a/`\n\n- `src/lib.rs`: root\n- lib.rs without backticks\n\n## Other\n\n- free\n");
    assert_eq!(
        layout.crates["a"]
            .1
            .iter()
            .map(|listed| listed.path.as_str())
            .collect::<Vec<_>>(),
        ["src/lib.rs"]
    );
    assert_eq!(layout.problems.len(), 1, "{:?}", layout.problems);
    assert!(layout.problems[0].contains(":6:"), "{:?}", layout.problems);
}
