//! Prometheus beside the cluster, as the local cluster (`isuctl cluster up --prometheus`)
//! and a deployment (`render`: the `isu-prometheus` unit on the coordinator host) run it:
//! its configuration (every node scraped with the cluster secret as the bearer token, the
//! project's rules evaluated) and its unit, and the series the rules read (each must exist in
//! a real scrape of the nodes, or the rule built on it sees nothing).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// Debian's `prometheus`, installed with apt-get when missing (the local cluster's
/// `--prometheus`, the namespace hosts).
pub fn ensure_installed() -> anyhow::Result<()> {
    if crate::external::on_path("prometheus") {
        return Ok(());
    }
    crate::external::install_packages(&["prometheus"]).context("Prometheus needs Debian's prometheus")
}

/// How often Prometheus scrapes the nodes and evaluates the rules: short, so a test or an
/// operator sees a fault within seconds (the nodes' `/metrics` costs well under a
/// millisecond each; Prometheus itself about 0.2 % of a core at this interval).
pub const SCRAPE_INTERVAL_SECONDS: u64 = 5;

/// The project's rules, `ops/prometheus/rules` of this checkout.
pub fn rules_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops/prometheus/rules")
}

/// One node to scrape: `host:port`, and the `node` and `cell` its series carry (given to its
/// target too, so that `up` names the node and cell that stopped answering).
pub struct Target {
    pub address: String,
    pub node: String,
    pub cell: String,
}

