//! The virtual clock of devices and of the bench: timestamps and query times run 30 000× faster than real time.

use std::time::{Duration, Instant};

/// 2021-08-08 00:00:00 JST, the virtual origin of the official benchmarker.
pub const DEFAULT_VIRTUAL_START: i64 = 1_628_348_400;
/// Virtual seconds per real second.
pub const DEFAULT_SPEED: i64 = 30_000;
/// JST is UTC+9 with no daylight saving, so a JST day is a fixed shift of a UTC day.
const JST_OFFSET_SECONDS: i64 = 9 * 3600;
const DAY_SECONDS: i64 = 86_400;

/// Maps real elapsed time onto virtual Unix seconds. Cheap to copy: every device task and
/// every user agent holds its own copy, all sharing one real origin.
#[derive(Debug, Clone, Copy)]
pub struct VirtualClock {
    real_origin: Instant,
    virtual_origin: i64,
    speed: i64,
}

impl VirtualClock {
    /// A clock whose virtual time is `virtual_origin` now and advances `speed`× faster than real time.
    pub fn starting_now(virtual_origin: i64, speed: i64) -> VirtualClock {
        VirtualClock {
            real_origin: Instant::now(),
            virtual_origin,
            speed,
        }
    }

    /// Virtual Unix seconds at this instant.
    pub fn now(&self) -> i64 {
        self.at(Instant::now())
    }

    /// Virtual Unix seconds at a real instant (instants before the origin map to the origin).
    pub fn at(&self, instant: Instant) -> i64 {
        let elapsed = instant.saturating_duration_since(self.real_origin);
        let virtual_elapsed = elapsed.as_millis() as i64 * self.speed / 1000;
        self.virtual_origin + virtual_elapsed
    }

    /// Real time that `virtual_seconds` of virtual time take.
    pub fn real_duration_of(&self, virtual_seconds: i64) -> Duration {
        Duration::from_millis((virtual_seconds.max(0) * 1000 / self.speed.max(1)) as u64)
    }

    pub fn virtual_origin(&self) -> i64 {
        self.virtual_origin
    }

    pub fn speed(&self) -> i64 {
        self.speed
    }
}

impl Default for VirtualClock {
    fn default() -> Self {
        VirtualClock::starting_now(DEFAULT_VIRTUAL_START, DEFAULT_SPEED)
    }
}

/// Start (00:00 JST) of the JST day containing `timestamp`.
pub fn jst_day_start(timestamp: i64) -> i64 {
    (timestamp + JST_OFFSET_SECONDS).div_euclid(DAY_SECONDS) * DAY_SECONDS - JST_OFFSET_SECONDS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_virtual_origin_is_a_jst_midnight() {
        assert_eq!(jst_day_start(DEFAULT_VIRTUAL_START), DEFAULT_VIRTUAL_START);
        assert_eq!(jst_day_start(DEFAULT_VIRTUAL_START + 86_399), DEFAULT_VIRTUAL_START);
        assert_eq!(jst_day_start(DEFAULT_VIRTUAL_START - 1), DEFAULT_VIRTUAL_START - 86_400);
    }

    #[test]
    fn virtual_time_runs_at_the_configured_speed() {
        let clock = VirtualClock::starting_now(1000, 30_000);
        let later = clock.real_origin + Duration::from_millis(40);
        assert_eq!(clock.at(later), 1000 + 1200);
        assert_eq!(clock.real_duration_of(60), Duration::from_millis(2));
    }
}
