//! Network faults on loopback with `tc`, confined to the nemesis's own addresses: an `htb`
//! root qdisc on `lo` with no default class, so that every packet no filter of ours
//! classifies is sent directly as before; u32 filters matching a node's listening address
//! (and port) send its packets to a class whose queue holds none (a partition, one-way or
//! both ways), only those whose IP ID ends in some values (a loss), or to a class of a few
//! Mbit/s (a slow link). The kernel of the development machine has no `netem`, `prio` nor
//! `gact` (`tc` actions): a fixed delay and a random drop are not possible, hence the slow
//! link and the IP ID.
//!
//! A node's own outgoing connections leave from 127.0.0.1 (loopback's source address; no
//! node binds its client sockets), which is not matched: a fault on a node cuts, slows or
//! thins what is sent to its listening sockets and what they answer, not the calls it makes.
//!
//! Only one root qdisc can exist on `lo`: the nemesis makes its own (handle `4e53:`), refuses
//! to run over one it did not make, and removes it when the run ends (its [`Lo`] dropped), on
//! SIGINT or SIGTERM ([`remove_ours`]), and at the next run's start when the run that made
//! it is gone (its PID in [`owner_file`]).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context};
use serde::Serialize;

/// The device: every loopback address's traffic passes its egress once.
const DEV: &str = "lo";
/// The root qdisc's handle (`N`, `S` in hex), which marks it as the nemesis's.
const ROOT: &str = "4e53:";
/// The class whose queue holds no packet: whatever a filter sends there is dropped.
const DROP: &str = "4e53:1";
/// The preference of the first fault's filters; each fault has one of its own.
const FIRST_PREF: u32 = 100;
/// Slow links' classes are `4e53:` this plus the fault's number.
const FIRST_CLASS: u32 = 0x100;

/// Which way a partition cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Way {
    /// Nothing reaches the node's listening sockets, nor leaves them.
    Both,
    /// Nothing sent to it reaches it (no connection opens; a request on an open one never
    /// arrives).
    Inbound,
    /// What it sends is lost: requests on open connections arrive, and may take effect, but
    /// their answers never come.
    Outbound,
}

/// A listening address of a node: a port, or every port of the address (a worker's node and
/// device servers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: Ipv4Addr,
    pub port: Option<u16>,
}

/// What a network fault does to a node's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Partition(Way),
    /// A link of this many kbit/s each way.
    Slow {
        kbit: u32,
    },
    /// `sixteenths`/16 of the packets dropped: those whose IP ID's last hex digit is 1 to
    /// `sixteenths` (never 0: a SYN-ACK or a RST carries ID 0, so new connections still open
    /// and a retransmission, with the next ID, passes).
    Loss {
        sixteenths: u8,
    },
}

/// The tc command lines that put `effect` on `endpoints`, as fault number `number` (its
/// filters' preference and, for a slow link, its class are its own).
pub fn add_commands(number: u32, effect: Effect, endpoints: &[Endpoint]) -> Vec<Vec<String>> {
    let pref = FIRST_PREF + number;
    let mut commands = Vec::new();
    let (ways, flowid, ids): (&[Side], String, Vec<u16>) = match effect {
        Effect::Partition(Way::Both) => (&[Side::To, Side::From], DROP.to_owned(), vec![]),
        Effect::Partition(Way::Inbound) => (&[Side::To], DROP.to_owned(), vec![]),
        Effect::Partition(Way::Outbound) => (&[Side::From], DROP.to_owned(), vec![]),
        Effect::Loss { sixteenths } => (
            &[Side::To, Side::From],
            DROP.to_owned(),
            (1..=u16::from(sixteenths.clamp(1, 15))).collect(),
        ),
        Effect::Slow { kbit } => {
            let class = slow_class(number);
            commands.push(words(&format!(
                "class add dev {DEV} parent {ROOT} classid {class} htb rate {kbit}kbit burst 4k quantum 1514"
            )));
            (&[Side::To, Side::From], class, vec![])
        }
    };
    for endpoint in endpoints {
        for side in ways {
            let matches = endpoint_match(*side, endpoint);
            if ids.is_empty() {
                commands.push(filter(pref, &matches, &flowid));
            }
            for id in &ids {
                commands.push(filter(
                    pref,
                    &format!("{matches} match u16 {id:#06x} 0x000f at 4"),
                    &flowid,
                ));
            }
        }
    }
    commands
}

