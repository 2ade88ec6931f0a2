//! A simulated ISU: its evolving state and the task that posts its conditions to the service.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use reqwest::Url;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::clock::VirtualClock;
use crate::condition::{condition_string, SentCondition};

/// Timing and size of a device's posts.
#[derive(Debug, Clone, Copy)]
pub struct DeviceTiming {
    /// Real time between two posting rounds (official: 40 ms).
    pub post_interval: Duration,
    /// Client timeout of one post (official: 100 ms); posts are never retried.
    pub post_timeout: Duration,
    /// At most this many (the newest) conditions per post (official: 10).
    pub max_batch: usize,
    /// Virtual seconds between two conditions (official: 60).
    pub slot_seconds: i64,
    /// Each timestamp is its slot time plus a uniform jitter in `[-jitter, +jitter]` (official: 5).
    /// Must stay below half a slot so timestamps strictly increase.
    pub jitter_seconds: i64,
}

impl Default for DeviceTiming {
    fn default() -> Self {
        DeviceTiming {
            post_interval: Duration::from_millis(40),
            post_timeout: Duration::from_millis(100),
            max_batch: 10,
            slot_seconds: 60,
            jitter_seconds: 5,
        }
    }
}

/// Messages by state; `""` is a legal message and is sent on purpose.
const CALM_MESSAGES: [&str; 5] = ["今日もいい天気", "ごきげん", "", "のんびり中", "all good"];
const DIRTY_MESSAGES: [&str; 3] = ["汚れが気になる", "掃除してほしい", "dusty"];
const OVERWEIGHT_MESSAGES: [&str; 3] = ["重い…", "ちょっと重すぎる", "too heavy"];
const BROKEN_MESSAGES: [&str; 3] = ["調子が悪い", "どこか壊れたみたい", "broken"];

/// Per-slot probabilities (out of 10 000) of the state changes.
const SITTING_TOGGLE_PER_10K: u32 = 1_100;
const DIRTY_PER_10K: u32 = 4;
const OVERWEIGHT_PER_10K: u32 = 4;
const BROKEN_PER_10K: u32 = 2;
/// Nobody repairs simulated ISUs, so bad flags clear by themselves (about 2 virtual hours).
const SELF_REPAIR_PER_10K: u32 = 80;

/// The simulated physical state of one ISU, advanced one virtual slot at a time.
#[derive(Debug, Clone)]
pub struct DeviceState {
    last_slot: i64,
    sitting: bool,
    dirty: bool,
    overweight: bool,
    broken: bool,
}

impl DeviceState {
    /// A device whose first slot comes one slot after `activated_at` (virtual seconds).
    pub fn new(activated_at: i64) -> DeviceState {
        DeviceState {
            last_slot: activated_at,
            sitting: false,
            dirty: false,
            overweight: false,
            broken: false,
        }
    }

    /// Number of slots that have started since the last one, at virtual time `now` (rounded up).
    pub fn slots_due(&self, now: i64, slot_seconds: i64) -> i64 {
        let elapsed = now - self.last_slot;
        if elapsed <= 0 {
            return 0;
        }
        (elapsed + slot_seconds - 1) / slot_seconds
    }

    /// Moves to the next slot and evolves the state through it.
    pub fn advance(&mut self, rng: &mut impl Rng, slot_seconds: i64) {
        self.last_slot += slot_seconds;
        // A seated cat on an overweight ISU does not get up.
        if !(self.sitting && self.overweight) && chance(rng, SITTING_TOGGLE_PER_10K) {
            self.sitting = !self.sitting;
        }
        for (flag, per_10k) in [
            (&mut self.dirty, DIRTY_PER_10K),
            (&mut self.overweight, if self.sitting { OVERWEIGHT_PER_10K } else { 0 }),
            (&mut self.broken, BROKEN_PER_10K),
        ] {
            if *flag {
                *flag = !chance(rng, SELF_REPAIR_PER_10K);
            } else {
                *flag = chance(rng, per_10k);
            }
        }
    }

