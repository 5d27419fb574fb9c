//! The two flavours a scenario written once runs on: [`Blocking`], the sync API on a Diesel
//! connection, and [`Async`], `diesel_inbox::asynch` on a diesel-async one.
//!
//! A scenario is an `async fn` over `F: Flavour`. Its handlers are async closures over
//! `&mut F::Conn` that write through [`Tx`]; the blocking flavour hands the sync API a closure
//! that polls such a handler once, which completes it, since a sync connection's [`Tx`] futures
//! are ready when made. What a scenario checks it reads through a sync connection of its own
//! ([`TestConn`]), whichever the flavour.

use std::fmt::Debug;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::connection::TransactionManager;
use diesel::prelude::*;
use diesel_inbox::doctor::Check;
use diesel_inbox::migrations::MigrationOptions;
use diesel_inbox::testing::{self, DeliveryReport, InboxRecord, Schedule, TestDatabase};
use diesel_inbox::{
    AdminError, AsyncPublisher, Audit, Claim, ClaimOutcome, ClaimRecord, Claimed, Claims,
    CorruptRow, Cursor, DeadLetter, Delivery, Envelope, Error, EventId, Gap, Gaps, HandlerError,
    Inbox, IntoDelivery, Lease, Outbox, OutboxRecord, OutboxState, OutboxStats, Outcome, Payload,
    Position, Pruned, Publisher, Relay, RelayPass, Resolution, Resume, Retention, Sequenced, Stats,
};
use futures_util::FutureExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{transaction_depth, Backend, EffectConn, StatementLog};

/// What a scenario's handler does inside the delivery's transaction.
pub(crate) trait Tx: Send {
    /// [`TestConn::record_effect`], through this connection.
    fn write_effect(&mut self, event_id: &str) -> impl Future<Output = QueryResult<()>> + Send;

    /// [`TestConn::record_effects`], through this connection: one statement.
    fn write_effects(&mut self, event_ids: &[&str])
        -> impl Future<Output = QueryResult<()>> + Send;

    /// Runs `sql`, statements separated by `;`.
    fn execute(&mut self, sql: &str) -> impl Future<Output = QueryResult<()>> + Send;
}

impl<C: EffectConn> Tx for C {
    fn write_effect(&mut self, event_id: &str) -> impl Future<Output = QueryResult<()>> + Send {
        std::future::ready(EffectConn::write_effect(self, event_id))
    }

    fn write_effects(
        &mut self,
        event_ids: &[&str],
    ) -> impl Future<Output = QueryResult<()>> + Send {
        std::future::ready(EffectConn::write_effects(self, event_ids))
    }

    fn execute(&mut self, sql: &str) -> impl Future<Output = QueryResult<()>> + Send {
        std::future::ready(self.batch_execute(sql))
    }
}

/// A handler the scenarios pass to flavour `F`: an async closure over `&mut F::Conn`, whose
/// future is `Send` where the async flavour is compiled in, as `asynch` requires.
pub(crate) trait Handle<F: Flavour + ?Sized, T, E>: Send {
    /// One call, as the blocking flavour makes it.
    fn call<'c>(&'c mut self, tx: &'c mut F::Conn) -> impl Future<Output = Result<T, E>>;

    /// The handler as `asynch` takes it.
    #[cfg(feature = "async")]
    #[allow(dead_code, reason = "the sync test binaries compile it too, unused")]
    fn into_async(self) -> impl diesel_inbox::asynch::Handler<F::Conn, T, E>;
}

#[cfg(feature = "async")]
impl<F, T, E, H> Handle<F, T, E> for H
where
    F: Flavour + ?Sized,
    H: diesel_inbox::asynch::Handler<F::Conn, T, E>,
{
    fn call<'c>(&'c mut self, tx: &'c mut F::Conn) -> impl Future<Output = Result<T, E>> {
        self(tx)
    }

    fn into_async(self) -> impl diesel_inbox::asynch::Handler<F::Conn, T, E> {
        self
    }
}

#[cfg(not(feature = "async"))]
impl<F, T, E, H> Handle<F, T, E> for H
where
    F: Flavour + ?Sized,
    H: for<'c> AsyncFnMut(&'c mut F::Conn) -> Result<T, E> + Send,
{
    fn call<'c>(&'c mut self, tx: &'c mut F::Conn) -> impl Future<Output = Result<T, E>> {
        self(tx)
    }
}

/// A two-argument handler the scenarios pass to flavour `F`: an async closure over
/// `&mut F::Conn` and `$arg`, as `asynch`'s method takes it where the async flavour is
/// compiled in (an `AsyncHandler2` whose future is `Send`).
macro_rules! handle_with {
    ($(#[$doc:meta])* $name:ident<$($l:lifetime),+>($arg:ty) -> $out:ty) => {
        $(#[$doc])*
        pub(crate) trait $name<F: Flavour + ?Sized, T, E>: Send {
            /// One call, as the blocking flavour makes it.
            fn call<'c, $($l),+>(
                &'c mut self,
                tx: &'c mut F::Conn,
                arg: $arg,
            ) -> impl Future<Output = Result<$out, E>>;

            /// The handler as `asynch` takes it.
            #[cfg(feature = "async")]
            #[allow(dead_code, reason = "the sync test binaries compile it too, unused")]
            fn into_async(
                self,
            ) -> impl for<'c, $($l),+> AsyncHandler2<&'c mut F::Conn, $arg, Result<$out, E>, Fut: Send>
                   + Send;
        }

        #[cfg(feature = "async")]
        impl<F, T, E, H> $name<F, T, E> for H
        where
            F: Flavour + ?Sized,
            H: for<'c, $($l),+> AsyncHandler2<&'c mut F::Conn, $arg, Result<$out, E>, Fut: Send> + Send,
        {
            fn call<'c, $($l),+>(
                &'c mut self,
                tx: &'c mut F::Conn,
                arg: $arg,
            ) -> impl Future<Output = Result<$out, E>> {
                self(tx, arg)
            }

            fn into_async(
                self,
            ) -> impl for<'c, $($l),+> AsyncHandler2<&'c mut F::Conn, $arg, Result<$out, E>, Fut: Send>
                   + Send {
                self
            }
        }

        #[cfg(not(feature = "async"))]
        impl<F, T, E, H> $name<F, T, E> for H
        where
            F: Flavour + ?Sized,
            H: for<'c, $($l),+> AsyncFnMut(&'c mut F::Conn, $arg) -> Result<$out, E> + Send,
        {
            fn call<'c, $($l),+>(
                &'c mut self,
                tx: &'c mut F::Conn,
                arg: $arg,
            ) -> impl Future<Output = Result<$out, E>> {
                self(tx, arg)
            }
        }
    };
}

#[cfg(feature = "async")]
use diesel_inbox::asynch::AsyncHandler2;

handle_with! {
    /// A redrive's handler: the transaction and the stored payload.
    Rerun<'p>(Option<&'p Payload>) -> T
}

handle_with! {
    /// A batch's handler, called once per new delivery.
    PerDelivery<'d>(&'d Delivery) -> T
}

handle_with! {
    /// A bulk handler, called once with every new delivery of the batch.
    Bulk<'d, 'e>(&'d [&'e Delivery]) -> ()
}

