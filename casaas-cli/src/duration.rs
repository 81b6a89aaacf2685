//! Durations on the command line: `500ms`, `15s`, `1.5s`, `2m`, `1h`.

use std::time::Duration;

/// `--wait`'s value: forever, or at most a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Wait until acquired.
    Forever,
    /// Give up after this long.
    AtMost(Duration),
}

/// Parses a positive duration in the one grammar of durations
/// ([`casaas_core::provider::parse_duration`]: `500ms`, `15s`, `1.5s`, `2m`,
/// `1h`, or a bare number of seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = casaas_core::provider::parse_duration(text)?;
    if d.is_zero() {
        return Err(format!(
            "{:?} is not a positive duration (e.g. 500ms, 15s, 2m)",
            text.trim()
        ));
    }
    Ok(d)
}

/// Parses `--wait`'s value: `forever`, or a duration where zero (`0`,
/// `0s`) means one attempt.
pub fn parse_wait(text: &str) -> Result<Wait, String> {
    match text {
        "forever" | "inf" => Ok(Wait::Forever),
        other if is_zero(other) => Ok(Wait::AtMost(Duration::ZERO)),
        other => parse_duration(other).map(Wait::AtMost),
    }
}

/// Parses `-w`'s value as flock(1) does: seconds, fractions allowed, and
/// 0 for one attempt (a unit is accepted too).
pub fn parse_wait_seconds(text: &str) -> Result<Duration, String> {
    if is_zero(text) {
        return Ok(Duration::ZERO);
    }
    parse_duration(text)
}

/// `0`, `0s`, `0.0`, `0ms`…
fn is_zero(text: &str) -> bool {
    let number = text
        .trim()
        .trim_end_matches(|c: char| c.is_ascii_alphabetic());
    number.parse::<f64>().is_ok_and(|n| n == 0.0)
}

/// A duration for people: `1.5s`, `250ms`, `2m30s`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let tenths = ms / 100;
        if tenths.is_multiple_of(10) {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        }
    } else {
        let s = ms / 1000;
        if s.is_multiple_of(60) {
            format!("{}m", s / 60)
        } else {
            format!("{}m{}s", s / 60, s % 60)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_errors() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(
            parse_duration("5 days")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("3s"), Ok(Wait::AtMost(Duration::from_secs(3))));
        assert_eq!(parse_wait("0s"), Ok(Wait::AtMost(Duration::ZERO)));
        assert_eq!(parse_wait_seconds("0"), Ok(Duration::ZERO));
        assert_eq!(parse_wait_seconds("2.5"), Ok(Duration::from_millis(2500)));
        assert!(parse_wait_seconds("-1").is_err());
    }

    #[test]
    fn human_readable() {
        assert_eq!(human(Duration::from_millis(250)), "250ms");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
        assert_eq!(human(Duration::from_secs(15)), "15s");
        assert_eq!(human(Duration::from_secs(150)), "2m30s");
        assert_eq!(human(Duration::from_secs(120)), "2m");
    }
}
