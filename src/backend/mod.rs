//! The per-backend SQL, behind one small sealed trait.
//!
//! Each backend module holds its schema (`table!`), the statement that records a delivery,
//! the check that the transaction is still alive, and what counts as contention. Statements
//! that read the same on every backend are written once in `portable.rs` and stamped into each
//! backend module. Adding a backend or a mode touches this folder only.

use chrono::{DateTime, Utc};
use diesel::connection::TransactionManager;
use diesel::{Connection, QueryResult};

#[macro_use]
mod portable;
#[cfg(feature = "mysql")]
mod mysql;
mod pooled;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "sqlite")]
pub use sqlite::SqliteSetup;

/// A Diesel connection the inbox can run on: `PgConnection`, `SqliteConnection`,
/// `MysqlConnection` (with the matching cargo feature), and r2d2 `PooledConnection`s of them.
///
/// The trait is sealed: its methods are the inbox's per-backend SQL, not an extension point.
pub trait InboxConnection: Connection + sealed::HasBackend {}

impl<C: Connection + sealed::HasBackend> InboxConnection for C {}

/// `(consumer, event_id)`: the inbox's key in every table.
pub(crate) type Key<'a> = (&'a str, &'a str);

pub(crate) mod sealed {
    use super::{Connection, DateTime, Key, QueryResult, TransactionManager, Utc};
    use crate::error::MigrationError;
    use crate::Payload;

    /// The connection that runs the statements: the connection itself, or the one a pool wraps.
    pub trait HasBackend {
        /// The concrete connection type.
        type Sql: InboxBackend;
        /// The connection to run statements on; it shares transaction state with `self`.
        fn backend(&mut self) -> &mut Self::Sql;
    }

    /// The inbox row of an event seen before.
    #[derive(Debug)]
    pub struct Existing {
        pub processed_at: DateTime<Utc>,
        pub deliveries: i64,
        pub state: String,
        pub payload_hash: Option<Vec<u8>>,
        pub result: Option<String>,
    }

    /// What recording a delivery found.
    #[derive(Debug)]
    pub enum Recorded {
        /// The row was inserted: run the effect.
        New,
        /// The row existed and now counts this delivery too.
        Seen(Existing),
    }

    /// A row of `diesel_inbox`, as tests and ops read it back.
    #[derive(Debug)]
    pub struct InboxRow {
        pub consumer: String,
        pub event_id: String,
        pub state: String,
        pub processed_at: DateTime<Utc>,
        pub last_seen_at: DateTime<Utc>,
        pub deliveries: i64,
    }

    /// A row of `diesel_inbox_failures`.
    #[derive(Debug)]
    pub struct FailureRow {
        pub event_id: String,
        pub state: String,
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
    pub struct LogRow {
        pub entry: String,
        pub attempt: Option<i64>,
        pub error: Option<String>,
        pub actor: Option<String>,
        pub reason: Option<String>,
        pub at: DateTime<Utc>,
    }

    /// The per-backend half of the inbox. Implemented once per concrete connection type.
    pub trait InboxBackend: Connection {
        /// Whether one failed statement can end the whole transaction, so that later
        /// statements would run in autocommit mode (MySQL deadlocks, SQLite I/O errors).
        const STATEMENT_ERRORS_CAN_END_TRANSACTION: bool;

        /// Whether a transaction that ended that way was ended by contention (a deadlock),
        /// so that running the attempt again is the cure.
        const CONTENTION_ENDS_TRANSACTION: bool;

        /// Opens a top-level transaction. SQLite overrides this to take the write lock at once.
        fn begin_top_level(&mut self) -> QueryResult<()> {
            Self::TransactionManager::begin_transaction(self)
        }

        /// Inserts the inbox row, or counts one more delivery on the existing one. The
        /// database's unique key decides which, in one statement where the backend allows.
        fn record_delivery(
            &mut self,
            key: Key<'_>,
            now: DateTime<Utc>,
            payload_hash: Option<&[u8]>,
        ) -> QueryResult<Recorded>;

        /// [`record_delivery`](Self::record_delivery) for many distinct event ids of one
        /// consumer, in as few statements as the backend allows; results in the order given.
        fn record_deliveries(
            &mut self,
            consumer: &str,
            items: &[(&str, Option<&[u8]>)],
            now: DateTime<Utc>,
        ) -> QueryResult<Vec<Recorded>>;

        /// Lets the open top-level transaction commit without waiting for the disk, where the
        /// backend can do that per transaction. Only for transactions that record bookkeeping
        /// alone (a duplicate's delivery count): a crash may lose the count, never an effect.
        fn commit_without_waiting_for_disk(&mut self) -> QueryResult<()> {
            Ok(())
        }

