//! What isuctl's integration tests share: a local cluster started by the cluster command on
//! loopback addresses of its own (127.X.Y.2-4, so it meets no other cluster of this machine),
//! with the debug binaries `cargo test` built beside the tests (`cargo build --workspace
//! --bins` when a test runs alone) and nginx on the path; isuctl run as a person runs it.

#![allow(dead_code)] // each test binary uses its own part

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

/// target/<profile>/NAME, beside this test's directory (`target/<profile>/deps`).
pub fn built_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target/<profile>/deps")
        .join(name);
    assert!(
        path.is_file(),
        "{name} binary not found at {}: run `cargo build --workspace --bins` first",
        path.display()
    );
    path
}

/// Loopback addresses no other cluster on this machine uses: 127.X.Y.{2,3,4} with ports
/// 3000, 8080 and the bench's JIA (5050) free on each.
pub fn free_loopback_subnet() -> [Ipv4Addr; 3] {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64);
    let seed = u64::from(std::process::id()) ^ now ^ Instant::now().elapsed().as_nanos() as u64;
    for attempt in 0..50u64 {
        let mixed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(attempt.wrapping_mul(1442695040888963407));
        let (x, y) = (100 + (mixed >> 33) % 100, 1 + (mixed >> 17) % 250);
        let hosts = [2, 3, 4].map(|last| Ipv4Addr::new(127, x as u8, y as u8, last));
        let free = hosts.iter().all(|host| {
            [3000, 8080, 5050]
                .iter()
                .all(|port| TcpListener::bind((*host, *port)).is_ok())
        });
        if free {
            return hosts;
        }
    }
    panic!("no free loopback subnet found");
}

/// A scratch directory for one test, removed when the test passes.
pub fn scratch(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("isuctl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path).unwrap();
    path
}

/// A local cluster (coordinator, workers a and b, nginx) in `<scratch>/cluster`; stopped when
/// dropped.
pub struct LocalCluster {
    pub run_dir: PathBuf,
    env: Vec<(String, String)>,
}

impl LocalCluster {
    /// `cluster up` with `options` (e.g. `--durable`) on `hosts`; a front end of one page.
    pub fn up(scratch: &Path, hosts: &[Ipv4Addr; 3], options: &[&str]) -> LocalCluster {
        let static_dir = scratch.join("static");
        std::fs::create_dir_all(&static_dir).unwrap();
        std::fs::write(
            static_dir.join("index.html"),
            "<!doctype html><title>ISUCONDITION</title>\n",
        )
        .unwrap();
        let path = |path: PathBuf| path.display().to_string();
        let env = [
            ("ISU_RUN_DIR", path(scratch.join("cluster"))),
            ("ISU_COORDINATOR_HOST", hosts[0].to_string()),
            ("ISU_WORKER_A_HOST", hosts[1].to_string()),
            ("ISU_WORKER_B_HOST", hosts[2].to_string()),
            ("ISU_STATIC_DIR", path(static_dir)),
            ("ISU_COORDINATOR_BIN", path(built_binary("coordinator"))),
            ("ISU_WORKER_BIN", path(built_binary("worker"))),
            ("ISU_CLUSTER_SECRET", "isuctl-test-secret-0123456789".to_owned()),
        ]
        .map(|(key, value)| (key.to_owned(), value))
        .to_vec();
        let cluster = LocalCluster {
            run_dir: scratch.join("cluster"),
            env,
        };
        let mut args = vec!["up", "--no-build"];
        args.extend_from_slice(options);
        let up = cluster.cluster(&args);
        assert!(up.status.success(), "cluster up failed:\n{}", text(&up));
        cluster
    }

    /// The cluster command on this cluster.
    pub fn cluster(&self, args: &[&str]) -> Output {
        let mut all = vec!["cluster"];
        all.extend_from_slice(args);
        self.isuctl(&all)
    }

    /// isuctl on this cluster (found through ISU_RUN_DIR, as a person's shell would).
    pub fn isuctl(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_isuctl"))
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("isuctl runs")
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = self.cluster(&["down"]);
    }
}

/// A command's stdout then stderr.
pub fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
