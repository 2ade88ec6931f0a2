//! The bench's cell simulator against a real coordinator: two simulated cells answer the
//! coordinator's internal calls (its reset gives them their ISUs) and push latest conditions
//! on streams, and the coordinator applies them (acknowledged, and in the trend).

use std::time::Duration;

use bench::cellsim::{CellSim, CellSimConfig};
use deploy::node_args::CoordinatorArgs;
use e2e::{free_ports, node_binary, wait_until, NodeProcess, ScratchDir};
use shared::dataset::generated::VIRTUAL_START;

const SECRET: &str = "cellsim-test-secret-of-32-bytes!";
const ISUS: usize = 300;

/// A coordinator told the simulator's cells, with a generated dataset of [`ISUS`] ISUs.
fn spawn_coordinator(cells: &CellSim, port: u16, scratch: &ScratchDir) -> NodeProcess {
    let args = CoordinatorArgs {
        listen: format!("127.0.0.1:{port}"),
        workers: cells.cell_endpoints(),
        dataset: Some(format!("generated:{ISUS}")),
        ..CoordinatorArgs::default()
    };
    let mut command = std::process::Command::new(node_binary("coordinator"));
    command.args(args.args()).env("ISU_CLUSTER_SECRET", SECRET);
    NodeProcess::spawn("coordinator", command, &scratch.path)
}

/// The trend's entries whose latest condition came from the simulator (newer than any
/// dataset condition).
fn simulated_entries(trend: &serde_json::Value) -> usize {
    trend
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|character| ["info", "warning", "critical"].map(|level| &character[level]))
        .filter_map(serde_json::Value::as_array)
        .flatten()
        .filter(|entry| {
            entry["timestamp"]
                .as_i64()
                .is_some_and(|timestamp| timestamp > VIRTUAL_START)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulated_cells_get_their_isus_and_the_coordinator_applies_their_pushes() {
    let scratch = ScratchDir::new("cellsim");
    let [port] = free_ports::<1>();
    let base = format!("http://127.0.0.1:{port}");
    let mut cells = CellSim::start(CellSimConfig {
        cells: 2,
        first_host: 200,
        coordinators: vec![base.clone()],
        secret: SECRET.to_owned(),
        interval: Duration::from_millis(10),
    })
    .await
    .expect("the simulator starts");
    let _coordinator = spawn_coordinator(&cells, port, &scratch);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    wait_until("the coordinator is ready", Duration::from_secs(10), || async {
        let answer = client.get(format!("{base}/healthz")).send().await.ok()?;
        answer.status().is_success().then_some(())
    })
    .await;
    let initialized = client.post(format!("{base}/initialize")).send().await.unwrap();
    assert!(initialized.status().is_success(), "{}", initialized.status());
    assert_eq!(cells.isu_count(), ISUS, "the resets gave the cells every ISU");
    assert!(
        cells.cells().iter().all(|cell| !cell.isus().is_empty()),
        "both cells own ISUs"
    );

    cells.start_pushing(20.0).expect("the cells push");
    wait_until("every ISU was pushed", Duration::from_secs(10), || async {
        (cells.totals().items_applied >= ISUS as u64).then_some(())
    })
    .await;
    let totals = cells.stop_pushing().await;
    assert_eq!(totals.items_applied, totals.items_sent, "{totals:?}");
    assert_eq!((totals.items_dropped, totals.streams_broken), (0, 0), "{totals:?}");

    wait_until(
        "the trend shows every ISU's pushed condition",
        Duration::from_secs(10),
        || async {
            let trend: serde_json::Value = client
                .get(format!("{base}/api/trend"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (simulated_entries(&trend) == ISUS).then_some(())
        },
    )
    .await;
    cells.shutdown().await;
}
