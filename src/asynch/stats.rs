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
use crate::{Error, Stats};

use super::AsyncInboxConnection;

/// The [`Stats`] of every consumer, sorted by name: [`Stats::all`], awaited.
///
/// # Errors
///
/// As [`Stats::all`].
pub async fn all<C: AsyncInboxConnection>(
    conn: &mut C,
    recent: Duration,
) -> Result<Vec<Stats>, Error> {
    crate::stats::all_in::<Async, _>(conn, recent).await
}
