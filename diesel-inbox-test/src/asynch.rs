//! The testing helpers for the async flavour (feature `async`): the same checks as the sync
//! helpers, reading through an async connection. Their failure messages are the sync ones'.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
//! use diesel_inbox::asynch;
//! use diesel_inbox_test::asynch::{assert_deliveries, assert_processed_once};
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

use std::fmt::Debug;
use std::future::{poll_fn, Future};
use std::marker::PhantomData;
use std::ops::DerefMut;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::Poll;

use diesel::QueryResult;

use diesel_inbox::asynch::{AsyncInboxConnection, Handler, Inbox};
use diesel_inbox::{dead_letter::DeadLetter, EventId, InboxRecord, IntoEventId, Outcome};

use crate::assert::{self, id, Seen};
use crate::harness::{check, counted, Delivered, DeliveryReport};
use crate::schedule::{judge, play, Deliver, Failed, Schedule, Struck};

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
    let seen = Seen::read(conn, inbox, id(event_id), false).await;
    assert::processed_once(inbox.consumer(), seen)
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
    let seen = Seen::read(conn, inbox, id(event_id), false).await;
    assert::deliveries(inbox.consumer(), seen, expected)
}

/// [`super::assert_not_processed`], reading through an async connection.
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
/// let inbox = asynch::Inbox::new("billing")?.max_attempts(1);
/// let fails = async |_: &mut Conn| Err::<(), _>(diesel_inbox::Error::transient("down"));
/// assert!(inbox.process(&mut conn, "evt-1", fails).await.is_err());
///
/// diesel_inbox_test::asynch::assert_not_processed(&mut conn, &inbox, "evt-1").await;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Panics
///
/// As [`super::assert_not_processed`].
pub async fn assert_not_processed<C: AsyncInboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) {
    let seen = Seen::read(conn, inbox, id(event_id), false).await;
    assert::not_processed(inbox.consumer(), seen);
}

/// [`super::assert_dead_lettered`], reading through an async connection.
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
/// let inbox = asynch::Inbox::new("billing")?.max_attempts(1);
/// let fails = async |_: &mut Conn| Err::<(), _>(diesel_inbox::Error::permanent("bad payload"));
/// let _ = inbox.process(&mut conn, "evt-1", fails).await;
///
/// let dead = diesel_inbox_test::asynch::assert_dead_lettered(&mut conn, &inbox, "evt-1").await;
/// assert_eq!(dead.attempts, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Panics
///
/// As [`super::assert_dead_lettered`].
pub async fn assert_dead_lettered<C: AsyncInboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) -> DeadLetter {
    let seen = Seen::read(conn, inbox, id(event_id), true).await;
    assert::dead_lettered(inbox.consumer(), seen)
}

/// [`super::assert_idempotent`] for an async handler on an async connection (feature `async`):
/// delivers one event `times` times in a row through `handler`, awaiting each, and asserts
/// that it took effect exactly once. Same checks and report; `effects` is async too.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel::sql_types::BigInt;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
/// use diesel_inbox::asynch;
/// use diesel_inbox_test::{self, TestDatabase};
///
/// type Conn = SyncConnectionWrapper<SqliteConnection>;
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let db = TestDatabase::sqlite();
/// let mut conn = Conn::new(db.connect());
/// conn.batch_execute("CREATE TABLE wallet (cents BIGINT NOT NULL); INSERT INTO wallet VALUES (0);")
///     .await?;
///
/// let report = diesel_inbox_test::asynch::assert_idempotent(
///     &mut conn,
///     5,
///     async |conn: &mut Conn| {
///         asynch::with_inbox(conn, "payment-1", async |tx: &mut Conn| {
///             diesel::sql_query("UPDATE wallet SET cents = cents + 500").execute(tx).await
///         })
///         .await
///     },
///     async |conn: &mut Conn| {
///         diesel::select(diesel::dsl::sql::<BigInt>("(SELECT cents / 500 FROM wallet)"))
///             .get_result(conn)
///             .await
///     },
/// )
/// .await;
/// assert_eq!(report.duplicates(), 4);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Panics
///
/// As [`super::assert_idempotent`].
pub async fn assert_idempotent<C, T, E, H, O>(
    conn: &mut C,
    times: usize,
    mut handler: H,
    mut effects: O,
) -> DeliveryReport
where
    H: AsyncFnMut(&mut C) -> Result<Outcome<T>, E>,
    E: Debug,
    O: AsyncFnMut(&mut C) -> QueryResult<i64>,
{
    assert!(times > 0, "assert_idempotent needs at least one delivery");
    let before = counted(effects(conn).await, "before the first delivery");
    let mut delivered = Vec::with_capacity(times);
    for _ in 0..times {
        delivered.push(Delivered::of(handler(conn).await));
    }
    let after = counted(effects(conn).await, "after the last delivery");
    check(&delivered, before, after, "one after another")
}

