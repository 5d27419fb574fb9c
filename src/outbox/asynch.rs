//! The producer side on async connections: [`Outbox::enqueue`] in the caller's transaction,
//! and a [`Relay`] whose passes run on an async connection and await an [`AsyncPublisher`].
//! Both run the sync API's bodies and statements.

use std::time::Duration;

use crate::outbox::Awaits;
use crate::sql::Async;
use crate::{
    envelope::Envelope,
    outbox::{AsyncPublisher, OutboxRecord, OutboxState, OutboxStats, RelayPass},
    AdminError, Audit, CorruptRow, Error,
};

use crate::asynch::AsyncInboxConnection;

/// A producer's outbox on async connections: [`crate::outbox::Outbox`], whose enqueues are awaited.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_inbox::{envelope::Envelope, outbox::{OutboxMessage, PublishError}, asynch};
///
/// /// Prints what it publishes; a real one sends to a broker and awaits its ack.
/// struct Stdout;
///
/// impl diesel_inbox::outbox::AsyncPublisher for Stdout {
///     async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
///         println!("{} -> {}", message.envelope.id(), message.topic);
///         Ok(())
///     }
/// }
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let mut setup = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut setup)?;
/// let mut conn: SyncConnectionWrapper<SqliteConnection> = SyncConnectionWrapper::new(setup);
/// let outbox = asynch::Outbox::new("orders-service")?;
///
/// let placed = Envelope::new("order.placed", "order", "42");
/// outbox.enqueue(&mut conn, "orders.placed", &placed).await?;
///
/// let relay = asynch::Relay::new();
/// assert_eq!(relay.run_once(&mut conn, &Stdout).await?.published, 1);
/// assert!(relay.run_once(&mut conn, &Stdout).await?.is_idle());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Outbox(crate::outbox::Outbox);

impl From<crate::outbox::Outbox> for Outbox {
    fn from(outbox: crate::outbox::Outbox) -> Self {
        Self(outbox)
    }
}

impl Outbox {
    /// [`crate::outbox::Outbox::new`].
    ///
    /// # Errors
    ///
    /// [`outbox::Refused::InvalidEnvelope`](super::Refused::InvalidEnvelope) when `producer` is
    /// empty.
    pub fn new(producer: &str) -> Result<Self, Error> {
        crate::outbox::Outbox::new(producer).map(Self)
    }

    /// The producer name.
    pub fn producer(&self) -> &str {
        self.0.producer()
    }

