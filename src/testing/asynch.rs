//! The testing helpers for the async flavour (feature `async`): the same checks as the sync
//! helpers, reading through an async connection. Their failure messages are the sync ones'.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
//! use diesel_inbox::asynch;
//! use diesel_inbox::testing::asynch::{assert_deliveries, assert_processed_once};
//!
//! type Conn = SyncConnectionWrapper<SqliteConnection>;
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let mut setup = SqliteConnection::establish(":memory:")?;
//! diesel_inbox::run_pending_migrations(&mut setup)?;
//! let mut conn = Conn::new(setup);
//! let inbox = asynch::Inbox::default();
//! for _ in 0..2 {
//!     let ok = async |_: &mut Conn| Ok::<_, diesel_inbox::Error>(());
//!     let _ = inbox.process(&mut conn, "evt-1", ok).await?;
//! }
//!
//! let record = assert_processed_once(&mut conn, &inbox, "evt-1").await;
//! assert_eq!(record.deliveries(), 2);
//! assert_deliveries(&mut conn, &inbox, "evt-1", 2).await;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::asynch::{AsyncInboxConnection, Inbox};
use crate::sql::Async;
use crate::{DeadLetter, Error, IntoEventId};

use super::assert::{self, id, Seen};
pub use super::harness::assert_idempotent_async as assert_idempotent;
use super::inspect::{inbox_record_in, InboxRecord};

/// What the inbox table records about `event_id` for `inbox`'s consumer:
/// [`super::inbox_record`], awaited.
///
/// # Errors
///
/// As [`super::inbox_record`].
pub async fn inbox_record<C: AsyncInboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) -> Result<Option<InboxRecord>, Error> {
    let event_id = event_id.into_event_id()?;
    inbox_record_in::<Async, _>(conn, inbox.sync(), &event_id).await
}

/// [`super::assert_processed_once`], reading through an async connection.
///
/// # Panics
///
/// As [`super::assert_processed_once`].
pub async fn assert_processed_once<C: AsyncInboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) -> InboxRecord {
    let seen = Seen::read::<Async, _>(conn, inbox.sync(), id(event_id), false).await;
    assert::processed_once(inbox.sync(), seen)
}

/// [`super::assert_deliveries`], reading through an async connection.
///
/// # Panics
///
/// As [`super::assert_deliveries`].
pub async fn assert_deliveries<C: AsyncInboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
    expected: u64,
) -> InboxRecord {
    let seen = Seen::read::<Async, _>(conn, inbox.sync(), id(event_id), false).await;
    assert::deliveries(inbox.sync(), seen, expected)
}

/// [`super::assert_not_processed`], reading through an async connection.
///
/// # Panics
///
/// As [`super::assert_not_processed`].
pub async fn assert_not_processed<C: AsyncInboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) {
    let seen = Seen::read::<Async, _>(conn, inbox.sync(), id(event_id), false).await;
    assert::not_processed(inbox.sync(), seen);
}

/// [`super::assert_dead_lettered`], reading through an async connection.
///
/// # Panics
///
/// As [`super::assert_dead_lettered`].
pub async fn assert_dead_lettered<C: AsyncInboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) -> DeadLetter {
    let seen = Seen::read::<Async, _>(conn, inbox.sync(), id(event_id), true).await;
    assert::dead_lettered(inbox.sync(), seen)
}
