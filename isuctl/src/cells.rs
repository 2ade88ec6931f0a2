//! `isuctl cells`: moves ISUs between the cells (workers) of a running cluster by live
//! migration (clone → flip → redirect → forget: devices and readers keep working, nothing
//! acknowledged is lost), and shows what each cell holds and does. Every command waits until
//! its migrations flipped and prints the coordinator's answer (`--json`: as it came).
//! Exit status: 0 on success, 1 when the coordinator refused or a migration rolled back.

use std::io::Write;

use anyhow::Context;
use rand::Rng;
use shared::placement_map::{CellId, PlacementMap};
use shared::protocol::cells::{CellsAnswer, CellsSummary, Latency, MigrateRequest};

use crate::cells_api::{CellsApi, Outcome, Target};
use crate::exit::Exit;
use crate::output::{emit, Format};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: Target,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// A table per cell: state, slots, pins, ISUs, conditions, requests/s, 5xx %, p99,
    /// latest-push p99 lag, shaped ISUs, the worker's map version, and the migrations in
    /// progress.
    Status(StatusArgs),
    /// The placement map slot by slot: a 16 × 16 grid of the cell owning each slot (row: the
    /// first hex digit, column: the second), the pins, the migrations in progress (JSON:
    /// the coordinator's answer, the map with its 256 slots as cell indexes).
    Map,
    /// Move slot HEX (a UUID's first two hex digits, 00-ff) to CELL, or pin one registered
    /// ISU to CELL (moving its data).
    Migrate(MigrateArgs),
    /// Move every slot and pin of CELL to the other cells.
    Drain {
        /// The cell to empty (a, b, ...).
        cell: String,
    },
    /// The fewest slot moves that give every cell an even share (after `cluster up
    /// --workers N` added one).
    Rebalance,
    /// Move one random slot to another cell than its owner (bench --migrate-every).
    Random,
    /// The coordinator replicas of a group: role, term, leader, applied index and how far
    /// each lags the most advanced, ready, state hash (equal hashes at equal indexes: the
    /// same state). The replicas are the local cluster's, or each --replica URL.
    Replicas {
        /// A replica's base URL (repeat it for each; default: the local cluster's replicas).
        #[arg(long = "replica", value_name = "URL")]
        replicas: Vec<String>,
    },
    /// Add a coordinator replica to the group. Start it first with its own --replica-id, an
    /// empty --data-dir and the group's --replica list (itself included); it catches up as a
    /// learner, then votes.
    AddReplica {
        /// Its id (unused in the group so far).
        #[arg(long)]
        id: u64,
        /// Its base URL, as the other replicas reach it.
        #[arg(long)]
        url: String,
    },
    /// Remove a coordinator replica from the group; stop its process afterwards.
    RemoveReplica {
        #[arg(long)]
        id: u64,
    },
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Seconds the rates and percentiles are measured over (0.1 to 30).
    #[arg(long, default_value_t = 1.0)]
    pub seconds: f64,
    /// Redraw the table every W seconds (default 2) until Ctrl-C.
    #[arg(long, num_args = 0..=1, default_missing_value = "2", value_name = "W")]
    pub watch: Option<f64>,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("subject").required(true).args(["slot", "isu"])))]
pub struct MigrateArgs {
    /// The slot to move: two hex digits, 00 to ff.
    #[arg(long)]
    pub slot: Option<String>,
    /// The registered ISU to pin (its UUID).
    #[arg(long)]
    pub isu: Option<String>,
    /// The cell that takes it.
    #[arg(long)]
    pub to: String,
}

