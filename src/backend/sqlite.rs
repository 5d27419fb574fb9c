//! SQLite, the embedded default: immediate transactions, so writers queue at `BEGIN` on the busy
//! timeout instead of failing when a read transaction tries to upgrade.

use std::time::Duration;

use diesel::connection::{SimpleConnection, TransactionDepthChange};
use diesel::prelude::*;
use diesel::r2d2::CustomizeConnection;
use diesel::sql_types::{BigInt, Text};
use diesel::sqlite::{Sqlite, SqliteConnection};

use super::sealed::HasInboxSql;
use crate::check::{Check, CheckStatus};
use crate::class::ErrorClass;
use crate::dialect::Dialect;
use crate::sql::{Db, DoctorSql, MigrationLock, MigrationsSql, Run, TransactionSql};
use crate::tables::sqlite as schema;

/// How SQLite binds keys (`TEXT`, binary collation) and times (UTC `TIMESTAMP` text).
mod codec {
    use chrono::{DateTime, NaiveDateTime, Utc};

    pub(super) type Time = NaiveDateTime;
    pub(super) type KeyOwned = String;

    pub(super) fn key(part: &str) -> &str {
        part
    }

    pub(super) fn key_string(key: KeyOwned) -> String {
        key
    }

    pub(super) fn time(time: DateTime<Utc>) -> Time {
        time.naive_utc()
    }

    pub(super) fn utc(time: Time) -> DateTime<Utc> {
        time.and_utc()
    }

    /// `SUM(expr)` of an integer expression, as a `BIGINT`: SQLite sums integers as integers
    /// already; the cast keeps one shape on every backend.
    /// `expr` is SQL text, always a literal of the inbox's own.
    pub(super) fn sum_i64(
        expr: &'static str,
    ) -> diesel::expression::SqlLiteral<diesel::sql_types::Nullable<diesel::sql_types::BigInt>>
    {
        diesel::dsl::sql(&format!("CAST(SUM({expr}) AS BIGINT)"))
    }
}

impl HasInboxSql for SqliteConnection {}

impl crate::sql::Sql for Sqlite {}

crate::inbox::sql::inbox_statements!(Sqlite, schema = schema, codec = codec, dialect = sqlite);

crate::dead_letter::sql::failure_statements!(
    Sqlite,
    schema = schema,
    codec = codec,
    conflict = key_columns,
);

crate::retention::sql::retention_statements!(
    Sqlite,
    schema = schema,
    codec = codec,
    lease_insert = plain,
    prune_lock = writer_lock,
);

crate::cursor::sql::cursor_statements!(
    Sqlite,
    schema = schema,
    codec = codec,
    insert_cursor = on_conflict_do_nothing,
    gap_id = returning,
);

crate::claim::sql::claim_statements!(
    Sqlite,
    schema = schema,
    codec = codec,
    record_claim = upsert_returning,
);

crate::chain::sql::chain_statements!(
    Sqlite,
    schema = schema,
    codec = codec,
    reorg_id = returning,
    block_events = per_row,
);

crate::replay::sql::replay_statements!(
    Sqlite,
    schema = schema,
    codec = codec,
    replay_id = returning,
);

crate::outbox::sql::outbox_statements!(
    Sqlite,
    schema = schema,
    codec = codec,
    insert = do_nothing,
    order_lock = none,
);

impl MigrationsSql for Sqlite {
    const DIALECT: Dialect = Dialect::Sqlite;

