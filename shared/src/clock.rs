//! Wall-clock times as the tools write them, all in UTC: a run's folder name
//! (`YYYYMMDD-HHMMSS`), a log line's time (`HH:MM:SS.nnnnnnnnn`), a watch's header
//! (`HH:MM:SS`), and an instant as milliseconds since the Unix epoch (the bench's failure
//! spans and stalls, a takeover's windows). The one place isuctl and the bench take them from.

use std::time::SystemTime;

use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::OffsetDateTime;

const TIMESTAMP: &[BorrowedFormatItem<'static>] = format_description!("[year][month][day]-[hour][minute][second]");
const CLOCK_TIME: &[BorrowedFormatItem<'static>] = format_description!("[hour]:[minute]:[second].[subsecond digits:9]");
const CLOCK_OF_DAY: &[BorrowedFormatItem<'static>] = format_description!("[hour]:[minute]:[second]");

/// A folder name for one run, `YYYYMMDD-HHMMSS` of now (`run/bench/<it>`, `run/profiles/<it>`).
pub fn timestamp() -> String {
    format(OffsetDateTime::now_utc(), TIMESTAMP)
}

/// `HH:MM:SS.nnnnnnnnn` of now (a line of a run's log).
pub fn clock_time() -> String {
    format(OffsetDateTime::now_utc(), CLOCK_TIME)
}

/// `HH:MM:SS` of now (a watch's header).
pub fn clock_of_day() -> String {
    format(OffsetDateTime::now_utc(), CLOCK_OF_DAY)
}

/// Milliseconds from the Unix epoch to `at` (0 before it).
pub fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

fn format(at: OffsetDateTime, description: &[BorrowedFormatItem<'_>]) -> String {
    at.format(description)
        .expect("a UTC date and time has every part these formats name")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(unix: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(unix).unwrap()
    }

    #[test]
    fn timestamps_are_utc_dates_and_times() {
        assert_eq!(format(at(0), TIMESTAMP), "19700101-000000");
        assert_eq!(format(at(951_782_400), TIMESTAMP), "20000229-000000");
        assert_eq!(format(at(1_796_270_399), TIMESTAMP), "20261203-035959");
    }

    #[test]
    fn times_of_day_have_their_nanoseconds_or_none() {
        let instant = at(1_796_270_399) + Duration::from_nanos(5_000_007);
        assert_eq!(format(instant, CLOCK_TIME), "03:59:59.005000007");
        assert_eq!(format(instant, CLOCK_OF_DAY), "03:59:59");
        assert_eq!(format(at(0), CLOCK_TIME), "00:00:00.000000000");
        // 2021-08-21 03:04:05.000000007 UTC, a leader kill's log line.
        assert_eq!(
            format(at(1_629_515_045) + Duration::from_nanos(7), CLOCK_TIME),
            "03:04:05.000000007"
        );
        assert_eq!(clock_time().len(), "HH:MM:SS.nnnnnnnnn".len());
        assert_eq!(clock_of_day().len(), "HH:MM:SS".len());
        assert_eq!(timestamp().len(), "YYYYMMDD-HHMMSS".len());
    }

    #[test]
    fn instants_are_milliseconds_since_the_epoch() {
        assert_eq!(unix_ms(SystemTime::UNIX_EPOCH), 0);
        assert_eq!(
            unix_ms(SystemTime::UNIX_EPOCH + Duration::from_micros(1_500_999)),
            1_500
        );
        assert_eq!(unix_ms(SystemTime::UNIX_EPOCH - Duration::from_secs(1)), 0);
    }
}
