//! The failures area's statements: a failed attempt's row (its attempts, error and payload),
//! its dead-letter state, and the event's history of attempts and transitions.
//!
//! Implemented for each backend in its file under `backend/`; the bodies shared by all three
//! are `backend/failures.rs`.

use std::future::Future;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use super::{Db, TransactionSql};
use crate::delivery::Payload;
use crate::rows::{FailureRow, HistoryRow, Key, Listed};
use crate::state::DeadLetterState;

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
