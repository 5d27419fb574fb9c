//! Sequence cursors on async connections: [`Cursor`], a [`crate::cursor::Cursor`] whose deliveries
//! and reads are awaited. The same transaction bodies and statements as the sync API.

use std::future::Future;

use crate::sql::Async;
use crate::{
    cursor::{Gap, InvalidStreamName, Lease, Position, Resume, Sequenced},
    AdminError, Audit, CorruptRow, Error, HandlerError, Outcome,
};

use crate::asynch::{AsyncInboxConnection, Called, Handler, Inbox};

impl Inbox {
    /// A cursor of this consumer over the stream called `stream`: [`crate::Inbox::cursor`].
    ///
    /// # Errors
    ///
    /// [`InvalidStreamName`] for a name that is not 1 to 255 bytes of UTF-8 without control
    /// characters.
    pub fn cursor(&self, stream: &str) -> Result<Cursor, InvalidStreamName> {
        self.blocking().cursor(stream).map(Cursor)
    }

    /// The gap ledger of this consumer's cursors, every stream: [`crate::Inbox::gaps`].
    pub fn gaps(&self) -> Gaps {
        Gaps(self.blocking().gaps())
    }
}

/// A consumer's position in one ordered stream, on async connections: [`crate::cursor::Cursor`],
/// whose deliveries are awaited. Made with [`Inbox::cursor`].
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_inbox::{cursor::Resume, asynch};
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
pub struct Cursor(crate::cursor::Cursor);

impl From<crate::cursor::Cursor> for Cursor {
    fn from(cursor: crate::cursor::Cursor) -> Self {
        Self(cursor)
    }
}

impl Cursor {
    /// [`crate::cursor::Cursor::epoch`].
    pub fn epoch(self, epoch: u64) -> Self {
        Self(self.0.epoch(epoch))
    }

    /// [`crate::cursor::Cursor::max_open_gaps`].
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
    /// the cursor's advance: [`crate::cursor::Cursor::process`], awaited, with the async inbox's
    /// handlers, backoff and cancellation (see [`Inbox::process`]).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
    /// use diesel_inbox::asynch;
    ///
    /// type Conn = SyncConnectionWrapper<SqliteConnection>;
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let mut conn = Conn::new(SqliteConnection::establish(":memory:")?);
    /// asynch::run_pending_migrations(&mut conn).await?;
    /// let orders = asynch::Inbox::new("projector")?.cursor("orders-0")?;
    /// let apply = async |_tx: &mut Conn| Ok::<_, diesel_inbox::Error>(());
    ///
    /// assert!(orders.process(&mut conn, 1, apply).await?.is_processed());
    /// assert!(orders.process(&mut conn, 1, apply).await?.is_duplicate());
    /// let after_gap = orders.process(&mut conn, 4, apply).await?;
    /// assert_eq!(after_gap.gaps()[0].sequences(), 2..=3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`crate::cursor::Cursor::process`].
    pub fn process<'a, C, T, E, H>(
        &'a self,
        conn: &'a mut C,
        delivery: impl Into<Sequenced>,
        handler: H,
    ) -> impl Future<Output = Result<Outcome<T>, E>> + Send + 'a
    where
        C: AsyncInboxConnection,
        H: for<'c> AsyncFnMut(&'c mut C) -> Result<T, E> + for<'c> Handler<(&'c mut C,), T, E> + 'a,
        T: Send + 'a,
        E: HandlerError + Send + 'a,
    {
        let effect = Called::new(handler);
        self.0
            .process_in::<Async, _, _, _>(conn, delivery.into(), effect)
    }

    /// Offers a run of sequences in one transaction that locks and writes the cursor once,
    /// `handler` running for each one not settled yet: [`crate::cursor::Cursor::process_batch`],
    /// awaited.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
    /// use diesel_inbox::asynch;
    ///
    /// type Conn = SyncConnectionWrapper<SqliteConnection>;
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let mut setup = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut setup)?;
    /// let mut conn = Conn::new(setup);
    /// let orders = asynch::Inbox::new("projector")?.cursor("orders-0")?;
    ///
    /// let run = [(100, "a"), (101, "b"), (101, "b"), (102, "c")];
    /// let apply = async |_tx: &mut Conn, offset: u64, order: &&str| {
    ///     Ok::<_, diesel_inbox::Error>(format!("{offset}:{order}"))
    /// };
    /// let outcomes = orders.process_batch(&mut conn, &run, apply).await?;
    /// assert_eq!(outcomes.iter().filter(|o| o.is_processed()).count(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`crate::cursor::Cursor::process_batch`].
    pub fn process_batch<'a, C, M, T, E, H>(
        &'a self,
        conn: &'a mut C,
        items: &'a [(u64, M)],
        handler: H,
    ) -> impl Future<Output = Result<Vec<Outcome<T>>, E>> + Send + 'a
    where
        C: AsyncInboxConnection,
        M: Sync,
        H: for<'c, 'm> AsyncFnMut(&'c mut C, u64, &'m M) -> Result<T, E>
            + for<'c, 'm> Handler<(&'c mut C, u64, &'m M), T, E>
            + 'a,
        T: Send + 'a,
        E: HandlerError + Send + 'a,
    {
        let effect = Called::new(handler);
        self.0
            .process_batch_in::<Async, _, _, _, _>(conn, items, effect)
    }

    /// Removes the processed id rows at or below the watermark, in batches:
    /// [`crate::cursor::Cursor::prune_events`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::cursor::Cursor::prune_events`].
    ///
    /// # Panics
    ///
    /// When `batch_size` is 0.
    pub async fn prune_events<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        batch_size: usize,
    ) -> Result<u64, AdminError> {
        self.0.prune_events_in::<Async, _>(conn, batch_size).await
    }

    /// The gap ledger of this stream: [`crate::cursor::Cursor::gaps`].
    pub fn gaps(&self) -> Gaps {
        Gaps(self.0.gaps())
    }

    /// Every cursor of `inbox`'s consumer, by stream name: [`crate::cursor::Cursor::all`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn all<C: AsyncInboxConnection>(
        conn: &mut C,
        inbox: &Inbox,
    ) -> Result<Vec<Position>, Error> {
        crate::cursor::Cursor::all_in::<Async, _>(conn, &inbox.blocking()).await
    }

    /// Every consumer with a cursor or a gap: [`crate::cursor::Cursor::consumers`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn consumers<C: AsyncInboxConnection>(conn: &mut C) -> Result<Vec<String>, Error> {
        crate::cursor::Cursor::consumers_in::<Async, _>(conn).await
    }

    /// Makes the caller the stream's owner: [`crate::cursor::Cursor::acquire`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::cursor::Cursor::acquire`].
    pub async fn acquire<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        owner: &str,
    ) -> Result<Lease, Error> {
        self.0.acquire_in::<Async, _>(conn, owner).await
    }

    /// Where to seek the broker: [`crate::cursor::Cursor::resume`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn resume<C: AsyncInboxConnection>(&self, conn: &mut C) -> Result<Resume, Error> {
        self.0.resume_in::<Async, _>(conn).await
    }

    /// Where the cursor stands, if it has a row: [`crate::cursor::Cursor::position`], awaited.
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

