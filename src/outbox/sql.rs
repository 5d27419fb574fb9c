//! The outbox area's statements: the rows a producer enqueues in its own transaction, the
//! order lock of an aggregate, and what a relay takes, leases, settles and prunes. The trait a
//! backend implements, the rows it reads and writes, and its statements for every backend,
//! written once.
//!
//! Each backend's file stamps the whole area with one line,
//! `outbox_statements!(Pg, schema = schema, codec = codec, ..)`: the backend type, its module
//! of [`crate::tables`] and its codec (how it binds keys and times) are explicit arguments,
//! and the options name the variants a backend needs: `insert` how a duplicate event id is
//! told (`do_nothing`, or `unique_error` on MySQL), `order_lock` how an aggregate's enqueues
//! are ordered (`advisory_lock` on PostgreSQL, `aggregate_row` on MySQL, `none` on SQLite),
//! `lock = for_update` where the relay's reads lock rows, and `followers = false` where a take
//! reads heads alone (MySQL). Adding a statement touches this file alone: the trait's method
//! and its arm below. The relay's order per aggregate rests on `outbox_heads`: a row is taken
//! only while no earlier row of its aggregate is pending.

use std::future::Future;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use super::state::OutboxState;
use crate::rows::Listed;
use crate::sql::{Db, TransactionSql};
use crate::state::UnknownState;

/// An outbox row as [`enqueue`](crate::outbox::Outbox::enqueue) inserts it: pending, due now.
#[derive(Debug)]
pub struct NewOutboxRow<'a> {
    pub event_id: &'a str,
    pub topic: &'a str,
    pub aggregate_type: &'a str,
    pub aggregate_id: &'a str,
    pub event_type: &'a str,
    /// The message headers as a JSON object.
    pub headers: &'a str,
    pub body: &'a [u8],
    pub now: DateTime<Utc>,
}

/// A row of `diesel_inbox_outbox`.
#[derive(Debug, Clone)]
pub struct OutboxRow {
    pub position: i64,
    pub event_id: String,
    pub topic: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    pub headers: String,
    pub body: Vec<u8>,
    pub state: OutboxState,
    pub attempts: i64,
    pub available_at: DateTime<Utc>,
    pub lease_until: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub enqueued_at: DateTime<Utc>,
    pub published_at: Option<DateTime<Utc>>,
}

/// An outbox state, its rows, and the oldest one's enqueue time; the state parsed from
/// the text, so that one this version cannot read is counted rather than failing.
pub(crate) type OutboxTotals = (
    Result<OutboxState, UnknownState>,
    i64,
    Option<DateTime<Utc>>,
);

/// What a relay writes to rows it holds, once their publish is over. Each clears the lease.
#[derive(Debug, Clone, Copy)]
pub enum OutboxChange<'a> {
    /// The broker accepted them.
    Published,
    /// The publish failed and may pass later: one more attempt counted, due again `at`.
    Retry { error: &'a str, at: DateTime<Utc> },
    /// The publish failed for good: one more attempt counted, failed with `error`.
    Failed { error: &'a str },
    /// Not attempted (an earlier row of the aggregate failed): as they were.
    Released,
}

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

/// The first key of the two-key advisory locks that order an aggregate's enqueues on
/// PostgreSQL (the bytes of `obux`); the second is a hash of the aggregate. Two-key locks
/// never meet one-key ones such as the migrations' (`backend/postgres.rs`).
#[cfg(feature = "postgres")]
pub(crate) const OUTBOX_ORDER_LOCK_CLASS: i32 = 0x6f62_7578;

/// MySQL's statement of the aggregate's order lock, written out.
#[cfg(feature = "mysql")]
pub(crate) mod mysql {
    use diesel::mysql::Mysql;
    use diesel::prelude::*;
    use diesel::query_builder::{AstPass, QueryFragment, QueryId};
    use diesel::sql_types::{Binary, Datetime};

    /// Upserts an aggregate's row in `diesel_inbox_outbox_aggregates`, which locks it until the
    /// transaction ends (see `lock_outbox_aggregate`): written out for the same reason as
    /// `RecordDelivery` (`inbox/mysql.rs`).
    pub(crate) struct LockAggregate<'a> {
        pub(crate) aggregate_type: &'a [u8],
        pub(crate) aggregate_id: &'a [u8],
        pub(crate) now: chrono::NaiveDateTime,
    }

    impl QueryFragment<Mysql> for LockAggregate<'_> {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
            out.push_sql(
                "INSERT INTO diesel_inbox_outbox_aggregates (aggregate_type, aggregate_id, enqueued_at) VALUES (",
            );
            out.push_bind_param::<Binary, _>(&self.aggregate_type)?;
            out.push_sql(", ");
            out.push_bind_param::<Binary, _>(&self.aggregate_id)?;
            out.push_sql(", ");
            out.push_bind_param::<Datetime, _>(&self.now)?;
            out.push_sql(") ON DUPLICATE KEY UPDATE enqueued_at = ");
            out.push_bind_param::<Datetime, _>(&self.now)
        }
    }

    impl QueryId for LockAggregate<'_> {
        type QueryId = LockAggregate<'static>;
        const HAS_STATIC_QUERY_ID: bool = true;
    }

    impl<Conn> RunQueryDsl<Conn> for LockAggregate<'_> {}
}