    /// A user repaired the ISU: it is clean, light and whole again from the next slot.
    pub fn repair(&mut self) {
        self.dirty = false;
        self.overweight = false;
        self.broken = false;
    }

    /// The condition describing the current slot, with a jittered timestamp.
    pub fn condition(&self, rng: &mut impl Rng, jitter_seconds: i64) -> SentCondition {
        let messages: &[&'static str] = if self.broken {
            &BROKEN_MESSAGES
        } else if self.overweight {
            &OVERWEIGHT_MESSAGES
        } else if self.dirty {
            &DIRTY_MESSAGES
        } else {
            &CALM_MESSAGES
        };
        SentCondition {
            is_sitting: self.sitting,
            condition: condition_string(self.dirty, self.overweight, self.broken),
            message: messages[rng.gen_range(0..messages.len())],
            timestamp: self.last_slot + rng.gen_range(-jitter_seconds..=jitter_seconds),
        }
    }
}

/// Everything one device task needs; built by the simulator on activation.
pub(crate) struct Device {
    pub post_url: Url,
    pub clock: VirtualClock,
    pub timing: DeviceTiming,
    pub rng: StdRng,
    /// The shared sent log of this ISU; conditions are appended before they are posted.
    pub log: Arc<Mutex<Vec<SentCondition>>>,
    pub client: reqwest::Client,
    pub stop: CancellationToken,
    pub deadline: Instant,
    pub running: Arc<std::sync::atomic::AtomicUsize>,
    /// Counts of every device's posts and their answers.
    pub posts: Arc<PostCounts>,
    /// Append each batch to the sent log (validation needs it; the capacity ramp does not,
    /// and its log would grow by megabytes a second).
    pub keep_log: bool,
    /// Post on a lean connection of its own instead of `client` (capacity runs).
    pub lean: Option<crate::lean::LeanConnection>,
    /// Set by [`crate::simulator::JiaHandle::repair`]; the device clears its bad flags and this.
    pub repair: Arc<std::sync::atomic::AtomicBool>,
}

impl Device {
    /// Posts the newest conditions every interval until stopped or the deadline passes.
    pub async fn run(mut self) {
        self.running.fetch_add(1, Ordering::SeqCst);
        let _running = DecrementOnDrop(self.running.clone());
        let mut state = DeviceState::new(self.clock.now());
        let mut ticker = tokio::time::interval(self.timing.post_interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep_until(self.deadline) => return,
                _ = ticker.tick() => {}
            }
            if self.repair.swap(false, Ordering::Relaxed) {
                state.repair();
            }
            let batch = self.next_batch(&mut state);
            if batch.is_empty() {
                continue;
            }
            if self.keep_log {
                self.log.lock().expect("sent log poisoned").extend_from_slice(&batch);
            }
            self.posts.sent.fetch_add(1, Ordering::Relaxed);
            let started = std::time::Instant::now();
            // Devices ignore the answer (as real ones do; it is only counted); only shutdown
            // cuts a post short.
            let answer = match &mut self.lean {
                Some(lean) => {
                    let body = bytes::Bytes::from(serde_json::to_vec(&batch).unwrap_or_default());
                    tokio::select! {
                        _ = self.stop.cancelled() => return,
                        answer = lean.post(body, self.timing.post_timeout) => answer,
                    }
                }
                None => {
                    let post = self.client.post(self.post_url.clone()).json(&batch).send();
                    tokio::select! {
                        _ = self.stop.cancelled() => return,
                        answer = post => answer.ok().map(|response| response.status().as_u16()),
                    }
                }
            };
            self.posts.count(answer, batch.len());
            self.posts.latencies.record(started.elapsed());
        }
    }

    /// Advances through every slot due and keeps the conditions of the newest `max_batch` ones.
    fn next_batch(&mut self, state: &mut DeviceState) -> Vec<SentCondition> {
        let slots = state.slots_due(self.clock.now(), self.timing.slot_seconds);
        let first_kept = slots - self.timing.max_batch as i64;
        let mut batch = Vec::with_capacity(self.timing.max_batch.min(slots.max(0) as usize));
        for slot in 0..slots {
            state.advance(&mut self.rng, self.timing.slot_seconds);
            if slot >= first_kept {
                batch.push(state.condition(&mut self.rng, self.timing.jitter_seconds));
            }
        }
        batch
    }
}

