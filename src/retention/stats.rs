//! What a consumer has processed, skipped and failed: totals from the inbox's tables, and a
//! recent window from the processed rows and the hourly counters.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::sql::RetentionSql;
use crate::backend::counter_bucket;
use crate::dead_letter::state::DeadLetterState;
use crate::engine::run_ready;
use crate::rows::ConsumerRows;
use crate::sql::{Db, Sql};
use crate::state::{Counter, InboxState};
use crate::{Error, Inbox, InboxConnection};

/// One consumer's stats, as [`Inbox::stats`] and [`Stats::all`] read them.
///
/// - [`totals`](Self::totals) are what the tables hold now: rows that retention pruned are no
///   longer counted.
/// - [`recent`](Self::recent) covers the window from [`recent_since`](Self::recent_since)
///   (now − `recent`) to now: processed events from the inbox table's index, everything else
///   from the hourly counters, counted in whole UTC hours, so it may include up to an hour
///   more than the window.
/// - [`oldest_unresolved_failure`](Self::oldest_unresolved_failure) says how long the
///   oldest event that still needs something has waited.
///
/// Each figure is read by a statement of its own, outside any transaction: they are not one
/// snapshot, and a delivery committing meanwhile may show in one and not in another.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
///
/// use diesel::prelude::*;
/// use diesel_inbox::{retention::Stats, Inbox};
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let billing = Inbox::new("billing")?;
/// billing.process(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(()))?;
/// billing.process(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(()))?;
///
/// let day = Duration::from_secs(24 * 60 * 60);
/// let stats = billing.stats(&mut conn, day)?;
/// assert_eq!((stats.totals.processed, stats.totals.duplicates), (1, 1));
/// assert_eq!((stats.recent.processed, stats.recent.duplicates), (1, 1));
/// assert_eq!(stats.oldest_unresolved_failure, None);
///
/// let everyone = Stats::all(&mut conn, day)?;
/// assert_eq!(everyone.len(), 1);
/// assert_eq!((everyone[0].consumer.as_str(), everyone[0].totals), ("billing", stats.totals));
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// The consumer name.
    pub consumer: String,
    /// What the tables hold now:
    /// - `processed`: inbox rows in state processed;
    /// - `duplicates`: deliveries of those rows after the one that processed them, summed
    ///   (`deliveries - 1`);
    /// - `payload_conflicts`: deliveries refused for reusing an id with another payload, over
    ///   all inbox rows;
    /// - `failed_attempts`: failed attempts, summed over the failure rows (an event that
    ///   failed and then succeeded keeps its count);
    /// - `dead_lettered`: dead letters awaiting a decision (failure rows in state
    ///   dead-lettered), not every event ever dead-lettered;
    /// - `discarded`, `redriven`, `released`: dead letters ops discarded, redrove or released
    ///   (failure rows in that state; a released event that fails again counts as retrying);
    /// - `unreadable`: inbox and failure rows whose state this version cannot read (a
    ///   corrupt row or one a newer version wrote), counted here instead of failing the
    ///   stats; `diesel-inbox dead-letters list` names the failure rows.
    pub totals: Counts,
    /// What happened since [`recent_since`](Self::recent_since):
    /// - `processed`: inbox rows in state processed with `processed_at` at or after it;
    /// - every other count: the hourly counters from the start of the UTC hour it falls in,
    ///   so up to an hour more than the window. `dead_lettered` and `discarded` count the
    ///   events dead-lettered and discarded in the window, whatever became of them since.
    ///   Duplicates and payload conflicts of deliveries nested in a caller's transaction are
    ///   not counted here (they are in `totals`).
    pub recent: Counts,
    /// The start of the recent window: now − `recent` (no earlier than 1970-01-01).
    pub recent_since: DateTime<Utc>,
    /// The first failure of the oldest event that still needs something: dead-lettered, or
    /// retrying with no delivery that processed it since. `None` when there is none.
    pub oldest_unresolved_failure: Option<DateTime<Utc>>,
}

/// Counts of what happened to a consumer's deliveries; see [`Stats`] for what each field
/// counts in [`totals`](Stats::totals) and in [`recent`](Stats::recent).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Events processed: the effect ran and committed.
    pub processed: u64,
    /// Deliveries of events already processed: the effect did not run.
    pub duplicates: u64,
    /// Failed attempts: the handler returned an error or panicked.
    pub failed_attempts: u64,
    /// Dead letters (totals: awaiting a decision; recent: dead-lettered in the window).
    pub dead_lettered: u64,
    /// Dead letters discarded by ops.
    pub discarded: u64,
    /// Deliveries that reused an id with another payload, refused.
    pub payload_conflicts: u64,
    /// Dead letters ops redrove (run again in place, through the inbox).
    pub redriven: u64,
    /// Dead letters ops released to be published again.
    pub released: u64,
    /// In totals, rows whose state this version cannot read; in recent, what the hourly
    /// counters this version does not know count.
    pub unreadable: u64,
}

