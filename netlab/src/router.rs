//! The router: one TUN device per port, each inside its own network
//! namespace, and threads that move IPv4 packets between them.
//!
//! Linking namespaces with veth pairs and shaping them with `tc netem` is
//! the usual way to build such a lab, but this machine's kernel ships no
//! netem, no u32/matchall classifiers, no gact and no iptables. Sending all
//! traffic through this userspace process instead lets netlab delay, drop
//! and cut it per pair of hosts.
//!
//! Per port, a reader thread takes packets from the TUN device, finds the
//! destination port by exact IPv4 address, applies the rule for the (source
//! host, destination host) pair and queues the packet, with a release time,
//! to the destination port's writer thread. The writer sends each packet
//! into its namespace when its release time comes. Packets are not
//! modified (TTL included): to the hosts, netlab looks like one wire.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use anyhow::{bail, Context};
use nix::sched::{setns, CloneFlags};
use parking_lot::{RwLock, RwLockWriteGuard};
use rand::Rng;

use crate::rules::{HostId, RuleTable};

/// Packets waiting for one writer; beyond this, new packets are tail-dropped
/// (and counted) rather than blocking the reader, as a router queue would.
const QUEUE_PACKETS: usize = 16 * 1024;

/// One `--port HOST:NETNS:IFNAME:IPV4/PREFIX` argument.
#[derive(Clone, Debug, PartialEq)]
pub struct PortSpec {
    /// Logical host the port belongs to; rules name hosts.
    pub host: String,
    /// Network namespace, as named by `ip netns` (/var/run/netns/NETNS).
    pub netns: String,
    /// Name of the TUN interface created in that namespace.
    pub ifname: String,
    /// Address given to the interface; packets to it are delivered here.
    pub addr: Ipv4Addr,
    /// Prefix length of the interface's subnet.
    pub prefix: u8,
}

impl FromStr for PortSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let usage = "expected HOST:NETNS:IFNAME:IPV4/PREFIX, e.g. web1:ns-web1:eth0:10.0.0.1/24";
        let [host, netns, ifname, cidr] = s.splitn(4, ':').collect::<Vec<_>>()[..] else {
            return Err(usage.to_string());
        };
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !name_ok(host) || host == "all" {
            return Err(format!(
                "bad host name `{host}`: use letters, digits, - _ . (and not `all`)"
            ));
        }
        if !name_ok(netns) || netns.starts_with('.') {
            return Err(format!("bad namespace name `{netns}`"));
        }
        if !name_ok(ifname) || ifname.len() > 15 {
            return Err(format!("bad interface name `{ifname}` (at most 15 characters)"));
        }
        let (addr, prefix) = cidr
            .split_once('/')
            .ok_or_else(|| format!("`{cidr}` lacks /PREFIX; {usage}"))?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| format!("bad IPv4 address `{addr}`"))?;
        let prefix: u8 = match prefix.parse() {
            Ok(p) if (1..=32).contains(&p) => p,
            _ => return Err(format!("bad prefix length `{prefix}` (1 to 32)")),
        };
        Ok(PortSpec {
            host: host.to_string(),
            netns: netns.to_string(),
            ifname: ifname.to_string(),
            addr,
            prefix,
        })
    }
}

impl std::fmt::Display for PortSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}/{}",
            self.host, self.netns, self.ifname, self.addr, self.prefix
        )
    }
}

/// Counters for packets from one host to another.
#[derive(Debug, Default)]
struct PairCounters {
    packets: AtomicU64,
    bytes: AtomicU64,
    cut: AtomicU64,
    lost: AtomicU64,
    overflow: AtomicU64,
}

/// Hosts, ports, rules and counters, shared by all threads.
#[derive(Debug)]
pub struct Router {
    hosts: Vec<String>,
    ports: Vec<PortSpec>,
    port_host: Vec<HostId>,
    by_addr: HashMap<Ipv4Addr, usize>,
    rules: RwLock<RuleTable>,
    /// Indexed by `src * hosts.len() + dst`.
    pairs: Vec<PairCounters>,
    unknown_dst: AtomicU64,
    not_ipv4: AtomicU64,
}

