//! The local cluster's coordinator group as `bench::takeover` reaches it (`isuctl bench
//! --kill-leader-every` / `--pause-leader-every`): each replica asked over loopback HTTP with
//! the cluster's secret, and `isuctl cluster kill|start|pause|resume NAME` done to it. The
//! kills, their timing and what they cost are `bench::takeover`'s.

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use bench::takeover::{Action, Group};
use shared::protocol::{HeldIsu, ReplicaAnswer, COORDINATOR_REPLICA, COORDINATOR_REPLICA_ISUS, SECRET_HEADER};

use crate::http;
use crate::local::{self, Node, RunDir};

/// The replicas of the local cluster in `run_dir`.
pub struct LocalGroup {
    run_dir: RunDir,
    replicas: Vec<Node>,
    secret: String,
}

impl LocalGroup {
    /// Reads the cluster's secret, which every replica's internal routes require.
    pub fn new(run_dir: RunDir, replicas: Vec<Node>) -> anyhow::Result<LocalGroup> {
        let secret = run_dir.secret()?;
        Ok(LocalGroup {
            run_dir,
            replicas,
            secret,
        })
    }

    /// The body of `GET path` on the replica when it answers 200 within `timeout`.
    fn get(&self, replica: usize, path: &str, timeout: Duration) -> Option<String> {
        let url = format!("{}{path}", self.replicas[replica].url.trim_end_matches('/'));
        http::get_with(&url, &[(SECRET_HEADER, self.secret.as_str())], timeout)
            .filter(|answer| answer.status == 200)
            .map(|answer| answer.body)
    }
}

impl Group for LocalGroup {
    fn replicas(&self) -> usize {
        self.replicas.len()
    }

    fn name(&self, replica: usize) -> &str {
        &self.replicas[replica].name
    }

    fn answer(&self, replica: usize) -> Option<ReplicaAnswer> {
        let body = self.get(replica, COORDINATOR_REPLICA, Duration::from_millis(500))?;
        serde_json::from_str(&body).ok()
    }

    fn held_isus(&self, replica: usize) -> Option<HashSet<HeldIsu>> {
        let body = self.get(replica, COORDINATOR_REPLICA_ISUS, Duration::from_secs(5))?;
        serde_json::from_str(&body).ok()
    }

    fn command(&self, action: Action, replica: usize) -> Command {
        let mut command = local::cluster_command();
        command
            .args([action.verb(), self.name(replica)])
            .env("ISU_RUN_DIR", &self.run_dir.path);
        command
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_is_disrupted_through_isuctl_cluster_of_its_run_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), "s3cret\n").unwrap();
        let replicas = ["coordinator", "coordinator-2"].map(|name| Node {
            name: name.to_owned(),
            url: "http://127.0.0.1:1".to_owned(),
        });
        let group = LocalGroup::new(RunDir::new(dir.path()), replicas.to_vec()).unwrap();
        assert_eq!(group.secret, "s3cret");
        let command = group.command(Action::Pause, 1);
        let args: Vec<&std::ffi::OsStr> = command.get_args().collect();
        assert_eq!(args, ["cluster", "pause", "coordinator-2"]);
        let run_dir = command.get_envs().find(|(key, _)| *key == "ISU_RUN_DIR");
        assert_eq!(run_dir, Some(("ISU_RUN_DIR".as_ref(), Some(dir.path().as_os_str()))));
        assert!(group.answer(0).is_none(), "nothing listens there");

        let missing = LocalGroup::new(RunDir::new(dir.path().join("none")), Vec::new());
        assert!(missing.is_err());
    }
}
