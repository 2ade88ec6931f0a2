//! The hosts' processes as this machine sees them in `/proc`: whether a recorded PID is
//! still ours, which node a process is, signals, and pinning a process tree to a CPU.

use super::plan;
use super::{Started, State};

pub(super) fn still_ours(started: &Started) -> bool {
    std::fs::read_link(format!("/proc/{}/exe", started.pid)).is_ok_and(|exe| {
        // A binary rebuilt while it runs shows as "<path> (deleted)".
        exe.to_string_lossy().starts_with(&*started.exe.to_string_lossy())
    })
}

pub(super) fn signal(pid: i32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
}

/// NAME=PID of every node process (the children of each host's run-host), for the bench's
/// CPU figures: `coordinator`, `worker-<cell>`, `nginx`.
pub(super) fn node_pids(state: &State) -> Vec<(String, u32)> {
    let hosts = plan::hosts(usize::from(state.workers), state.coordinators);
    let mut nodes = Vec::new();
    for started in state.processes.iter().filter(|started| started.name != "netlab") {
        let Some(host) = hosts.iter().find(|host| host.name == started.name) else {
            continue;
        };
        let cell = match &host.role {
            plan::Role::Worker { cell } => Some(cell.as_str()),
            _ => None,
        };
        for pid in deploy::supervise::children_of(started.pid) {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let args = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if let Some(name) = node_name(&args, cell, &host.coordinator_node()) {
                nodes.push((name, pid));
            }
        }
    }
    nodes
}

/// Which node a process is, by its command line (`coordinator`: the name of the host's
/// coordinator, see [`plan::HostPlan::coordinator_node`]).
fn node_name(args: &str, cell: Option<&str>, coordinator: &str) -> Option<String> {
    if args.contains("/coordinator ") {
        Some(coordinator.to_owned())
    } else if args.contains("/worker ") {
        Some(format!("worker-{}", cell.unwrap_or("?")))
    } else if (args.contains("nginx") && args.contains("master")) || args.contains("nginx -p") {
        Some("nginx".to_owned())
    } else {
        None
    }
}

/// Every thread of `pid` and of its descendants onto CPU `cpu`.
pub(super) fn pin_tree(pid: u32, cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_err() {
        return;
    }
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            if let Some(tid) = task.file_name().to_str().and_then(|tid| tid.parse::<i32>().ok()) {
                let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(tid), &set);
            }
        }
    }
    for child in deploy::supervise::children_of(pid) {
        pin_tree(child, cpu);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_told_apart_by_their_command_lines() {
        assert_eq!(
            node_name(
                "/r/target/release/coordinator --data-dir /var/lib/x ",
                None,
                "coordinator"
            )
            .as_deref(),
            Some("coordinator")
        );
        assert_eq!(
            node_name(
                "/r/target/release/coordinator --data-dir /x ",
                Some("a"),
                "coordinator-2"
            )
            .as_deref(),
            Some("coordinator-2")
        );
        assert_eq!(
            node_name("/r/target/release/worker --data-dir /x ", Some("b"), "coordinator").as_deref(),
            Some("worker-b")
        );
        assert_eq!(
            node_name(
                "nginx: master process /usr/sbin/nginx -p /var/lib/isucondition/nginx/ ",
                None,
                "coordinator"
            )
            .as_deref(),
            Some("nginx")
        );
        assert_eq!(node_name("/bin/sh -c for i in ", None, "coordinator"), None);
    }
}
