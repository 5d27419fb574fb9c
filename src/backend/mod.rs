//! The per-backend SQL, behind one small sealed trait.
//!
//! Each backend module holds its schema (`table!`), the statement that records a delivery,
//! the check that the transaction is still alive, and what counts as contention. Adding a
//! backend or a mode touches this folder only.

use chrono::{DateTime, Utc};
use diesel::connection::TransactionManager;
use diesel::{Connection, QueryResult};

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
pub trait InboxConnection: Connection + sealed::InboxBackend {}

impl<C: sealed::InboxBackend> InboxConnection for C {}

pub(crate) mod sealed {
    use super::{Connection, DateTime, QueryResult, TransactionManager, Utc};
    use crate::error::MigrationError;
    use crate::Duplicate;

    /// What recording a delivery found.
    #[derive(Debug)]
    pub enum Recorded {
        /// The row was inserted: run the effect.
        New,
        /// The row existed and now counts this delivery too.
        Seen(Duplicate),
    }

    /// The per-backend half of the inbox. Implemented once per connection type.
    pub trait InboxBackend: Connection {
        /// Opens a top-level transaction. SQLite overrides this to take the write lock at once.
        fn begin_top_level(&mut self) -> QueryResult<()> {
            Self::TransactionManager::begin_transaction(self)
        }

        /// Inserts `(consumer, event_id)`, or counts one more delivery on the existing row.
        /// The database's unique key decides which, in one statement where the backend allows.
        fn record_delivery(
            &mut self,
            consumer: &str,
            event_id: &str,
            now: DateTime<Utc>,
        ) -> QueryResult<Recorded>;

        /// `Ok(true)` while the transaction opened by the inbox can still commit what it did.
        /// `Ok(false)` or an error means the database already aborted or rolled it back.
        fn transaction_is_alive(&mut self) -> QueryResult<bool>;

        /// Whether `error` is contention that a retry of the whole transaction can cure.
        fn is_contention(error: &diesel::result::Error) -> bool;

        /// Applies the inbox's embedded migrations that are not applied yet.
        fn apply_migrations(&mut self) -> Result<usize, MigrationError>;
    }
}

/// Converts a UTC time read from a backend that stores naive UTC timestamps.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
fn utc(naive: chrono::NaiveDateTime) -> DateTime<Utc> {
    naive.and_utc()
}

/// Turns a delivery count read from the table into the record of a duplicate, or `New` for
/// the first delivery: a fresh row starts at 1 and every later delivery adds one.
fn recorded(processed_at: DateTime<Utc>, deliveries: i64) -> sealed::Recorded {
    if deliveries <= 1 {
        sealed::Recorded::New
    } else {
        sealed::Recorded::Seen(crate::Duplicate {
            processed_at,
            deliveries: deliveries.unsigned_abs(),
        })
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
