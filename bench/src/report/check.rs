//! What CI expects of a bench run beyond its passing, read from its report (`isuctl bench
//! check REPORT` asks it):
//!
//! - no errors (three cells, live migrations under load): no error of any kind, no
//!   connection error of any cause, and no router reload (nginx takes each new map without
//!   one);
//! - the control plane held (the leader killed or paused under load): in the report's
//!   `control_plane`, no failed kill, no replica differing, no acknowledged registration
//!   lost, none activated twice by JIA or never; some registration acknowledged during the
//!   load; and at least 2 of the disruptions named.

use std::path::Path;

use super::ReportFile;

/// The disruptions a control-plane check counts.
const MIN_DISRUPTIONS: u32 = 2;

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
    pub fn key(self) -> &'static str {
        match self {
            Disruptions::LeaderKills => "leader_kills",
            Disruptions::LeaderPauses => "leader_pauses",
        }
    }
}

/// Reads the report at `path` and checks it: the checks made (`report`, `no_errors`,
/// `control_plane`), or one line naming the report and every problem.
pub fn check(path: &Path, no_errors: bool, control_plane: Option<Disruptions>) -> anyhow::Result<Vec<&'static str>> {
    let report = ReportFile::read(path)?;
    let problems = problems(&report, no_errors, control_plane);
    anyhow::ensure!(problems.is_empty(), "{}: {}", path.display(), problems.join(", "));
    let mut checks = vec!["report"];
    checks.extend(no_errors.then_some("no_errors"));
    checks.extend(control_plane.map(|_| "control_plane"));
    Ok(checks)
}

/// Every problem of `report` for the checks asked, in words (none: it holds).
pub fn problems(report: &ReportFile, no_errors: bool, control_plane: Option<Disruptions>) -> Vec<String> {
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
    use crate::report::ControlPlane;
    use shared::protocol::HeldIsu;

    use super::*;

    /// A report that holds every check: a real one's shape, its figures set here.
    fn holding() -> ReportFile {
        let text = include_str!("../../tests/data/report-control-plane.json");
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
        let error = check(&path, true, Some(Disruptions::LeaderKills)).unwrap_err();
        let message = format!("{error:#}");
        assert_eq!(message, format!("{}: errors 1, failed_kills 2", path.display()));
        assert!(!message.contains('\n'));
        check(&path, false, None).unwrap();
        std::fs::write(&path, "{}").unwrap();
        let error = check(&path, false, None).unwrap_err();
        assert!(format!("{error:#}").contains("not a bench run's report"), "{error:#}");
    }
}
