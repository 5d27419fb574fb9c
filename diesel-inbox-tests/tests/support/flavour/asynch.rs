//! The async flavour: `diesel_inbox::asynch`, on a diesel-async connection.

use std::ops::DerefMut;

use diesel::connection::TransactionManagerStatus;
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
use diesel_async::{AsyncConnection, SimpleAsyncConnection, TransactionManager as _};
use diesel_inbox::asynch::{self, AsyncInboxConnection};

use super::*;

/// A backend's async connection, and a deadpool pool of them.
pub(crate) trait AsyncBackend: Backend {
    type Async: AsyncInboxConnection + Tx;

    /// An async connection to the database at `url`, set up as the sync one is.
    fn connect(url: &str) -> impl Future<Output = Self::Async> + Send {
        async move { Self::Async::establish(url).await.unwrap() }
    }

    /// A deadpool pool of such connections.
    type Pool: Clone + Send + Sync + 'static;

    /// A pool of `size` connections to the database at `url`.
    fn pool(url: &str, size: usize) -> Self::Pool;

    /// A connection from the pool, as deadpool hands it out.
    fn get(pool: &Self::Pool) -> impl Future<Output = Pooled<Self::Async>> + Send;

    /// A bb8 pool of such connections.
    type Bb8: Clone + Send + Sync + 'static;

    /// A bb8 pool of `size` connections to the database at `url`.
    fn bb8(url: &str, size: u32) -> impl Future<Output = Self::Bb8> + Send;

    /// A connection from the bb8 pool, as bb8 hands it out.
    fn get_bb8(pool: &Self::Bb8) -> impl Future<Output = Pooled<Self::Async>> + Send;
}

/// The transaction depth diesel-async's transaction manager counts on `conn`: 0 outside a
/// transaction; `None` when it is broken (a delivery dropped mid-transaction marks it so).
pub(crate) fn depth_of<C: AsyncConnection>(conn: &mut C) -> Option<u32> {
    match C::TransactionManager::transaction_manager_status_mut(conn) {
        TransactionManagerStatus::Valid(status) => Some(
            status
                .transaction_depth()
                .map_or(0, std::num::NonZeroU32::get),
        ),
        TransactionManagerStatus::InError => None,
    }
}

/// A pooled connection, whichever its pool.
pub(crate) type Pooled<C> = Box<dyn DerefMut<Target = C> + Send>;

/// [`AsyncBackend`]'s pools, whose bounds only a concrete connection type meets; their
/// connections are set up as [`AsyncBackend::connect`] sets one up.
macro_rules! pools {
    () => {
        type Pool = Pool<Self::Async>;

        fn pool(url: &str, size: usize) -> Self::Pool {
            let manager = manager::<Self>(url);
            Pool::builder(manager).max_size(size).build().unwrap()
        }

        async fn get(pool: &Self::Pool) -> Pooled<Self::Async> {
            Box::new(pool.get().await.unwrap())
        }

        type Bb8 = diesel_async::pooled_connection::bb8::Pool<Self::Async>;

        async fn bb8(url: &str, size: u32) -> Self::Bb8 {
            let manager = manager::<Self>(url);
            let pool = Self::Bb8::builder().max_size(size);
            pool.build(manager).await.unwrap()
        }

        async fn get_bb8(pool: &Self::Bb8) -> Pooled<Self::Async> {
            Box::new(pool.get_owned().await.unwrap())
        }
    };
}

/// A pool's manager of connections to `url`, set up as [`AsyncBackend::connect`] sets one up.
fn manager<B: AsyncBackend>(url: &str) -> AsyncDieselConnectionManager<B::Async> {
    let mut config = ManagerConfig::default();
    config.custom_setup = Box::new(|url| {
        let url = url.to_owned();
        Box::pin(async move { Ok(B::connect(&url).await) })
    });
    AsyncDieselConnectionManager::new_with_config(url, config)
}

#[cfg(feature = "postgres")]
impl AsyncBackend for crate::support::Postgres {
    type Async = diesel_async::AsyncPgConnection;
    pools!();
}

#[cfg(feature = "mysql")]
impl AsyncBackend for crate::support::Mysql {
    type Async = diesel_async::AsyncMysqlConnection;
    pools!();
}

