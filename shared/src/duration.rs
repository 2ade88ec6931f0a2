//! Durations as people type them on command lines (`--duration 60s`, `--interval 1500ms`): the
//! one parser the bench's flags and isuctl share.
//!
//! `humantime` does not fit: it takes neither a bare number of seconds nor a fraction
//! (`0.5s`), which these flags always have.

use std::time::Duration;

/// A text that is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {0:?}: expected a number of seconds, or one with a unit (ms, s or m) such as 60s, 1500ms, 2m or 0.5s")]
pub struct InvalidDuration(String);

/// Parses `20s`, `1500ms`, `2m`, `0.5s` or a bare number of seconds (`15`), spaces around
/// it or before its unit ignored; to the millisecond (finer parts are dropped).
pub fn parse(text: &str) -> Result<Duration, InvalidDuration> {
    let text = text.trim();
    let (number, unit_millis) = if let Some(number) = text.strip_suffix("ms") {
        (number, 1.0)
    } else if let Some(number) = text.strip_suffix('s') {
        (number, 1000.0)
    } else if let Some(number) = text.strip_suffix('m') {
        (number, 60_000.0)
    } else {
        (text, 1000.0)
    };
    let invalid = || InvalidDuration(text.to_owned());
    let value: f64 = number.trim().parse().map_err(|_| invalid())?;
    if !value.is_finite() || value < 0.0 {
        return Err(invalid());
    }
    Ok(Duration::from_millis((value * unit_millis) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("15"), Ok(Duration::from_secs(15)));
        assert_eq!(parse("0.5s"), Ok(Duration::from_millis(500)));
        assert!(parse("soon").is_err());
        assert!(parse("-1s").is_err());
    }

    #[test]
    fn spaces_are_ignored_and_mistakes_are_named_with_the_accepted_forms() {
        assert_eq!(parse(" 90 s "), Ok(Duration::from_secs(90)));
        assert_eq!(parse("0.1m"), Ok(Duration::from_secs(6)));
        for bad in ["", "s", "1h", "inf", "NaN", "1,5s"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let message = parse(" soon ").unwrap_err().to_string();
        assert!(message.contains("\"soon\""), "{message}");
        assert!(message.contains("60s, 1500ms, 2m or 0.5s"), "{message}");
    }
}