/// A consumer's gap ledger, of every stream or of one, on async connections:
/// [`crate::cursor::Gaps`], awaited. Made with [`Inbox::gaps`] or [`Cursor::gaps`].
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_inbox::{cursor::{GapState, Resume}, asynch, Audit};
///
/// type Conn = SyncConnectionWrapper<SqliteConnection>;
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let mut setup = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut setup)?;
/// let mut conn = Conn::new(setup);
/// let cursor = asynch::Inbox::new("projector")?.cursor("orders-0")?;
/// let apply = async |_tx: &mut Conn| Ok::<_, diesel_inbox::Error>(());
/// cursor.process(&mut conn, 1, apply).await?;
/// cursor.process(&mut conn, 5, apply).await?; // 2..=4 missing
///
/// let gap = cursor.gaps().open(&mut conn).await?.remove(0)?;
/// let audit = Audit::new("ops@example.com", "2..=4 were test messages, deleted upstream")?;
/// let resolved = cursor.gaps().resolve(&mut conn, gap.id, &audit).await?;
/// assert_eq!(resolved.state, GapState::Resolved);
/// assert_eq!(cursor.resume(&mut conn).await?, Resume::At(6));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Gaps(crate::cursor::Gaps);

impl From<crate::cursor::Gaps> for Gaps {
    fn from(gaps: crate::cursor::Gaps) -> Self {
        Self(gaps)
    }
}

impl Gaps {
    /// The open gaps, by stream and first sequence: [`crate::cursor::Gaps::open`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn open<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
    ) -> Result<Vec<Result<Gap, CorruptRow>>, Error> {
        self.0.open_in::<Async, _>(conn).await
    }

    /// Up to `limit` gaps after gap id `after`: [`crate::cursor::Gaps::list`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn list<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Result<Gap, CorruptRow>>, Error> {
        self.0.list_in::<Async, _>(conn, after, limit).await
    }

    /// Resolves the open gap `id` and moves the watermark past it: [`crate::cursor::Gaps::resolve`],
    /// awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::cursor::Gaps::resolve`].
    pub async fn resolve<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
        audit: &Audit,
    ) -> Result<Gap, AdminError> {
        self.0.resolve_in::<Async, _>(conn, id, audit).await
    }
}