pub fn run(args: Args, format: Format) -> anyhow::Result<()> {
    let api = || CellsApi::connect(&args.target);
    match args.command {
        Command::Status(status) => {
            if !(status.seconds.is_finite() && status.seconds >= 0.0) {
                return Err(Exit::usage("--seconds needs a number").into());
            }
            let api = api()?;
            match status.watch {
                None => emit(format, &api.summary(status.seconds)?, render_summary),
                Some(every) => watch(&api, status.seconds, every, format),
            }
        }
        Command::Migrate(migrate) => {
            let request = MigrateRequest {
                slot: migrate.slot.as_deref().map(checked_word).transpose()?,
                isu: migrate.isu.as_deref().map(checked_word).transpose()?,
                to: checked_word(&migrate.to)?,
            };
            report(api()?.migrate(&request)?, format)
        }
        Command::Map => emit(format, &api()?.placement()?, render_map),
        Command::Drain { cell } => report(api()?.drain(&checked_word(&cell)?)?, format),
        Command::Rebalance => report(api()?.rebalance()?, format),
        Command::Replicas { replicas } => {
            let api = api()?;
            let bases = match replicas.is_empty() {
                false => replicas,
                true => {
                    let cluster = crate::local::RunDir::from_env().cluster()?;
                    match cluster.replicas.is_empty() {
                        true => vec![cluster.coordinator_url],
                        false => cluster.replicas.into_iter().map(|node| node.url).collect(),
                    }
                }
            };
            let rows: Vec<ReplicaRow> = bases
                .into_iter()
                .map(|base| {
                    let answer = api.replica_at(&base).map_err(|error| format!("{error:#}"));
                    ReplicaRow { url: base, answer }
                })
                .collect();
            emit(format, &rows, render_replicas)
        }
        Command::AddReplica { id, url } => {
            let answer = api()?.change_members(&shared::protocol::MembershipRequest::Add { id, url })?;
            emit(format, &answer, |answer| {
                format!("members now {:?}", answer.status.members)
            })
        }
        Command::RemoveReplica { id } => {
            let answer = api()?.change_members(&shared::protocol::MembershipRequest::Remove(id))?;
            emit(format, &answer, |answer| {
                format!("members now {:?}", answer.status.members)
            })
        }
        Command::Random => {
            let api = api()?;
            let placement = api.placement()?;
            let (slot, to) = random_move(&placement.map, &mut rand::thread_rng())?;
            let request = MigrateRequest {
                slot: Some(format!("{slot:02x}")),
                isu: None,
                to: placement.map.cells()[usize::from(to)].name.clone(),
            };
            report(api.migrate(&request)?, format)
        }
    }
}

/// One replica in `cells replicas`: its answer or why there is none.
#[derive(Debug, serde::Serialize)]
struct ReplicaRow {
    url: String,
    #[serde(flatten, with = "answer_or_error")]
    answer: Result<shared::protocol::ReplicaAnswer, String>,
}

/// A replica's answer as its fields, or `{"error": ...}`.
mod answer_or_error {
    use serde::Serialize;

    pub fn serialize<S: serde::Serializer>(
        answer: &Result<shared::protocol::ReplicaAnswer, String>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match answer {
            Ok(answer) => answer.serialize(serializer),
            Err(error) => serde_json::json!({ "error": error }).serialize(serializer),
        }
    }
}

/// The replicas table: one line per replica; `lag` is how many entries it has applied
/// fewer than the most advanced one.
fn render_replicas(rows: &Vec<ReplicaRow>) -> String {
    let most = rows
        .iter()
        .filter_map(|row| row.answer.as_ref().ok())
        .map(|answer| answer.status.applied_index)
        .max()
        .unwrap_or(0);
    let mut text = format!(
        "{:<28} {:>3} {:<10} {:>5} {:>6} {:>8} {:>5} {:<5} {}\n",
        "replica", "id", "role", "term", "leader", "applied", "lag", "ready", "state"
    );
    for row in rows {
        match &row.answer {
            Ok(answer) => {
                let status = &answer.status;
                let applied = status.applied_index;
                text.push_str(&format!(
                    "{:<28} {:>3} {:<10} {:>5} {:>6} {:>8} {:>5} {:<5} {}\n",
                    row.url,
                    status.id,
                    status.role,
                    status.term,
                    status
                        .leader
                        .map_or_else(|| "-".to_owned(), |leader| leader.to_string()),
                    applied,
                    most - applied,
                    answer.ready,
                    answer.state_hash
                ));
            }
            Err(error) => text.push_str(&format!("{:<28} down: {error}\n", row.url)),
        }
    }
    text.trim_end().to_owned()
}

/// A name or UUID as the API takes it (the script's rule: letters, digits and dashes).
fn checked_word(word: &str) -> anyhow::Result<String> {
    match !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        true => Ok(word.to_owned()),
        false => Err(Exit::usage(format!("unexpected characters in '{word}'")).into()),
    }
}

/// Prints an operation's answer; a refusal or a rollback is an error (exit 1).
fn report(outcome: Outcome, format: Format) -> anyhow::Result<()> {
    emit(format, &outcome.answer, render_answer)?;
    match (outcome.succeeded(), &outcome.answer.error) {
        (true, _) => Ok(()),
        (false, Some(error)) => anyhow::bail!("the coordinator answered {}: {error}", outcome.status),
        (false, None) => anyhow::bail!("the coordinator answered {}", outcome.status),
    }
}

