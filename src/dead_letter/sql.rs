//! The failures area's statements: a failed attempt's row (its attempts, error and payload),
//! its dead-letter state, and the event's history of attempts and transitions; the trait a
//! backend implements, the rows it reads and writes, and its statements for every backend,
//! written once.
//!
//! Each backend's file stamps the whole area with one line,
//! `failure_statements!(Pg, schema = schema, codec = codec, ..)`: the backend type, its module
//! of [`crate::tables`] and its codec (how it binds keys and times) are explicit arguments,
//! and options name the variants a backend needs (`conflict = key_columns` where the upsert
//! names its conflict target, `duplicated_keys` on MySQL; `lock = for_update` where it has row
//! locks). Adding a statement touches this file alone: the trait's method and its body below.

use std::future::Future;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use crate::delivery::Payload;
use crate::rows::{Key, Listed};
use crate::sql::{Db, TransactionSql};
use crate::state::UnknownState;

use super::state::{DeadLetterState, HistoryKind};

/// A row of `diesel_inbox_failures`.
#[derive(Debug)]
pub struct FailureRow {
    pub event_id: String,
    /// Read as text and parsed per row, so that one row this version cannot read does
    /// not fail a listing.
    pub state: Result<DeadLetterState, UnknownState>,
    pub attempts: i64,
    pub last_error: String,
    pub first_failed_at: DateTime<Utc>,
    pub last_failed_at: DateTime<Utc>,
    pub payload: Option<Vec<u8>>,
    pub payload_kind: Option<String>,
    pub updated_at: DateTime<Utc>,
}

/// A row of `diesel_inbox_failure_log`.
#[derive(Debug)]
pub struct HistoryRow {
    pub kind: HistoryKind,
    pub attempt: Option<i64>,
    pub error: Option<String>,
    pub actor: Option<String>,
    pub reason: Option<String>,
    pub at: DateTime<Utc>,
}

/// The failures area's statements for one database, on a connection of either flavour. Sealed.
pub trait FailureSql: TransactionSql {
    /// Counts one more failed attempt, keeps the payload and the error, and appends the
    /// attempt to the history; returns the attempt count and the row's state afterwards.
    fn record_failure<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        now: DateTime<Utc>,
        error: &str,
        payload: Option<&Payload>,
    ) -> impl Future<Output = QueryResult<(i64, DeadLetterState)>> + Send;

    /// The failure row, locked for the rest of the transaction where the backend has row
    /// locks (SQLite's immediate transaction holds the whole database instead).
    fn failure<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
    ) -> impl Future<Output = QueryResult<Option<FailureRow>>> + Send;

    /// Up to `limit` of the consumer's failure rows in `state` (and those whose state this
    /// version cannot read), after event id `after` where given, in event id order;
    /// without their payloads.
    fn failures<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        state: DeadLetterState,
        after: Option<&str>,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<FailureRow>>> + Send;

    /// Changes the failure row's state from `from` to `to`; `false` when it was not in `from`.
    fn set_failure_state<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        from: DeadLetterState,
        to: DeadLetterState,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Sets the failure row's attempts back to 0, so the event gets the full
    /// `max_attempts` again (after a release).
    fn reset_attempts<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Appends to the event's history.
    fn append_history<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        row: &HistoryRow,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// The event's history, oldest first.
    fn history<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
    ) -> impl Future<Output = QueryResult<Vec<Listed<HistoryRow>>>> + Send;
}