impl Router {
    /// Checks the ports and builds the topology; creates no device yet.
    pub fn new(ports: Vec<PortSpec>) -> anyhow::Result<Self> {
        if ports.is_empty() {
            bail!("at least one --port is needed");
        }
        let mut hosts: Vec<String> = Vec::new();
        let mut port_host = Vec::new();
        let mut by_addr = HashMap::new();
        for (i, p) in ports.iter().enumerate() {
            if let Some(prev) = by_addr.insert(p.addr, i) {
                bail!("address {} is used by two ports ({} and {p})", p.addr, ports[prev]);
            }
            if let Some(other) = ports[..i].iter().find(|o| o.netns == p.netns && o.ifname == p.ifname) {
                bail!(
                    "two ports create {} in namespace {} ({other} and {p})",
                    p.ifname,
                    p.netns
                );
            }
            let id = hosts.iter().position(|h| *h == p.host).unwrap_or_else(|| {
                hosts.push(p.host.clone());
                hosts.len() - 1
            });
            port_host.push(id);
        }
        let pairs = (0..hosts.len() * hosts.len())
            .map(|_| PairCounters::default())
            .collect();
        Ok(Router {
            hosts,
            ports,
            port_host,
            by_addr,
            rules: RwLock::new(RuleTable::default()),
            pairs,
            unknown_dst: AtomicU64::new(0),
            not_ipv4: AtomicU64::new(0),
        })
    }

    /// The id of a host by name.
    pub fn host_id(&self, name: &str) -> Option<HostId> {
        self.hosts.iter().position(|h| h == name)
    }

    /// Host names, indexed by host id.
    pub fn host_names(&self) -> &[String] {
        &self.hosts
    }

    /// The rule table, locked for changes.
    pub fn rules(&self) -> RwLockWriteGuard<'_, RuleTable> {
        self.rules.write()
    }

    fn counters(&self, src: HostId, dst: HostId) -> &PairCounters {
        &self.pairs[src * self.hosts.len() + dst]
    }

    /// The `stats` answer: a whitespace-separated table with a header, one
    /// row per ordered pair of distinct hosts (and per same-host pair that
    /// saw traffic), then totals of packets that matched no pair.
    pub fn stats_table(&self) -> Vec<String> {
        let width = self.hosts.iter().map(String::len).max().unwrap_or(0).max(4);
        let mut lines = vec![format!(
            "{:<width$} {:<width$} {:>12} {:>14} {:>10} {:>10} {:>10}",
            "src", "dst", "packets", "bytes", "cut", "lost", "overflow"
        )];
        for (s, src) in self.hosts.iter().enumerate() {
            for (d, dst) in self.hosts.iter().enumerate() {
                let c = self.counters(s, d);
                let row = [&c.packets, &c.bytes, &c.cut, &c.lost, &c.overflow].map(|a| a.load(Relaxed));
                if s == d && row.iter().all(|&v| v == 0) {
                    continue;
                }
                let [packets, bytes, cut, lost, overflow] = row;
                lines.push(format!(
                    "{src:<width$} {dst:<width$} {packets:>12} {bytes:>14} {cut:>10} {lost:>10} {overflow:>10}"
                ));
            }
        }
        lines.push(format!("unknown-destination {}", self.unknown_dst.load(Relaxed)));
        lines.push(format!("not-ipv4 {}", self.not_ipv4.load(Relaxed)));
        lines
    }

    /// Creates every TUN device and starts the forwarding threads. When this
    /// returns, every port is up with its address.
    pub fn start(self: &Arc<Self>, mtu: u16) -> anyhow::Result<()> {
        let devices = self
            .ports
            .iter()
            .map(|p| create_tun(p, mtu).with_context(|| format!("creating port {p}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut readers = Vec::new();
        let mut queues = Vec::new();
        for (port, device) in self.ports.iter().zip(devices) {
            let (reader, writer) = device.split();
            let (tx, rx) = sync_channel(QUEUE_PACKETS);
            thread::Builder::new()
                .name(format!("tx-{}", port.ifname))
                .spawn(move || writer_loop(rx, writer))?;
            readers.push(reader);
            queues.push(tx);
            tracing::info!(host = %port.host, netns = %port.netns, "port {} up with {}/{}", port.ifname, port.addr, port.prefix);
        }
        for (index, reader) in readers.into_iter().enumerate() {
            let router = Arc::clone(self);
            let queues = queues.clone();
            thread::Builder::new()
                .name(format!("rx-{}", self.ports[index].ifname))
                .spawn(move || router.reader_loop(index, reader, queues))?;
        }
        Ok(())
    }

    /// Forwards packets arriving on port `index` until its device fails.
    fn reader_loop(&self, index: usize, mut reader: tun::Reader, queues: Vec<SyncSender<Queued>>) {
        let src = self.port_host[index];
        let mut rng = rand::thread_rng();
        // Release time of the last packet queued to each port: a packet never
        // leaves before an earlier one of the same flow, even if the delay
        // was just lowered.
        let mut last_release = vec![Instant::now(); self.ports.len()];
        let mut buf = vec![0u8; 65536];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::error!("reading {}: {e}; port stops forwarding", self.ports[index]);
                    return;
                }
            };
            let packet = &buf[..n];
            let Some(dst_addr) = ipv4_destination(packet) else {
                self.not_ipv4.fetch_add(1, Relaxed);
                continue;
            };
            // Each subnet is its own network: a packet only reaches ports on the network it
            // came in from, whatever routes a host adds (a host without an internal address
            // cannot reach the internal network through its public one).
            let Some(&out) = self
                .by_addr
                .get(&dst_addr)
                .filter(|&&out| same_network(&self.ports[index], &self.ports[out]))
            else {
                self.unknown_dst.fetch_add(1, Relaxed);
                continue;
            };
            let dst = self.port_host[out];
            let counters = self.counters(src, dst);
            let rule = self.rules.read().effective(src, dst);
            if rule.cut {
                counters.cut.fetch_add(1, Relaxed);
                continue;
            }
            let imp = rule.impairment;
            if imp.loss > 0.0 && rng.gen::<f64>() < imp.loss {
                counters.lost.fetch_add(1, Relaxed);
                continue;
            }
            let release = (Instant::now() + imp.delay).max(last_release[out]);
            last_release[out] = release;
            match queues[out].try_send(Queued {
                release,
                data: packet.to_vec(),
            }) {
                Ok(()) => {
                    counters.packets.fetch_add(1, Relaxed);
                    counters.bytes.fetch_add(n as u64, Relaxed);
                }
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                    counters.overflow.fetch_add(1, Relaxed);
                }
            }
        }
    }
}

