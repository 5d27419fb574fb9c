//! Times and durations as the inbox uses them: the time now as the backends store it, where a
//! window that reaches back one starts, and how one reads in a message.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, TimeDelta, Utc};

/// The time now, to the microsecond as every backend stores it: a value the inbox returns is
/// then equal to the same value read back (a gap's `detected_at`, say).
pub(crate) fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// `now - duration`, never before 1970: no inbox row is older, and every backend's time type
/// holds it.
pub(crate) fn before(now: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(duration)
        .ok()
        .and_then(|duration| now.checked_sub_signed(duration))
        .map_or(DateTime::UNIX_EPOCH, |start| {
            start.max(DateTime::UNIX_EPOCH)
        })
}

/// `now + duration`, saturating at the last instant every backend's time type holds (the end
/// of year 9999), so an absurd lease is long rather than an error.
pub(crate) fn after(now: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    let last = DateTime::parse_from_rfc3339("9999-12-31T23:59:59Z")
        .map_or(DateTime::<Utc>::MAX_UTC, |last| last.with_timezone(&Utc));
    TimeDelta::from_std(duration)
        .ok()
        .and_then(|duration| now.checked_add_signed(duration))
        .map_or(last, |end| end.min(last))
}

/// A duration as people write it in an error message: whole days, hours, minutes or seconds
/// where it is one, else as Rust prints it.
pub(crate) fn human(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if duration.subsec_nanos() != 0 || seconds == 0 {
        return format!("{duration:?}");
    }
    let (amount, unit) = match seconds {
        s if s % 86_400 == 0 => (s / 86_400, "day"),
        s if s % 3_600 == 0 => (s / 3_600, "hour"),
        s if s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{amount} {unit}{}", if amount == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_starts_its_length_before_now_and_never_before_1970() {
        let now = Utc::now();
        assert_eq!(
            before(now, Duration::from_secs(60)),
            now - TimeDelta::seconds(60)
        );
        assert_eq!(before(now, Duration::MAX), DateTime::UNIX_EPOCH);
        assert_eq!(
            before(now, Duration::from_secs(100 * 365 * 86_400)),
            DateTime::UNIX_EPOCH
        );
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(Duration::from_secs(7 * 86_400)), "7 days");
        assert_eq!(human(Duration::from_secs(3_600)), "1 hour");
        assert_eq!(human(Duration::from_secs(90)), "90 seconds");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
    }
}
