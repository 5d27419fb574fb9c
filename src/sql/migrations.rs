//! The migrations area's statements: the lock that lets one process at a time apply the
//! inbox migrations, and the inbox's own record of what it applied,
//! `diesel_inbox_migrations` (with the record of diesel-inbox 0.1 it takes over from Diesel's
//! `__diesel_schema_migrations`).
//!
//! Implemented for each backend in its file under `backend/`; the record's statements, the
//! same on all three, are `backend/tracking.rs`. What to apply and in which order is
//! [`crate::migrations`]'s.

use std::future::Future;
use std::time::Duration;

use diesel::QueryResult;

use super::{Db, TransactionSql};
use crate::dialect::Dialect;
use crate::AdminError;

/// The inbox's own record of the migrations it applied, apart from the application's.
pub(crate) const CREATE_TRACKING_TABLE: &str =
    "CREATE TABLE IF NOT EXISTS diesel_inbox_migrations (
    version VARCHAR(50) PRIMARY KEY NOT NULL,
    run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
)";

/// The migration lock as [`MigrationsSql::lock_migrations`] took it, for
/// [`MigrationsSql::unlock_migrations`].
#[derive(Debug)]
pub struct MigrationLock {
    /// SQLite: the transaction depth before the lock's transaction, and the connection's own
    /// busy timeout, to put back.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) sqlite: Option<(u32, i64)>,
    /// PostgreSQL: the transaction depth before the lock's transaction, which holds the lock.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) postgres: Option<u32>,
}

/// The migrations area's statements for one database, on a connection of either flavour.
/// Sealed.
pub trait MigrationsSql: TransactionSql {
    /// Which database this is, for its migrations' SQL.
    const DIALECT: Dialect;

    /// Takes the lock that lets one process at a time apply the inbox migrations, waiting
    /// for it at most `timeout`. PostgreSQL: a transaction around them all, holding a
    /// transaction-scoped advisory lock, polled; MySQL/MariaDB: `GET_LOCK`, named after the
    /// database; SQLite: an immediate transaction around them all, waited for on a busy
    /// timeout of the bound.
    ///
    /// Errors: [`AdminError::MigrationLocked`] when the bound passed first; [`AdminError::Inbox`].
    fn lock_migrations<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        timeout: Duration,
    ) -> impl Future<Output = Result<MigrationLock, AdminError>> + Send;

    /// Releases the lock; PostgreSQL and SQLite commit what was applied, or roll it back when
    /// `applied` is false.
    fn unlock_migrations<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        lock: MigrationLock,
        applied: bool,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Creates `diesel_inbox_migrations` where it does not exist yet.
    fn create_tracking_table<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        conn.batch_execute(CREATE_TRACKING_TABLE)
    }

    /// Records `version` as applied.
    fn record_migration<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        version: &str,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// The applied versions.
    fn applied_migrations<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<Vec<String>>> + Send;

    /// The inbox's versions in Diesel's `__diesel_schema_migrations`, oldest first (an
    /// error where that table does not exist).
    fn pre_release_versions<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<Vec<String>>> + Send;

    /// Removes `version` from Diesel's `__diesel_schema_migrations`.
    fn forget_pre_release<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        version: &str,
    ) -> impl Future<Output = QueryResult<()>> + Send;
}