impl Inbox {
    /// This consumer's [`Stats`], with a recent window of `recent` up to now.
    ///
    /// Reads without a transaction of its own. The totals read every row of this consumer in
    /// the inbox and failure tables; the recent window reads only the inbox rows processed in
    /// it (an index range scan) and the window's hourly counters.
    ///
    /// # Errors
    ///
    /// [`Error::Database`]. A state column that holds text this version does not know is
    /// counted in [`Counts::unreadable`], not an error.
    pub fn stats<C: InboxConnection>(
        &self,
        conn: &mut C,
        recent: Duration,
    ) -> Result<Stats, Error> {
        run_ready(read(conn, self.consumer(), since(recent)))
    }
}

/// The start of a recent window of `recent` up to now.
pub(crate) fn since(recent: Duration) -> DateTime<Utc> {
    crate::duration::before(Utc::now(), recent)
}

impl Stats {
    /// The [`Stats`] of every consumer with a row in the inbox, failure or counter table,
    /// sorted by name (byte order), each as [`Inbox::stats`] reads it. Finding the consumers
    /// reads the distinct names of each table.
    ///
    /// # Errors
    ///
    /// As [`Inbox::stats`].
    pub fn all<C: InboxConnection>(conn: &mut C, recent: Duration) -> Result<Vec<Stats>, Error> {
        run_ready(all_in(conn, recent))
    }
}

/// [`Stats::all`] in either flavour.
pub(crate) async fn all_in<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    recent: Duration,
) -> Result<Vec<Stats>, Error> {
    let since = since(recent);
    let consumers = C::Backend::consumers(conn, ConsumerRows::Inbox).await?;
    let mut all = Vec::with_capacity(consumers.len());
    for consumer in &consumers {
        all.push(read(conn, consumer, since).await?);
    }
    Ok(all)
}

/// A count read from the database as a `u64`; a negative count (a hand-edited row) reads as 0.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// One consumer's stats, with the recent window from `since`.
pub(crate) async fn read<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    consumer: &str,
    since: DateTime<Utc>,
) -> Result<Stats, Error> {
    let mut totals = Counts::default();
    for row in C::Backend::inbox_totals(conn, consumer).await? {
        match row.state {
            Ok(InboxState::Processed) => {
                totals.processed += count(row.rows);
                totals.duplicates += count(row.repeats);
            }
            Ok(_) => {}
            Err(_) => totals.unreadable += count(row.rows),
        }
        totals.payload_conflicts += count(row.payload_conflicts);
    }
    for row in C::Backend::failure_totals(conn, consumer).await? {
        totals.failed_attempts += count(row.attempts);
        match row.state {
            Ok(DeadLetterState::DeadLettered) => totals.dead_lettered += count(row.rows),
            Ok(DeadLetterState::Discarded) => totals.discarded += count(row.rows),
            Ok(DeadLetterState::Redriven) => totals.redriven += count(row.rows),
            Ok(DeadLetterState::Released) => totals.released += count(row.rows),
            Ok(DeadLetterState::Retrying) => {}
            Err(_) => totals.unreadable += count(row.rows),
        }
    }

    let mut recent = Counts {
        processed: count(C::Backend::processed_since(conn, consumer, since).await?),
        ..Counts::default()
    };
    for (counter, total) in
        C::Backend::counters_since(conn, consumer, counter_bucket(since)).await?
    {
        let total = count(total);
        match counter {
            Ok(Counter::Duplicate) => recent.duplicates += total,
            Ok(Counter::PayloadConflict) => recent.payload_conflicts += total,
            Ok(Counter::FailedAttempt) => recent.failed_attempts += total,
            Ok(Counter::DeadLettered) => recent.dead_lettered += total,
            Ok(Counter::Discarded) => recent.discarded += total,
            Ok(Counter::Redriven) => recent.redriven += total,
            Ok(Counter::Released) => recent.released += total,
            // A counter this version does not know (a newer version's, or edited by hand).
            Err(_) => recent.unreadable += total,
        }
    }

    Ok(Stats {
        consumer: consumer.to_owned(),
        totals,
        recent,
        recent_since: since,
        oldest_unresolved_failure: C::Backend::oldest_unresolved_failure(conn, consumer).await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_the_start_of_the_hour() {
        let since = DateTime::parse_from_rfc3339("2026-03-01T10:30:00Z")
            .unwrap()
            .to_utc();
        let hour = DateTime::parse_from_rfc3339("2026-03-01T10:00:00Z")
            .unwrap()
            .to_utc();
        assert_eq!(counter_bucket(since), hour);
        assert_eq!(counter_bucket(hour), hour);
    }
}