/// Implements [`FailureSql`] for a backend: `failure_statements!(Backend, schema = ..,
/// codec = .., conflict = key_columns | duplicated_keys $(, lock = for_update)?)`.
///
/// `schema` is the backend's module of [`crate::tables`]; `codec` its module of key and time
/// conversions (`key`, `key_string`, `time`, `utc`, `Time`, `KeyOwned`). `conflict` is the
/// backend's upsert target for `diesel_inbox_failures`: its key columns, or MySQL's
/// `DuplicatedKeys`. `lock`: `for_update` where the backend has row locks; SQLite locks the
/// whole database for the (immediate) transaction instead. Nothing else is taken from the
/// caller's scope. Expands to the impl and, beside it, `mod failure_rows`: the select lists
/// and row conversions the statements share.
macro_rules! failure_statements {
    (
        $backend:ty,
        schema = $schema:ident,
        codec = $codec:ident,
        conflict = $conflict:ident
        $(, lock = $lock:ident)? $(,)?
    ) => {
        /// The failure and history tables' select lists and their conversion into rows.
        mod failure_rows {
            use super::{$codec, $schema};
            use $crate::dead_letter::sql::{FailureRow, HistoryRow};
            use $crate::rows::Listed;
            use $schema::diesel_inbox_failure_log as l;
            use $schema::diesel_inbox_failures as f;

            /// The failure row's columns but its payload: what a listing reads.
            pub(super) type SummaryColumns = (
                $codec::KeyOwned,
                String,
                i64,
                String,
                $codec::Time,
                $codec::Time,
                Option<String>,
                $codec::Time,
            );

            pub(super) type SummarySelect = (
                f::event_id,
                f::state,
                f::attempts,
                f::last_error,
                f::first_failed_at,
                f::last_failed_at,
                f::payload_kind,
                f::updated_at,
            );

            pub(super) fn summary_columns() -> SummarySelect {
                (
                    f::event_id,
                    f::state,
                    f::attempts,
                    f::last_error,
                    f::first_failed_at,
                    f::last_failed_at,
                    f::payload_kind,
                    f::updated_at,
                )
            }

            pub(super) fn summary_row(row: SummaryColumns) -> FailureRow {
                let (event_id, state, attempts, last_error, first, last, kind, updated) = row;
                FailureRow {
                    event_id: $codec::key_string(event_id),
                    state: state.parse(),
                    attempts,
                    last_error,
                    first_failed_at: $codec::utc(first),
                    last_failed_at: $codec::utc(last),
                    payload: None,
                    payload_kind: kind,
                    updated_at: $codec::utc(updated),
                }
            }

            /// The whole failure row: the summary, and the payload.
            pub(super) type Columns = (SummaryColumns, Option<Vec<u8>>);

            pub(super) fn columns() -> (SummarySelect, f::payload) {
                (summary_columns(), f::payload)
            }

            pub(super) fn row((summary, payload): Columns) -> FailureRow {
                FailureRow {
                    payload,
                    ..summary_row(summary)
                }
            }

            pub(super) type HistoryColumns = (
                i64,
                String,
                Option<i64>,
                Option<String>,
                Option<String>,
                Option<String>,
                $codec::Time,
            );

            pub(super) fn history_columns() -> (
                l::id,
                l::entry,
                l::attempt,
                l::error,
                l::actor,
                l::reason,
                l::at,
            ) {
                (
                    l::id,
                    l::entry,
                    l::attempt,
                    l::error,
                    l::actor,
                    l::reason,
                    l::at,
                )
            }

            /// A history line, or its id and the kind this version cannot read.
            pub(super) fn history_row(row: HistoryColumns) -> Listed<HistoryRow> {
                let (id, kind, attempt, error, actor, reason, at) = row;
                let kind = $crate::rows::listed_column(&id, kind.parse())?;
                Ok(HistoryRow {
                    kind,
                    attempt,
                    error,
                    actor,
                    reason,
                    at: $codec::utc(at),
                })
            }
        }

        impl $crate::dead_letter::sql::FailureSql for $backend {
            async fn record_failure<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
                now: chrono::DateTime<chrono::Utc>,
                error: &str,
                payload: Option<&$crate::Payload>,
            ) -> diesel::QueryResult<(i64, $crate::dead_letter::state::DeadLetterState)> {
                use diesel::prelude::*;
                use $crate::dead_letter::sql::HistoryRow;
                use $crate::dead_letter::state::{DeadLetterState, HistoryKind};
                use $crate::sql::Run;
                use $schema::diesel_inbox_failures::dsl as f;
                let stored = payload.map(|p| (p.to_bytes(), p.kind()));
                let (bytes, kind) = (stored.as_ref().map(|s| &s.0[..]), stored.as_ref().map(|s| s.1));
                let when = $codec::time(now);
                // The counter is bumped in the database, so concurrent failures of one event
                // each get their own attempt number.
                diesel::insert_into(f::diesel_inbox_failures)
                    .values((
                        f::consumer.eq($codec::key(key.0)),
                        f::event_id.eq($codec::key(key.1)),
                        f::state.eq(DeadLetterState::Retrying),
                        f::attempts.eq(1),
                        f::last_error.eq(error),
                        f::first_failed_at.eq(when),
                        f::last_failed_at.eq(when),
                        f::payload.eq(bytes),
                        f::payload_kind.eq(kind),
                        f::updated_at.eq(when),
                    ))
                    .on_conflict($crate::dead_letter::sql::failure_statements!(@conflict $conflict, $schema))
                    .do_update()
                    .set((
                        f::attempts.eq(f::attempts + 1),
                        f::last_error.eq(error),
                        f::last_failed_at.eq(when),
                        f::payload.eq(bytes),
                        f::payload_kind.eq(kind),
                        f::updated_at.eq(when),
                    ))
                    .execute_on(conn)
                    .await?;
                let (attempts, state) = f::diesel_inbox_failures
                    .find(($codec::key(key.0), $codec::key(key.1)))
                    .select((f::attempts, f::state))
                    .limit(1)
                    .get_result_on::<(i64, DeadLetterState)>(conn)
                    .await?;
                <Self as $crate::dead_letter::sql::FailureSql>::append_history(
                    conn,
                    key,
                    &HistoryRow {
                        kind: HistoryKind::Failed,
                        attempt: Some(attempts),
                        error: Some(error.to_owned()),
                        actor: None,
                        reason: None,
                        at: now,
                    },
                )
                .await?;
                Ok((attempts, state))
            }

            async fn failure<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
            ) -> diesel::QueryResult<Option<$crate::dead_letter::sql::FailureRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_failures::dsl as f;
                f::diesel_inbox_failures
                    .find(($codec::key(key.0), $codec::key(key.1)))
                    .select(failure_rows::columns())
                    $(.$lock())?
                    .limit(1)
                    .get_result_on::<failure_rows::Columns>(conn)
                    .await
                    .optional()
                    .map(|row| row.map(failure_rows::row))
            }

            async fn failures<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                state: $crate::dead_letter::state::DeadLetterState,
                after: Option<&str>,
                limit: i64,
            ) -> diesel::QueryResult<Vec<$crate::dead_letter::sql::FailureRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_failures::dsl as f;
                // The state is compared as text: a row whose state this version cannot read
                // is listed too, as unreadable, rather than left out.
                let mut query = f::diesel_inbox_failures
                    .filter(f::consumer.eq($codec::key(consumer)))
                    .filter(
                        f::state
                            .eq(state)
                            .or(f::state.ne_all($crate::dead_letter::state::DeadLetterState::TEXTS)),
                    )
                    .into_boxed();
                if let Some(after) = after {
                    query = query.filter(f::event_id.gt($codec::key(after)));
                }
                query
                    .order(f::event_id)
                    .limit(limit)
                    .select(failure_rows::summary_columns())
                    .load_on::<failure_rows::SummaryColumns>(conn)
                    .await
                    .map(|rows| rows.into_iter().map(failure_rows::summary_row).collect())
            }

            async fn set_failure_state<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
                from: $crate::dead_letter::state::DeadLetterState,
                to: $crate::dead_letter::state::DeadLetterState,
                now: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_failures::dsl as f;
                let row = f::diesel_inbox_failures
                    .find(($codec::key(key.0), $codec::key(key.1)))
                    .filter(f::state.eq(from));
                diesel::update(row)
                    .set((f::state.eq(to), f::updated_at.eq($codec::time(now))))
                    .execute_on(conn)
                    .await
                    .map(|changed| changed == 1)
            }

            async fn reset_attempts<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
                now: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_failures::dsl as f;
                diesel::update(f::diesel_inbox_failures.find(($codec::key(key.0), $codec::key(key.1))))
                    .set((f::attempts.eq(0), f::updated_at.eq($codec::time(now))))
                    .execute_on(conn)
                    .await
                    .map(drop)
            }

            async fn append_history<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
                row: &$crate::dead_letter::sql::HistoryRow,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_failure_log::dsl as l;
                diesel::insert_into(l::diesel_inbox_failure_log)
                    .values((
                        l::consumer.eq($codec::key(key.0)),
                        l::event_id.eq($codec::key(key.1)),
                        l::entry.eq(row.kind),
                        l::attempt.eq(row.attempt),
                        l::error.eq(row.error.as_deref()),
                        l::actor.eq(row.actor.as_deref()),
                        l::reason.eq(row.reason.as_deref()),
                        l::at.eq($codec::time(row.at)),
                    ))
                    .execute_on(conn)
                    .await
                    .map(drop)
            }

            async fn history<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
            ) -> diesel::QueryResult<Vec<$crate::rows::Listed<$crate::dead_letter::sql::HistoryRow>>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_failure_log::dsl as l;
                l::diesel_inbox_failure_log
                    .filter(l::consumer.eq($codec::key(key.0)).and(l::event_id.eq($codec::key(key.1))))
                    .order(l::id)
                    .select(failure_rows::history_columns())
                    .load_on::<failure_rows::HistoryColumns>(conn)
                    .await
                    .map(|rows| rows.into_iter().map(failure_rows::history_row).collect())
            }
        }
    };

    // The upsert's conflict target: the table's key columns (PostgreSQL, SQLite), or MySQL's
    // `ON DUPLICATE KEY`, which names none.
    (@conflict key_columns, $schema:ident) => {
        (
            $schema::diesel_inbox_failures::consumer,
            $schema::diesel_inbox_failures::event_id
        )
    };
    (@conflict duplicated_keys, $schema:ident) => {
        diesel::dsl::DuplicatedKeys
    };
}
pub(crate) use failure_statements;
