//! PostgreSQL's own part of recording a delivery: the inbox row's insert, as text, that travels
//! with the `BEGIN` in one simple-protocol message. The second transaction, which records a
//! duplicate the unique key refused there, is a statement of its own
//! ([`seen_after_conflict`](super::sql::seen_after_conflict)).

/// What lets a transaction commit without waiting for the WAL flush, which costs more than the
/// round trip that sends it.
pub(crate) const COMMIT_WITHOUT_WAITING: &str = "SET LOCAL synchronous_commit = off";

/// Values as SQL text, for the one statement the inbox sends in a simple-protocol message,
/// where nothing can be bound: the inbox row's insert that travels with the `BEGIN`.
pub(crate) mod text {
    use std::fmt::Write;

    use chrono::{DateTime, Utc};

    use crate::rows::Key;

    /// `bytes` as a `bytea` the server decodes from hex: only hex digits go between the
    /// quotes, so no input can change the statement, whatever the server's string settings.
    pub(super) fn bytes(bytes: &[u8]) -> String {
        let mut sql = String::with_capacity(bytes.len() * 2 + 18);
        sql.push_str("decode('");
        for byte in bytes {
            let _ = write!(sql, "{byte:02x}");
        }
        sql.push_str("', 'hex')");
        sql
    }

    /// `text` as a `text` value, by way of its UTF-8 [`bytes`].
    pub(super) fn text(text: &str) -> String {
        format!("convert_from({}, 'UTF8')", bytes(text.as_bytes()))
    }

    /// `time` as a `timestamptz`, in UTC to the microsecond, as a bound value is stored.
    pub(super) fn time(time: DateTime<Utc>) -> String {
        format!("'{}'::timestamptz", time.format("%Y-%m-%d %H:%M:%S%.6f+00"))
    }

    /// The inbox row of an event's first delivery, as `record_delivery`'s upsert inserts it.
    pub(crate) fn insert_delivery(
        key: Key<'_>,
        now: DateTime<Utc>,
        payload_hash: Option<&[u8]>,
    ) -> String {
        let now = time(now);
        format!(
            "INSERT INTO diesel_inbox_events \
             (consumer, event_id, processed_at, last_seen_at, deliveries, payload_hash) \
             VALUES ({}, {}, {now}, {now}, 1, {})",
            text(key.0),
            text(key.1),
            payload_hash.map_or_else(|| "NULL".to_owned(), bytes),
        )
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn only_hex_digits_go_between_the_quotes_of_a_value() {
            let id = "o'k\\'); DROP TABLE diesel_inbox_events; -- Zoë";
            let sql = text(id);
            let hex = sql
                .strip_prefix("convert_from(decode('")
                .and_then(|rest| rest.strip_suffix("', 'hex'), 'UTF8')"))
                .unwrap();
            assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{sql}");
            let decoded: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            assert_eq!(decoded, id.as_bytes());
            assert_eq!(bytes(&[0, 0xab, 0xff]), "decode('00abff', 'hex')");
            assert_eq!(bytes(&[]), "decode('', 'hex')");
        }

        #[test]
        fn a_time_is_written_in_utc_to_the_microsecond() {
            let time = DateTime::parse_from_rfc3339("2026-12-07T06:14:36.123456789+01:00")
                .unwrap()
                .with_timezone(&Utc);
            assert_eq!(
                super::time(time),
                "'2026-12-07 05:14:36.123456+00'::timestamptz"
            );
        }
    }
}