/// The configuration, after `first_line` (a comment): one job over `targets` with the secret
/// file as the bearer token (the nodes' own labels kept: `honor_labels`), and every rule
/// file of `rules` (`*.yml`). A relative path is Prometheus's, relative to the
/// configuration file's directory.
pub fn configuration(first_line: &str, targets: &[Target], secret: &Path, rules: &Path) -> String {
    let targets: String = targets
        .iter()
        .map(|target| {
            format!(
                "      - targets: [\"{}\"]\n        labels: {{node: \"{}\", cell: \"{}\"}}\n",
                target.address, target.node, target.cell
            )
        })
        .collect();
    format!(
        "{first_line}
global:
  scrape_interval: {SCRAPE_INTERVAL_SECONDS}s
  evaluation_interval: {SCRAPE_INTERVAL_SECONDS}s
rule_files:
  - {rules}/*.yml
scrape_configs:
  - job_name: isucondition
    honor_labels: true
    authorization:
      type: Bearer
      credentials_file: {secret}
    static_configs:
{targets}",
        rules = rules.display(),
        secret = secret.display(),
    )
}

/// The series the rules of `dir` (`*.yml`) read: every metric name in their expressions,
/// not the series recorded by the rules themselves (named `level:metric:operations`).
/// Each must exist in a real scrape of the nodes, or the rule built on it sees nothing.
pub fn series_named_by_rules(dir: &Path) -> anyhow::Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|extension| extension == "yml") {
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            for expression in expressions(&text) {
                names.extend(metric_names(&expression).into_iter().filter(|name| !name.contains(':')));
            }
        }
    }
    Ok(names)
}

/// The `expr:` values of a rule file: one line, or the block (`expr: |`) of the lines
/// indented deeper than the key.
fn expressions(text: &str) -> Vec<String> {
    let mut expressions = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some((indent, value)) = line.split_once("expr:") else {
            continue;
        };
        if !indent.trim_start_matches(' ').trim_start_matches("- ").is_empty() {
            continue;
        }
        let value = value.trim();
        if value != "|" && value != ">" {
            expressions.push(value.to_owned());
            continue;
        }
        let mut block = Vec::new();
        while let Some(next) = lines.next_if(|next| next.len() - next.trim_start().len() > indent.len()) {
            block.push(next.trim());
        }
        expressions.push(block.join(" "));
    }
    expressions
}

/// The metric names of a PromQL expression: identifiers that are not a function called,
/// a keyword or aggregation, a label (inside `{…}` or the parentheses of `by`, `without`,
/// `on`, `ignoring`, `group_left`, `group_right`), a duration (`[5m]`) or a string.
fn metric_names(expression: &str) -> BTreeSet<String> {
    const KEYWORDS: [&str; 25] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "inf",
        "nan",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    ];
    const LABEL_LISTS: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];
    let chars: Vec<char> = expression.chars().collect();
    let mut names = BTreeSet::new();
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        let closing = match c {
            '{' => Some('}'),
            '[' => Some(']'),
            '"' | '\'' => Some(c),
            _ => None,
        };
        if let Some(closing) = closing {
            index += chars[index + 1..]
                .iter()
                .position(|&x| x == closing)
                .map_or(chars.len(), |at| at + 2);
            continue;
        }
        if c.is_ascii_digit() {
            while index < chars.len() && (chars[index].is_ascii_alphanumeric() || chars[index] == '.') {
                index += 1;
            }
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_' || c == ':') {
            index += 1;
            continue;
        }
        let start = index;
        while index < chars.len()
            && (chars[index].is_ascii_alphanumeric() || chars[index] == '_' || chars[index] == ':')
        {
            index += 1;
        }
        let word: String = chars[start..index].iter().collect();
        let rest = chars[index..].iter().skip_while(|c| c.is_whitespace()).copied().next();
        if LABEL_LISTS.contains(&word.to_ascii_lowercase().as_str()) && rest == Some('(') {
            index += chars[index..]
                .iter()
                .position(|&x| x == ')')
                .map_or(chars.len() - index, |at| at + 1);
            continue;
        }
        if rest == Some('(') || KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
            continue;
        }
        names.insert(word);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_is_scraped_with_the_secret_and_every_rule_file_is_read() {
        let target = |address: &str, node: &str, cell: &str| Target {
            address: address.to_owned(),
            node: node.to_owned(),
            cell: cell.to_owned(),
        };
        let text = configuration(
            "# test",
            &[
                target("127.0.0.2:3000", "coordinator", "coordinator"),
                target("127.0.0.3:3000", "worker-a", "a"),
            ],
            Path::new("/run/c/secret"),
            Path::new("/repo/ops/prometheus/rules"),
        );
        assert!(text.contains("  - /repo/ops/prometheus/rules/*.yml\n"), "{text}");
        assert!(text.contains("credentials_file: /run/c/secret\n"), "{text}");
        assert!(
            text.contains("      - targets: [\"127.0.0.3:3000\"]\n        labels: {node: \"worker-a\", cell: \"a\"}\n"),
            "{text}"
        );
        assert!(text.contains("honor_labels: true"), "{text}");
        assert!(text.starts_with("# test\nglobal:\n  scrape_interval: 5s\n"), "{text}");
    }

    #[test]
    fn the_metrics_of_an_expression_are_found_past_functions_labels_and_durations() {
        let names = metric_names(
            "(sum by (cell) (rate(http_requests_total{status=~\"5..\"}[5m])) or 0 * sum by (cell, le) \
             (rate(http_requests_total[1h]))) / on (cell) group_left max(coordinator_raft_leader) > 1e3 \
             and cell:http_request_errors:ratio_rate1h > (14.4 * 0.001)",
        );
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "cell:http_request_errors:ratio_rate1h",
                "coordinator_raft_leader",
                "http_requests_total"
            ]
        );
    }

    #[test]
    fn the_project_rules_name_the_series_the_nodes_export() {
        let names = series_named_by_rules(&rules_dir()).unwrap();
        for expected in [
            "http_requests_total",
            "http_request_duration_seconds_bucket",
            "latest_push_lag_seconds_bucket",
            "ingest_rejected_batches_total",
            "coordinator_raft_leader",
            "router_map_versions_behind",
        ] {
            assert!(names.contains(expected), "{expected} not found in {names:?}");
        }
        assert!(
            names.iter().all(|name| !name.contains(':')),
            "recorded series left out: {names:?}"
        );
    }

    #[test]
    fn block_expressions_are_read_whole() {
        let text = "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: |\n          a_total > 1\n          and\n          b_total > 2\n        for: 1m\n      - record: x:y:z\n        expr: sum(c_total)\n";
        assert_eq!(expressions(text), ["a_total > 1 and b_total > 2", "sum(c_total)"]);
    }
}