/// A cursor batch's handler the scenarios pass to flavour `F`: an async closure over
/// `&mut F::Conn`, the sequence and its item.
pub(crate) trait PerSequence<F: Flavour + ?Sized, M, T, E>: Send {
    /// One call, as the blocking flavour makes it.
    fn call<'c>(
        &'c mut self,
        tx: &'c mut F::Conn,
        sequence: u64,
        item: &M,
    ) -> impl Future<Output = Result<T, E>>;

    /// The handler as `asynch` takes it.
    #[cfg(feature = "async")]
    #[allow(dead_code, reason = "the sync test binaries compile it too, unused")]
    fn into_async(
        self,
    ) -> impl for<'c, 'm> diesel_inbox::asynch::AsyncHandler3<
        &'c mut F::Conn,
        u64,
        &'m M,
        Result<T, E>,
        Fut: Send,
    > + Send;
}

#[cfg(feature = "async")]
impl<F, M, T, E, H> PerSequence<F, M, T, E> for H
where
    F: Flavour + ?Sized,
    H: for<'c, 'm> diesel_inbox::asynch::AsyncHandler3<
            &'c mut F::Conn,
            u64,
            &'m M,
            Result<T, E>,
            Fut: Send,
        > + Send,
{
    fn call<'c>(
        &'c mut self,
        tx: &'c mut F::Conn,
        sequence: u64,
        item: &M,
    ) -> impl Future<Output = Result<T, E>> {
        self(tx, sequence, item)
    }

    fn into_async(
        self,
    ) -> impl for<'c, 'm> diesel_inbox::asynch::AsyncHandler3<
        &'c mut F::Conn,
        u64,
        &'m M,
        Result<T, E>,
        Fut: Send,
    > + Send {
        self
    }
}

#[cfg(not(feature = "async"))]
impl<F, M, T, E, H> PerSequence<F, M, T, E> for H
where
    F: Flavour + ?Sized,
    H: for<'c, 'm> AsyncFnMut(&'c mut F::Conn, u64, &'m M) -> Result<T, E> + Send,
{
    fn call<'c>(
        &'c mut self,
        tx: &'c mut F::Conn,
        sequence: u64,
        item: &M,
    ) -> impl Future<Output = Result<T, E>> {
        self(tx, sequence, item)
    }
}

/// A side effect under a claim the scenarios pass: an async closure over the held
/// [`Claim`], as `asynch` takes it where the async flavour is compiled in.
pub(crate) trait Acts<T, E>: Send {
    /// The one call, as the blocking flavour makes it.
    fn call(self, claim: &Claim) -> impl Future<Output = Result<T, E>>;

    /// The side effect as `asynch` takes it.
    #[cfg(feature = "async")]
    #[allow(dead_code, reason = "the sync test binaries compile it too, unused")]
    fn into_async(
        self,
    ) -> impl for<'c> diesel_inbox::asynch::AsyncHandler<&'c Claim, Result<T, E>, Fut: Send> + Send;
}

#[cfg(feature = "async")]
impl<T, E, H> Acts<T, E> for H
where
    H: for<'c> diesel_inbox::asynch::AsyncHandler<&'c Claim, Result<T, E>, Fut: Send> + Send,
{
    async fn call(mut self, claim: &Claim) -> Result<T, E> {
        self(claim).await
    }

    fn into_async(
        self,
    ) -> impl for<'c> diesel_inbox::asynch::AsyncHandler<&'c Claim, Result<T, E>, Fut: Send> + Send
    {
        self
    }
}

#[cfg(not(feature = "async"))]
impl<T, E, H> Acts<T, E> for H
where
    H: for<'c> AsyncFnMut(&'c Claim) -> Result<T, E> + Send,
{
    async fn call(mut self, claim: &Claim) -> Result<T, E> {
        self(claim).await
    }
}

handle_with! {
    /// A claim's record writes: the transaction and the side effect's result.
    Keeps<'v>(&'v T) -> ()
}

handle_with! {
    /// A schedule's effect: the transaction and the event id of the step.
    Scheduled<'i>(&'i EventId) -> T
}

