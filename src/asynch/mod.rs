//! The async flavour, on diesel-async (feature `async`): the same inbox, with async closures
//! for handlers.
//!
//! The names and the guarantees are the sync API's: [`with_inbox`] and [`Inbox::process`]
//! run a handler once per event, in one transaction with the record that it did, on
//! `AsyncPgConnection`, `AsyncMysqlConnection`, `SyncConnectionWrapper<SqliteConnection>`, and
//! the pooled connections of diesel-async's deadpool and bb8 pools. Both flavours run the same
//! transaction bodies and statements; only the connection's I/O differs.
//!
//! Each a wrapper of the sync type with the same methods, awaited:
//! - [`Inbox`]: deliveries, stored results, batches ([`Inbox::process_batch`],
//!   [`Inbox::process_bulk`]), stats, [prune](Inbox::prune);
//! - [`Cursor`] ([`Inbox::cursor`]): ordered streams, batches of sequences, fencing, where to
//!   resume, pruning by cursor; [`Gaps`]: the gap ledger, listed and resolved;
//! - [`DeadLetters`] ([`Inbox::dead_letters`]): list, show, redrive, discard, release;
//! - [`Chain`] ([`Inbox::chain`]): chain cursors that undo reorgs, with an async
//!   [`ChainHandler`]; [`Reorgs`]: the fork ledger;
//! - [`Claims`] ([`Inbox::claims`]) and a held [`Claim`]: side effects outside the database,
//!   and the claims in doubt, listed and resolved;
//! - [`Replays`]: governed replays, with an async [`ReplayHandler`] and [`ReplaySource`];
//! - [`Outbox`] and [`Relay`]: the producer side, publishing through an
//!   [`AsyncPublisher`](crate::outbox::AsyncPublisher); the outbox's rows listed, retried, pruned;
//! - [`run_pending_migrations`]: the schema, fleet-safe; [`doctor::check`]: its health;
//!   [`stats::all`]: every consumer's stats.
//!
//! [`Inbox`] is the sync inbox's own type in the async flavour ([`crate::flavour`]): its
//! settings and builders are written once for both. The other types wrap their sync
//! configuration: each async builder forwards to it, and a configured sync value converts
//! with `From` ([`Relay`] has only that). A unit test names every field of the sync
//! [`crate::replay::Replays`] and sets each through the async builder, so a setting added on
//! the sync side fails to compile there until it is forwarded.
//!
//! A future dropped while its connection holds a transaction or a session-level lock (a
//! prune's, the migrations') marks the connection broken: it refuses the next transaction,
//! and diesel-async's pools discard it, which ends both on the server.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
//! use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
//! use diesel_inbox::{asynch, Outcome};
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let mut setup = SqliteConnection::establish(":memory:")?;
//! diesel_inbox::run_pending_migrations(&mut setup)?;
//! let mut conn = SyncConnectionWrapper::new(setup);
//! conn.batch_execute("CREATE TABLE points (n INTEGER NOT NULL)").await?;
//!
//! let award = async |tx: &mut SyncConnectionWrapper<SqliteConnection>| {
//!     diesel::sql_query("INSERT INTO points (n) VALUES (10)")
//!         .execute(tx)
//!         .await
//! };
//! let first = asynch::with_inbox(&mut conn, "evt-1", award).await?;
//! let again = asynch::with_inbox(&mut conn, "evt-1", award).await?;
//! assert_eq!(first, Outcome::Processed(1));
//! assert!(again.is_duplicate());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Handlers
//!
//! A handler is an async closure over the transaction's connection, `async |tx| { ... }`,
//! called again when contention rolls the transaction back. It may borrow from its
//! surroundings (`&event`), and its future must be `Send`, so that the delivery can run on a
//! multi-threaded runtime. It cannot take its captures by `move` or mutate them: each call's
//! future must stand on its own. A handler that counts its attempts uses an atomic or a
//! `Cell`.
//!
//! Every shape of handler, whatever the number of its arguments, is one trait, [`Handler`],
//! generic over the tuple of the arguments: `Handler<(&mut C,), T, E>` for a delivery's,
//! `Handler<(&mut C, &Delivery), T, E>` for a batch's, and so on.
//!
//! # Cancellation
//!
//! A delivery's future may be dropped at any await point: by a `timeout`, a `select!`, or a
//! shutdown. Its transaction never commits half an effect: it commits whole or not at all.
//! What a dropped delivery leaves is an open transaction on the connection, which
//! diesel-async does not end. The inbox marks that connection's transaction manager broken:
//! the next transaction on it fails with [`Error::Database`]
//! (`BrokenTransactionManager`), and diesel-async's pools discard it instead of handing it out
//! again, which closes the session and ends the transaction on the server. So every cancelled
//! delivery costs a reconnect, and the event is neither lost nor doubled: redelivered, it is
//! processed, or a duplicate if the commit had gone through.
//!
//! Two cases to know:
//! - **deadpool** checks a connection when it hands it out, not when it takes it back: until
//!   then a cancelled delivery's connection sits idle in the pool with its transaction open,
//!   and a redelivery of the same event on another connection waits on that transaction's row
//!   lock. bb8 checks when it takes the connection back and closes it at once.
//! - **`SyncConnectionWrapper`** (SQLite) waits for a statement still running on tokio's
//!   blocking pool when its future is dropped, with `block_in_place`: cancelling a delivery
//!   on it needs tokio's multi-thread runtime, and holds up the task that drops it until the
//!   statement returns. A sibling delivery in the same task cannot go on meanwhile; if it
//!   holds SQLite's write lock that the dropped one waits for, the task stalls for the busy
//!   timeout. Give each delivery a task of its own that takes its own pooled connection
//!   (`tokio::spawn`, a `JoinSet`), as the NATS package's `examples/async_service.rs` does: a timeout then stops
//!   waiting for the delivery, which runs on to its end.
//!
//! # The other areas, awaited
//!
//! The producer side, ordered streams, chains and claims have the sync API's names and
//! semantics, with async closures (sketched here over a pool of diesel-async connections; the
//! sync chapters have the runnable examples):
//!
//! ```ignore
//! // In a handler's transaction: the invoice and its event commit together.
//! let outbox = asynch::Outbox::new("billing")?;
//! billing.process(&mut *conn, &envelope, async |tx| {
//!     diesel::insert_into(invoices::table).values(&invoice).execute(tx).await?;
//!     outbox.enqueue(tx, "invoices.issued", &issued).await
//! }).await;
//!
//! // A relay pass on a pooled connection, awaiting an `AsyncPublisher` (JetStream, say).
//! let pass = asynch::Relay::new().run_once(&mut *pool.get().await?, &publisher).await?;
//!
//! // A cursor over an ordered stream, fenced by the lease its owner acquired.
//! let orders = asynch::Inbox::new("projector")?.cursor("orders-0")?;
//! let lease = orders.acquire(&mut *conn, "worker-a").await?;
//! let orders = orders.epoch(lease.epoch());
//! orders.process(&mut *conn, seq, async |tx| project(tx, &order).await).await?;
//!
//! // A chain cursor: an `asynch::ChainHandler` writes its apply and revert as `async fn`s.
//! let chain = asynch::Inbox::new("rewards")?.chain("eth:mainnet", 64)?;
//! chain.process(&mut *conn, &block, &mut rewards).await?;
//!
//! // A claim: the side effect is an async closure over the claim.
//! let mailer = asynch::Inbox::new("mailer")?.claims();
//! let sent = mailer
//!     .run(&mut *conn, &envelope, async |claim| mail.send(&welcome, claim.idempotency_key()).await)
//!     .await?; // ClaimOutcome::Ran, or Completed with the first send's result
//! ```
//!
//! A relay pass holds its connection while it awaits the broker: take one from the pool for
//! each pass. An async handler's future is boxed, once per attempt, so that rustc lays it out
//! apart from the inbox's own (a handler that enqueues nests a second transaction body in the
//! first). Batches take an async closure over the transaction and one new delivery
//! (`process_batch`), or all of them at once (`process_bulk`), with the sync API's failure
//! isolation; cursor batches take `async |tx, sequence, message| ..`. The ops calls are here
//! too, awaited: pruning, the gap ledger, the claims in doubt, the outbox's rows, stats and the
//! doctor.