/// The tc command lines that take fault number `number`'s `effect` off again.
pub fn remove_commands(number: u32, effect: Effect) -> Vec<Vec<String>> {
    let mut commands = vec![words(&format!(
        "filter del dev {DEV} parent {ROOT} protocol ip prio {}",
        FIRST_PREF + number
    ))];
    if let Effect::Slow { .. } = effect {
        commands.push(words(&format!("class del dev {DEV} classid {}", slow_class(number))));
    }
    commands
}

/// The root qdisc and the class that drops.
fn root_commands() -> Vec<Vec<String>> {
    vec![
        // No default class: what no filter classifies is sent directly, untouched.
        words(&format!("qdisc add dev {DEV} root handle {ROOT} htb")),
        words(&format!(
            "class add dev {DEV} parent {ROOT} classid {DROP} htb rate 1gbit quantum 60000"
        )),
        words(&format!("qdisc add dev {DEV} parent {DROP} handle 4e54: pfifo limit 0")),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Side {
    /// Packets sent to the endpoint.
    To,
    /// Packets the endpoint sends.
    From,
}

fn endpoint_match(side: Side, endpoint: &Endpoint) -> String {
    let (address, port) = match side {
        Side::To => ("dst", "dport"),
        Side::From => ("src", "sport"),
    };
    let mut matches = format!("match ip {address} {}/32", endpoint.ip);
    if let Some(number) = endpoint.port {
        matches.push_str(&format!(" match ip {port} {number} 0xffff"));
    }
    matches
}

fn filter(pref: u32, matches: &str, flowid: &str) -> Vec<String> {
    words(&format!(
        "filter add dev {DEV} parent {ROOT} protocol ip prio {pref} u32 {matches} flowid {flowid}"
    ))
}

fn slow_class(number: u32) -> String {
    format!("4e53:{:x}", FIRST_CLASS + number)
}

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_owned).collect()
}

