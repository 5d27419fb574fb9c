//! The outbox area's statements: the rows a producer enqueues in its own transaction, the
//! order lock of an aggregate, and what a relay takes, leases, settles and prunes.
//!
//! Implemented for each backend in its file under `backend/`; the bodies shared by all three
//! are `backend/outbox.rs`. The relay's order per aggregate rests on `outbox_heads`: a row is
//! taken only while no earlier row of its aggregate is pending.

use std::future::Future;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use super::{Db, TransactionSql};
use crate::rows::{Listed, NewOutboxRow, OutboxChange, OutboxRow, OutboxTotals};
use crate::state::OutboxState;

/// The outbox area's statements for one database, on a connection of either flavour. Sealed.
pub trait OutboxSql: TransactionSql {
    /// Whether a relay's take also locks the pending rows after each head it took
    /// ([`outbox_followers`](Self::outbox_followers)), so that a pass publishes runs of one
    /// aggregate. MySQL/MariaDB: no. There that read can lose a deadlock to a relay marking
    /// its rows, and a cached prepared multi-row `SELECT .. FOR UPDATE` that lost one was
    /// seen to hang its connection on the next run (Diesel 2.3 with MariaDB 10.11); heads
    /// alone are read with `SKIP LOCKED`, through a statement that is not cached.
    const OUTBOX_FOLLOWERS: bool = true;

    /// Inserts a pending outbox row: one statement, in the caller's transaction. `false`
    /// when an outbox row has the event id already; that leaves the transaction usable.
    fn insert_outbox<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        row: &NewOutboxRow<'_>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Holds the enqueue order of the aggregate `(aggregate_type, aggregate_id)` until the
    /// caller's transaction ends, before its row takes a position: a second producer of
    /// the same aggregate waits here until the first commits or rolls back. So the rows of
    /// one aggregate commit in position order, and a relay never publishes a later one
    /// while an earlier one is still uncommitted. PostgreSQL: a transaction-scoped advisory
    /// lock; MySQL/MariaDB: an upsert of the aggregate's row in
    /// `diesel_inbox_outbox_aggregates`, whose row lock a Galera cluster certifies too;
    /// SQLite: nothing, one writer holds the database from its first write to its commit.
    fn lock_outbox_aggregate<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        aggregate_type: &str,
        aggregate_id: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Deletes up to `limit` rows of the aggregates' order locks that no enqueue used since
    /// `cutoff`; returns how many (0 where the backend keeps no such rows).
    fn delete_idle_outbox_aggregates<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        cutoff: DateTime<Utc>,
        limit: i64,
    ) -> impl Future<Output = QueryResult<usize>> + Send;

    /// Up to `limit` outbox rows a relay may publish now, in position order: pending, due,
    /// not held by a live lease, and first among the pending rows of their aggregate.
    /// Each comes with whether later pending rows of its aggregate follow it. Locked for
    /// the rest of the transaction, skipping rows another relay has locked, where the
    /// backend has row locks (SQLite's immediate transaction holds the whole database).
    fn outbox_heads<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        now: DateTime<Utc>,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<(OutboxRow, bool)>>> + Send;

    /// Up to `limit` pending rows of `head`'s aggregate after it, in position order;
    /// locked as [`outbox_heads`](Self::outbox_heads) locks, without skipping.
    fn outbox_followers<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        head: &OutboxRow,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<OutboxRow>>> + Send;

    /// Leases the pending rows at `positions` to `token` until `until`; returns how many.
    fn lease_outbox<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        positions: &[i64],
        token: &str,
        until: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<usize>> + Send;

    /// Applies `change` to those rows at `positions` that are pending and leased to
    /// `token`; returns how many (fewer when another relay took some over).
    fn settle_outbox<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        positions: &[i64],
        token: &str,
        change: OutboxChange<'_>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<usize>> + Send;

    /// Up to `limit` outbox rows after `after`, in position order, in `state` where given.
    fn outbox_rows<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        state: Option<OutboxState>,
        after: i64,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<Listed<OutboxRow>>>> + Send;

    /// The outbox row at `position`, if there is one.
    fn outbox_row<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        position: i64,
    ) -> impl Future<Output = QueryResult<Option<OutboxRow>>> + Send;

    /// The outbox row of event `event_id`, if there is one.
    fn outbox_row_of_event<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        event_id: &str,
    ) -> impl Future<Output = QueryResult<Option<OutboxRow>>> + Send;

    /// Makes the failed row at `position` pending again, due now, with its attempts at 0;
    /// `false` when it was not failed.
    fn retry_outbox<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        position: i64,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Deletes up to `limit` rows published before `cutoff` at positions below `below`,
    /// oldest first; returns how many. Rows at `below` and after wait for an open replay
    /// that reads them.
    fn delete_published_outbox<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        cutoff: DateTime<Utc>,
        below: i64,
        limit: i64,
    ) -> impl Future<Output = QueryResult<usize>> + Send;

    /// Per state: the rows, and the oldest row's enqueue time.
    fn outbox_totals<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<Vec<OutboxTotals>>> + Send;
}
