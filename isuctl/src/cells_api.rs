//! The coordinator's cells API as typed calls (`shared::protocol::cells`): the one place in
//! the tool that builds its URLs and carries the cluster secret. Blocking for the caller (a
//! small runtime of its own), no proxy (the cluster is reached directly), no overall time
//! limit (a migration answers once it flipped, which may take minutes for a heavy slot).

use std::time::Duration;

use anyhow::Context;
use serde::de::DeserializeOwned;
use serde::Serialize;
use shared::protocol::cells::{CellsAnswer, CellsSummary, DrainRequest, MigrateRequest, PlacementAnswer};
use shared::protocol::{
    MembershipRequest, ReplicaAnswer, COORDINATOR_CELLS, COORDINATOR_DRAIN, COORDINATOR_MEMBERS, COORDINATOR_MIGRATE,
    COORDINATOR_PLACEMENT, COORDINATOR_REBALANCE, COORDINATOR_REPLICA, SECRET_HEADER,
};

use crate::local::RunDir;

/// Where the coordinator is: the flag or `ISU_COORDINATOR_URL`, else the local cluster's.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// The coordinator's URL (default: the local cluster's, found in ISU_RUN_DIR, default
    /// <repo>/run/cluster); the secret is ISU_CLUSTER_SECRET, else the run directory's.
    #[arg(long, env = "ISU_COORDINATOR_URL")]
    pub coordinator_url: Option<String>,
}

/// What a cells operation (`migrate`, `drain`, `rebalance`) answered.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The HTTP status (2xx: every migration flipped).
    pub status: u16,
    pub answer: CellsAnswer,
}

impl Outcome {
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// A connection to one coordinator's cells API.
pub struct CellsApi {
    base: String,
    secret: String,
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
}

impl CellsApi {
    /// The coordinator `target` names (or the local cluster's) with its secret.
    pub fn connect(target: &Target) -> anyhow::Result<CellsApi> {
        let run_dir = RunDir::from_env();
        let base = match &target.coordinator_url {
            Some(url) => url.clone(),
            None => {
                run_dir
                    .cluster()
                    .context("no cluster (or set ISU_COORDINATOR_URL)")?
                    .coordinator_url
            }
        };
        let secret = match std::env::var("ISU_CLUSTER_SECRET") {
            Ok(secret) if !secret.is_empty() => secret,
            _ => run_dir
                .secret()
                .context("no cluster secret (or set ISU_CLUSTER_SECRET)")?,
        };
        CellsApi::new(base, secret)
    }

    pub fn new(base: impl Into<String>, secret: impl Into<String>) -> anyhow::Result<CellsApi> {
        let client = node_http::internal_client()
            .connect_timeout(Duration::from_secs(3))
            .build()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        Ok(CellsApi {
            base: base.into().trim_end_matches('/').to_owned(),
            secret: secret.into(),
            client,
            runtime,
        })
    }

    pub fn coordinator_url(&self) -> &str {
        &self.base
    }

    /// `GET /internal/cells?seconds=S`: every cell's figures over S seconds (0.1 to 30).
    pub fn summary(&self, seconds: f64) -> anyhow::Result<CellsSummary> {
        self.get(&format!("{COORDINATOR_CELLS}?seconds={seconds}"))
    }

    /// `GET /internal/placement`: the map (which cell owns each slot) and unfinished migrations.
    pub fn placement(&self) -> anyhow::Result<PlacementAnswer> {
        self.get(COORDINATOR_PLACEMENT)
    }

    pub fn migrate(&self, request: &MigrateRequest) -> anyhow::Result<Outcome> {
        self.operate(COORDINATOR_MIGRATE, request)
    }

    pub fn drain(&self, cell: &str) -> anyhow::Result<Outcome> {
        self.operate(COORDINATOR_DRAIN, &DrainRequest { cell: cell.to_owned() })
    }

    pub fn rebalance(&self) -> anyhow::Result<Outcome> {
        self.operate(COORDINATOR_REBALANCE, &serde_json::json!({}))
    }

    /// `GET /internal/replica` of the coordinator at `base` (another replica of the group).
    pub fn replica_at(&self, base: &str) -> anyhow::Result<ReplicaAnswer> {
        let request = self
            .client
            .get(format!("{}{COORDINATOR_REPLICA}", base.trim_end_matches('/')));
        self.read(request, "GET", COORDINATOR_REPLICA)
    }

    /// `POST /internal/replica/members`: the leader's answer once the change is committed.
    pub fn change_members(&self, request: &MembershipRequest) -> anyhow::Result<ReplicaAnswer> {
        let request = self
            .client
            .post(format!("{}{COORDINATOR_MEMBERS}", self.base))
            .json(request);
        self.read(request, "POST", COORDINATOR_MEMBERS)
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.read(self.client.get(format!("{}{path}", self.base)), "GET", path)
    }

    /// Sends `request`; its 2xx answer as `T`, any other status an error with its text.
    fn read<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
        method: &str,
        path: &str,
    ) -> anyhow::Result<T> {
        let (status, body) = self.send(request, method, path)?;
        if !(200..300).contains(&status) {
            anyhow::bail!("{method} {path} answered {status}: {}", body.trim());
        }
        serde_json::from_str(&body).with_context(|| format!("{method} {path}: an answer this tool does not read"))
    }

    /// A POST whose answer is a [`CellsAnswer`] on success and on failure alike.
    fn operate(&self, path: &str, body: &impl Serialize) -> anyhow::Result<Outcome> {
        let request = self.client.post(format!("{}{path}", self.base)).json(body);
        let (status, text) = self.send(request, "POST", path)?;
        let answer =
            serde_json::from_str(&text).with_context(|| format!("POST {path} answered {status}: {}", text.trim()))?;
        Ok(Outcome { status, answer })
    }

    fn send(&self, request: reqwest::RequestBuilder, method: &str, path: &str) -> anyhow::Result<(u16, String)> {
        let request = request.header(SECRET_HEADER, &self.secret);
        self.runtime
            .block_on(async {
                let response = request.send().await?;
                let status = response.status().as_u16();
                Ok::<_, reqwest::Error>((status, response.text().await?))
            })
            .with_context(|| format!("{method} {path}: the coordinator at {} did not answer", self.base))
    }
}