fn tc(args: &[String]) -> anyhow::Result<String> {
    let output = deploy::external::output_checked(Command::new("tc").args(args))?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Where the run that made the root qdisc writes its PID.
pub fn owner_file() -> PathBuf {
    std::env::temp_dir().join("isu-nemesis-lo-qdisc.pid")
}

/// `lo`'s root qdisc: none (`noqueue`), the nemesis's, or another's (its line).
#[derive(Debug, PartialEq, Eq)]
enum Root {
    Free,
    Ours,
    Other(String),
}

fn root_of(show: &str) -> Root {
    let Some(line) = show.lines().find(|line| line.contains(" root ")) else {
        return Root::Free;
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["qdisc", "noqueue", ..] => Root::Free,
        ["qdisc", "htb", handle, ..] if *handle == ROOT => Root::Ours,
        _ => Root::Other(line.trim().to_owned()),
    }
}

fn root() -> anyhow::Result<Root> {
    Ok(root_of(&tc(&words(&format!("qdisc show dev {DEV} root")))?))
}

/// Removes the root qdisc if this process made it (its PID in [`owner_file`]): for a
/// signal handler, and the [`Lo`]'s drop.
pub fn remove_ours() {
    let owner = std::fs::read_to_string(owner_file()).ok();
    if owner.as_deref().map(str::trim) != Some(&std::process::id().to_string()) {
        return;
    }
    if root().is_ok_and(|root| root == Root::Ours) {
        let _ = tc(&words(&format!("qdisc del dev {DEV} root handle {ROOT}")));
    }
    let _ = std::fs::remove_file(owner_file());
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The nemesis's qdisc on `lo` while a run lasts, removed when dropped.
pub struct Lo {
    allowed: Vec<Ipv4Addr>,
    next: AtomicU32,
}

impl Lo {
    /// Makes the root qdisc, for faults on `allowed` addresses only (the cluster's own; never
    /// 127.0.0.1, which every other local process uses). A root qdisc left by a run that
    /// is gone is removed first; one another live run holds, or one the nemesis did not
    /// make, is refused.
    pub fn install(allowed: Vec<Ipv4Addr>) -> anyhow::Result<Lo> {
        if let Some(address) = allowed
            .iter()
            .find(|address| !address.is_loopback() || **address == Ipv4Addr::LOCALHOST)
        {
            bail!("network faults need the cluster on loopback addresses of its own, not {address}");
        }
        match root().context("tc (iproute2) is needed for network faults; --no-network runs without them")? {
            Root::Free => {}
            Root::Ours => {
                let owner: Option<u32> = std::fs::read_to_string(owner_file())
                    .ok()
                    .and_then(|text| text.trim().parse().ok());
                if let Some(pid) = owner.filter(|pid| *pid != std::process::id() && alive(*pid)) {
                    bail!("another nemesis run (pid {pid}) holds lo's root qdisc {ROOT}; one at a time, or --no-network");
                }
                eprintln!("nemesis: removing lo's qdisc {ROOT} a run that is gone left");
                tc(&words(&format!("qdisc del dev {DEV} root handle {ROOT}")))?;
            }
            Root::Other(line) => bail!(
                "lo has a root qdisc the nemesis did not make ({line}); network faults need it: --no-network runs without them"
            ),
        }
        std::fs::write(owner_file(), std::process::id().to_string())?;
        let lo = Lo {
            allowed,
            next: AtomicU32::new(0),
        };
        for command in root_commands() {
            tc(&command)?;
        }
        Ok(lo)
    }

    /// Puts `effect` on `endpoints` (each on an allowed address); what [`Lo::remove`] takes
    /// off again. On an error, what was added is taken off.
    pub fn add(&self, effect: Effect, endpoints: &[Endpoint]) -> anyhow::Result<Added> {
        if let Some(endpoint) = endpoints.iter().find(|endpoint| !self.allowed.contains(&endpoint.ip)) {
            bail!("{} is not one of the cluster's own addresses", endpoint.ip);
        }
        let added = Added {
            number: self.next.fetch_add(1, Ordering::Relaxed),
            effect,
        };
        for command in add_commands(added.number, effect, endpoints) {
            if let Err(error) = tc(&command) {
                self.remove(added);
                return Err(error);
            }
        }
        Ok(added)
    }

    /// Takes every fault's filters off (the classes they used stay, unused).
    pub fn clear(&self) {
        let _ = tc(&words(&format!("filter del dev {DEV} parent {ROOT}")));
    }

    /// Takes a fault's filters (and class) off; whether it all went.
    pub fn remove(&self, added: Added) -> bool {
        remove_commands(added.number, added.effect)
            .iter()
            .all(|command| tc(command).is_ok())
    }
}

impl Drop for Lo {
    fn drop(&mut self) {
        remove_ours();
    }
}

/// A fault put on `lo`.
#[derive(Debug, Clone, Copy)]
pub struct Added {
    number: u32,
    effect: Effect,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(commands: Vec<Vec<String>>) -> Vec<String> {
        commands.into_iter().map(|words| words.join(" ")).collect()
    }

    const REPLICA: Endpoint = Endpoint {
        ip: Ipv4Addr::new(127, 0, 43, 2),
        port: Some(3001),
    };
    const WORKER: Endpoint = Endpoint {
        ip: Ipv4Addr::new(127, 0, 43, 3),
        port: None,
    };

    #[test]
    fn a_partition_drops_what_goes_to_and_from_the_node_by_address_and_port() {
        assert_eq!(
            lines(add_commands(2, Effect::Partition(Way::Both), &[REPLICA])),
            [
                "filter add dev lo parent 4e53: protocol ip prio 102 u32 match ip dst 127.0.43.2/32 match ip dport 3001 0xffff flowid 4e53:1",
                "filter add dev lo parent 4e53: protocol ip prio 102 u32 match ip src 127.0.43.2/32 match ip sport 3001 0xffff flowid 4e53:1",
            ]
        );
        assert_eq!(
            lines(add_commands(0, Effect::Partition(Way::Inbound), &[WORKER])),
            ["filter add dev lo parent 4e53: protocol ip prio 100 u32 match ip dst 127.0.43.3/32 flowid 4e53:1"]
        );
        assert_eq!(
            lines(add_commands(0, Effect::Partition(Way::Outbound), &[WORKER])),
            ["filter add dev lo parent 4e53: protocol ip prio 100 u32 match ip src 127.0.43.3/32 flowid 4e53:1"]
        );
        assert_eq!(
            lines(remove_commands(2, Effect::Partition(Way::Both))),
            ["filter del dev lo parent 4e53: protocol ip prio 102"]
        );
    }

    #[test]
    fn a_loss_drops_ip_ids_ending_in_1_to_n_and_a_slow_link_has_a_class_of_its_own() {
        let loss = lines(add_commands(1, Effect::Loss { sixteenths: 3 }, &[WORKER]));
        assert_eq!(loss.len(), 6, "{loss:?}");
        assert_eq!(
            loss[0],
            "filter add dev lo parent 4e53: protocol ip prio 101 u32 match ip dst 127.0.43.3/32 match u16 0x0001 0x000f at 4 flowid 4e53:1"
        );
        assert!(loss.iter().all(|line| !line.contains("0x0000 0x000f")), "{loss:?}");
        let slow = lines(add_commands(5, Effect::Slow { kbit: 800 }, &[REPLICA]));
        assert_eq!(
            slow[0],
            "class add dev lo parent 4e53: classid 4e53:105 htb rate 800kbit burst 4k quantum 1514"
        );
        assert!(
            slow[1..].iter().all(|line| line.ends_with("flowid 4e53:105")),
            "{slow:?}"
        );
        assert_eq!(
            lines(remove_commands(5, Effect::Slow { kbit: 800 })),
            [
                "filter del dev lo parent 4e53: protocol ip prio 105",
                "class del dev lo classid 4e53:105",
            ]
        );
    }

    #[test]
    fn unclassified_traffic_is_sent_directly_and_only_our_root_is_ours() {
        let root = lines(root_commands());
        assert_eq!(root[0], "qdisc add dev lo root handle 4e53: htb");
        assert!(!root[0].contains("default"));
        assert_eq!(root_of("qdisc noqueue 0: root refcnt 2\n"), Root::Free);
        assert_eq!(root_of(""), Root::Free);
        assert_eq!(
            root_of("qdisc htb 4e53: root refcnt 2 r2q 10 default 0 direct_packets_stat 3\n"),
            Root::Ours
        );
        assert!(matches!(
            root_of("qdisc htb 1: root refcnt 2 r2q 10 default 0x10\n"),
            Root::Other(_)
        ));
    }

    #[test]
    fn a_fault_on_another_address_is_refused() {
        let lo = Lo {
            allowed: vec![Ipv4Addr::new(127, 0, 43, 2)],
            next: AtomicU32::new(0),
        };
        let error = lo.add(Effect::Partition(Way::Both), &[WORKER]).unwrap_err();
        assert!(error.to_string().contains("127.0.43.3"), "{error}");
        // Not ours to remove: the drop leaves lo alone (no owner file of this PID).
        std::mem::forget(lo);
        assert!(Lo::install(vec![Ipv4Addr::LOCALHOST]).is_err());
    }
}