/// [`super::assert_idempotent_concurrently`] for an async handler: delivers one event
/// `times` times at once, as that many futures polled together on the calling task, each
/// with its own connection from `checkout`, and asserts that it took effect exactly once.
///
/// `checkout` hands out a connection as a pool does (diesel-async's deadpool or bb8 pool,
/// `async || pool.get().await.unwrap()`); a pool smaller than `times` is fine, deliveries
/// queue for connections. `effects` runs on a connection of its own from `checkout`.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel::sql_types::BigInt;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};
/// use diesel_inbox::asynch;
/// use diesel_inbox_test::{self, TestDatabase};
///
/// type Conn = SyncConnectionWrapper<SqliteConnection>;
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let db = TestDatabase::sqlite();
/// let mut setup = Conn::new(db.connect());
/// setup.batch_execute("CREATE TABLE sent (event_id TEXT NOT NULL)").await?;
///
/// let report = diesel_inbox_test::asynch::assert_idempotent_concurrently(
///     async || Box::new(Conn::new(db.connect())),
///     8,
///     async |conn: &mut Conn| {
///         asynch::with_inbox(conn, "evt-1", async |tx: &mut Conn| {
///             diesel::sql_query("INSERT INTO sent VALUES ('evt-1')").execute(tx).await
///         })
///         .await
///     },
///     async |conn: &mut Conn| {
///         diesel::select(diesel::dsl::sql::<BigInt>("(SELECT COUNT(*) FROM sent)"))
///             .get_result(conn)
///             .await
///     },
/// )
/// .await;
/// assert_eq!(report.processed(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Panics
///
/// As [`super::assert_idempotent_concurrently`]; a panic in `checkout` or `handler`
/// propagates.
pub async fn assert_idempotent_concurrently<C, P, T, E, K, H, O>(
    checkout: K,
    times: usize,
    handler: H,
    mut effects: O,
) -> DeliveryReport
where
    P: DerefMut<Target = C>,
    K: AsyncFn() -> P,
    H: AsyncFn(&mut C) -> Result<Outcome<T>, E>,
    E: Debug,
    O: AsyncFnMut(&mut C) -> QueryResult<i64>,
{
    assert!(
        times > 0,
        "assert_idempotent_concurrently needs at least one delivery"
    );
    let before = counted(
        effects(&mut *checkout().await).await,
        "before the first delivery",
    );
    let deliveries = (0..times).map(|_| async {
        let mut conn = checkout().await;
        Delivered::of(handler(&mut conn).await)
    });
    let delivered = together(deliveries).await;
    let after = counted(
        effects(&mut *checkout().await).await,
        "after the last delivery",
    );
    check(
        &delivered,
        before,
        after,
        "all at once, as concurrent futures",
    )
}

