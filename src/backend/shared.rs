//! What every backend's statements share: the counters' buckets and stripes, the rows per
//! multi-row statement, the readings of a listed row, the rollback of a transaction a
//! statement opened. Below the statements: it names none of them.

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use crate::rows::{Existing, Listed, Recorded, Unreadable};
use crate::state::UnknownState;

/// An existing row counted one more delivery; a fresh row starts at 1.
pub(crate) fn recorded(existing: Existing) -> Recorded {
    if existing.deliveries <= 1 {
        Recorded::New
    } else {
        Recorded::Seen(existing)
    }
}

/// The start of the UTC hour `now` falls in: the bucket its counters go to.
pub(crate) fn counter_bucket(now: DateTime<Utc>) -> DateTime<Utc> {
    use chrono::{DurationRound, TimeDelta};
    now.duration_trunc(TimeDelta::hours(1)).unwrap_or(now)
}

/// How many rows each counter has per hour. Concurrent deliveries of different events then
/// rarely bump the same row, which would queue every duplicate of a consumer behind one lock;
/// stats sum the rows.
const COUNTER_STRIPES: u32 = 16;

/// Which of its counter's rows for the hour a count for `event_id` goes to, as an offset of
/// 0 to 15 microseconds from the start of the hour in the row's `bucket`: fixed per event, so
/// that the deliveries of one event, which queue on its inbox row anyway, share one. In the
/// bucket rather than a column of its own, so the table keeps its key, and earlier releases,
/// which upsert on that key, can run beside this one; windows and retention compare buckets
/// with whole hours, which the offset never crosses.
pub(crate) fn counter_stripe(event_id: &str) -> chrono::TimeDelta {
    let hash = event_id.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    chrono::TimeDelta::microseconds(i64::from(hash % COUNTER_STRIPES))
}

/// Rows per multi-row statement: far below every backend's bind-parameter limit.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) const ROWS_PER_STATEMENT: usize = 1000;

/// Puts the rows a batch statement returned (keyed by event id) back in the order asked.
pub(crate) fn in_order(
    items: &[(&str, Option<&[u8]>)],
    mut found: std::collections::HashMap<String, Result<Existing, UnknownState>>,
) -> QueryResult<Vec<Listed<Recorded>>> {
    items
        .iter()
        .map(|(event_id, _)| {
            let row = found
                .remove(*event_id)
                .ok_or(diesel::result::Error::NotFound)?;
            Ok(row.map(recorded).map_err(|unknown| Unreadable {
                key: (*event_id).to_owned(),
                unknown,
            }))
        })
        .collect()
}

/// Rolls back a transaction that one of the inbox's statements opened before the engine
/// counted its level: the statement that followed failed, and the caller must not be left
/// inside a transaction it does not know of. A failure is logged: the connection is then
/// lost, and the transaction with it.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) async fn roll_back_uncounted<F, C>(conn: &mut C)
where
    C: crate::sql::Db<F, Backend: crate::sql::TransactionSql>,
{
    use crate::sql::TransactionSql;
    if let Err(error) = C::Backend::rollback_uncounted(conn).await {
        tracing::warn!(%error, "rolling back the inbox transaction failed");
    }
}

/// A column this version cannot read, as the error Diesel gives when a typed column does not
/// read: what a statement of one row returns, and [`crate::state::unreadable`] names.
pub(crate) fn known<T>(value: Result<T, UnknownState>) -> QueryResult<T> {
    value.map_err(|unknown| diesel::result::Error::DeserializationError(Box::new(unknown)))
}

/// One row read by a listing's mapping, for a statement of one row: see [`known`].
pub(crate) fn readable<R>(row: Listed<R>) -> QueryResult<R> {
    known(row.map_err(|unreadable| unreadable.unknown))
}

impl Unreadable {
    /// The row as a [`CorruptRow`](crate::CorruptRow): its key is `scope`, then `column`
    /// holding the key this listing read.
    pub(crate) fn in_row(self, scope: &[(&str, &str)], column: &str) -> crate::CorruptRow {
        let mut key = scope.to_vec();
        key.push((column, self.key.as_str()));
        self.unknown.in_row(&key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_keeps_its_counter_stripe_and_many_events_spread_over_all_of_them() {
        assert_eq!(counter_stripe("evt-1"), counter_stripe("evt-1"));
        let stripes: std::collections::HashSet<i64> = (0..200)
            .map(|i| {
                counter_stripe(&format!("evt-{i}"))
                    .num_microseconds()
                    .unwrap()
            })
            .collect();
        assert_eq!(stripes.len(), COUNTER_STRIPES as usize, "{stripes:?}");
        assert!(stripes.iter().all(|s| (0..16).contains(s)));
    }
}
