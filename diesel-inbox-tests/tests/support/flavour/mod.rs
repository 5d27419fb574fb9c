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
use diesel_inbox::chain::{Block, BlockOutcome, Chain, ChainPosition, Reorg};
use diesel_inbox::doctor::Check;
use diesel_inbox::migrations::MigrationOptions;
use diesel_inbox::replay::{Evidence, OutboxSource, Replays, Report, RunReport};
use diesel_inbox::InboxRecord;
use diesel_inbox::{
    claim::{Claim, ClaimOutcome, ClaimRecord, Claimed, Claims, Resolution},
    cursor::{Cursor, Gap, Gaps, Lease, Position, Resume, Sequenced},
    dead_letter::DeadLetter,
    envelope::Envelope,
    outbox::{
        AsyncPublisher, Outbox, OutboxRecord, OutboxState, OutboxStats, Publisher, Relay, RelayPass,
    },
    retention::{Pruned, Retention, Stats},
    AdminError, Audit, CorruptRow, Delivery, Error, EventId, HandlerError, Inbox, IntoDelivery,
    Outcome, Payload,
};
use diesel_inbox_test::{DeliveryReport, Schedule, TestDatabase};
use futures_util::FutureExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{transaction_depth, Backend, EffectConn, StatementLog};

mod blocking;
mod chain;
mod handlers;
mod replay;

pub(crate) use blocking::{block_on, Blocking};
pub(crate) use chain::{ChainLedger, REVERTED};
pub(crate) use handlers::*;
pub(crate) use replay::{ReplayLedger, FOLLOW_UP, SHADOW};

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

    /// [`diesel_inbox::dead_letter::DeadLetters::show`].
    async fn show(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        event_id: &str,
    ) -> Result<DeadLetter, AdminError>;

    /// [`Inbox::stats`].
    async fn stats(inbox: &Inbox, conn: &mut Self::Conn, window: Duration) -> Result<Stats, Error>;

    /// [`diesel_inbox::dead_letter::DeadLetters::list`].
    async fn list(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Result<DeadLetter, CorruptRow>>, Error>;

    /// [`diesel_inbox::dead_letter::DeadLetters::redrive`].
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

    /// [`diesel_inbox::dead_letter::DeadLetters::discard`].
    async fn discard(
        inbox: &Inbox,
        conn: &mut Self::Conn,
        event_id: &str,
        audit: &Audit,
    ) -> Result<(), AdminError>;

    /// [`diesel_inbox::dead_letter::DeadLetters::release`].
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

    /// [`diesel_inbox::migrations::run_pending_migrations_with`].
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

    /// [`Chain::process`](diesel_inbox::chain::Chain::process), with a [`ChainLedger`].
    async fn process_block(
        chain: &Chain,
        conn: &mut Self::Conn,
        block: &Block<()>,
        ledger: &mut ChainLedger,
    ) -> Result<BlockOutcome, Error>;

    /// [`Chain::position`](diesel_inbox::chain::Chain::position).
    async fn chain_position(
        chain: &Chain,
        conn: &mut Self::Conn,
    ) -> Result<Option<ChainPosition>, Error>;

    /// Every reorg of the chain's stream: [`Reorgs::list`](diesel_inbox::chain::Reorgs::list).
    async fn reorgs(chain: &Chain, conn: &mut Self::Conn) -> Result<Vec<Reorg>, Error>;

    /// [`Replays::run`] over the outbox, with a [`ReplayLedger`].
    async fn run_replay(
        replays: &Replays,
        conn: &mut Self::Conn,
        id: i64,
        ledger: &mut ReplayLedger,
    ) -> Result<RunReport, Error>;

    /// [`Replays::reconcile`] over the outbox, with the app's `reports`.
    async fn reconcile_replay(
        replays: &Replays,
        conn: &mut Self::Conn,
        id: i64,
        reports: Vec<Report>,
    ) -> Result<Evidence, AdminError>;

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

    /// [`diesel_inbox_test::assert_processed_once`].
    async fn assert_processed_once(
        conn: &mut Self::Conn,
        inbox: &Inbox,
        event_id: &str,
    ) -> InboxRecord;

    /// [`diesel_inbox_test::assert_deliveries`].
    async fn assert_deliveries(
        conn: &mut Self::Conn,
        inbox: &Inbox,
        event_id: &str,
        expected: u64,
    ) -> InboxRecord;

    /// [`diesel_inbox_test::assert_not_processed`].
    async fn assert_not_processed(conn: &mut Self::Conn, inbox: &Inbox, event_id: &str);

    /// [`diesel_inbox_test::assert_dead_lettered`].
    async fn assert_dead_lettered(
        conn: &mut Self::Conn,
        inbox: &Inbox,
        event_id: &str,
    ) -> DeadLetter;

    /// [`diesel_inbox_test::assert_idempotent`], with the delivery and the effect counter as async
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

    /// [`diesel_inbox_test::run_schedule`], with the effect and the effect counter as async closures.
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

#[cfg(feature = "async")]
#[allow(
    unused_imports,
    reason = "the sync test binaries compile it too, unused"
)]
pub(crate) use asynch::{depth_of, Async, AsyncBackend, Pooled};

#[cfg(feature = "async")]
#[allow(dead_code, reason = "the sync test binaries compile it too, unused")]
mod asynch;

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
