//! The retention area's statements: what the tables hold per consumer (the stats' totals and
//! counters, the consumers themselves), and the batches that prune it.
//!
//! Implemented for each backend in its file under `backend/`; the bodies shared by all three
//! are `backend/retention.rs`.

use std::future::Future;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use super::{Db, TransactionSql};
use crate::rows::{
    ConsumerRows, CounterTotal, FailureTotals, InboxTotals, PruneCounts, PruneCursor,
};

/// The retention area's statements for one database, on a connection of either flavour. Sealed.
pub trait RetentionSql: TransactionSql {
    /// Over the consumer's inbox rows, per state: the rows, their deliveries beyond the
    /// first, and their payload conflicts.
    fn inbox_totals<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
    ) -> impl Future<Output = QueryResult<Vec<InboxTotals>>> + Send;

    /// Over the consumer's failure rows, per state: the rows and their failed attempts.
    fn failure_totals<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
    ) -> impl Future<Output = QueryResult<Vec<FailureTotals>>> + Send;

    /// The consumer's inbox rows processed at or after `since`: a range scan of the
    /// `(consumer, state, processed_at, event_id)` index.
    fn processed_since<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        since: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<i64>> + Send;

    /// The consumer's hourly counters summed per counter, over the buckets at or after
    /// `since`.
    fn counters_since<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        since: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<Vec<CounterTotal>>> + Send;

    /// The first failure of the consumer's oldest event that still needs something: one
    /// dead-lettered, or one retrying that no delivery has processed since.
    fn oldest_unresolved_failure<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
    ) -> impl Future<Output = QueryResult<Option<DateTime<Utc>>>> + Send;

    /// Every consumer with a row in the tables of `area`, each once, sorted by name (byte
    /// order).
    fn consumers<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        area: ConsumerRows,
    ) -> impl Future<Output = QueryResult<Vec<String>>> + Send;

    /// Up to `limit` of the consumer's processed rows that are prunable at `cutoff`
    /// (`processed_at` and `last_seen_at` before it), after `after` in `(processed_at,
    /// event_id)` order, through the `diesel_inbox_events_settled` index; locked for the
    /// rest of the transaction where the backend has row locks (SQLite's immediate
    /// transaction holds the whole database instead).
    fn prune_candidates<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        cutoff: DateTime<Utc>,
        after: &PruneCursor,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<PruneCursor>>> + Send;

    /// Deletes those of `event_ids` whose inbox row is still prunable at `cutoff`; returns
    /// how many it deleted.
    fn delete_prunable_events<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        cutoff: DateTime<Utc>,
        event_ids: &[&str],
    ) -> impl Future<Output = QueryResult<usize>> + Send;

    /// Those of `event_ids` that still have an inbox row.
    fn remaining_events<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        event_ids: &[&str],
    ) -> impl Future<Output = QueryResult<Vec<String>>> + Send;

    /// Deletes the failure rows and the history of `event_ids`; returns how many of each.
    fn delete_failures_of<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        event_ids: &[&str],
    ) -> impl Future<Output = QueryResult<(usize, usize)>> + Send;

    /// Deletes the consumer's counters of hours that start before `cutoff`.
    fn delete_counters_before<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        cutoff: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<usize>> + Send;

    /// Deletes the consumer's completed and abandoned claims last changed or delivered
    /// before `cutoff`.
    fn delete_settled_claims<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        cutoff: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<usize>> + Send;

    /// Counts what a prune at `cutoff` would delete, locking nothing.
    fn count_prunable<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        cutoff: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<PruneCounts>> + Send;

    /// Takes the session-level lock that lets one prune run at a time, without waiting:
    /// `false` when another session holds it. MySQL/MariaDB only: SQLite's writer lock already
    /// serialises the batches, and PostgreSQL's prune holds a lease row instead.
    fn try_prune_lock<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<bool>> + Send {
        let _ = conn;
        std::future::ready(Ok(true))
    }

    /// Releases the lock [`try_prune_lock`](Self::try_prune_lock) took.
    fn release_prune_lock<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        let _ = conn;
        std::future::ready(Ok(()))
    }

    /// Whether a prune holds the lease row `prune` of `diesel_inbox_leases`: where
    /// [`try_prune_lock`](Self::try_prune_lock) holds on this node only while other nodes
    /// write the same tables (a Galera node, `wsrep_on`), and on PostgreSQL, which has no
    /// session lock (a pooler in transaction mode may stand between client and session), and
    /// where the lease is the prune's only lock.
    fn prune_needs_lease<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<bool>> + Send {
        let _ = conn;
        std::future::ready(Ok(false))
    }

    /// Inside a transaction: gives the lease `name` to `holder` until `until` if it is free
    /// at `now` (never taken, expired, or `holder`'s already); whether `holder` holds it.
    fn take_lease<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        name: &str,
        holder: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Extends `holder`'s lease `name` to `until`: `false` when another holder has it now.
    fn renew_lease<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        name: &str,
        holder: &str,
        until: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Ends `holder`'s lease `name`, if it still has it.
    fn release_lease<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        name: &str,
        holder: &str,
    ) -> impl Future<Output = QueryResult<()>> + Send;
}