pub(crate) mod batch;
pub mod doctor;
mod migrations;
pub mod stats;

use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use diesel_async::AsyncConnection;
use serde::Serialize;

use crate::engine::Effect;
use crate::sql::{Async, Sql};
use crate::{
    retention::{Pruned, Retention, Stats},
    AdminError, Error, HandlerError, InboxRecord, IntoDelivery, IntoEventId, Outcome,
};

pub use crate::chain::asynch::{Chain, ChainHandler, Reorgs};
pub use crate::claim::asynch::{Claim, Claimed, Claims};
pub use crate::cursor::asynch::{Cursor, Gaps};
pub use crate::dead_letter::asynch::DeadLetters;
pub use crate::outbox::asynch::{Outbox, Relay};
pub use crate::replay::asynch::{ReplayHandler, ReplaySource, Replays};
pub use migrations::{run_pending_migrations, run_pending_migrations_with};

/// A connection the async inbox runs on: every diesel-async connection to PostgreSQL,
/// MySQL/MariaDB or SQLite (through `SyncConnectionWrapper`), and the pooled connections of
/// diesel-async's pools. Sealed: its backend holds the inbox's statements.
pub trait AsyncInboxConnection: AsyncConnection<Backend: Sql> + 'static {}

impl<C: AsyncConnection<Backend: Sql> + 'static> AsyncInboxConnection for C {}

