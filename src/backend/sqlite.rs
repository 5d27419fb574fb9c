//! SQLite, the embedded default: immediate transactions, so writers queue at `BEGIN` on the busy
//! timeout instead of failing when a read transaction tries to upgrade.

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::connection::{AnsiTransactionManager, SimpleConnection};
use diesel::prelude::*;
use diesel::r2d2::CustomizeConnection;
use diesel::sqlite::SqliteConnection;

use super::sealed::{Existing, FailureRow, HasBackend, InboxBackend, LogRow, Recorded};
use crate::error::MigrationError;

inbox_tables!(key = Text, time = Timestamp);
row_mappings!();

type Time = NaiveDateTime;
type KeyOwned = String;

fn ts(time: DateTime<Utc>) -> Time {
    time.naive_utc()
}

fn utc(time: Time) -> DateTime<Utc> {
    time.and_utc()
}

fn k(part: &str) -> &str {
    part
}

fn key_string(key: KeyOwned) -> String {
    key
}

impl HasBackend for SqliteConnection {
    type Sql = Self;

    fn backend(&mut self) -> &mut Self {
        self
    }
}

impl InboxBackend for SqliteConnection {
    const STATEMENT_ERRORS_CAN_END_TRANSACTION: bool = true;
    const CONTENTION_ENDS_TRANSACTION: bool = false;

    fn begin_top_level(&mut self) -> QueryResult<()> {
        AnsiTransactionManager::begin_transaction_sql(self, "BEGIN IMMEDIATE")
    }

    upsert_returning!();

    fn transaction_is_alive(&mut self) -> QueryResult<bool> {
        // Some errors (I/O, full disk, a trigger's RAISE(ROLLBACK)) make SQLite roll the whole
        // transaction back, and SQL cannot read the autocommit flag. `BEGIN` can: inside a
        // transaction it fails and changes nothing; outside, it opens one, which the inbox's
        // rollback then ends. In process, so it costs no round trip.
        Ok(self.batch_execute("BEGIN").is_err())
    }

    fn is_contention(error: &diesel::result::Error) -> bool {
        // SQLITE_BUSY and SQLITE_LOCKED arrive as Unknown with these messages.
        super::message_names_contention(error, &["database is locked", "database table is locked"])
    }

    fn apply_migrations(&mut self) -> Result<usize, MigrationError> {
        crate::migrations::apply(self, crate::migrations::SQLITE)
    }

    portable_statements!(failures_conflict = (failures::consumer, failures::event_id));
}

/// The connection settings the inbox expects on SQLite: WAL journal and a busy timeout.
///
/// Without a busy timeout, a second writer fails at once with "database is locked" instead of
/// waiting its turn; the inbox would retry it, but waiting inside SQLite is cheaper. Apply it to
/// each connection, or hand it to an r2d2 pool as its connection customizer.
///
/// ```
/// use diesel::prelude::*;
/// use diesel::r2d2::{ConnectionManager, Pool};
/// use diesel_inbox::SqliteSetup;
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// SqliteSetup::default().apply(&mut conn)?;
///
/// let dir = tempfile::tempdir()?;
/// let url = dir.path().join("app.db").display().to_string();
/// let pool = Pool::builder()
///     .connection_customizer(Box::new(SqliteSetup::default()))
///     .build(ConnectionManager::<SqliteConnection>::new(url))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct SqliteSetup {
    busy_timeout: Duration,
}

impl Default for SqliteSetup {
    /// A busy timeout of 5 seconds.
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
        }
    }
}

impl SqliteSetup {
    /// How long a connection waits for another writer before giving up. Defaults to 5 seconds.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets WAL mode and the busy timeout on `conn`.
    ///
    /// # Errors
    ///
    /// The database's error if a pragma fails.
    pub fn apply(&self, conn: &mut SqliteConnection) -> QueryResult<()> {
        // busy_timeout first: switching to WAL itself needs the lock another connection may hold.
        conn.batch_execute(&format!(
            "PRAGMA busy_timeout = {}; PRAGMA journal_mode = WAL;",
            self.busy_timeout.as_millis()
        ))
    }
}

impl CustomizeConnection<SqliteConnection, diesel::r2d2::Error> for SqliteSetup {
    fn on_acquire(&self, conn: &mut SqliteConnection) -> Result<(), diesel::r2d2::Error> {
        self.apply(conn).map_err(diesel::r2d2::Error::QueryError)
    }
}