#[cfg(feature = "sqlite")]
impl AsyncBackend for crate::support::Sqlite {
    type Async =
        diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>;

    async fn connect(url: &str) -> Self::Async {
        // The busy timeout and journal mode of `SqliteSetup`, as every sync connection has.
        diesel_async::sync_connection_wrapper::SyncConnectionWrapper::new(Self::connect_to(url))
    }

    pools!();
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
async_tx!(diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>);

type Manager<C> = <C as AsyncConnection>::TransactionManager;

impl<B: AsyncBackend + 'static> Flavour for Async<B> {
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

    async fn stats(inbox: &Inbox, conn: &mut B::Async, window: Duration) -> Result<Stats, Error> {
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

    async fn migrate(conn: &mut B::Async, options: MigrationOptions) -> Result<usize, AdminError> {
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

    async fn acquire(cursor: &Cursor, conn: &mut B::Async, owner: &str) -> Result<Lease, Error> {
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

    async fn process_block(
        chain: &Chain,
        conn: &mut B::Async,
        block: &Block<()>,
        ledger: &mut ChainLedger,
    ) -> Result<BlockOutcome, Error> {
        let chain = asynch::Chain::from(chain.clone());
        chain.process(conn, block, ledger).await
    }

    async fn chain_position(
        chain: &Chain,
        conn: &mut B::Async,
    ) -> Result<Option<ChainPosition>, Error> {
        asynch::Chain::from(chain.clone()).position(conn).await
    }

    async fn reorgs(chain: &Chain, conn: &mut B::Async) -> Result<Vec<Reorg>, Error> {
        let chain = asynch::Chain::from(chain.clone());
        chain.reorgs().list(conn, 0, 10_000).await
    }

    async fn run_replay(
        replays: &Replays,
        conn: &mut B::Async,
        id: i64,
        ledger: &mut ReplayLedger,
    ) -> Result<RunReport, Error> {
        let replays = asynch::Replays::from(replays.clone());
        replays
            .run(conn, id, &mut OutboxSource::new(), ledger)
            .await
    }

    async fn reconcile_replay(
        replays: &Replays,
        conn: &mut B::Async,
        id: i64,
        reports: Vec<Report>,
    ) -> Result<Evidence, AdminError> {
        let replays = asynch::Replays::from(replays.clone());
        let reports = std::sync::Mutex::new(Some(reports));
        let check = async |_: &mut B::Async| Ok(reports.lock().unwrap().take().unwrap_or_default());
        replays
            .reconcile(conn, id, &mut OutboxSource::new(), check)
            .await
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

    async fn outbox_record(conn: &mut B::Async, position: i64) -> Result<OutboxRecord, AdminError> {
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
        diesel_inbox_test::asynch::assert_processed_once(conn, &inbox, event_id).await
    }

    async fn assert_deliveries(
        conn: &mut B::Async,
        inbox: &Inbox,
        event_id: &str,
        expected: u64,
    ) -> InboxRecord {
        let inbox = asynch::Inbox::from(inbox.clone());
        diesel_inbox_test::asynch::assert_deliveries(conn, &inbox, event_id, expected).await
    }

    async fn assert_not_processed(conn: &mut B::Async, inbox: &Inbox, event_id: &str) {
        let inbox = asynch::Inbox::from(inbox.clone());
        diesel_inbox_test::asynch::assert_not_processed(conn, &inbox, event_id).await;
    }

    async fn assert_dead_lettered(
        conn: &mut B::Async,
        inbox: &Inbox,
        event_id: &str,
    ) -> DeadLetter {
        let inbox = asynch::Inbox::from(inbox.clone());
        diesel_inbox_test::asynch::assert_dead_lettered(conn, &inbox, event_id).await
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
        diesel_inbox_test::asynch::assert_idempotent(conn, times, deliver, effects).await
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
        diesel_inbox_test::asynch::run_schedule(conn, &inbox, schedule, effect, effects).await
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
        depth_of(conn).expect("the transaction manager is broken")
    }

    fn log(conn: &mut B::Async) -> StatementLog {
        StatementLog::install_async(conn)
    }
}
