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

use bench::report::ReportFile;
use serde::Serialize;

use crate::output::{self, Format};

/// The disruptions a control-plane check counts.
const MIN_DISRUPTIONS: u32 = 2;

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

/// Which disruptions of the leader a control-plane check counts (a key of `control_plane`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Disruptions {
    /// `--kill-leader-every`.
    #[value(name = "leader_kills")]
    LeaderKills,
    /// `--pause-leader-every`.
    #[value(name = "leader_pauses")]
    LeaderPauses,
}

impl Disruptions {
    fn key(self) -> &'static str {
        match self {
            Disruptions::LeaderKills => "leader_kills",
            Disruptions::LeaderPauses => "leader_pauses",
        }
    }
}

/// What `isuctl bench check` says of a report that holds.
#[derive(Debug, Serialize)]
struct Checked {
    report: PathBuf,
    /// The checks made (`report`, `no_errors`, `control_plane`).
    checks: Vec<&'static str>,
}

pub fn run(args: CheckArgs, format: Format) -> anyhow::Result<()> {
    let report = ReportFile::read(&args.report)?;
    let problems = problems(&report, args.no_errors, args.control_plane);
    anyhow::ensure!(
        problems.is_empty(),
        "{}: {}",
        args.report.display(),
        problems.join(", ")
    );
    let mut checks = vec!["report"];
    checks.extend(args.no_errors.then_some("no_errors"));
    checks.extend(args.control_plane.map(|_| "control_plane"));
    let checked = Checked {
        report: args.report,
        checks,
    };
    output::emit(format, &checked, |checked| {
        format!("{}: holds ({})", checked.report.display(), checked.checks.join(", "))
    })
}

/// Every problem of `report` for the checks asked, in words (none: it holds).
fn problems(report: &ReportFile, no_errors: bool, control_plane: Option<Disruptions>) -> Vec<String> {
    let mut problems = Vec::new();
    if no_errors {
        problems.extend(error_problems(report));
    }
    if let Some(counted) = control_plane {
        problems.extend(control_plane_problems(report, counted));
    }
    problems
}

/// Errors, router reloads and connection errors of a run that must have none.
fn error_problems(report: &ReportFile) -> Vec<String> {
    let mut problems = Vec::new();
    if report.errors != 0 {
        problems.push(format!("errors {}", report.errors));
    }
    match report.router_reloads {
        Some(0) => {}
        Some(reloads) => problems.push(format!("router_reloads {reloads}")),
        None => problems.push("router_reloads unknown (nginx was not watched)".to_owned()),
    }
    for (cause, count) in &report.connection_errors {
        if *count != 0 {
            problems.push(format!("connection errors ({cause}) {count}"));
        }
    }
    problems
}

/// What a run whose leader was killed or paused must show in `control_plane`.
fn control_plane_problems(report: &ReportFile, counted: Disruptions) -> Vec<String> {
    let Some(plane) = &report.control_plane else {
        return vec!["no control_plane (a run without --kill-leader-every or --pause-leader-every)".to_owned()];
    };
    let mut problems: Vec<String> = [
        ("failed_kills", u64::from(plane.failed_kills)),
        ("replicas_differing", plane.replicas_differing),
        ("lost_acknowledged", plane.lost_acknowledged),
        ("repeated_activations", plane.repeated_activations),
        ("unactivated_acknowledged", plane.unactivated_acknowledged),
    ]
    .into_iter()
    .filter(|(_, count)| *count != 0)
    .map(|(key, count)| format!("{key} {count}"))
    .collect();
    if report.acknowledged_registrations.is_empty() {
        problems.push("no registration acknowledged during the load".to_owned());
    }
    let count = match counted {
        Disruptions::LeaderKills => plane.leader_kills,
        Disruptions::LeaderPauses => plane.leader_pauses,
    };
    if count < MIN_DISRUPTIONS {
        problems.push(format!("only {count} {}", counted.key()));
    }
    problems
}

#[cfg(test)]
mod tests {
    use bench::report::ControlPlane;
    use shared::protocol::HeldIsu;

    use super::*;

    /// A report that holds every check: a real one's shape, its figures set here.
    fn holding() -> ReportFile {
        let text = include_str!("../../../bench/tests/data/report-control-plane.json");
        let mut report: ReportFile = serde_json::from_str(text).unwrap();
        report.errors = 0;
        report.router_reloads = Some(0);
        report.connection_errors.values_mut().for_each(|count| *count = 0);
        report.acknowledged_registrations = vec![HeldIsu {
            uuid: "isu-1".to_owned(),
            owner: "bench000".to_owned(),
            icon_sha256: None,
        }];
        report.control_plane = Some(ControlPlane {
            replicas: 3,
            leader_kills: 3,
            leader_pauses: 2,
            ..ControlPlane::default()
        });
        report
    }