/// One flavour of the API, on one backend: what the scenarios written once call.
pub(crate) trait Flavour: 'static {
    /// The backend, whose sync connection the scenarios check with.
    type Backend: Backend;

    /// The connection deliveries run on.
    type Conn: Tx + 'static;

    /// A connection to `db` for deliveries, set up as a sync one is.
    async fn connect(db: &TestDatabase<<Self::Backend as Backend>::Conn>) -> Self::Conn;

    /// [`Inbox::process`].
    /// Its future is `Send`, so that a handler (or a harness's delivery) can await it.
    fn process<T, E, H>(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        delivery: impl IntoDelivery + Send,
        handler: H,
    ) -> impl Future<Output = Result<Outcome<T>, E>> + Send
    where
        H: Handle<Self, T, E>,
        T: Send,
        E: HandlerError + Send;

    /// [`Inbox::process_storing_result`].
    async fn process_storing_result<T, E, H>(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        delivery: impl IntoDelivery + Send,
        handler: H,
    ) -> Result<Outcome<T>, E>
    where
        H: Handle<Self, T, E>,
        T: Serialize + Send,
        E: HandlerError + Send;

    /// [`diesel_inbox::with_inbox`].
    fn with_inbox<T, E, H>(
        conn: &mut Self::Conn,
        delivery: impl IntoDelivery + Send,
        handler: H,
    ) -> impl Future<Output = Result<Outcome<T>, E>> + Send
    where
        H: Handle<Self, T, E>,
        T: Send,
        E: HandlerError + Send,
    {
        async move { Self::process(&Inbox::default(), conn, delivery, handler).await }
    }

    /// [`diesel_inbox::DeadLetters::show`].
    async fn show(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        event_id: &str,
    ) -> Result<DeadLetter, AdminError>;

    /// [`Inbox::stats`].
    async fn stats(inbox: &Inbox, conn: &mut Self::Conn, window: Duration) -> Result<Stats, Error>;

    /// [`diesel_inbox::DeadLetters::list`].
    async fn list(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Result<DeadLetter, CorruptRow>>, Error>;

    /// [`diesel_inbox::DeadLetters::redrive`].
    async fn redrive<T, E, H>(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        event_id: &str,
        audit: &Audit,
        handler: H,
    ) -> Result<Outcome<T>, E>
    where
        H: Rerun<Self, T, E>,
        T: Send,
        E: HandlerError + From<AdminError> + Send;

    /// [`diesel_inbox::DeadLetters::discard`].
    async fn discard(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        event_id: &str,
        audit: &Audit,
    ) -> Result<(), AdminError>;

    /// [`diesel_inbox::DeadLetters::release`].
    async fn release(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        event_id: &str,
        audit: &Audit,
    ) -> Result<(), AdminError>;

    /// [`Inbox::process_batch`].
    #[allow(clippy::type_complexity)]
    async fn process_batch<T, E, H, D>(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        deliveries: Vec<D>,
        handler: H,
    ) -> Result<Vec<Result<Outcome<T>, E>>, E>
    where
        H: PerDelivery<Self, T, E>,
        D: IntoDelivery,
        T: Send,
        E: HandlerError + Send;

    /// [`Inbox::process_bulk`].
    #[allow(clippy::type_complexity)]
    async fn process_bulk<E, H, D>(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        deliveries: Vec<D>,
        handler: H,
    ) -> Result<Vec<Result<Outcome<()>, E>>, E>
    where
        H: Bulk<Self, (), E>,
        D: IntoDelivery,
        E: HandlerError + Send;

    /// [`diesel_inbox::run_pending_migrations_with`].
    async fn migrate(conn: &mut Self::Conn, options: MigrationOptions)
        -> Result<usize, AdminError>;

    /// [`Stats::all`].
    async fn stats_all(conn: &mut Self::Conn, window: Duration) -> Result<Vec<Stats>, Error>;

    /// [`diesel_inbox::doctor::check`].
    async fn doctor(conn: &mut Self::Conn) -> Result<Vec<Check>, Error>;

    /// [`Cursor::process`].
    async fn advance<T, E, H>(
        cursor: &Cursor,
        conn: &mut Self::Conn,
        delivery: impl Into<Sequenced> + Send,
        handler: H,
    ) -> Result<Outcome<T>, E>
    where
        H: Handle<Self, T, E>,
        T: Send,
        E: HandlerError + Send;

    /// [`Cursor::process_batch`].
    async fn advance_batch<M, T, E, H>(
        cursor: &Cursor,
        conn: &mut Self::Conn,
        items: &[(u64, M)],
        handler: H,
    ) -> Result<Vec<Outcome<T>>, E>
    where
        H: PerSequence<Self, M, T, E>,
        M: Sync,
        T: Send,
        E: HandlerError + Send;

    /// [`Cursor::acquire`].
    async fn acquire(cursor: &Cursor, conn: &mut Self::Conn, owner: &str) -> Result<Lease, Error>;

    /// [`Cursor::resume`].
    async fn resume(cursor: &Cursor, conn: &mut Self::Conn) -> Result<Resume, Error>;

    /// [`Cursor::position`].
    async fn position(cursor: &Cursor, conn: &mut Self::Conn) -> Result<Option<Position>, Error>;

    /// [`Cursor::prune_events`].
    async fn prune_events(
        cursor: &Cursor,
        conn: &mut Self::Conn,
        batch_size: usize,
    ) -> Result<u64, AdminError>;

    /// [`Gaps::open`].
    async fn open_gaps(
        gaps: &Gaps,
        conn: &mut Self::Conn,
    ) -> Result<Vec<Result<Gap, CorruptRow>>, Error>;

    /// [`Gaps::list`].
    async fn list_gaps(
        gaps: &Gaps,
        conn: &mut Self::Conn,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Result<Gap, CorruptRow>>, Error>;

    /// [`Gaps::resolve`].
    async fn resolve_gap(
        gaps: &Gaps,
        conn: &mut Self::Conn,
        id: i64,
        audit: &Audit,
    ) -> Result<Gap, AdminError>;

    /// A held claim, as [`claim`](Self::claim) hands it out.
    type Held: std::fmt::Debug + Send;

    /// [`Claims::claim`].
    async fn claim(
        claims: &Claims,
        conn: &mut Self::Conn,
        delivery: impl IntoDelivery + Send,
    ) -> Result<Claimed<Self::Held>, Error>;

    /// [`Claims::run_and_record`].
    async fn run_claimed<T, E, S, R>(
        claims: &Claims,
        conn: &mut Self::Conn,
        delivery: impl IntoDelivery + Send,
        side_effect: S,
        record: R,
    ) -> Result<ClaimOutcome<T>, E>
    where
        S: Acts<T, E>,
        R: Keeps<Self, T, E>,
        T: Serialize + DeserializeOwned + Send + Sync,
        E: HandlerError + Send;

    /// [`Claims::run`].
    async fn run_claim<T, E, S>(
        claims: &Claims,
        conn: &mut Self::Conn,
        delivery: impl IntoDelivery + Send,
        side_effect: S,
    ) -> Result<ClaimOutcome<T>, E>
    where
        S: Acts<T, E>,
        T: Serialize + DeserializeOwned + Send + Sync,
        E: HandlerError + Send,
    {
        let nothing = async |_: &mut Self::Conn, _: &T| Ok(());
        Self::run_claimed(claims, conn, delivery, side_effect, nothing).await
    }

    /// [`Claims::show`].
    async fn show_claim(
        claims: &Claims,
        conn: &mut Self::Conn,
        event_id: &str,
    ) -> Result<Option<ClaimRecord>, Error>;

    /// [`Claims::resolve`].
    async fn resolve_claim(
        claims: &Claims,
        conn: &mut Self::Conn,
        event_id: &str,
        resolution: Resolution,
        audit: &Audit,
    ) -> Result<ClaimRecord, AdminError>;

    /// [`Claim::idempotency_key`].
    fn idempotency_key(held: &Self::Held) -> String;

    /// [`Claim::lease_until`].
    fn lease_until(held: &Self::Held) -> DateTime<Utc>;

    /// [`Claim::extend`].
    async fn extend(
        held: &mut Self::Held,
        conn: &mut Self::Conn,
        by: Duration,
    ) -> Result<(), Error>;

    /// [`Claim::complete_with`].
    async fn complete_with<T, E, H>(
        held: Self::Held,
        conn: &mut Self::Conn,
        result: &T,
        record: H,
    ) -> Result<(), E>
    where
        H: Handle<Self, (), E>,
        T: Serialize + Sync,
        E: HandlerError + Send;

    /// [`Claim::complete`].
    async fn complete<T: Serialize + Sync>(
        held: Self::Held,
        conn: &mut Self::Conn,
        result: &T,
    ) -> Result<(), Error> {
        let nothing = async |_: &mut Self::Conn| Ok(());
        Self::complete_with(held, conn, result, nothing).await
    }

    /// [`Outbox::enqueue`]; its future is `Send`, so that a handler can await it.
    fn enqueue(
        outbox: &Outbox,
        conn: &mut Self::Conn,
        topic: &str,
        envelope: &Envelope,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// [`Outbox::stats`].
    async fn outbox_stats(conn: &mut Self::Conn) -> Result<OutboxStats, Error>;

    /// [`Outbox::list`].
    async fn outbox_list(
        conn: &mut Self::Conn,
        state: Option<OutboxState>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Result<OutboxRecord, CorruptRow>>, Error>;

    /// [`Outbox::record`].
    async fn outbox_record(
        conn: &mut Self::Conn,
        position: i64,
    ) -> Result<OutboxRecord, AdminError>;

    /// [`Outbox::retry`].
    async fn outbox_retry(
        conn: &mut Self::Conn,
        position: i64,
        audit: &Audit,
    ) -> Result<(), AdminError>;

    /// [`Outbox::prune`].
    async fn outbox_prune(
        conn: &mut Self::Conn,
        older_than: Duration,
        batch: usize,
    ) -> Result<u64, Error>;

    /// One pass of [`Relay::run_once`], through `publisher` as the flavour takes it.
    async fn relay_once<P: Publisher + AsyncPublisher>(
        relay: &Relay,
        conn: &mut Self::Conn,
        publisher: &mut P,
    ) -> Result<RelayPass, AdminError>;

    /// [`testing::assert_processed_once`].
    async fn assert_processed_once(
        conn: &mut Self::Conn,
        inbox: &Inbox,
        event_id: &str,
    ) -> InboxRecord;

    /// [`testing::assert_deliveries`].
    async fn assert_deliveries(
        conn: &mut Self::Conn,
        inbox: &Inbox,
        event_id: &str,
        expected: u64,
    ) -> InboxRecord;

    /// [`testing::assert_not_processed`].
    async fn assert_not_processed(conn: &mut Self::Conn, inbox: &Inbox, event_id: &str);

    /// [`testing::assert_dead_lettered`].
    async fn assert_dead_lettered(
        conn: &mut Self::Conn,
        inbox: &Inbox,
        event_id: &str,
    ) -> DeadLetter;

    /// [`testing::assert_idempotent`], with the delivery and the effect counter as async
    /// closures over the connection.
    async fn assert_idempotent<T, E, H, O>(
        conn: &mut Self::Conn,
        times: usize,
        deliver: H,
        effects: O,
    ) -> DeliveryReport
    where
        H: Handle<Self, Outcome<T>, E>,
        O: Handle<Self, i64, diesel::result::Error>,
        T: Send,
        E: HandlerError + Debug + Send;

    /// [`testing::run_schedule`], with the effect and the effect counter as async closures.
    async fn run_schedule<T, E, G, O>(
        conn: &mut Self::Conn,
        inbox: &Inbox,
        schedule: &Schedule,
        effect: G,
        effects: O,
    ) -> DeliveryReport
    where
        G: Scheduled<Self, T, E>,
        O: Handle<Self, i64, diesel::result::Error>,
        T: Send,
        E: HandlerError + Debug + Send;

    /// [`Inbox::prune`].
    async fn prune(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        retention: &Retention,
    ) -> Result<Pruned, AdminError>;

    /// Opens a transaction (or a savepoint inside one) through the connection's own
    /// transaction manager, as a caller's transaction would.
    async fn begin(conn: &mut Self::Conn);

    /// Ends the innermost transaction level opened by [`begin`](Self::begin).
    async fn end(conn: &mut Self::Conn, commit: bool);

    /// The transaction depth the connection's transaction manager counts: 0 outside one.
    fn depth(conn: &mut Self::Conn) -> u32;

    /// Logs what `conn` sends from now on.
    fn log(conn: &mut Self::Conn) -> StatementLog;
}

/// The sync API on backend `B`'s Diesel connection.
pub(crate) struct Blocking<B>(PhantomData<B>);

/// Completes a handler's call on a sync connection, whose futures are ready when made.
fn now<R>(call: impl Future<Output = R>) -> R {
    call.now_or_never()
        .expect("a handler on a sync connection awaits only what is ready")
}

/// Runs a scenario of the blocking flavour: every future it awaits is ready at once.
pub(crate) fn block_on(scenario: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(scenario);
}

impl<B: Backend + 'static> Flavour for Blocking<B> {
    type Backend = B;
    type Conn = B::Conn;

    async fn connect(db: &TestDatabase<B::Conn>) -> B::Conn {
        db.connect()
    }

    async fn process<T, E, H>(
        inbox: &Inbox,
        conn: &mut B::Conn,
        delivery: impl IntoDelivery + Send,
        mut handler: H,
    ) -> Result<Outcome<T>, E>
    where
        H: Handle<Self, T, E>,
        T: Send,
        E: HandlerError + Send,
    {
        // Run when polled, as an async delivery is: a panic comes out of the poll.
        inbox.process(conn, delivery, |tx| now(handler.call(tx)))
    }

    async fn process_storing_result<T, E, H>(
        inbox: &Inbox,
        conn: &mut B::Conn,
        delivery: impl IntoDelivery + Send,
        mut handler: H,
    ) -> Result<Outcome<T>, E>
    where
        H: Handle<Self, T, E>,
        T: Serialize + Send,
        E: HandlerError + Send,
    {
        inbox.process_storing_result(conn, delivery, |tx| now(handler.call(tx)))
    }

    async fn show(
        inbox: &Inbox,
        conn: &mut B::Conn,
        event_id: &str,
    ) -> Result<DeadLetter, AdminError> {
        inbox.dead_letters().show(conn, event_id)
    }

    async fn stats(inbox: &Inbox, conn: &mut B::Conn, window: Duration) -> Result<Stats, Error> {
        inbox.stats(conn, window)
    }

    async fn list(
        inbox: &Inbox,
        conn: &mut B::Conn,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Result<DeadLetter, CorruptRow>>, Error> {
        inbox.dead_letters().list(conn, after, limit)
    }

    async fn redrive<T, E, H>(
        inbox: &Inbox,
        conn: &mut B::Conn,
        event_id: &str,
        audit: &Audit,
        mut handler: H,
    ) -> Result<Outcome<T>, E>
    where
        H: Rerun<Self, T, E>,
        T: Send,
        E: HandlerError + From<AdminError> + Send,
    {
        let rerun = |tx: &mut B::Conn, payload: Option<&Payload>| now(handler.call(tx, payload));
        inbox.dead_letters().redrive(conn, event_id, audit, rerun)
    }

    async fn discard(
        inbox: &Inbox,
        conn: &mut B::Conn,
        event_id: &str,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        inbox.dead_letters().discard(conn, event_id, audit)
    }

    async fn release(
        inbox: &Inbox,
        conn: &mut B::Conn,
        event_id: &str,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        inbox.dead_letters().release(conn, event_id, audit)
    }

    async fn process_batch<T, E, H, D>(
        inbox: &Inbox,
        conn: &mut B::Conn,
        deliveries: Vec<D>,
        mut handler: H,
    ) -> Result<Vec<Result<Outcome<T>, E>>, E>
    where
        H: PerDelivery<Self, T, E>,
        D: IntoDelivery,
        T: Send,
        E: HandlerError + Send,
    {
        let each = |tx: &mut B::Conn, delivery: &Delivery| now(handler.call(tx, delivery));
        inbox.process_batch(conn, deliveries, each)
    }

    async fn process_bulk<E, H, D>(
        inbox: &Inbox,
        conn: &mut B::Conn,
        deliveries: Vec<D>,
        mut handler: H,
    ) -> Result<Vec<Result<Outcome<()>, E>>, E>
    where
        H: Bulk<Self, (), E>,
        D: IntoDelivery,
        E: HandlerError + Send,
    {
        let all = |tx: &mut B::Conn, new: &[&Delivery]| now(handler.call(tx, new));
        inbox.process_bulk(conn, deliveries, all)
    }

    async fn migrate(conn: &mut B::Conn, options: MigrationOptions) -> Result<usize, AdminError> {
        diesel_inbox::run_pending_migrations_with(conn, options)
    }

    async fn stats_all(conn: &mut B::Conn, window: Duration) -> Result<Vec<Stats>, Error> {
        Stats::all(conn, window)
    }

    async fn doctor(conn: &mut B::Conn) -> Result<Vec<Check>, Error> {
        diesel_inbox::doctor::check(conn)
    }

    async fn advance<T, E, H>(
        cursor: &Cursor,
        conn: &mut B::Conn,
        delivery: impl Into<Sequenced> + Send,
        mut handler: H,
    ) -> Result<Outcome<T>, E>
    where
        H: Handle<Self, T, E>,
        T: Send,
        E: HandlerError + Send,
    {
        cursor.process(conn, delivery, |tx| now(handler.call(tx)))
    }

    async fn advance_batch<M, T, E, H>(
        cursor: &Cursor,
        conn: &mut B::Conn,
        items: &[(u64, M)],
        mut handler: H,
    ) -> Result<Vec<Outcome<T>>, E>
    where
        H: PerSequence<Self, M, T, E>,
        M: Sync,
        T: Send,
        E: HandlerError + Send,
    {
        let each = |tx: &mut B::Conn, n: u64, item: &M| now(handler.call(tx, n, item));
        cursor.process_batch(conn, items, each)
    }

    async fn acquire(cursor: &Cursor, conn: &mut B::Conn, owner: &str) -> Result<Lease, Error> {
        cursor.acquire(conn, owner)
    }

    async fn resume(cursor: &Cursor, conn: &mut B::Conn) -> Result<Resume, Error> {
        cursor.resume(conn)
    }

    async fn position(cursor: &Cursor, conn: &mut B::Conn) -> Result<Option<Position>, Error> {
        cursor.position(conn)
    }

    async fn prune_events(
        cursor: &Cursor,
        conn: &mut B::Conn,
        batch_size: usize,
    ) -> Result<u64, AdminError> {
        cursor.prune_events(conn, batch_size)
    }

    async fn open_gaps(
        gaps: &Gaps,
        conn: &mut B::Conn,
    ) -> Result<Vec<Result<Gap, CorruptRow>>, Error> {
        gaps.open(conn)
    }

    async fn list_gaps(
        gaps: &Gaps,
        conn: &mut B::Conn,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Result<Gap, CorruptRow>>, Error> {
        gaps.list(conn, after, limit)
    }

    async fn resolve_gap(
        gaps: &Gaps,
        conn: &mut B::Conn,
        id: i64,
        audit: &Audit,
    ) -> Result<Gap, AdminError> {
        gaps.resolve(conn, id, audit)
    }

    type Held = Claim;

    async fn claim(
        claims: &Claims,
        conn: &mut B::Conn,
        delivery: impl IntoDelivery + Send,
    ) -> Result<Claimed, Error> {
        claims.claim(conn, delivery)
    }

    async fn run_claimed<T, E, S, R>(
        claims: &Claims,
        conn: &mut B::Conn,
        delivery: impl IntoDelivery + Send,
        side_effect: S,
        mut record: R,
    ) -> Result<ClaimOutcome<T>, E>
    where
        S: Acts<T, E>,
        R: Keeps<Self, T, E>,
        T: Serialize + DeserializeOwned + Send + Sync,
        E: HandlerError + Send,
    {
        let act = |claim: &Claim| now(side_effect.call(claim));
        let keep = |tx: &mut B::Conn, value: &T| now(record.call(tx, value));
        claims.run_and_record(conn, delivery, act, keep)
    }

    async fn show_claim(
        claims: &Claims,
        conn: &mut B::Conn,
        event_id: &str,
    ) -> Result<Option<ClaimRecord>, Error> {
        claims.show(conn, event_id)
    }

    async fn resolve_claim(
        claims: &Claims,
        conn: &mut B::Conn,
        event_id: &str,
        resolution: Resolution,
        audit: &Audit,
    ) -> Result<ClaimRecord, AdminError> {
        claims.resolve(conn, event_id, resolution, audit)
    }

    fn idempotency_key(held: &Claim) -> String {
        held.idempotency_key()
    }

    fn lease_until(held: &Claim) -> DateTime<Utc> {
        held.lease_until()
    }

    async fn extend(held: &mut Claim, conn: &mut B::Conn, by: Duration) -> Result<(), Error> {
        held.extend(conn, by)
    }

    async fn complete_with<T, E, H>(
        held: Claim,
        conn: &mut B::Conn,
        result: &T,
        mut record: H,
    ) -> Result<(), E>
    where
        H: Handle<Self, (), E>,
        T: Serialize + Sync,
        E: HandlerError + Send,
    {
        held.complete_with(conn, result, |tx| now(record.call(tx)))
    }

    async fn enqueue(
        outbox: &Outbox,
        conn: &mut B::Conn,
        topic: &str,
        envelope: &Envelope,
    ) -> Result<(), Error> {
        outbox.enqueue(conn, topic, envelope)
    }

    async fn outbox_stats(conn: &mut B::Conn) -> Result<OutboxStats, Error> {
        Outbox::stats(conn)
    }

    async fn outbox_list(
        conn: &mut B::Conn,
        state: Option<OutboxState>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Result<OutboxRecord, CorruptRow>>, Error> {
        Outbox::list(conn, state, after, limit)
    }

    async fn outbox_record(conn: &mut B::Conn, position: i64) -> Result<OutboxRecord, AdminError> {
        Outbox::record(conn, position)
    }

    async fn outbox_retry(
        conn: &mut B::Conn,
        position: i64,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        Outbox::retry(conn, position, audit)
    }

    async fn outbox_prune(
        conn: &mut B::Conn,
        older_than: Duration,
        batch: usize,
    ) -> Result<u64, Error> {
        Outbox::prune(conn, older_than, batch)
    }

    async fn relay_once<P: Publisher + AsyncPublisher>(
        relay: &Relay,
        conn: &mut B::Conn,
        publisher: &mut P,
    ) -> Result<RelayPass, AdminError> {
        relay.run_once(conn, publisher)
    }

    async fn assert_processed_once(
        conn: &mut B::Conn,
        inbox: &Inbox,
        event_id: &str,
    ) -> InboxRecord {
        testing::assert_processed_once(conn, inbox, event_id)
    }

    async fn assert_deliveries(
        conn: &mut B::Conn,
        inbox: &Inbox,
        event_id: &str,
        expected: u64,
    ) -> InboxRecord {
        testing::assert_deliveries(conn, inbox, event_id, expected)
    }

    async fn assert_not_processed(conn: &mut B::Conn, inbox: &Inbox, event_id: &str) {
        testing::assert_not_processed(conn, inbox, event_id);
    }

    async fn assert_dead_lettered(conn: &mut B::Conn, inbox: &Inbox, event_id: &str) -> DeadLetter {
        testing::assert_dead_lettered(conn, inbox, event_id)
    }

    async fn assert_idempotent<T, E, H, O>(
        conn: &mut B::Conn,
        times: usize,
        mut deliver: H,
        mut effects: O,
    ) -> DeliveryReport
    where
        H: Handle<Self, Outcome<T>, E>,
        O: Handle<Self, i64, diesel::result::Error>,
        T: Send,
        E: HandlerError + Debug + Send,
    {
        let deliver = |conn: &mut B::Conn| now(deliver.call(conn));
        testing::assert_idempotent(conn, times, deliver, |conn| now(effects.call(conn)))
    }

    async fn run_schedule<T, E, G, O>(
        conn: &mut B::Conn,
        inbox: &Inbox,
        schedule: &Schedule,
        mut effect: G,
        mut effects: O,
    ) -> DeliveryReport
    where
        G: Scheduled<Self, T, E>,
        O: Handle<Self, i64, diesel::result::Error>,
        T: Send,
        E: HandlerError + Debug + Send,
    {
        let effect = |tx: &mut B::Conn, id: &EventId| now(effect.call(tx, id));
        testing::run_schedule(
            conn,
            inbox,
            schedule,
            effect,
            |conn| now(effects.call(conn)),
        )
    }

    async fn prune(
        inbox: &Inbox,
        conn: &mut B::Conn,
        retention: &Retention,
    ) -> Result<Pruned, AdminError> {
        inbox.prune(conn, retention)
    }

    async fn begin(conn: &mut B::Conn) {
        <B::Conn as Connection>::TransactionManager::begin_transaction(conn).unwrap();
    }

    async fn end(conn: &mut B::Conn, commit: bool) {
        type Manager<C> = <C as Connection>::TransactionManager;
        if commit {
            Manager::<B::Conn>::commit_transaction(conn).unwrap();
        } else {
            Manager::<B::Conn>::rollback_transaction(conn).unwrap();
        }
    }

    fn depth(conn: &mut B::Conn) -> u32 {
        transaction_depth(conn)
    }

    fn log(conn: &mut B::Conn) -> StatementLog {
        StatementLog::install(conn)
    }
}

#[cfg(feature = "async")]
#[allow(
    unused_imports,
    reason = "the sync test binaries compile it too, unused"
)]
pub(crate) use asynch::{Async, AsyncBackend, Pooled};

#[cfg(feature = "async")]
#[allow(dead_code, reason = "the sync test binaries compile it too, unused")]
mod asynch {
    use std::ops::DerefMut;

    use diesel::connection::TransactionManagerStatus;
    use diesel_async::pooled_connection::deadpool::Pool;
    use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
    use diesel_async::{AsyncConnection, SimpleAsyncConnection, TransactionManager as _};
    use diesel_inbox::asynch::{self, AsyncInboxConnection};

    use super::*;

    /// A backend's async connection, and a deadpool pool of them.
    pub(crate) trait AsyncBackend: Backend {
        type Async: AsyncInboxConnection;

        /// An async connection to the database at `url`, set up as the sync one is.
        fn connect(url: &str) -> impl Future<Output = Self::Async> + Send;

        /// A deadpool pool of such connections.
        type Pool: Clone + Send + Sync + 'static;

        /// A pool of `size` connections to the database at `url`.
        fn pool(url: &str, size: usize) -> Self::Pool;

        /// A connection from the pool, as deadpool hands it out.
        fn get(pool: &Self::Pool) -> impl Future<Output = Pooled<Self::Async>> + Send;
    }

    /// A pooled connection, whichever its pool.
    pub(crate) type Pooled<C> = Box<dyn DerefMut<Target = C> + Send>;

    /// [`AsyncBackend`]'s pool, whose bounds only a concrete connection type meets.
    macro_rules! deadpool {
        () => {
            type Pool = Pool<Self::Async>;

            fn pool(url: &str, size: usize) -> Self::Pool {
                let mut config = ManagerConfig::default();
                config.custom_setup = Box::new(|url| {
                    let url = url.to_owned();
                    Box::pin(async move { Ok(<Self as AsyncBackend>::connect(&url).await) })
                });
                let manager = AsyncDieselConnectionManager::new_with_config(url, config);
                Pool::builder(manager).max_size(size).build().unwrap()
            }

            async fn get(pool: &Self::Pool) -> Pooled<Self::Async> {
                Box::new(pool.get().await.unwrap())
            }
        };
    }

    #[cfg(feature = "postgres")]
    impl AsyncBackend for crate::support::Postgres {
        type Async = diesel_async::AsyncPgConnection;

        async fn connect(url: &str) -> Self::Async {
            Self::Async::establish(url).await.unwrap()
        }

        deadpool!();
    }

    #[cfg(feature = "mysql")]
    impl AsyncBackend for crate::support::Mysql {
        type Async = diesel_async::AsyncMysqlConnection;

        async fn connect(url: &str) -> Self::Async {
            Self::Async::establish(url).await.unwrap()
        }

        deadpool!();
    }

    #[cfg(feature = "sqlite")]
    impl AsyncBackend for crate::support::Sqlite {
        type Async =
            diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>;

        async fn connect(url: &str) -> Self::Async {
            // The busy timeout and journal mode of `SqliteSetup`, as every sync connection has.
            diesel_async::sync_connection_wrapper::SyncConnectionWrapper::new(Self::connect_to(url))
        }

        deadpool!();
    }

    /// `diesel_inbox::asynch` on backend `B`'s diesel-async connection.
    pub(crate) struct Async<B>(PhantomData<B>);

    /// The effects table's insert of one row per id, written out: the ids are the scenarios'
    /// own, safe as text.
    fn effects_sql(event_ids: &[&str]) -> String {
        let rows: Vec<String> = event_ids.iter().map(|id| format!("('{id}')")).collect();
        format!("INSERT INTO effects (event_id) VALUES {}", rows.join(", "))
    }

    macro_rules! async_tx {
        ($conn:ty) => {
            impl Tx for $conn {
                fn write_effect(
                    &mut self,
                    event_id: &str,
                ) -> impl Future<Output = QueryResult<()>> + Send {
                    let sql = effects_sql(&[event_id]);
                    async move { self.batch_execute(&sql).await }
                }

                fn write_effects(
                    &mut self,
                    event_ids: &[&str],
                ) -> impl Future<Output = QueryResult<()>> + Send {
                    let sql = effects_sql(event_ids);
                    async move { self.batch_execute(&sql).await }
                }

                fn execute(&mut self, sql: &str) -> impl Future<Output = QueryResult<()>> + Send {
                    let sql = sql.to_owned();
                    async move { self.batch_execute(&sql).await }
                }
            }
        };
    }

    #[cfg(feature = "postgres")]
    async_tx!(diesel_async::AsyncPgConnection);
    #[cfg(feature = "mysql")]
    async_tx!(diesel_async::AsyncMysqlConnection);
    #[cfg(feature = "sqlite")]
    async_tx!(
        diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>
    );

    type Manager<C> = <C as AsyncConnection>::TransactionManager;

    impl<B: AsyncBackend + 'static> Flavour for Async<B>
    where
        B::Async: Tx,
    {
        type Backend = B;
        type Conn = B::Async;

        async fn connect(db: &TestDatabase<B::Conn>) -> B::Async {
            <B as AsyncBackend>::connect(db.url()).await
        }

        fn process<T, E, H>(
            inbox: &Inbox,
            conn: &mut B::Async,
            delivery: impl IntoDelivery + Send,
            handler: H,
        ) -> impl Future<Output = Result<Outcome<T>, E>> + Send
        where
            H: Handle<Self, T, E>,
            T: Send,
            E: HandlerError + Send,
        {
            let inbox = asynch::Inbox::from(inbox.clone());
            async move { inbox.process(conn, delivery, handler.into_async()).await }
        }

        async fn process_storing_result<T, E, H>(
            inbox: &Inbox,
            conn: &mut B::Async,
            delivery: impl IntoDelivery + Send,
            handler: H,
        ) -> Result<Outcome<T>, E>
        where
            H: Handle<Self, T, E>,
            T: Serialize + Send,
            E: HandlerError + Send,
        {
            let inbox = asynch::Inbox::from(inbox.clone());
            inbox
                .process_storing_result(conn, delivery, handler.into_async())
                .await
        }

        async fn show(
            inbox: &Inbox,
            conn: &mut B::Async,
            event_id: &str,
        ) -> Result<DeadLetter, AdminError> {
            let inbox = asynch::Inbox::from(inbox.clone());
            inbox.dead_letters().show(conn, event_id).await
        }

        async fn stats(
            inbox: &Inbox,
            conn: &mut B::Async,
            window: Duration,
        ) -> Result<Stats, Error> {
            asynch::Inbox::from(inbox.clone()).stats(conn, window).await
        }

        async fn list(
            inbox: &Inbox,
            conn: &mut B::Async,
            after: Option<&str>,
            limit: usize,
        ) -> Result<Vec<Result<DeadLetter, CorruptRow>>, Error> {
            let dead = asynch::Inbox::from(inbox.clone()).dead_letters();
            dead.list(conn, after, limit).await
        }

        async fn redrive<T, E, H>(
            inbox: &Inbox,
            conn: &mut B::Async,
            event_id: &str,
            audit: &Audit,
            handler: H,
        ) -> Result<Outcome<T>, E>
        where
            H: Rerun<Self, T, E>,
            T: Send,
            E: HandlerError + From<AdminError> + Send,
        {
            let dead = asynch::Inbox::from(inbox.clone()).dead_letters();
            let rerun = handler.into_async();
            dead.redrive(conn, event_id, audit, rerun).await
        }

        async fn discard(
            inbox: &Inbox,
            conn: &mut B::Async,
            event_id: &str,
            audit: &Audit,
        ) -> Result<(), AdminError> {
            let dead = asynch::Inbox::from(inbox.clone()).dead_letters();
            dead.discard(conn, event_id, audit).await
        }

        async fn release(
            inbox: &Inbox,
            conn: &mut B::Async,
            event_id: &str,
            audit: &Audit,
        ) -> Result<(), AdminError> {
            let dead = asynch::Inbox::from(inbox.clone()).dead_letters();
            dead.release(conn, event_id, audit).await
        }

        async fn process_batch<T, E, H, D>(
            inbox: &Inbox,
            conn: &mut B::Async,
            deliveries: Vec<D>,
            handler: H,
        ) -> Result<Vec<Result<Outcome<T>, E>>, E>
        where
            H: PerDelivery<Self, T, E>,
            D: IntoDelivery,
            T: Send,
            E: HandlerError + Send,
        {
            let inbox = asynch::Inbox::from(inbox.clone());
            let each = handler.into_async();
            inbox.process_batch(conn, deliveries, each).await
        }

        async fn process_bulk<E, H, D>(
            inbox: &Inbox,
            conn: &mut B::Async,
            deliveries: Vec<D>,
            handler: H,
        ) -> Result<Vec<Result<Outcome<()>, E>>, E>
        where
            H: Bulk<Self, (), E>,
            D: IntoDelivery,
            E: HandlerError + Send,
        {
            let inbox = asynch::Inbox::from(inbox.clone());
            let all = handler.into_async();
            inbox.process_bulk(conn, deliveries, all).await
        }

        async fn migrate(
            conn: &mut B::Async,
            options: MigrationOptions,
        ) -> Result<usize, AdminError> {
            asynch::run_pending_migrations_with(conn, options).await
        }

        async fn stats_all(conn: &mut B::Async, window: Duration) -> Result<Vec<Stats>, Error> {
            asynch::stats::all(conn, window).await
        }

        async fn doctor(conn: &mut B::Async) -> Result<Vec<Check>, Error> {
            asynch::doctor::check(conn).await
        }

        async fn advance<T, E, H>(
            cursor: &Cursor,
            conn: &mut B::Async,
            delivery: impl Into<Sequenced> + Send,
            handler: H,
        ) -> Result<Outcome<T>, E>
        where
            H: Handle<Self, T, E>,
            T: Send,
            E: HandlerError + Send,
        {
            let cursor = asynch::Cursor::from(cursor.clone());
            cursor.process(conn, delivery, handler.into_async()).await
        }

        async fn advance_batch<M, T, E, H>(
            cursor: &Cursor,
            conn: &mut B::Async,
            items: &[(u64, M)],
            handler: H,
        ) -> Result<Vec<Outcome<T>>, E>
        where
            H: PerSequence<Self, M, T, E>,
            M: Sync,
            T: Send,
            E: HandlerError + Send,
        {
            let cursor = asynch::Cursor::from(cursor.clone());
            cursor
                .process_batch(conn, items, handler.into_async())
                .await
        }

        async fn acquire(
            cursor: &Cursor,
            conn: &mut B::Async,
            owner: &str,
        ) -> Result<Lease, Error> {
            asynch::Cursor::from(cursor.clone())
                .acquire(conn, owner)
                .await
        }

        async fn resume(cursor: &Cursor, conn: &mut B::Async) -> Result<Resume, Error> {
            asynch::Cursor::from(cursor.clone()).resume(conn).await
        }

        async fn position(cursor: &Cursor, conn: &mut B::Async) -> Result<Option<Position>, Error> {
            asynch::Cursor::from(cursor.clone()).position(conn).await
        }

        async fn prune_events(
            cursor: &Cursor,
            conn: &mut B::Async,
            batch_size: usize,
        ) -> Result<u64, AdminError> {
            let cursor = asynch::Cursor::from(cursor.clone());
            cursor.prune_events(conn, batch_size).await
        }

        async fn open_gaps(
            gaps: &Gaps,
            conn: &mut B::Async,
        ) -> Result<Vec<Result<Gap, CorruptRow>>, Error> {
            asynch::Gaps::from(gaps.clone()).open(conn).await
        }

        async fn list_gaps(
            gaps: &Gaps,
            conn: &mut B::Async,
            after: i64,
            limit: usize,
        ) -> Result<Vec<Result<Gap, CorruptRow>>, Error> {
            asynch::Gaps::from(gaps.clone())
                .list(conn, after, limit)
                .await
        }

        async fn resolve_gap(
            gaps: &Gaps,
            conn: &mut B::Async,
            id: i64,
            audit: &Audit,
        ) -> Result<Gap, AdminError> {
            asynch::Gaps::from(gaps.clone())
                .resolve(conn, id, audit)
                .await
        }

        type Held = asynch::Claim;

        async fn claim(
            claims: &Claims,
            conn: &mut B::Async,
            delivery: impl IntoDelivery + Send,
        ) -> Result<asynch::Claimed, Error> {
            asynch::Claims::from(claims.clone())
                .claim(conn, delivery)
                .await
        }

        async fn run_claimed<T, E, S, R>(
            claims: &Claims,
            conn: &mut B::Async,
            delivery: impl IntoDelivery + Send,
            side_effect: S,
            record: R,
        ) -> Result<ClaimOutcome<T>, E>
        where
            S: Acts<T, E>,
            R: Keeps<Self, T, E>,
            T: Serialize + DeserializeOwned + Send + Sync,
            E: HandlerError + Send,
        {
            let claims = asynch::Claims::from(claims.clone());
            let (act, keep) = (side_effect.into_async(), record.into_async());
            claims.run_and_record(conn, delivery, act, keep).await
        }

        async fn show_claim(
            claims: &Claims,
            conn: &mut B::Async,
            event_id: &str,
        ) -> Result<Option<ClaimRecord>, Error> {
            asynch::Claims::from(claims.clone())
                .show(conn, event_id)
                .await
        }

        async fn resolve_claim(
            claims: &Claims,
            conn: &mut B::Async,
            event_id: &str,
            resolution: Resolution,
            audit: &Audit,
        ) -> Result<ClaimRecord, AdminError> {
            let claims = asynch::Claims::from(claims.clone());
            claims.resolve(conn, event_id, resolution, audit).await
        }

        fn idempotency_key(held: &asynch::Claim) -> String {
            held.idempotency_key()
        }

        fn lease_until(held: &asynch::Claim) -> DateTime<Utc> {
            held.lease_until()
        }

        async fn extend(
            held: &mut asynch::Claim,
            conn: &mut B::Async,
            by: Duration,
        ) -> Result<(), Error> {
            held.extend(conn, by).await
        }

        async fn complete_with<T, E, H>(
            held: asynch::Claim,
            conn: &mut B::Async,
            result: &T,
            record: H,
        ) -> Result<(), E>
        where
            H: Handle<Self, (), E>,
            T: Serialize + Sync,
            E: HandlerError + Send,
        {
            held.complete_with(conn, result, record.into_async()).await
        }

        fn enqueue(
            outbox: &Outbox,
            conn: &mut B::Async,
            topic: &str,
            envelope: &Envelope,
        ) -> impl Future<Output = Result<(), Error>> + Send {
            let outbox = asynch::Outbox::from(outbox.clone());
            async move { outbox.enqueue(conn, topic, envelope).await }
        }

        async fn outbox_stats(conn: &mut B::Async) -> Result<OutboxStats, Error> {
            asynch::Outbox::stats(conn).await
        }

        async fn outbox_list(
            conn: &mut B::Async,
            state: Option<OutboxState>,
            after: i64,
            limit: i64,
        ) -> Result<Vec<Result<OutboxRecord, CorruptRow>>, Error> {
            asynch::Outbox::list(conn, state, after, limit).await
        }

        async fn outbox_record(
            conn: &mut B::Async,
            position: i64,
        ) -> Result<OutboxRecord, AdminError> {
            asynch::Outbox::record(conn, position).await
        }

        async fn outbox_retry(
            conn: &mut B::Async,
            position: i64,
            audit: &Audit,
        ) -> Result<(), AdminError> {
            asynch::Outbox::retry(conn, position, audit).await
        }

        async fn outbox_prune(
            conn: &mut B::Async,
            older_than: Duration,
            batch: usize,
        ) -> Result<u64, Error> {
            asynch::Outbox::prune(conn, older_than, batch).await
        }

        async fn relay_once<P: Publisher + AsyncPublisher>(
            relay: &Relay,
            conn: &mut B::Async,
            publisher: &mut P,
        ) -> Result<RelayPass, AdminError> {
            let relay = asynch::Relay::from(relay.clone());
            relay.run_once(conn, &*publisher).await
        }

        async fn assert_processed_once(
            conn: &mut B::Async,
            inbox: &Inbox,
            event_id: &str,
        ) -> InboxRecord {
            let inbox = asynch::Inbox::from(inbox.clone());
            testing::asynch::assert_processed_once(conn, &inbox, event_id).await
        }

        async fn assert_deliveries(
            conn: &mut B::Async,
            inbox: &Inbox,
            event_id: &str,
            expected: u64,
        ) -> InboxRecord {
            let inbox = asynch::Inbox::from(inbox.clone());
            testing::asynch::assert_deliveries(conn, &inbox, event_id, expected).await
        }

        async fn assert_not_processed(conn: &mut B::Async, inbox: &Inbox, event_id: &str) {
            let inbox = asynch::Inbox::from(inbox.clone());
            testing::asynch::assert_not_processed(conn, &inbox, event_id).await;
        }

        async fn assert_dead_lettered(
            conn: &mut B::Async,
            inbox: &Inbox,
            event_id: &str,
        ) -> DeadLetter {
            let inbox = asynch::Inbox::from(inbox.clone());
            testing::asynch::assert_dead_lettered(conn, &inbox, event_id).await
        }

        async fn assert_idempotent<T, E, H, O>(
            conn: &mut B::Async,
            times: usize,
            deliver: H,
            effects: O,
        ) -> DeliveryReport
        where
            H: Handle<Self, Outcome<T>, E>,
            O: Handle<Self, i64, diesel::result::Error>,
            T: Send,
            E: HandlerError + Debug + Send,
        {
            let (deliver, effects) = (deliver.into_async(), effects.into_async());
            testing::asynch::assert_idempotent(conn, times, deliver, effects).await
        }

        async fn run_schedule<T, E, G, O>(
            conn: &mut B::Async,
            inbox: &Inbox,
            schedule: &Schedule,
            effect: G,
            effects: O,
        ) -> DeliveryReport
        where
            G: Scheduled<Self, T, E>,
            O: Handle<Self, i64, diesel::result::Error>,
            T: Send,
            E: HandlerError + Debug + Send,
        {
            let inbox = asynch::Inbox::from(inbox.clone());
            let (effect, effects) = (effect.into_async(), effects.into_async());
            testing::asynch::run_schedule(conn, &inbox, schedule, effect, effects).await
        }

        async fn prune(
            inbox: &Inbox,
            conn: &mut B::Async,
            retention: &Retention,
        ) -> Result<Pruned, AdminError> {
            asynch::Inbox::from(inbox.clone())
                .prune(conn, retention)
                .await
        }

        async fn begin(conn: &mut B::Async) {
            Manager::<B::Async>::begin_transaction(conn).await.unwrap();
        }

        async fn end(conn: &mut B::Async, commit: bool) {
            if commit {
                Manager::<B::Async>::commit_transaction(conn).await.unwrap();
            } else {
                Manager::<B::Async>::rollback_transaction(conn)
                    .await
                    .unwrap();
            }
        }

        fn depth(conn: &mut B::Async) -> u32 {
            match Manager::<B::Async>::transaction_manager_status_mut(conn) {
                TransactionManagerStatus::Valid(status) => status
                    .transaction_depth()
                    .map_or(0, std::num::NonZeroU32::get),
                TransactionManagerStatus::InError => panic!("the transaction manager is broken"),
            }
        }

        fn log(conn: &mut B::Async) -> StatementLog {
            StatementLog::install_async(conn)
        }
    }
}

/// A flavour's backend.
pub(crate) type BackendOf<F> = <F as Flavour>::Backend;

/// The sync connection a scenario checks with, whichever its flavour.
pub(crate) type CheckConn<F> = <<F as Flavour>::Backend as Backend>::Conn;

/// A database with the effects table, a sync connection to check it through, and a
/// connection of the flavour's for the deliveries.
pub(crate) async fn setup_flavour<F: Flavour>(
) -> (TestDatabase<CheckConn<F>>, CheckConn<F>, F::Conn) {
    let (db, check) = super::setup::<F::Backend>();
    let conn = F::connect(&db).await;
    (db, check, conn)
}