        /// `Ok(true)` while the transaction opened by the inbox can still commit what it did.
        /// `Ok(false)` or an error means the database already aborted or rolled it back.
        fn transaction_is_alive(&mut self) -> QueryResult<bool>;

        /// Whether `error` is contention that a retry of the whole transaction can cure.
        fn is_contention(error: &diesel::result::Error) -> bool;

        /// Applies the inbox's embedded migrations that are not applied yet.
        fn apply_migrations(&mut self) -> Result<usize, MigrationError>;

        /// Counts a delivery that reused the id with a different payload.
        fn note_payload_conflict(&mut self, key: Key<'_>) -> QueryResult<()>;

        /// Stores the effect's result (JSON) on the inbox row.
        fn store_result(&mut self, key: Key<'_>, json: &str) -> QueryResult<()>;

        /// Counts one more failed attempt, keeps the payload and the error, and logs the
        /// attempt; returns the attempt count and the row's state afterwards.
        fn record_failure(
            &mut self,
            key: Key<'_>,
            now: DateTime<Utc>,
            error: &str,
            payload: Option<&Payload>,
        ) -> QueryResult<(i64, String)>;

        /// Inserts the inbox row in `state` (e.g. dead-lettered) so later deliveries skip the
        /// effect. `false` when the event already has an inbox row.
        fn settle(&mut self, key: Key<'_>, now: DateTime<Utc>, state: &str) -> QueryResult<bool>;

        /// Changes the inbox row's state from `from` to `to`; `false` when it was not in `from`.
        fn set_inbox_state(
            &mut self,
            key: Key<'_>,
            from: &str,
            to: Option<&str>,
        ) -> QueryResult<bool>;

        /// The failure row, locked for the rest of the transaction where the backend has row
        /// locks (SQLite's immediate transaction holds the whole database instead).
        fn failure(&mut self, key: Key<'_>) -> QueryResult<Option<FailureRow>>;

        /// The consumer's failure rows in `state`, oldest failure first.
        fn failures(&mut self, consumer: &str, state: &str) -> QueryResult<Vec<FailureRow>>;

        /// Changes the failure row's state from `from` to `to`; `false` when it was not in `from`.
        fn set_failure_state(
            &mut self,
            key: Key<'_>,
            from: &str,
            to: &str,
            now: DateTime<Utc>,
        ) -> QueryResult<bool>;

        /// The inbox row of `key`, if there is one.
        fn inbox_row(&mut self, key: Key<'_>) -> QueryResult<Option<InboxRow>>;

        /// Up to `limit` inbox rows in key order.
        fn inbox_rows(&mut self, limit: i64) -> QueryResult<Vec<InboxRow>>;

        /// Appends to the failure log.
        fn log(&mut self, key: Key<'_>, entry: &LogRow) -> QueryResult<()>;

        /// The event's failure log, oldest first.
        fn failure_log(&mut self, key: Key<'_>) -> QueryResult<Vec<LogRow>>;
    }
}

/// Whether a database error message names contention. Only for errors Diesel reports as
/// `Unknown` (PostgreSQL deadlocks, MySQL lock-wait timeouts, SQLite busy/locked), whose
/// codes Diesel does not expose; messages are the servers' English defaults.
fn message_names_contention(error: &diesel::result::Error, needles: &[&str]) -> bool {
    use diesel::result::{DatabaseErrorKind, Error};
    match error {
        Error::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => true,
        Error::DatabaseError(DatabaseErrorKind::Unknown, info) => {
            needles.iter().any(|needle| info.message().contains(needle))
        }
        _ => false,
    }
}

/// An existing row counted one more delivery; a fresh row starts at 1.
pub(crate) fn recorded(existing: sealed::Existing) -> sealed::Recorded {
    if existing.deliveries <= 1 {
        sealed::Recorded::New
    } else {
        sealed::Recorded::Seen(existing)
    }
}

/// Rows per multi-row statement: far below every backend's bind-parameter limit.
pub(crate) const ROWS_PER_STATEMENT: usize = 1000;

/// Puts the rows a batch statement returned (keyed by event id) back in the order asked.
pub(crate) fn in_order(
    items: &[(&str, Option<&[u8]>)],
    mut found: std::collections::HashMap<String, sealed::Existing>,
) -> QueryResult<Vec<sealed::Recorded>> {
    items
        .iter()
        .map(|(event_id, _)| {
            found
                .remove(*event_id)
                .map(recorded)
                .ok_or(diesel::result::Error::NotFound)
        })
        .collect()
}