/// Until Ctrl-C: the table again every `every` seconds (each measured over `seconds`).
fn watch(api: &CellsApi, seconds: f64, every: f64, format: Format) -> anyhow::Result<()> {
    if !(every.is_finite() && every > 0.0) {
        return Err(Exit::usage("--watch needs a number of seconds").into());
    }
    loop {
        let shown = match api.summary(seconds) {
            Ok(summary) => match format {
                Format::Json => serde_json::to_string(&summary)?,
                Format::Human => render_summary(&summary),
            },
            Err(error) => format!("{error:#}"),
        };
        let mut stdout = std::io::stdout().lock();
        let written = match format {
            // One summary a line, for a program to follow.
            Format::Json => writeln!(stdout, "{shown}"),
            Format::Human => writeln!(
                stdout,
                "\x1b[H\x1b[2J{}  (every {every}s; Ctrl-C to stop)\n{shown}",
                shared::clock::clock_of_day()
            ),
        };
        if written.and_then(|()| stdout.flush()).is_err() {
            // Whoever read the output is gone (a closed pipe): nothing left to watch for.
            return Ok(());
        }
        drop(stdout);
        std::thread::sleep(std::time::Duration::from_secs_f64(every));
    }
}

/// A slot chosen uniformly and a cell to take it, chosen uniformly among the cells that do
/// not own it: every call moves something (a target drawn among all cells was the owner one
/// time in N, and the call then did nothing).
pub fn random_move(map: &PlacementMap, rng: &mut impl Rng) -> anyhow::Result<(u8, CellId)> {
    let cells = map.cells().len();
    if cells < 2 {
        return Err(Exit::usage("random needs at least two cells").into());
    }
    let slot: u8 = rng.gen();
    let owner = map.slots()[usize::from(slot)];
    // Draw among the N-1 others: skip the owner's index.
    let mut to = rng.gen_range(0..cells - 1) as CellId;
    if to >= owner {
        to += 1;
    }
    Ok((slot, to))
}

/// The human form of an operation's answer: one line per migration that flipped.
pub fn render_answer(answer: &CellsAnswer) -> String {
    let mut lines: Vec<String> = answer
        .migrations
        .iter()
        .map(|migration| {
            format!(
                "migration {}: {} {} → {}: {} ISUs, {} conditions, flipped in {} ms (map v{})",
                migration.id,
                migration.subject,
                migration.from,
                migration.to,
                migration.isus,
                migration.conditions,
                migration.millis,
                migration.map_version
            )
        })
        .collect();
    if answer.migrations.is_empty() && answer.error.is_none() {
        lines.push("nothing to move".to_owned());
    }
    if let Some(error) = &answer.error {
        lines.push(format!("error: {error}"));
    }
    if let Some(version) = answer.map_version {
        lines.push(format!("placement map version {version}"));
    }
    lines.join("\n")
}

