//! Every consumer's stats on an async connection: [`all`], the sync [`Stats::all`] awaited.
//! One consumer's are [`Inbox::stats`](super::Inbox::stats).
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use std::time::Duration;
//!
//! use diesel::prelude::*;
//! use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
//! use diesel_inbox::asynch;
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let mut setup = SqliteConnection::establish(":memory:")?;
//! diesel_inbox::run_pending_migrations(&mut setup)?;
//! let mut conn: SyncConnectionWrapper<SqliteConnection> = SyncConnectionWrapper::new(setup);
//! let billing = asynch::Inbox::new("billing")?;
//! let outcome = billing.process(&mut conn, "evt-1", async |_tx| Ok::<_, diesel_inbox::Error>(())).await?;
//! assert!(outcome.is_processed());
//!
//! let all = asynch::stats::all(&mut conn, Duration::from_secs(3600)).await?;
//! assert_eq!(all.len(), 1);
//! assert_eq!((all[0].consumer.as_str(), all[0].totals.processed), ("billing", 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::time::Duration;

use crate::sql::Async;
use crate::{retention::Stats, Error};

use super::AsyncInboxConnection;

/// The [`Stats`] of every consumer, sorted by name: [`Stats::all`], awaited.
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
/// asynch::run_pending_migrations(&mut conn).await?;
/// let noop = async |_tx: &mut SyncConnectionWrapper<SqliteConnection>| Ok::<_, diesel_inbox::Error>(());
/// let _ = asynch::Inbox::new("billing")?.process(&mut conn, "evt-1", noop).await?;
/// let stats = asynch::stats::all(&mut conn, std::time::Duration::from_secs(3600)).await?;
/// assert_eq!(stats.len(), 1);
/// assert_eq!(stats[0].consumer, "billing");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`Stats::all`].
pub async fn all<C: AsyncInboxConnection>(
    conn: &mut C,
    recent: Duration,
) -> Result<Vec<Stats>, Error> {
    crate::retention::stats::all_in::<Async, _>(conn, recent).await
}