/// What the devices' posts got, for the report (CPU per stored condition, acceptance).
#[derive(Debug, Default)]
pub struct PostCounts {
    pub sent: AtomicU64,
    /// Answered 202: every condition of the batch is stored.
    pub accepted: AtomicU64,
    pub accepted_conditions: AtomicU64,
    /// Answered with another status.
    pub refused: AtomicU64,
    /// No answer: a timeout (the device's post timeout) or a connection error.
    pub failed: AtomicU64,
    /// Latency of every answered or failed post since the last [`PostCounts::take_latencies`].
    latencies: LatencyWindow,
}

/// Latencies in microseconds (1 µs to 60 s, 3 significant digits) since the last
/// [`LatencyWindow::take`]: the window of one measurement.
#[derive(Debug, Default)]
pub struct LatencyWindow(Mutex<Option<hdrhistogram::Histogram<u64>>>);

impl LatencyWindow {
    pub fn record(&self, elapsed: std::time::Duration) {
        let mut latencies = self.0.lock().expect("latencies poisoned");
        let histogram = latencies.get_or_insert_with(|| {
            hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
        });
        histogram.saturating_record(elapsed.as_micros().max(1) as u64);
    }

    /// What was recorded since the last call (`None`: nothing), and a fresh start.
    pub fn take(&self) -> Option<hdrhistogram::Histogram<u64>> {
        self.0.lock().expect("latencies poisoned").take()
    }
}

impl PostCounts {
    fn count(&self, answer: Option<u16>, conditions: usize) {
        match answer {
            Some(202) => {
                self.accepted.fetch_add(1, Ordering::Relaxed);
                self.accepted_conditions.fetch_add(conditions as u64, Ordering::Relaxed);
            }
            Some(_) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The post latencies (µs) recorded since the last call, and a fresh start.
    pub fn take_latencies(&self) -> Option<hdrhistogram::Histogram<u64>> {
        self.latencies.take()
    }

    /// `sent`, `accepted`, `accepted_conditions`, `refused`, `failed`, in that order.
    pub fn snapshot(&self) -> [u64; 5] {
        [
            &self.sent,
            &self.accepted,
            &self.accepted_conditions,
            &self.refused,
            &self.failed,
        ]
        .map(|counter| counter.load(Ordering::Relaxed))
    }
}

fn chance(rng: &mut impl Rng, per_10k: u32) -> bool {
    rng.gen_range(0..10_000) < per_10k
}

struct DecrementOnDrop(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for DecrementOnDrop {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::condition::is_valid_condition_string;
    use rand::SeedableRng;

    #[test]
    fn slots_round_up_and_timestamps_strictly_increase() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut state = DeviceState::new(1000);
        assert_eq!(state.slots_due(1000, 60), 0);
        assert_eq!(state.slots_due(1001, 60), 1);
        assert_eq!(state.slots_due(1121, 60), 3);
        let mut previous = i64::MIN;
        for _ in 0..10_000 {
            state.advance(&mut rng, 60);
            let condition = state.condition(&mut rng, 5);
            assert!(condition.timestamp > previous);
            assert!((condition.timestamp - state.last_slot).abs() <= 5);
            assert!(is_valid_condition_string(condition.condition));
            previous = condition.timestamp;
        }
    }

    #[test]
    fn most_conditions_are_calm_but_bad_ones_happen() {
        let mut rng = StdRng::seed_from_u64(11);
        let mut state = DeviceState::new(0);
        let mut bad = 0;
        for _ in 0..100_000 {
            state.advance(&mut rng, 60);
            bad += usize::from(state.dirty || state.overweight || state.broken);
        }
        assert!(bad > 0 && bad < 20_000, "{bad} bad slots");
    }
}