    /// Enqueues `envelope` for `topic` on `conn`: [`crate::outbox::Outbox::enqueue`], awaited. Inside
    /// a transaction, an async inbox handler's included, the row commits with it; outside
    /// one, in a transaction of its own.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
    /// use diesel_inbox::{envelope::Envelope, asynch};
    ///
    /// type Conn = SyncConnectionWrapper<SqliteConnection>;
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let mut conn = Conn::new(SqliteConnection::establish(":memory:")?);
    /// asynch::run_pending_migrations(&mut conn).await?;
    /// let outbox = asynch::Outbox::new("orders-service")?;
    /// let orders = asynch::Inbox::new("orders")?;
    ///
    /// // In the handler's transaction: the follow-up event commits with the effect, or neither does.
    /// let placed = Envelope::new("order.placed", "order", "42");
    /// let _ = orders.process(&mut conn, "evt-1", async |tx: &mut Conn| {
    ///     outbox.enqueue(tx, "orders.placed", &placed).await
    /// }).await?;
    /// assert_eq!(asynch::Outbox::stats(&mut conn).await?.pending, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`crate::outbox::Outbox::enqueue`].
    pub async fn enqueue<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        topic: &str,
        envelope: &Envelope,
    ) -> Result<(), Error> {
        self.0.enqueue_in::<Async, _>(conn, topic, envelope).await
    }

    /// The rows per state and the oldest pending row: [`crate::outbox::Outbox::stats`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn stats<C: AsyncInboxConnection>(conn: &mut C) -> Result<OutboxStats, Error> {
        crate::outbox::Outbox::stats_in::<Async, _>(conn).await
    }

    /// Up to `limit` rows after position `after`, in `state` where given:
    /// [`crate::outbox::Outbox::list`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn list<C: AsyncInboxConnection>(
        conn: &mut C,
        state: Option<OutboxState>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Result<OutboxRecord, CorruptRow>>, Error> {
        crate::outbox::Outbox::list_in::<Async, _>(conn, state, after, limit).await
    }

    /// The row at `position`: [`crate::outbox::Outbox::record`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::outbox::Outbox::record`].
    pub async fn record<C: AsyncInboxConnection>(
        conn: &mut C,
        position: i64,
    ) -> Result<OutboxRecord, AdminError> {
        crate::outbox::Outbox::record_in::<Async, _>(conn, position).await
    }

    /// Makes the failed row at `position` pending again: [`crate::outbox::Outbox::retry`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::outbox::Outbox::retry`].
    pub async fn retry<C: AsyncInboxConnection>(
        conn: &mut C,
        position: i64,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        crate::outbox::Outbox::retry_in::<Async, _>(conn, position, audit).await
    }

    /// Deletes the rows published more than `older_than` ago, in batches:
    /// [`crate::outbox::Outbox::prune`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn prune<C: AsyncInboxConnection>(
        conn: &mut C,
        older_than: Duration,
        batch: usize,
    ) -> Result<u64, Error> {
        crate::outbox::Outbox::prune_in::<Async, _>(conn, older_than, batch).await
    }
}

/// Publishes outbox rows from an async connection through an [`AsyncPublisher`]:
/// [`crate::outbox::Relay`], whose passes are awaited. Configure it as a [`crate::outbox::Relay`] and convert
/// it with `From`.
///
/// A pass holds its connection while it publishes; with a pool, take a connection for each
/// pass, so that a slow broker holds one connection at most.
#[derive(Debug, Clone, Default)]
pub struct Relay(crate::outbox::Relay);

impl From<crate::outbox::Relay> for Relay {
    fn from(relay: crate::outbox::Relay) -> Self {
        Self(relay)
    }
}

impl Relay {
    /// [`crate::outbox::Relay::new`].
    pub fn new() -> Self {
        Self(crate::outbox::Relay::new())
    }

    /// One pass: takes the rows due now, publishes them through `publisher` in order,
    /// awaiting each, and marks them: [`crate::outbox::Relay::run_once`], awaited.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
    /// use diesel_inbox::{outbox::{AsyncPublisher, OutboxMessage, PublishError}, envelope::Envelope, asynch};
    ///
    /// type Conn = SyncConnectionWrapper<SqliteConnection>;
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let mut conn = Conn::new(SqliteConnection::establish(":memory:")?);
    /// asynch::run_pending_migrations(&mut conn).await?;
    /// /// Accepts everything; a real one awaits its broker's ack.
    /// struct Accepting;
    ///
    /// impl AsyncPublisher for Accepting {
    ///     async fn publish(&self, _message: &OutboxMessage) -> Result<(), PublishError> {
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let placed = Envelope::new("order.placed", "order", "42");
    /// asynch::Outbox::new("orders")?.enqueue(&mut conn, "orders.placed", &placed).await?;
    /// let relay = asynch::Relay::new();
    /// assert_eq!(relay.run_once(&mut conn, &Accepting).await?.published, 1);
    /// assert!(relay.run_once(&mut conn, &Accepting).await?.is_idle());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`crate::outbox::Relay::run_once`].
    pub async fn run_once<C, P>(&self, conn: &mut C, publisher: &P) -> Result<RelayPass, AdminError>
    where
        C: AsyncInboxConnection,
        P: AsyncPublisher + ?Sized,
    {
        use tracing::Instrument;
        self.0
            .pass::<Async, _>(conn, &mut Awaits(publisher))
            .instrument(tracing::info_span!("relay"))
            .await
    }
}
