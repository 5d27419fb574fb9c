//! The inbox's async front: [`with_inbox`] and the operations of [`Inbox`] in the async
//! flavour, awaited. The settings are the one configuration type's
//! ([`crate::flavour::Inbox`]).

use std::future::Future;
use std::time::Duration;

use serde::Serialize;

use crate::asynch::{AsyncInboxConnection, Called, Handler};
use crate::sql::Async;
use crate::{
    retention::{Pruned, Retention, Stats},
    AdminError, Error, HandlerError, InboxRecord, IntoDelivery, IntoEventId, Outcome,
};

/// Runs `handler` once per event for the default consumer: the async
/// [`with_inbox`](crate::with_inbox), with the same guarantees (see [`Inbox::process`]).
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
/// assert!(asynch::with_inbox(&mut conn, "evt-1", noop).await?.is_processed());
/// assert!(asynch::with_inbox(&mut conn, "evt-1", noop).await?.is_duplicate());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// The handler's own error, unchanged, or the inbox's [`Error`] converted into
/// `E`.
#[allow(
    clippy::manual_async_fn,
    reason = "the signature promises a `Send` future, which an `async fn` would only leak"
)]
pub fn with_inbox<'a, C, T, E, H>(
    conn: &'a mut C,
    delivery: impl IntoDelivery + Send + 'a,
    handler: H,
) -> impl Future<Output = Result<Outcome<T>, E>> + Send + 'a
where
    C: AsyncInboxConnection,
    H: for<'c> AsyncFnMut(&'c mut C) -> Result<T, E> + for<'c> Handler<(&'c mut C,), T, E> + 'a,
    T: Send + 'a,
    E: HandlerError + Send + 'a,
{
    async move { Inbox::default().process(conn, delivery, handler).await }
}

/// The inbox for one consumer, on async connections: the one configuration type,
/// [`crate::flavour::Inbox`], in the [`Async`] flavour, whose deliveries are awaited. Its
/// builders are [`crate::Inbox`]'s, the same methods of the same type; a configured
/// [`crate::Inbox`] converts with `From`.
pub type Inbox = crate::flavour::Inbox<Async>;

impl From<crate::Inbox> for Inbox {
    fn from(inbox: crate::Inbox) -> Self {
        inbox.flavoured()
    }
}

impl Inbox {
    /// The same settings in the sync flavour, for the sync configurations the async ones wrap.
    pub(crate) fn blocking(&self) -> crate::Inbox {
        self.flavoured()
    }

