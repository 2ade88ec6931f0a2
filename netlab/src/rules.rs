//! The rule table: which pairs of hosts are cut apart, and how much delay and
//! loss the links between them suffer.
//!
//! This replaces what `tc qdisc ... netem` plus a classifier would do on a
//! fuller kernel; the kernel netlab runs on has neither netem nor the u32 /
//! matchall classifiers, so every rule is applied per packet by the router.
//! Rules are symmetric: a rule for `A B` applies to packets from A to B and
//! from B to A alike.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Index of a logical host in the topology.
pub type HostId = usize;

/// Delay and loss applied to every packet of a link.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Impairment {
    /// One-way delay added to each packet.
    pub delay: Duration,
    /// Probability in `0.0..=1.0` that a packet is dropped.
    pub loss: f64,
}

impl Impairment {
    /// True when this impairment changes nothing.
    pub fn is_none(&self) -> bool {
        self.delay.is_zero() && self.loss <= 0.0
    }
}

impl std::fmt::Display for Impairment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.delay.as_secs_f64() * 1e3;
        write!(f, "delay={ms}ms loss={}%", self.loss * 100.0)
    }
}

/// What the router does with packets between two hosts right now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Effective {
    /// Drop every packet.
    pub cut: bool,
    /// Delay and loss for packets that are not cut.
    pub impairment: Impairment,
}

/// An unordered pair of hosts, stored with the smaller id first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pair(HostId, HostId);

impl Pair {
    fn new(a: HostId, b: HostId) -> Self {
        Pair(a.min(b), a.max(b))
    }
}

/// All rules in force. Starts empty: every link is perfect.
#[derive(Debug, Default)]
pub struct RuleTable {
    cuts: BTreeSet<Pair>,
    /// Per-pair impairments; they override `all` for that pair.
    pairs: BTreeMap<Pair, Impairment>,
    /// Impairment for every pair without one of its own.
    all: Impairment,
}

impl RuleTable {
    /// Drops all traffic between `a` and `b`. Returns false if already cut.
    pub fn cut(&mut self, a: HostId, b: HostId) -> bool {
        self.cuts.insert(Pair::new(a, b))
    }

    /// Undoes [`RuleTable::cut`]. Returns false if the pair was not cut.
    pub fn heal(&mut self, a: HostId, b: HostId) -> bool {
        self.cuts.remove(&Pair::new(a, b))
    }

    /// Replaces the impairment for every pair that has no rule of its own.
    pub fn impair_all(&mut self, impairment: Impairment) {
        self.all = impairment;
    }

    /// Replaces the impairment of one pair; `None` removes the pair's own
    /// rule so that the `all` rule applies to it again.
    pub fn impair_pair(&mut self, a: HostId, b: HostId, impairment: Option<Impairment>) {
        match impairment {
            Some(imp) => self.pairs.insert(Pair::new(a, b), imp),
            None => self.pairs.remove(&Pair::new(a, b)),
        };
    }

    /// Removes every rule.
    pub fn clear(&mut self) {
        *self = RuleTable::default();
    }

    /// The treatment of packets going from `src` to `dst`.
    pub fn effective(&self, src: HostId, dst: HostId) -> Effective {
        let pair = Pair::new(src, dst);
        Effective {
            cut: self.cuts.contains(&pair),
            impairment: self.pairs.get(&pair).copied().unwrap_or(self.all),
        }
    }

    /// One human-readable line per rule, using `names` for host ids.
    pub fn describe(&self, names: &[String]) -> Vec<String> {
        let name = |id: HostId| names.get(id).map_or("?", String::as_str);
        let mut lines = Vec::new();
        if !self.all.is_none() {
            lines.push(format!("impair all {}", self.all));
        }
        for (pair, imp) in &self.pairs {
            lines.push(format!("impair {} {} {imp}", name(pair.0), name(pair.1)));
        }
        for pair in &self.cuts {
            lines.push(format!("cut {} {}", name(pair.0), name(pair.1)));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imp(ms: u64, loss: f64) -> Impairment {
        Impairment {
            delay: Duration::from_millis(ms),
            loss,
        }
    }

    #[test]
    fn empty_table_is_transparent() {
        let t = RuleTable::default();
        assert_eq!(t.effective(0, 1), Effective::default());
        assert!(t.describe(&[]).is_empty());
    }

    #[test]
    fn cut_is_symmetric_and_heals() {
        let mut t = RuleTable::default();
        assert!(t.cut(1, 0));
        assert!(!t.cut(0, 1), "second cut of the same pair is a no-op");
        assert!(t.effective(0, 1).cut);
        assert!(t.effective(1, 0).cut);
        assert!(!t.effective(0, 2).cut);
        assert!(t.heal(0, 1));
        assert!(!t.heal(0, 1));
        assert!(!t.effective(1, 0).cut);
    }

    #[test]
    fn pair_impairment_overrides_all() {
        let mut t = RuleTable::default();
        t.impair_all(imp(50, 0.0));
        t.impair_pair(2, 1, Some(imp(0, 0.25)));
        assert_eq!(t.effective(0, 1).impairment, imp(50, 0.0));
        assert_eq!(t.effective(1, 2).impairment, imp(0, 0.25));
        assert_eq!(t.effective(2, 1).impairment, imp(0, 0.25));
        // Removing the pair's own rule falls back to `all`.
        t.impair_pair(1, 2, None);
        assert_eq!(t.effective(1, 2).impairment, imp(50, 0.0));
    }

    #[test]
    fn impairment_replaces_rather_than_adds() {
        let mut t = RuleTable::default();
        t.impair_pair(0, 1, Some(imp(10, 0.5)));
        t.impair_pair(0, 1, Some(imp(20, 0.0)));
        assert_eq!(t.effective(0, 1).impairment, imp(20, 0.0));
    }

    #[test]
    fn cut_and_impairment_coexist_and_clear_removes_all() {
        let mut t = RuleTable::default();
        t.cut(0, 1);
        t.impair_all(imp(5, 0.01));
        let e = t.effective(0, 1);
        assert!(e.cut);
        assert_eq!(e.impairment, imp(5, 0.01));
        let names = ["a".to_string(), "b".to_string()];
        assert_eq!(t.describe(&names), vec!["impair all delay=5ms loss=1%", "cut a b"]);
        t.clear();
        assert_eq!(t.effective(0, 1), Effective::default());
    }
}
