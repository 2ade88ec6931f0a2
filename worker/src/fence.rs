//! Fencing of deposed coordinator leaders: a leading replica's control calls carry the raft
//! term it leads in ([`TERM_HEADER`]); the worker keeps the newest term it has seen and
//! refuses a control call of an older one with 403. A replica paused or cut off while it
//! led may still believe it leads and go on with a registration or a reset: once the next
//! leader has called this worker, nothing the old one sends changes it.
//!
//! The newest term is not durable: a restarted worker admits the first term it sees. Its
//! health answer says the newest term it has seen (`fence_term`); the current leader's
//! watch, which asks every second, calls it with its term when that is older, and ends any
//! registration that passed meanwhile (its sweep). Calls
//! without a term (a lone coordinator) are always admitted, as are reads (health, the
//! latest conditions' full resync) and a migration's import (a worker's own call).

use std::sync::atomic::{AtomicU64, Ordering};

pub use shared::protocol::TERM_HEADER;

/// Control calls refused because their leader term was older than one seen before.
pub const FENCED_CALLS: &str = "worker_fenced_calls_total";

/// The newest leader term seen (the control routes' middleware is `routes::fenced`).
#[derive(Debug, Default)]
pub struct Fence {
    newest: AtomicU64,
}

impl Fence {
    /// Admits a call of `term` (raising the newest term seen), or returns the newer term
    /// that fences it off.
    pub fn admit(&self, term: u64) -> Result<(), u64> {
        let newest = self.newest.fetch_max(term, Ordering::AcqRel);
        if term < newest {
            Err(newest)
        } else {
            Ok(())
        }
    }

    /// The newest term seen (0: none).
    pub fn newest(&self) -> u64 {
        self.newest.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_older_than_the_newest_seen_is_refused_and_never_lowers_it() {
        let fence = Fence::default();
        assert_eq!(fence.admit(3), Ok(()));
        assert_eq!(fence.admit(3), Ok(()));
        assert_eq!(fence.admit(2), Err(3));
        assert_eq!(fence.newest(), 3);
        assert_eq!(fence.admit(5), Ok(()));
        assert_eq!(fence.admit(4), Err(5));
    }
}