/// The cells table: one line per cell, then one per migration in progress.
pub fn render_summary(summary: &CellsSummary) -> String {
    let mut text = format!(
        "placement map version {} ({} cells, {} pins); rates over {:.1} s\n{:<8} {:<5} {:>5} {:>4} {:>6} {:>11} {:>8} {:>7} {:>8} {:>9} {:>6} {:>4}  {:<28} {}\n",
        summary.map_version,
        summary.cells.len(),
        summary.pins,
        summary.seconds,
        "CELL",
        "STATE",
        "SLOTS",
        "PINS",
        "ISUS",
        "CONDITIONS",
        "REQ/S",
        "ERR%",
        "P99 ms",
        "PUSH p99",
        "SHAPED",
        "MAP",
        "INTERNAL URL",
        "DEVICE URL"
    );
    let latency = |value: Option<Latency>| value.map_or("-".to_owned(), |latency| latency.to_string());
    for cell in &summary.cells {
        let columns = match &cell.figures {
            Some(figures) => format!(
                "{:<5} {:>5} {:>4} {:>6} {:>11} {:>8.1} {:>7} {:>8} {:>9} {:>6} {:>4}",
                "up",
                cell.slots,
                cell.pins,
                cell.isus,
                figures.conditions,
                figures.requests_per_second,
                figures
                    .error_ratio
                    .map_or("-".to_owned(), |ratio| format!("{:.2}", ratio * 100.0)),
                latency(figures.p99),
                latency(figures.push_lag_p99),
                figures.shaped_isus,
                figures.map_version,
            ),
            None => format!(
                "{:<5} {:>5} {:>4} {:>6} {:>11} {:>8} {:>7} {:>8} {:>9} {:>6} {:>4}",
                "DOWN", cell.slots, cell.pins, cell.isus, "-", "-", "-", "-", "-", "-", "-"
            ),
        };
        text.push_str(&format!(
            "{:<8} {columns}  {:<28} {}\n",
            cell.name, cell.internal_url, cell.device_url
        ));
    }
    for migration in &summary.migrations {
        text.push_str(&format!(
            "migration {}: {} {} → {} ({})\n",
            migration.id, migration.subject, migration.from, migration.to, migration.phase
        ));
    }
    if let Some(router) = summary.router {
        let nginx = match router.nginx_version {
            None => "no control server".to_owned(),
            Some(version) if version == summary.map_version => format!("nginx routes by version {version}"),
            Some(0) => "nginx has not taken a map from this coordinator yet (handed over again every second)".to_owned(),
            Some(version) => format!(
                "nginx routes by version {version}, behind (handed over again every second; workers forward stale routes)"
            ),
        };
        text.push_str(&format!("router: map file version {}; {nginx}\n", router.file_version));
    }
    text.trim_end().to_owned()
}

/// The map as 16 rows of 16 slots, each the name of its cell, then the pins and migrations.
fn render_map(placement: &shared::protocol::cells::PlacementAnswer) -> String {
    let map = &placement.map;
    let name = |cell: CellId| map.cells()[usize::from(cell)].name.clone();
    let mut text = format!("placement map version {}\n   ", map.version());
    text.extend((0..16).map(|column| format!(" {column:>2x}")));
    for (row, slots) in map.slots().chunks(16).enumerate() {
        text.push_str(&format!("\n{row:x}_ "));
        text.extend(slots.iter().map(|cell| format!(" {:>2}", name(*cell))));
    }
    for (uuid, cell) in map.pins() {
        text.push_str(&format!("\npin {uuid} → {}", name(*cell)));
    }
    for migration in &placement.migrations {
        text.push_str(&format!(
            "\nmigration {}: {} {} → {}: {}",
            migration.id,
            migration.subject,
            name(migration.from),
            name(migration.to),
            migration.phase
        ));
    }
    text
}

/// The names of the cells, in map order.
pub fn cell_names(summary: &CellsSummary) -> Vec<String> {
    summary.cells.iter().map(|cell| cell.name.clone()).collect()
}