    /// Runs `handler` if and only if this consumer has not processed the event yet, in one
    /// transaction with the record that it did: [`crate::Inbox::process`], awaited.
    ///
    /// Contention backs off on tokio's timer, never blocking the runtime; a panic in the
    /// handler rolls back, is recorded, and goes on unwinding; a dropped future leaves its
    /// connection broken, never inside a transaction (see [the module docs](crate::asynch)).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
    /// use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
    /// use diesel_inbox::{asynch, Outcome};
    ///
    /// type Conn = SyncConnectionWrapper<SqliteConnection>;
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let mut conn = Conn::new(SqliteConnection::establish(":memory:")?);
    /// asynch::run_pending_migrations(&mut conn).await?;
    /// conn.batch_execute("CREATE TABLE invoices (n INTEGER NOT NULL)").await?;
    ///
    /// let billing = asynch::Inbox::new("billing")?.max_attempts(5);
    /// let issue = async |tx: &mut Conn| diesel::sql_query("INSERT INTO invoices VALUES (1)").execute(tx).await;
    /// assert_eq!(billing.process(&mut conn, "evt-1", issue).await?, Outcome::Processed(1));
    /// assert!(billing.process(&mut conn, "evt-1", issue).await?.is_duplicate());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`crate::Inbox::process`].
    pub fn process<'a, C, T, E, H>(
        &'a self,
        conn: &'a mut C,
        delivery: impl IntoDelivery + Send + 'a,
        handler: H,
    ) -> impl Future<Output = Result<Outcome<T>, E>> + Send + 'a
    where
        C: AsyncInboxConnection,
        H: for<'c> AsyncFnMut(&'c mut C) -> Result<T, E> + for<'c> Handler<(&'c mut C,), T, E> + 'a,
        T: Send + 'a,
        E: HandlerError + Send + 'a,
    {
        self.run(conn, delivery, handler, |_| Ok(None))
    }

    /// [`process`](Self::process), keeping the handler's return value so that a duplicate
    /// delivery gets the first answer back: [`crate::Inbox::process_storing_result`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::Inbox::process_storing_result`].
    pub fn process_storing_result<'a, C, T, E, H>(
        &'a self,
        conn: &'a mut C,
        delivery: impl IntoDelivery + Send + 'a,
        handler: H,
    ) -> impl Future<Output = Result<Outcome<T>, E>> + Send + 'a
    where
        C: AsyncInboxConnection,
        H: for<'c> AsyncFnMut(&'c mut C) -> Result<T, E> + for<'c> Handler<(&'c mut C,), T, E> + 'a,
        T: Serialize + Send + 'a,
        E: HandlerError + Send + 'a,
    {
        self.run(conn, delivery, handler, |value| {
            serde_json::to_string(value).map(Some)
        })
    }

    /// This consumer's [`Stats`]: [`crate::Inbox::stats`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn stats<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        recent: Duration,
    ) -> Result<Stats, Error> {
        let since = crate::retention::stats::since(recent);
        crate::retention::stats::read::<Async, _>(conn, self.consumer(), since).await
    }

    /// Prunes this consumer's rows settled before `retention`'s age:
    /// [`crate::Inbox::prune`], awaited. Cancelled while it holds the prune lock (between
    /// batches or inside one), the connection is marked broken, so that a pool discards it
    /// and the server frees the lock with the session; the batches committed stay, and the
    /// next prune continues where this one stopped.
    ///
    /// # Errors
    ///
    /// As [`crate::Inbox::prune`].
    pub async fn prune<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        retention: &Retention,
    ) -> Result<Pruned, AdminError> {
        self.prune_in::<Async, _>(conn, retention).await
    }

    /// What the inbox table records of `event_id` for this consumer:
    /// [`crate::Inbox::record`], awaited.
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
    /// let inbox = asynch::Inbox::default();
    /// assert_eq!(inbox.record(&mut conn, "evt-1").await?, None);
    /// let ok = async |_: &mut Conn| Ok::<_, diesel_inbox::Error>(());
    /// let _ = inbox.process(&mut conn, "evt-1", ok).await?;
    /// let _ = inbox.process(&mut conn, "evt-1", ok).await?;
    /// let record = inbox.record(&mut conn, "evt-1").await?.expect("processed");
    /// assert_eq!(record.deliveries(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`crate::Inbox::record`].
    pub async fn record<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
    ) -> Result<Option<InboxRecord>, Error> {
        let event_id = event_id.into_event_id()?;
        self.record_in::<Async, _>(conn, &event_id).await
    }

    /// Up to `limit` rows of the inbox table, every consumer's: [`crate::Inbox::records`],
    /// awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::Inbox::records`].
    pub async fn records<C: AsyncInboxConnection>(
        conn: &mut C,
        limit: usize,
    ) -> Result<Vec<InboxRecord>, Error> {
        crate::Inbox::records_in::<Async, _>(conn, limit).await
    }

    /// A delivery through the one inbox body, with `encode` deciding what result to store.
    fn run<'a, C, T, E, H>(
        &'a self,
        conn: &'a mut C,
        delivery: impl IntoDelivery + Send + 'a,
        handler: H,
        encode: fn(&T) -> Result<Option<String>, serde_json::Error>,
    ) -> impl Future<Output = Result<Outcome<T>, E>> + Send + 'a
    where
        C: AsyncInboxConnection,
        H: for<'c> AsyncFnMut(&'c mut C) -> Result<T, E> + for<'c> Handler<(&'c mut C,), T, E> + 'a,
        T: Send + 'a,
        E: HandlerError + Send + 'a,
    {
        self.run_in::<Async, _, _, _>(conn, delivery, Called::new(handler), encode)
    }
}
