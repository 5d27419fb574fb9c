//! Sequence cursors on async connections: [`Cursor`], a [`crate::Cursor`] whose deliveries
//! and reads are awaited. The same transaction bodies and statements as the sync API.

use std::future::Future;
use std::marker::PhantomData;

use crate::sql::Async;
use crate::{Error, HandlerError, InvalidStreamName, Lease, Outcome, Position, Resume, Sequenced};

use super::{AsyncInboxConnection, Called, Handler, Inbox};

impl Inbox {
    /// A cursor of this consumer over the stream called `stream`: [`crate::Inbox::cursor`].
    ///
    /// # Errors
    ///
    /// [`InvalidStreamName`] for a name that is not 1 to 255 bytes of UTF-8 without control
    /// characters.
    pub fn cursor(&self, stream: &str) -> Result<Cursor, InvalidStreamName> {
        self.0.cursor(stream).map(Cursor)
    }
}

/// A consumer's position in one ordered stream, on async connections: [`crate::Cursor`],
/// whose deliveries are awaited. Made with [`Inbox::cursor`].
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_inbox::{asynch, Resume};
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let mut setup = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut setup)?;
/// let mut conn = SyncConnectionWrapper::new(setup);
/// let orders = asynch::Inbox::new("projector")?.cursor("orders-0")?;
/// let apply = async |_tx: &mut SyncConnectionWrapper<SqliteConnection>| {
///     Ok::<_, diesel_inbox::Error>(())
/// };
///
/// assert!(orders.process(&mut conn, 1, apply).await?.is_processed());
/// assert!(orders.process(&mut conn, 1, apply).await?.is_duplicate());
/// // 2 and 3 went missing: processed, and recorded as a gap.
/// let outcome = orders.process(&mut conn, 4, apply).await?;
/// assert_eq!(outcome.gaps()[0].sequences(), 2..=3);
/// assert_eq!(orders.resume(&mut conn).await?, Resume::At(2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Cursor(crate::Cursor);

impl From<crate::Cursor> for Cursor {
    fn from(cursor: crate::Cursor) -> Self {
        Self(cursor)
    }
}

impl Cursor {
    /// [`crate::Cursor::epoch`].
    pub fn epoch(self, epoch: u64) -> Self {
        Self(self.0.epoch(epoch))
    }

    /// [`crate::Cursor::max_open_gaps`].
    ///
    /// # Panics
    ///
    /// When `gaps` is 0.
    pub fn max_open_gaps(self, gaps: usize) -> Self {
        Self(self.0.max_open_gaps(gaps))
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        self.0.consumer()
    }

    /// The stream name.
    pub fn stream(&self) -> &str {
        self.0.stream()
    }

    /// Runs `handler` if and only if the sequence is not settled yet, in one transaction with
    /// the cursor's advance: [`crate::Cursor::process`], awaited, with the async inbox's
    /// handlers, backoff and cancellation (see [`Inbox::process`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Cursor::process`].
    pub fn process<'a, C, T, E, H>(
        &'a self,
        conn: &'a mut C,
        delivery: impl Into<Sequenced>,
        handler: H,
    ) -> impl Future<Output = Result<Outcome<T>, E>> + Send + 'a
    where
        C: AsyncInboxConnection,
        H: Handler<C, T, E> + 'a,
        T: Send + 'a,
        E: HandlerError + Send + 'a,
    {
        let effect = Called(handler, PhantomData);
        self.0
            .process_in::<Async, _, _, _>(conn, delivery.into(), effect)
    }

    /// Makes the caller the stream's owner: [`crate::Cursor::acquire`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::Cursor::acquire`].
    pub async fn acquire<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        owner: &str,
    ) -> Result<Lease, Error> {
        self.0.acquire_in::<Async, _>(conn, owner).await
    }

    /// Where to seek the broker: [`crate::Cursor::resume`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn resume<C: AsyncInboxConnection>(&self, conn: &mut C) -> Result<Resume, Error> {
        self.0.resume_in::<Async, _>(conn).await
    }

    /// Where the cursor stands, if it has a row: [`crate::Cursor::position`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn position<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
    ) -> Result<Option<Position>, Error> {
        self.0.position_in::<Async, _>(conn).await
    }
}