/// Polls `futures` together on the calling task until all are done: their outputs in order.
async fn together<T>(futures: impl IntoIterator<Item = impl Future<Output = T>>) -> Vec<T> {
    let mut pending: Vec<Pin<Box<_>>> = futures.into_iter().map(Box::pin).collect();
    let mut done: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    poll_fn(|cx| {
        for (future, output) in pending.iter_mut().zip(&mut done) {
            if output.is_none() {
                if let Poll::Ready(value) = future.as_mut().poll(cx) {
                    *output = Some(value);
                }
            }
        }
        if done.iter().all(Option::is_some) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    done.into_iter().flatten().collect()
}

/// [`super::run_schedule`] for an async effect on an async connection: runs `schedule`
/// through `inbox`, awaiting `effect(tx, id)` in each delivery, with the same faults, checks
/// and report. `effects` is async too.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel::sql_types::{BigInt, Text};
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
/// use diesel_inbox_test::{self, Schedule, TestDatabase};
/// use diesel_inbox::{asynch, EventId};
///
/// type Conn = SyncConnectionWrapper<SqliteConnection>;
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let db = TestDatabase::sqlite();
/// let mut conn = Conn::new(db.connect());
/// conn.batch_execute("CREATE TABLE ledger (event_id TEXT NOT NULL)").await?;
///
/// let schedule = Schedule::random(3);
/// let report = diesel_inbox_test::asynch::run_schedule(
///     &mut conn,
///     &asynch::Inbox::new("ledger")?,
///     &schedule,
///     async |tx: &mut Conn, id: &EventId| {
///         diesel::sql_query("INSERT INTO ledger VALUES (?)")
///             .bind::<Text, _>(id.as_str())
///             .execute(tx)
///             .await
///     },
///     async |conn: &mut Conn| {
///         diesel::select(diesel::dsl::sql::<BigInt>("(SELECT COUNT(*) FROM ledger)"))
///             .get_result(conn)
///             .await
///     },
/// )
/// .await;
/// assert_eq!(report.processed(), schedule.distinct_events());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Panics
///
/// As [`super::run_schedule`].
pub async fn run_schedule<C, T, E, G, O>(
    conn: &mut C,
    inbox: &Inbox,
    schedule: &Schedule,
    effect: G,
    mut effects: O,
) -> DeliveryReport
where
    C: AsyncInboxConnection,
    G: for<'c, 'i> AsyncFnMut(&'c mut C, &'i EventId) -> Result<T, E>
        + for<'c, 'i> Handler<(&'c mut C, &'i EventId), T, E>,
    T: Send,
    E: Debug + Send,
    O: AsyncFnMut(&mut C) -> QueryResult<i64>,
{
    let before = counted(effects(conn).await, "before the first delivery");
    let played = play(conn, inbox, schedule, &mut AsyncSteps(effect, PhantomData)).await;
    let after = counted(effects(conn).await, "after the last delivery");
    judge(schedule, played, before, after)
}

/// The async flavour's steps: `effect(tx, id)` through [`Inbox::process`].
struct AsyncSteps<G, T, E>(G, PhantomData<fn() -> (T, E)>);

impl<C, T, E, G> Deliver<C> for AsyncSteps<G, T, E>
where
    C: AsyncInboxConnection,
    G: for<'c, 'i> AsyncFnMut(&'c mut C, &'i EventId) -> Result<T, E>
        + for<'c, 'i> Handler<(&'c mut C, &'i EventId), T, E>,
    T: Send,
    E: Debug + Send,
{
    type Inbox = Inbox;
    type Output = T;
    type Error = E;

    fn deliver(
        &mut self,
        inbox: &Inbox,
        conn: &mut C,
        n: usize,
        id: &EventId,
        struck: &Struck,
    ) -> impl Future<Output = Result<Outcome<T>, Failed<E>>> {
        // The effect behind a lock held only to call it: the future it returns borrows the
        // transaction, not the closure, so the handler is one `asynch` takes.
        let effect = Mutex::new(&mut self.0);
        async move {
            let handler = async |tx: &mut C| {
                let future = {
                    let mut effect = effect.lock().unwrap_or_else(PoisonError::into_inner);
                    Handler::call(&mut **effect, (tx, id))
                };
                struck.strike(future.await, n, id)
            };
            inbox.process(conn, id, handler).await
        }
    }
}
