//! `isuctl bench check REPORT`: what CI expects of a bench run beyond its passing, read from
//! its report (`report.json`, as the typed `bench::report::ReportFile`):
//!
//! - `--no-errors` (three cells, live migrations under load): no error of any kind, no
//!   connection error of any cause, and no router reload (nginx takes each new map without
//!   one);
//! - `--control-plane leader_kills|leader_pauses` (the leader killed or paused under load):
//!   in the report's `control_plane`, no failed kill, no replica differing, no acknowledged
//!   registration lost, none activated twice by JIA or never; some registration acknowledged
//!   during the load; and at least 2 of the disruptions named.
//!
//! It exits non-zero with one line naming every problem.

use std::path::PathBuf;

use bench::report::check::{check, Disruptions};
use serde::Serialize;

use crate::output::{self, Format};

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The bench's report (RUN/report.json; `report: PATH` in the bench's output). Alone,
    /// only that it reads as one.
    #[arg(value_name = "REPORT")]
    pub report: PathBuf,
    /// No error during the load: `errors` 0, every cause of `connection_errors` 0, and
    /// `router_reloads` 0 (a run with live migrations: the router takes each new map without
    /// a reload; unknown counts as a problem).
    #[arg(long)]
    pub no_errors: bool,
    /// The control plane held under leader kills or pauses: `control_plane`'s failed_kills,
    /// replicas_differing, lost_acknowledged, repeated_activations and
    /// unactivated_acknowledged 0, some registration acknowledged during the load, and at
    /// least 2 of COUNT (the run's disruptions).
    #[arg(long, value_name = "COUNT")]
    pub control_plane: Option<Disruptions>,
    /// Print help.
    #[arg(short, long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

/// What `isuctl bench check` says of a report that holds.
#[derive(Debug, Serialize)]
struct Checked {
    report: PathBuf,
    /// The checks made (`report`, `no_errors`, `control_plane`).
    checks: Vec<&'static str>,
}

pub fn run(args: CheckArgs, format: Format) -> anyhow::Result<()> {
    let checked = Checked {
        checks: check(&args.report, args.no_errors, args.control_plane)?,
        report: args.report,
    };
    output::emit(format, &checked, |checked| {
        format!("{}: holds ({})", checked.report.display(), checked.checks.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_is_a_subcommand_of_bench_and_the_runs_options_stay_whole() {
        use clap::Parser as _;
        let parse = |words: &str| {
            let words: Vec<&str> = words.split_whitespace().collect();
            match crate::Cli::try_parse_from(words).unwrap().command {
                crate::Command::Bench(args) => args,
                other => panic!("{other:?}"),
            }
        };
        let args = parse("isuctl bench check run/r.json --no-errors --control-plane leader_pauses");
        let Some(crate::bench::BenchCommand::Check(check)) = args.command else {
            panic!("{args:?}");
        };
        assert_eq!(check.report, PathBuf::from("run/r.json"));
        assert!(check.no_errors);
        assert_eq!(check.control_plane, Some(Disruptions::LeaderPauses));
        // After `--` (scripts/bench), `check` is not the subcommand.
        let args = parse("isuctl bench -- check --users 3");
        assert!(args.command.is_none());
        assert_eq!(args.args, ["check", "--users", "3"]);
        let refused = crate::Cli::try_parse_from(["isuctl", "bench", "check", "r.json", "--control-plane", "x"]);
        assert!(refused.is_err());
    }
}