/// The async closures the async front takes, of every shape: `async |tx| ...`,
/// `async |tx, delivery| ...`, `async |tx, sequence, message| ...`, `async |claim| ...`.
///
/// `Args` is the tuple of the arguments one call takes, so `Handler<(&mut C,), T, E>` is a
/// handler over the transaction's connection and `Handler<(&mut C, &Delivery), T, E>` one
/// of a batch's deliveries. It is implemented, for each arity, for every closure
/// `AsyncFnMut(A, ..) -> Result<T, E>` that is `Send` and whose future is `Send`: the
/// future's type, which `AsyncFnMut` leaves unnamed, is [`Handler::Future`] here, so that the
/// future of a delivery running the handler can promise `Send` in turn. A method that takes
/// a handler states the same shape as an `AsyncFnMut` bound too, from which the compiler
/// learns the closure's argument types: `async |tx| ...` needs no annotation.
///
/// A handler is called again when contention rolls its transaction back, and it may borrow
/// from its surroundings; it cannot take its captures by `move` or mutate them (each call's
/// future must stand on its own), as [the module docs](self#handlers) say.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_inbox::{asynch::{self, Handler}, Delivery, Error};
///
/// type Conn = SyncConnectionWrapper<SqliteConnection>;
///
/// // One argument, as `Inbox::process` takes it; two, as `Inbox::process_batch` does.
/// fn apply() -> impl for<'c> Handler<(&'c mut Conn,), u32, Error> {
///     async |_tx: &mut Conn| Ok(1)
/// }
/// fn apply_each() -> impl for<'c, 'd> Handler<(&'c mut Conn, &'d Delivery), usize, Error> {
///     async |_tx: &mut Conn, delivery: &Delivery| Ok(delivery.id().as_str().len())
/// }
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let mut conn = Conn::new(SqliteConnection::establish(":memory:")?);
/// asynch::run_pending_migrations(&mut conn).await?;
/// let mut handler = apply();
/// assert_eq!(handler.call((&mut conn,)).await?, 1);
/// assert!(apply_each().call((&mut conn, &Delivery::new("evt-1")?)).await? > 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Handler<Args, T, E>: Send {
    /// The future one call returns.
    type Future: Future<Output = Result<T, E>> + Send;

    /// Calls the handler with `args`.
    fn call(&mut self, args: Args) -> Self::Future;
}

/// Implements [`Handler`] for the async closures of the arguments named.
macro_rules! handler {
    ($($arg:ident),+) => {
        impl<H, Fut, T, E, $($arg),+> Handler<($($arg,)+), T, E> for H
        where
            H: AsyncFnMut($($arg),+) -> Result<T, E> + FnMut($($arg),+) -> Fut + Send,
            Fut: Future<Output = Result<T, E>> + Send,
        {
            type Future = Fut;

            #[allow(non_snake_case, reason = "the arguments are named by their types")]
            fn call(&mut self, ($($arg,)+): ($($arg,)+)) -> Fut {
                self($($arg),+)
            }
        }
    };
}

handler!(A);
handler!(A, B);
handler!(A, B, D);

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
    /// connection broken, never inside a transaction (see [the module docs](self)).
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

/// A [`Handler`] as the engine calls it, whatever its shape: through the future type it
/// names, which is `Send` (an async closure called as `AsyncFnMut` is not provably so,
/// rust-lang/rust#134997), and boxed, so that rustc lays the handler's future out apart from
/// the delivery's: the engine's own nesting and a handler's (one that enqueues or claims,
/// say) together would pass its layout depth limit. One allocation per call.
///
/// One adapter for every engine trait a shape of handler serves: a delivery's effect, a
/// batch's effect for each delivery, a cursor batch's for each sequence, a redrive's, a
/// claim's side effect and its record writes.
pub(crate) struct Called<H, T, E>(pub(crate) H, PhantomData<fn() -> (T, E)>);

impl<H, T, E> Called<H, T, E> {
    /// `handler`, to be called by the engine.
    pub(crate) fn new(handler: H) -> Self {
        Self(handler, PhantomData)
    }
}

impl<C, T, E, H> Effect<C> for Called<H, T, E>
where
    H: for<'c> Handler<(&'c mut C,), T, E>,
{
    type Output = T;
    type Error = E;

    fn call(&mut self, conn: &mut C) -> impl Future<Output = Result<T, E>> {
        Box::pin(self.0.call((conn,)))
    }
}

/// Parity with the sync builders, for the configurations the async front still wraps (the
/// inbox's are one type for both flavours). Each test names every field of a sync
/// configuration without `..`: a setting added to the sync type fails to compile here, and
/// each field is set through the async builder to something other than its default, so a
/// setting the async type does not forward fails the test.
#[cfg(test)]
mod parity {
    use std::time::Duration;

    use crate::replay;
    use crate::RetryPolicy;

    fn other_policy() -> RetryPolicy {
        RetryPolicy::default().max_retries(3)
    }

    #[test]
    fn every_setting_of_the_sync_replays_is_set_through_the_async_one() {
        let replays = super::Replays::new()
            .runner("nightly")
            .batch_size(7)
            .lease(Duration::from_secs(11))
            .retry(other_policy());

        let replay::Replays {
            runner,
            batch_size,
            lease,
            retry,
        } = replays.into_sync();
        assert_eq!(runner, "nightly");
        assert_eq!(batch_size, 7);
        assert_eq!(lease, Duration::from_secs(11));
        assert_eq!(retry, other_policy());
    }
}