/// The destination of an IPv4 packet, or `None` for anything else.
/// Whether two ports are on the same network (same prefix, same masked address).
fn same_network(a: &PortSpec, b: &PortSpec) -> bool {
    let mask = |prefix: u8| u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
    a.prefix == b.prefix && u32::from(a.addr) & mask(a.prefix) == u32::from(b.addr) & mask(b.prefix)
}

fn ipv4_destination(packet: &[u8]) -> Option<Ipv4Addr> {
    if packet.len() < 20 || packet[0] >> 4 != 4 {
        return None;
    }
    Some(Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]))
}

/// A packet waiting in a writer's queue.
struct Queued {
    release: Instant,
    data: Vec<u8>,
}

/// Writes packets to one port as their release times come. Packets are held
/// in a heap ordered by (release time, arrival), so a long delay on one pair
/// does not hold up packets of another pair headed to the same port.
fn writer_loop(rx: Receiver<Queued>, mut writer: tun::Writer) {
    // (release, arrival number, packet); arrival numbers are unique, so the
    // packet bytes never take part in the ordering.
    let mut heap: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>> = BinaryHeap::new();
    let mut arrivals = 0u64;
    let mut send = |data: &[u8]| {
        if let Err(e) = writer.write(data) {
            tracing::debug!("dropping a packet the kernel refused: {e}");
        }
    };
    loop {
        let now = Instant::now();
        while heap.peek().is_some_and(|Reverse((release, _, _))| *release <= now) {
            if let Some(Reverse((_, _, data))) = heap.pop() {
                send(&data);
            }
        }
        // Wait for the next packet, or until the earliest held one is due.
        let next = match heap.peek() {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(Reverse((release, _, _))) => rx.recv_timeout(release.saturating_duration_since(Instant::now())),
        };
        match next {
            // Fast path: nothing held and no delay.
            Ok(q) if heap.is_empty() && q.release <= Instant::now() => send(&q.data),
            Ok(q) => {
                arrivals += 1;
                heap.push(Reverse((q.release, arrivals, q.data)));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Creates the TUN device of `port` inside its namespace, with its address,
/// MTU and link up, then returns this thread to its own namespace.
fn create_tun(port: &PortSpec, mtu: u16) -> anyhow::Result<tun::Device> {
    let ns_path = format!("/var/run/netns/{}", port.netns);
    let target =
        File::open(&ns_path).with_context(|| format!("opening {ns_path} (was `ip netns add {}` run?)", port.netns))?;
    let home = File::open("/proc/thread-self/ns/net").context("opening this thread's own network namespace")?;
    setns(&target, CloneFlags::CLONE_NEWNET).with_context(|| format!("entering network namespace {}", port.netns))?;
    // Both the TUN device and the socket the tun crate configures it through
    // belong to the namespace this thread is in when they are created.
    let netmask = Ipv4Addr::from(u32::MAX << (32 - u32::from(port.prefix)));
    let mut config = tun::Configuration::default();
    config
        .tun_name(&port.ifname)
        .layer(tun::Layer::L3)
        .address(port.addr)
        .netmask(netmask)
        .mtu(mtu)
        .up();
    let created = tun::create(&config);
    setns(&home, CloneFlags::CLONE_NEWNET).context("returning to the original network namespace")?;
    created.with_context(|| format!("creating TUN device {} in namespace {}", port.ifname, port.netns))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(s: &str) -> PortSpec {
        s.parse().unwrap()
    }

    #[test]
    fn port_spec_parses() {
        let p = port("web1:ns-web1:eth0:10.0.0.1/24");
        assert_eq!(
            p,
            PortSpec {
                host: "web1".into(),
                netns: "ns-web1".into(),
                ifname: "eth0".into(),
                addr: Ipv4Addr::new(10, 0, 0, 1),
                prefix: 24
            }
        );
        assert_eq!(p.to_string(), "web1:ns-web1:eth0:10.0.0.1/24");
    }

    #[test]
    fn port_spec_rejects_garbage() {
        for bad in [
            "web1:ns:eth0:10.0.0.1",
            "web1:ns:eth0:10.0.0.1/33",
            "web1:ns:eth0:10.0.0/24",
            "web1:ns:eth0",
            "all:ns:eth0:10.0.0.1/24",
            "web1:../x:eth0:10.0.0.1/24",
            "web1:ns:averyveryverylongname:10.0.0.1/24",
            ":ns:eth0:10.0.0.1/24",
        ] {
            assert!(bad.parse::<PortSpec>().is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn topology_checks() {
        let r = Router::new(vec![
            port("a:ns-a:pub:10.0.0.1/24"),
            port("a:ns-a:int:10.1.0.1/24"),
            port("b:ns-b:pub:10.0.0.2/24"),
        ])
        .unwrap();
        assert_eq!(r.host_names(), ["a", "b"]);
        assert_eq!(r.host_id("b"), Some(1));
        assert_eq!(r.port_host, [0, 0, 1]);
        assert!(Router::new(vec![]).is_err());
        assert!(Router::new(vec![port("a:x:e0:10.0.0.1/24"), port("b:y:e0:10.0.0.1/24")]).is_err());
        assert!(Router::new(vec![port("a:x:e0:10.0.0.1/24"), port("b:x:e0:10.0.0.2/24")]).is_err());
    }

    #[test]
    fn stats_table_lists_pairs() {
        let r = Router::new(vec![port("a:x:e0:10.0.0.1/24"), port("b:y:e0:10.0.0.2/24")]).unwrap();
        r.counters(0, 1).packets.fetch_add(3, Relaxed);
        r.counters(0, 1).bytes.fetch_add(300, Relaxed);
        let t = r.stats_table();
        assert_eq!(t.len(), 5, "{t:?}");
        let row: Vec<&str> = t[1].split_whitespace().collect();
        assert_eq!(row, ["a", "b", "3", "300", "0", "0", "0"]);
        assert_eq!(t[3], "unknown-destination 0");
    }

    #[test]
    fn a_packet_stays_on_the_network_it_came_from() {
        let public = port("a:ns:pub0:10.77.0.1/24");
        let internal = port("a:ns:int0:10.78.0.1/24");
        assert!(same_network(&public, &port("b:ns2:pub0:10.77.0.100/24")));
        assert!(!same_network(&public, &internal));
        assert!(!same_network(&public, &port("b:ns2:pub0:10.77.0.2/16")));
    }

    #[test]
    fn destination_is_read_from_ipv4_header() {
        let mut pkt = [0u8; 20];
        pkt[0] = 0x45;
        pkt[16..20].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(ipv4_destination(&pkt), Some(Ipv4Addr::new(10, 0, 0, 2)));
        pkt[0] = 0x60;
        assert_eq!(ipv4_destination(&pkt), None);
        assert_eq!(ipv4_destination(&[0x45; 10]), None);
    }
}
