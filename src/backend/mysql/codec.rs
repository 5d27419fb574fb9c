//! How MySQL binds keys (`VARBINARY`, as bytes, so no collation or charset conversion touches
//! them) and times (UTC `DATETIME(6)`).

use chrono::{DateTime, NaiveDateTime, Utc};

pub(crate) type Time = NaiveDateTime;
pub(crate) type KeyOwned = Vec<u8>;

pub(crate) fn key(part: &str) -> &[u8] {
    part.as_bytes()
}

pub(crate) fn key_string(key: KeyOwned) -> String {
    // Only ever written from validated `&str`s.
    String::from_utf8(key).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

pub(crate) fn time(time: DateTime<Utc>) -> Time {
    time.naive_utc()
}

pub(crate) fn utc(time: Time) -> DateTime<Utc> {
    time.and_utc()
}

/// `SUM(expr)` of an integer expression, as a `BIGINT`: MySQL sums integers as `DECIMAL`,
/// and casts to a 64-bit integer as `SIGNED`.
/// `expr` is SQL text, always a literal of the inbox's own.
pub(crate) fn sum_i64(
    expr: &'static str,
) -> diesel::expression::SqlLiteral<diesel::sql_types::Nullable<diesel::sql_types::BigInt>> {
    diesel::dsl::sql(&format!("CAST(SUM({expr}) AS SIGNED)"))
}
