//! Exponential back-off with sparse logging, for the background senders that retry until the
//! other node answers (the worker's latest pusher, the coordinator's user syncer): the pause
//! doubles from `first` up to `max`, and a failure streak is worth logging on its first
//! failure and every tenth after it.

use std::time::Duration;

/// One sender's failure streak.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
    failures: u64,
}

/// What a failure means for the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// Pause before the next attempt.
    pub pause: Duration,
    /// Failures in a row, this one included.
    pub failures: u64,
    /// Log this one (the first of a streak, then every tenth).
    pub log: bool,
}

impl Backoff {
    pub fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
            failures: 0,
        }
    }

    /// Records a failure.
    pub fn failed(&mut self) -> Failure {
        self.failures += 1;
        let pause = self.next;
        self.next = (self.next * 2).min(self.max);
        Failure {
            pause,
            failures: self.failures,
            log: self.failures == 1 || self.failures.is_multiple_of(10),
        }
    }

    /// Records a success; the length of the failure streak it ended (0: there was none).
    pub fn succeeded(&mut self) -> u64 {
        self.next = self.first;
        std::mem::take(&mut self.failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_and_a_success_starts_over() {
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(100));
        let pauses: Vec<u64> = (0..5).map(|_| backoff.failed().pause.as_millis() as u64).collect();
        assert_eq!(pauses, [20, 40, 80, 100, 100]);
        assert_eq!(backoff.succeeded(), 5);
        assert_eq!(backoff.succeeded(), 0);
        assert_eq!(backoff.failed().pause, Duration::from_millis(20));
    }

    #[test]
    fn a_streak_is_logged_on_its_first_failure_and_every_tenth() {
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(1));
        let logged: Vec<u64> = (0..25)
            .map(|_| backoff.failed())
            .filter(|f| f.log)
            .map(|f| f.failures)
            .collect();
        assert_eq!(logged, [1, 10, 20]);
    }
}