/// Implements [`OutboxSql`] for a backend: `outbox_statements!(Backend, schema = .., codec =
/// .., insert = do_nothing | unique_error, order_lock = advisory_lock | aggregate_row | none
/// $(, lock = for_update)? $(, followers = false)?)`.
///
/// `schema` is the backend's module of [`crate::tables`]; `codec` its module of key and time
/// conversions (`key`, `key_string`, `time`, `utc`, `Time`, `KeyOwned`). Nothing else is
/// taken from the caller's scope. Expands to the impl and, beside it, `mod outbox_rows`: the
/// select list and row conversion the statements share.
macro_rules! outbox_statements {
    (
        $backend:ty,
        schema = $schema:ident,
        codec = $codec:ident,
        insert = $on_duplicate:ident,
        order_lock = $order_lock:ident
        $(, lock = $lock:ident)?
        $(, followers = $followers:literal)? $(,)?
    ) => {
        /// The outbox table's select list and its conversion into rows.
        mod outbox_rows {
            use super::{$codec, $schema};
            use $crate::outbox::sql::OutboxRow;
            use $crate::rows::Listed;
            use $schema::diesel_inbox_outbox as o;

            /// The outbox row's Rust types.
            pub(super) type Columns = (
                i64,
                $codec::KeyOwned,
                String,
                $codec::KeyOwned,
                $codec::KeyOwned,
                String,
                String,
                Vec<u8>,
                // The state is read as text, and parsed per row: see `Listed`.
                String,
                i64,
                $codec::Time,
                Option<$codec::Time>,
                Option<String>,
                $codec::Time,
                Option<$codec::Time>,
            );

            /// The outbox row's select list.
            pub(super) fn columns() -> (
                o::position,
                o::event_id,
                o::topic,
                o::aggregate_type,
                o::aggregate_id,
                o::event_type,
                o::headers,
                o::body,
                o::state,
                o::attempts,
                o::available_at,
                o::lease_until,
                o::last_error,
                o::enqueued_at,
                o::published_at,
            ) {
                (
                    o::position,
                    o::event_id,
                    o::topic,
                    o::aggregate_type,
                    o::aggregate_id,
                    o::event_type,
                    o::headers,
                    o::body,
                    o::state,
                    o::attempts,
                    o::available_at,
                    o::lease_until,
                    o::last_error,
                    o::enqueued_at,
                    o::published_at,
                )
            }

            /// An `OutboxRow` from the values of `columns()`, or its position and the state
            /// this version cannot read (a `Listed` row).
            pub(super) fn row(row: Columns) -> Listed<OutboxRow> {
                let (
                    position,
                    event_id,
                    topic,
                    aggregate_type,
                    aggregate_id,
                    event_type,
                    headers,
                    body,
                    state,
                    attempts,
                    available_at,
                    lease_until,
                    last_error,
                    enqueued_at,
                    published_at,
                ) = row;
                let state = state.parse::<$crate::outbox::state::OutboxState>();
                let state = $crate::rows::listed_column(&position, state)?;
                Ok(OutboxRow {
                    position,
                    event_id: $codec::key_string(event_id),
                    topic,
                    aggregate_type: $codec::key_string(aggregate_type),
                    aggregate_id: $codec::key_string(aggregate_id),
                    event_type,
                    headers,
                    body,
                    state,
                    attempts,
                    available_at: $codec::utc(available_at),
                    lease_until: lease_until.map($codec::utc),
                    last_error,
                    enqueued_at: $codec::utc(enqueued_at),
                    published_at: published_at.map($codec::utc),
                })
            }
        }

        impl $crate::outbox::sql::OutboxSql for $backend {
            $(const OUTBOX_FOLLOWERS: bool = $followers;)?

            async fn insert_outbox<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                row: &$crate::outbox::sql::NewOutboxRow<'_>,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_outbox as o;
                let now = $codec::time(row.now);
                let insert = diesel::insert_into(o::table).values((
                    o::event_id.eq($codec::key(row.event_id)),
                    o::topic.eq(row.topic),
                    o::aggregate_type.eq($codec::key(row.aggregate_type)),
                    o::aggregate_id.eq($codec::key(row.aggregate_id)),
                    o::event_type.eq(row.event_type),
                    o::headers.eq(row.headers),
                    o::body.eq(row.body),
                    o::state.eq($crate::outbox::state::OutboxState::Pending),
                    o::attempts.eq(0_i64),
                    o::available_at.eq(now),
                    o::enqueued_at.eq(now),
                ));
                // A duplicate id must not fail the statement where a failed statement aborts
                // the caller's transaction (PostgreSQL): the business writes would be lost
                // with it. MySQL has no `ON CONFLICT DO NOTHING` but undoes a failed
                // statement alone.
                $crate::outbox::sql::outbox_statements!(@insert $on_duplicate, conn, insert, o)
            }

            $crate::outbox::sql::outbox_statements!(@order_lock $order_lock, $schema, $codec);

            async fn outbox_heads<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                now: chrono::DateTime<chrono::Utc>,
                limit: i64,
            ) -> diesel::QueryResult<Vec<($crate::outbox::sql::OutboxRow, bool)>> {
                use diesel::prelude::*;
                use $crate::outbox::state::OutboxState;
                use $crate::sql::Run;
                use $schema::diesel_inbox_outbox as o;
                // The same on every backend; the correlated subqueries read the aggregate index.
                const NO_EARLIER_PENDING: &str = "NOT EXISTS (SELECT 1 FROM diesel_inbox_outbox e \
                    WHERE e.aggregate_type = diesel_inbox_outbox.aggregate_type \
                    AND e.aggregate_id = diesel_inbox_outbox.aggregate_id \
                    AND e.state = 'pending' AND e.position < diesel_inbox_outbox.position)";
                const LATER_PENDING: &str = "EXISTS (SELECT 1 FROM diesel_inbox_outbox e \
                    WHERE e.aggregate_type = diesel_inbox_outbox.aggregate_type \
                    AND e.aggregate_id = diesel_inbox_outbox.aggregate_id \
                    AND e.state = 'pending' AND e.position > diesel_inbox_outbox.position)";
                let now = $codec::time(now);
                let query = o::table
                    .filter(o::state.eq(OutboxState::Pending))
                    .filter(o::available_at.le(now))
                    .filter(o::lease_until.is_null().or(o::lease_until.le(now)))
                    .filter(diesel::dsl::sql::<diesel::sql_types::Bool>(NO_EARLIER_PENDING))
                    .order(o::position)
                    .limit(limit)
                    .select((
                        outbox_rows::columns(),
                        diesel::dsl::sql::<diesel::sql_types::Bool>(LATER_PENDING),
                    ));
                $(let query = query.$lock().skip_locked();)?
                query
                    .load_on::<(outbox_rows::Columns, bool)>(conn)
                    .await?
                    .into_iter()
                    .map(|(row, more)| Ok(($crate::backend::readable(outbox_rows::row(row))?, more)))
                    .collect()
            }

            async fn outbox_followers<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                head: &$crate::outbox::sql::OutboxRow,
                limit: i64,
            ) -> diesel::QueryResult<Vec<$crate::outbox::sql::OutboxRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_outbox as o;
                let query = o::table
                    .filter(o::aggregate_type.eq($codec::key(&head.aggregate_type)))
                    .filter(o::aggregate_id.eq($codec::key(&head.aggregate_id)))
                    .filter(o::state.eq($crate::outbox::state::OutboxState::Pending))
                    .filter(o::position.gt(head.position))
                    .order(o::position)
                    .limit(limit)
                    .select(outbox_rows::columns());
                $(let query = query.$lock();)?
                query
                    .load_on::<outbox_rows::Columns>(conn)
                    .await?
                    .into_iter()
                    .map(|row| $crate::backend::readable(outbox_rows::row(row)))
                    .collect()
            }

            async fn lease_outbox<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                positions: &[i64],
                token: &str,
                until: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<usize> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_outbox as o;
                diesel::update(
                    o::table
                        .filter(o::position.eq_any(positions))
                        .filter(o::state.eq($crate::outbox::state::OutboxState::Pending)),
                )
                .set((
                    o::lease_token.eq(Some(token)),
                    o::lease_until.eq(Some($codec::time(until))),
                ))
                .execute_on(conn)
                .await
            }

            async fn settle_outbox<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                positions: &[i64],
                token: &str,
                change: $crate::outbox::sql::OutboxChange<'_>,
                now: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<usize> {
                use diesel::prelude::*;
                use $crate::outbox::sql::OutboxChange;
                use $crate::outbox::state::OutboxState;
                use $crate::sql::Run;
                use $schema::diesel_inbox_outbox as o;
                let held = o::table
                    .filter(o::position.eq_any(positions))
                    .filter(o::state.eq(OutboxState::Pending))
                    .filter(o::lease_token.eq(token));
                let unleased = (
                    o::lease_token.eq(None::<&str>),
                    o::lease_until.eq(None::<$codec::Time>),
                );
                let update = diesel::update(held);
                match change {
                    OutboxChange::Published => update
                        .set((
                            unleased,
                            o::state.eq(OutboxState::Published),
                            o::published_at.eq(Some($codec::time(now))),
                        ))
                        .execute_on(conn)
                        .await,
                    OutboxChange::Retry { error, at } => update
                        .set((
                            unleased,
                            o::attempts.eq(o::attempts + 1),
                            o::available_at.eq($codec::time(at)),
                            o::last_error.eq(Some(error)),
                        ))
                        .execute_on(conn)
                        .await,
                    OutboxChange::Failed { error } => update
                        .set((
                            unleased,
                            o::state.eq(OutboxState::Failed),
                            o::attempts.eq(o::attempts + 1),
                            o::last_error.eq(Some(error)),
                        ))
                        .execute_on(conn)
                        .await,
                    OutboxChange::Released => update.set(unleased).execute_on(conn).await,
                }
            }

            async fn outbox_rows<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                state: Option<$crate::outbox::state::OutboxState>,
                after: i64,
                limit: i64,
            ) -> diesel::QueryResult<Vec<$crate::rows::Listed<$crate::outbox::sql::OutboxRow>>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_outbox as o;
                let mut query = o::table
                    .filter(o::position.gt(after))
                    .order(o::position)
                    .limit(limit)
                    .select(outbox_rows::columns())
                    .into_boxed();
                // The state is compared as text: a row whose state this version cannot read
                // is listed too, as unreadable, rather than left out.
                if let Some(state) = state {
                    query = query.filter(
                        o::state
                            .eq(state)
                            .or(o::state.ne_all($crate::outbox::state::OutboxState::TEXTS)),
                    );
                }
                query
                    .load_on::<outbox_rows::Columns>(conn)
                    .await
                    .map(|rows| rows.into_iter().map(outbox_rows::row).collect())
            }

            async fn outbox_row<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                position: i64,
            ) -> diesel::QueryResult<Option<$crate::outbox::sql::OutboxRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_outbox as o;
                o::table
                    .find(position)
                    .select(outbox_rows::columns())
                    .limit(1)
                    .get_result_on::<outbox_rows::Columns>(conn)
                    .await
                    .optional()?
                    .map(|row| $crate::backend::readable(outbox_rows::row(row)))
                    .transpose()
            }

            async fn outbox_row_of_event<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                event_id: &str,
            ) -> diesel::QueryResult<Option<$crate::outbox::sql::OutboxRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_outbox as o;
                o::table
                    .filter(o::event_id.eq($codec::key(event_id)))
                    .select(outbox_rows::columns())
                    .limit(1)
                    .get_result_on::<outbox_rows::Columns>(conn)
                    .await
                    .optional()?
                    .map(|row| $crate::backend::readable(outbox_rows::row(row)))
                    .transpose()
            }

            async fn retry_outbox<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                position: i64,
                now: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::outbox::state::OutboxState;
                use $crate::sql::Run;
                use $schema::diesel_inbox_outbox as o;
                diesel::update(
                    o::table
                        .find(position)
                        .filter(o::state.eq(OutboxState::Failed)),
                )
                .set((
                    o::state.eq(OutboxState::Pending),
                    o::attempts.eq(0_i64),
                    o::available_at.eq($codec::time(now)),
                ))
                .execute_on(conn)
                .await
                .map(|changed| changed == 1)
            }

            async fn delete_published_outbox<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                cutoff: chrono::DateTime<chrono::Utc>,
                below: i64,
                limit: i64,
            ) -> diesel::QueryResult<usize> {
                use diesel::prelude::*;
                use $crate::outbox::state::OutboxState;
                use $crate::sql::Run;
                use $schema::diesel_inbox_outbox as o;
                let published = o::state.eq(OutboxState::Published);
                let before = o::published_at.lt($codec::time(cutoff));
                let unreplayed = o::position.lt(below);
                // Two statements: MySQL takes no LIMIT in an IN subquery.
                let positions: Vec<i64> = o::table
                    .filter(published)
                    .filter(before)
                    .filter(unreplayed)
                    .order(o::published_at)
                    .limit(limit)
                    .select(o::position)
                    .load_on::<i64>(conn)
                    .await?;
                diesel::delete(
                    o::table
                        .filter(o::position.eq_any(&positions))
                        .filter(published)
                        .filter(before)
                        .filter(unreplayed),
                )
                .execute_on(conn)
                .await
            }

            async fn outbox_totals<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
            ) -> diesel::QueryResult<Vec<$crate::outbox::sql::OutboxTotals>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_outbox as o;
                o::table
                    .group_by(o::state)
                    .select((
                        o::state,
                        diesel::dsl::count_star(),
                        diesel::dsl::min(o::enqueued_at),
                    ))
                    .load_on::<(String, i64, Option<$codec::Time>)>(conn)
                    .await
                    .map(|rows| {
                        rows.into_iter()
                            .map(|(state, rows, oldest)| (state.parse(), rows, oldest.map($codec::utc)))
                            .collect()
                    })
            }
        }
    };

    // Runs the outbox INSERT on `$conn`: `Ok(true)` when it inserted, `Ok(false)` when the
    // event id was in the outbox. `do_nothing`: `ON CONFLICT DO NOTHING` (PostgreSQL,
    // SQLite); `unique_error`: the unique key's error, which undoes that statement alone
    // (MySQL).
    (@insert do_nothing, $conn:expr, $insert:expr, $o:ident) => {
        $insert
            .on_conflict($o::event_id)
            .do_nothing()
            .execute_on($conn)
            .await
            .map(|inserted| inserted == 1)
    };
    (@insert unique_error, $conn:expr, $insert:expr, $o:ident) => {
        match $insert.execute_on($conn).await {
            Ok(_) => Ok(true),
            Err(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UniqueViolation,
                _,
            )) => Ok(false),
            Err(error) => Err(error),
        }
    };

    // PostgreSQL: a transaction-scoped advisory lock, which leaves no rows.
    (@order_lock advisory_lock, $schema:ident, $codec:ident) => {
        async fn lock_outbox_aggregate<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            aggregate_type: &str,
            aggregate_id: &str,
            _now: chrono::DateTime<chrono::Utc>,
        ) -> diesel::QueryResult<()> {
            use diesel::sql_types::{Bool, Integer, Text};
            use $crate::sql::Run;
            // Held until the transaction ends. Two aggregates whose hashes collide only wait for
            // each other. The lock returns `void`, which reads as not null.
            diesel::select(
                diesel::dsl::sql::<Bool>("pg_advisory_xact_lock(")
                    .bind::<Integer, _>($crate::outbox::sql::OUTBOX_ORDER_LOCK_CLASS)
                    .sql(", hashtext(")
                    .bind::<Text, _>(aggregate_type)
                    .sql(" || chr(31) || ")
                    .bind::<Text, _>(aggregate_id)
                    .sql(")) IS NOT NULL"),
            )
            .get_result_on::<bool>(conn)
            .await
            .map(drop)
        }

        async fn delete_idle_outbox_aggregates<F, C: $crate::sql::Db<F, Backend = Self>>(
            _conn: &mut C,
            _cutoff: chrono::DateTime<chrono::Utc>,
            _limit: i64,
        ) -> diesel::QueryResult<usize> {
            Ok(0) // advisory locks leave no rows
        }
    };
    // MySQL: an upsert of the aggregate's row in `diesel_inbox_outbox_aggregates`, whose
    // rows idle aggregates leave behind.
    (@order_lock aggregate_row, $schema:ident, $codec:ident) => {
        async fn lock_outbox_aggregate<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            aggregate_type: &str,
            aggregate_id: &str,
            now: chrono::DateTime<chrono::Utc>,
        ) -> diesel::QueryResult<()> {
            use $crate::sql::Run;
            $crate::outbox::sql::mysql::LockAggregate {
                aggregate_type: $codec::key(aggregate_type),
                aggregate_id: $codec::key(aggregate_id),
                now: $codec::time(now),
            }
            .execute_on(conn)
            .await
            .map(drop)
        }

        async fn delete_idle_outbox_aggregates<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            cutoff: chrono::DateTime<chrono::Utc>,
            limit: i64,
        ) -> diesel::QueryResult<usize> {
            use diesel::sql_types::{BigInt, Datetime};
            use $crate::sql::Run;
            // A row an open enqueue holds is waited for, and read again after its commit: with
            // its new time it stays. One deleted between enqueues is inserted again by the next.
            diesel::sql_query(
                "DELETE FROM diesel_inbox_outbox_aggregates WHERE enqueued_at < ? ORDER BY enqueued_at LIMIT ?",
            )
            .bind::<Datetime, _>($codec::time(cutoff))
            .bind::<BigInt, _>(limit)
            .execute_on(conn).await
        }
    };
    // SQLite: nothing to lock.
    (@order_lock none, $schema:ident, $codec:ident) => {
        async fn lock_outbox_aggregate<F, C: $crate::sql::Db<F, Backend = Self>>(
            _conn: &mut C,
            _aggregate_type: &str,
            _aggregate_id: &str,
            _now: chrono::DateTime<chrono::Utc>,
        ) -> diesel::QueryResult<()> {
            // One writer at a time holds the database from its first write to its commit, so
            // outbox rows commit in position order already.
            Ok(())
        }

        async fn delete_idle_outbox_aggregates<F, C: $crate::sql::Db<F, Backend = Self>>(
            _conn: &mut C,
            _cutoff: chrono::DateTime<chrono::Utc>,
            _limit: i64,
        ) -> diesel::QueryResult<usize> {
            Ok(0)
        }
    };
}
pub(crate) use outbox_statements;
