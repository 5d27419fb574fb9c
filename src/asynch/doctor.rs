//! The doctor on an async connection: [`check`], the sync [`crate::doctor::check`] awaited,
//! through the same checks and statements.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
//! use diesel_inbox::asynch;
//! use diesel_inbox::doctor::CheckStatus;
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let mut setup = SqliteConnection::establish(":memory:")?;
//! diesel_inbox::run_pending_migrations(&mut setup)?;
//! let mut conn: SyncConnectionWrapper<SqliteConnection> = SyncConnectionWrapper::new(setup);
//! let checks = asynch::doctor::check(&mut conn).await?;
//! let schema = checks.iter().find(|check| check.name == "schema").unwrap();
//! assert_eq!(schema.status, CheckStatus::Ok, "{}", schema.detail);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::doctor::Check;
use crate::sql::Async;
use crate::Error;

use super::AsyncInboxConnection;

/// Checks `conn`'s database: [`crate::doctor::check`], awaited. Reads only.
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
/// use diesel_inbox::doctor::CheckStatus;
///
/// asynch::run_pending_migrations(&mut conn).await?;
/// let checks = asynch::doctor::check(&mut conn).await?;
/// assert!(checks.iter().all(|check| check.status != CheckStatus::Fail), "{checks:?}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`crate::doctor::check`].
pub async fn check<C: AsyncInboxConnection>(conn: &mut C) -> Result<Vec<Check>, Error> {
    crate::doctor::check_in::<Async, _>(conn).await
}