    fn problems_of(report: &ReportFile) -> Vec<String> {
        let mut all = problems(report, true, Some(Disruptions::LeaderKills));
        all.extend(problems(report, false, Some(Disruptions::LeaderPauses)));
        all
    }

    fn with_plane(change: impl FnOnce(&mut ControlPlane)) -> ReportFile {
        let mut report = holding();
        change(report.control_plane.as_mut().unwrap());
        report
    }

    #[test]
    fn a_report_that_holds_has_no_problem() {
        assert_eq!(problems_of(&holding()), Vec::<String>::new());
        // No check asked: only that it reads.
        let mut failing = holding();
        failing.errors = 9;
        failing.control_plane = None;
        assert_eq!(problems(&failing, false, None), Vec::<String>::new());
    }

    #[test]
    fn errors_router_reloads_and_each_connection_error_cause_are_named() {
        let mut report = holding();
        report.errors = 3;
        assert_eq!(problems(&report, true, None), ["errors 3"]);
        let mut report = holding();
        report.router_reloads = Some(1);
        assert_eq!(problems(&report, true, None), ["router_reloads 1"]);
        let mut report = holding();
        report.router_reloads = None;
        assert_eq!(
            problems(&report, true, None),
            ["router_reloads unknown (nginx was not watched)"]
        );
        let mut report = holding();
        report.connection_errors.insert("reset".to_owned(), 2);
        report.connection_errors.insert("refused".to_owned(), 1);
        assert_eq!(
            problems(&report, true, None),
            ["connection errors (refused) 1", "connection errors (reset) 2"]
        );
        // Errors do not fail a control-plane check alone (as before, in CI).
        assert_eq!(
            problems(&report, false, Some(Disruptions::LeaderKills)),
            Vec::<String>::new()
        );
    }

    #[test]
    fn each_control_plane_count_that_is_not_zero_is_named() {
        let cases: [(&str, ReportFile); 5] = [
            ("failed_kills 1", with_plane(|plane| plane.failed_kills = 1)),
            ("replicas_differing 1", with_plane(|plane| plane.replicas_differing = 1)),
            ("lost_acknowledged 4", with_plane(|plane| plane.lost_acknowledged = 4)),
            (
                "repeated_activations 2",
                with_plane(|plane| plane.repeated_activations = 2),
            ),
            (
                "unactivated_acknowledged 1",
                with_plane(|plane| plane.unactivated_acknowledged = 1),
            ),
        ];
        for (problem, report) in cases {
            assert_eq!(problems(&report, false, Some(Disruptions::LeaderKills)), [problem]);
        }
    }

    #[test]
    fn a_control_plane_run_needs_acknowledged_registrations_and_two_disruptions() {
        let mut report = holding();
        report.acknowledged_registrations.clear();
        assert_eq!(
            problems(&report, false, Some(Disruptions::LeaderKills)),
            ["no registration acknowledged during the load"]
        );
        let report = with_plane(|plane| plane.leader_kills = 1);
        assert_eq!(
            problems(&report, false, Some(Disruptions::LeaderKills)),
            ["only 1 leader_kills"]
        );
        let report = with_plane(|plane| plane.leader_pauses = 0);
        assert_eq!(
            problems(&report, false, Some(Disruptions::LeaderPauses)),
            ["only 0 leader_pauses"]
        );
        let mut report = holding();
        report.control_plane = None;
        assert_eq!(
            problems(&report, false, Some(Disruptions::LeaderPauses)),
            ["no control_plane (a run without --kill-leader-every or --pause-leader-every)"]
        );
    }

    #[test]
    fn the_command_fails_with_one_line_naming_every_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        let mut report = with_plane(|plane| plane.failed_kills = 2);
        report.errors = 1;
        report.write(&path).unwrap();
        let args = |no_errors: bool, control_plane: Option<Disruptions>| CheckArgs {
            report: path.clone(),
            no_errors,
            control_plane,
            help: None,
        };
        let error = run(args(true, Some(Disruptions::LeaderKills)), Format::Human).unwrap_err();
        let message = format!("{error:#}");
        assert_eq!(message, format!("{}: errors 1, failed_kills 2", path.display()));
        assert!(!message.contains('\n'));
        run(args(false, None), Format::Human).unwrap();
        std::fs::write(&path, "{}").unwrap();
        let error = run(args(false, None), Format::Human).unwrap_err();
        assert!(format!("{error:#}").contains("not a bench run's report"), "{error:#}");
    }

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