    async fn lock_migrations<F, C: crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        timeout: Duration,
    ) -> Result<MigrationLock, crate::AdminError> {
        // One immediate transaction around them all: it takes the write lock at BEGIN, so a
        // second process waits there, on a busy timeout of the bound (the connection's own is
        // put back after), and then reads the versions the first one recorded. Inside a
        // caller's transaction, a savepoint of it.
        let own_timeout = diesel::select(diesel::dsl::sql::<BigInt>(
            "(SELECT timeout FROM pragma_busy_timeout())",
        ))
        .get_result_on::<i64>(conn)
        .await?;
        let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        conn.batch_execute(&format!("PRAGMA busy_timeout = {millis}"))
            .await?;
        let started = std::time::Instant::now();
        let depth = conn.depth()?;
        let began = if depth == 0 {
            match Self::begin_top(conn, None).await {
                Ok(()) => conn.count_level(TransactionDepthChange::IncreaseDepth),
                Err(error) => Err(error),
            }
        } else {
            conn.begin_level().await
        };
        let Err(error) = began else {
            let sqlite = Some((depth, own_timeout));
            return Ok(MigrationLock {
                sqlite,
                postgres: None,
            });
        };
        conn.batch_execute(&format!("PRAGMA busy_timeout = {own_timeout}"))
            .await?;
        Err(if Self::classify(&error) == ErrorClass::Contention {
            crate::AdminError::MigrationLocked {
                waited: started.elapsed(),
            }
        } else {
            crate::AdminError::Migration(Box::new(error))
        })
    }

    async fn unlock_migrations<F, C: crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        lock: MigrationLock,
        applied: bool,
    ) -> QueryResult<()> {
        let Some((depth, own_timeout)) = lock.sqlite else {
            return Ok(());
        };
        let committed = match (applied, depth) {
            (true, 0) => match Self::commit_top(conn).await {
                Ok(()) => conn.count_level(TransactionDepthChange::DecreaseDepth),
                Err(error) => Err(error),
            },
            (true, _) => conn.commit_level().await,
            (false, _) => Ok(()),
        };
        // Nothing applied, or the commit failed: nothing of it stays.
        if !applied || committed.is_err() {
            while conn.depth().is_ok_and(|now| now > depth) {
                if conn.rollback_level().await.is_err() {
                    break;
                }
            }
        }
        let restored = conn
            .batch_execute(&format!("PRAGMA busy_timeout = {own_timeout}"))
            .await;
        committed.and(restored)
    }

    tracking_statements!();
}

impl DoctorSql for Sqlite {
    catalogue_statement!(
        table_exists,
        catalogue = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = "
    );
    catalogue_statement!(
        index_exists,
        catalogue = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = "
    );

    catalogue_statement!(
        column_exists,
        columns = ("SELECT COUNT(*) FROM pragma_table_info(", ") WHERE name = ")
    );

    async fn unique_index_exists<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        table: &str,
        name: &str,
    ) -> QueryResult<bool> {
        // A unique constraint's index is `sqlite_autoindex_<table>_<n>`: found by its origin.
        diesel::dsl::sql::<BigInt>("SELECT COUNT(*) FROM pragma_index_list(")
            .bind::<Text, _>(table)
            .sql(") WHERE \"unique\" = 1 AND (origin = 'u' OR name = ")
            .bind::<Text, _>(name)
            .sql(")")
            .get_result_on::<i64>(conn)
            .await
            .map(|found| found > 0)
    }
    async fn backend_checks<F, C: Db<F, Backend = Self>>(conn: &mut C) -> QueryResult<Vec<Check>> {
        let journal = diesel::select(diesel::dsl::sql::<Text>(
            "(SELECT journal_mode FROM pragma_journal_mode())",
        ))
        .get_result_on::<String>(conn)
        .await?;
        let timeout = diesel::select(diesel::dsl::sql::<BigInt>(
            "(SELECT timeout FROM pragma_busy_timeout())",
        ))
        .get_result_on::<i64>(conn)
        .await?;
        Ok(vec![
            Check::ok_if(
                "journal_mode",
                journal.eq_ignore_ascii_case("wal"),
                "wal",
                (
                    CheckStatus::Warn,
                    format!("{journal}: readers block the writer and the writer blocks readers; apply diesel_inbox::SqliteSetup (it sets WAL, which then stays on the database file)"),
                ),
            ),
            Check::ok_if(
                "busy_timeout",
                timeout > 0,
                format!("{timeout} ms on this connection"),
                (
                    CheckStatus::Warn,
                    "0 on this connection: a second writer fails at once instead of waiting; the timeout is set per connection, so apply diesel_inbox::SqliteSetup to each of the application's connections (a tool's own connection, like this one, reports 0 unless it does so)".to_owned(),
                ),
            ),
        ])
    }
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
        SimpleConnection::batch_execute(
            conn,
            &format!(
                "PRAGMA busy_timeout = {}; PRAGMA journal_mode = WAL;",
                self.busy_timeout.as_millis()
            ),
        )
    }
}

impl CustomizeConnection<SqliteConnection, diesel::r2d2::Error> for SqliteSetup {
    fn on_acquire(&self, conn: &mut SqliteConnection) -> Result<(), diesel::r2d2::Error> {
        self.apply(conn).map_err(diesel::r2d2::Error::QueryError)
    }
}