/// The cells of the cluster `target` names, in map order (a quick summary).
pub fn list_cells(api: &CellsApi) -> anyhow::Result<Vec<String>> {
    Ok(cell_names(&api.summary(0.1).context("reading the cells")?))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use shared::migration::{Phase, Subject};
    use shared::placement_map::Cell;
    use shared::protocol::cells::{CellFigures, CellSummary, MigrationInProgress, MigrationReport};

    use super::*;

    fn map(cells: usize) -> PlacementMap {
        let cells = (0..cells)
            .map(|index| Cell {
                name: ((b'a' + index as u8) as char).to_string(),
                internal_url: format!("http://127.0.0.{}:3000", 3 + index),
                device_url: format!("http://127.0.0.{}:8080", 3 + index),
            })
            .collect();
        PlacementMap::new(cells).unwrap()
    }

    #[test]
    fn a_random_move_never_targets_the_slots_owner_and_reaches_every_other_cell() {
        let map = map(3);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut targets = [0usize; 3];
        for _ in 0..3000 {
            let (slot, to) = random_move(&map, &mut rng).unwrap();
            assert_ne!(map.slots()[usize::from(slot)], to, "slot {slot:02x} moved to its owner");
            targets[usize::from(to)] += 1;
        }
        assert!(
            targets.iter().all(|count| *count > 500),
            "every cell takes slots: {targets:?}"
        );
    }

    #[test]
    fn a_random_move_needs_two_cells() {
        let error = random_move(&map(1), &mut rand::thread_rng()).unwrap_err();
        assert_eq!(error.downcast_ref::<Exit>().map(|exit| exit.code), Some(2));
        assert!(random_move(&map(2), &mut rand::thread_rng()).is_ok());
    }

    fn summary() -> CellsSummary {
        let cell = |name: &str, figures: Option<CellFigures>| CellSummary {
            name: name.to_owned(),
            slots: 128,
            pins: 0,
            isus: 0,
            internal_url: format!("http://{name}:3000"),
            device_url: format!("http://{name}:8080"),
            figures,
        };
        CellsSummary {
            map_version: 3,
            pins: 0,
            seconds: 1.0,
            cells: vec![
                cell(
                    "a",
                    Some(CellFigures {
                        conditions: 0,
                        requests_per_second: 0.0,
                        error_ratio: None,
                        p99: None,
                        push_lag_p99: None,
                        shaped_isus: 0,
                        map_version: 3,
                    }),
                ),
                cell(
                    "b",
                    Some(CellFigures {
                        conditions: 1234,
                        requests_per_second: 52.26,
                        error_ratio: Some(0.0125),
                        p99: Some(Latency::Millis(10.0)),
                        push_lag_p99: Some(Latency::BeyondHistogram { above_millis: 2500.0 }),
                        shaped_isus: 2,
                        map_version: 3,
                    }),
                ),
                cell("c", None),
            ],
            migrations: vec![MigrationInProgress {
                id: 4,
                subject: Subject::Slot(0x0b),
                from: "a".into(),
                to: "c".into(),
                phase: Phase::Flipped { map_version: 3 },
            }],
            router: None,
        }
    }

    #[test]
    fn the_table_shows_each_cell_and_migration_without_negative_zeros_or_debug_forms() {
        let text = render_summary(&summary());
        let columns = |cell: &str| -> Vec<String> {
            text.lines()
                .find(|line| line.split_whitespace().next() == Some(cell))
                .unwrap_or_else(|| panic!("no line for {cell}:\n{text}"))
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        };
        assert!(
            text.starts_with("placement map version 3 (3 cells, 0 pins); rates over 1.0 s\nCELL"),
            "{text}"
        );
        assert_eq!(
            columns("a")[1..12],
            ["up", "128", "0", "0", "0", "0.0", "-", "-", "-", "0", "3"],
            "{text}"
        );
        assert_eq!(columns("b")[5..10], ["1234", "52.3", "1.25", "10.0", ">2500"], "{text}");
        assert_eq!(columns("c")[1], "DOWN", "{text}");
        assert!(
            text.ends_with("migration 4: slot 0b a → c (flipped at map v3)"),
            "{text}"
        );
        assert!(!text.contains("-0"), "{text}");
        assert!(!text.contains("Flipped"), "{text}");
        assert!(!text.contains("router"), "no router line without a router: {text}");
    }

    #[test]
    fn the_router_line_says_whether_nginx_holds_the_current_map() {
        use shared::protocol::cells::RouterCopy;
        let mut with_router = summary();
        let line = |summary: &CellsSummary| render_summary(summary).lines().last().unwrap().to_owned();
        with_router.router = Some(RouterCopy {
            file_version: 3,
            nginx_version: Some(3),
        });
        assert_eq!(
            line(&with_router),
            "router: map file version 3; nginx routes by version 3"
        );
        with_router.router = Some(RouterCopy {
            file_version: 3,
            nginx_version: Some(2),
        });
        assert!(line(&with_router).contains("nginx routes by version 2, behind"));
        with_router.router = Some(RouterCopy {
            file_version: 3,
            nginx_version: None,
        });
        assert_eq!(line(&with_router), "router: map file version 3; no control server");
    }

    #[test]
    fn an_answer_lists_its_migrations_then_its_error() {
        let answer = CellsAnswer {
            error: Some("migration rolled back: worker b failed".into()),
            migrations: vec![MigrationReport {
                id: 2,
                subject: "slot 0b".into(),
                from: "a".into(),
                to: "b".into(),
                isus: 3,
                conditions: 120,
                millis: 250,
                map_version: 5,
            }],
            map_version: Some(5),
        };
        assert_eq!(
            render_answer(&answer),
            "migration 2: slot 0b a → b: 3 ISUs, 120 conditions, flipped in 250 ms (map v5)\n\
             error: migration rolled back: worker b failed\nplacement map version 5"
        );
    }

    #[test]
    fn names_with_other_characters_are_refused_before_any_call() {
        assert_eq!(checked_word("worker-a").unwrap(), "worker-a");
        for bad in ["", "a b", "a\"", "ü"] {
            assert!(checked_word(bad).is_err(), "{bad:?}");
        }
    }
}
