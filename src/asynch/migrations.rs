//! The inbox's migrations on an async connection: the same runner, lock and record as
//! [`crate::run_pending_migrations`].

use crate::migrations::{self, MigrationOptions};
use crate::sql::Async;
use crate::AdminError;

use super::AsyncInboxConnection;

/// Applies the inbox migrations not applied yet: [`crate::run_pending_migrations`], awaited.
/// Safe in a fleet: replicas starting together wait for one another on the database's
/// migration lock, for 60 seconds at most (on PostgreSQL on tokio's timer, never blocking the
/// runtime).
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::SqliteConnection;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_async::AsyncConnection;
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let mut conn = SyncConnectionWrapper::<SqliteConnection>::establish(":memory:").await?;
/// assert_eq!(diesel_inbox::asynch::run_pending_migrations(&mut conn).await?, 11);
/// assert_eq!(diesel_inbox::asynch::run_pending_migrations(&mut conn).await?, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`crate::run_pending_migrations`].
pub async fn run_pending_migrations<C: AsyncInboxConnection>(
    conn: &mut C,
) -> Result<usize, AdminError> {
    run_pending_migrations_with(conn, MigrationOptions::default()).await
}

/// [`run_pending_migrations`], waiting for the migration lock at most as long as `options`
/// says: [`crate::migrations::run_pending_migrations_with`], awaited.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_inbox::asynch;
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let mut conn: SyncConnectionWrapper<SqliteConnection> =
///     SyncConnectionWrapper::new(SqliteConnection::establish(":memory:")?);
/// use diesel_inbox::migrations::MigrationOptions;
/// use std::time::Duration;
///
/// let options = MigrationOptions::default().lock_timeout(Duration::from_secs(5));
/// assert_eq!(asynch::run_pending_migrations_with(&mut conn, options).await?, 11);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`crate::run_pending_migrations`].
pub async fn run_pending_migrations_with<C: AsyncInboxConnection>(
    conn: &mut C,
    options: MigrationOptions,
) -> Result<usize, AdminError> {
    migrations::migrate::<Async, _>(conn, options).await
}
