//! The blocking flavour: the sync API, on a Diesel connection.

use super::*;

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
        diesel_inbox::migrations::run_pending_migrations_with(conn, options)
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

    async fn process_block(
        chain: &Chain,
        conn: &mut B::Conn,
        block: &Block<()>,
        ledger: &mut ChainLedger,
    ) -> Result<BlockOutcome, Error> {
        chain.process(conn, block, ledger)
    }

    async fn chain_position(
        chain: &Chain,
        conn: &mut B::Conn,
    ) -> Result<Option<ChainPosition>, Error> {
        chain.position(conn)
    }

    async fn reorgs(chain: &Chain, conn: &mut B::Conn) -> Result<Vec<Reorg>, Error> {
        chain.reorgs().list(conn, 0, 10_000)
    }

    async fn run_replay(
        replays: &Replays,
        conn: &mut B::Conn,
        id: i64,
        ledger: &mut ReplayLedger,
    ) -> Result<RunReport, Error> {
        replays.run(conn, id, &mut OutboxSource::new(), ledger)
    }

    async fn reconcile_replay(
        replays: &Replays,
        conn: &mut B::Conn,
        id: i64,
        reports: Vec<Report>,
    ) -> Result<Evidence, AdminError> {
        replays.reconcile(conn, id, &mut OutboxSource::new(), |_| Ok(reports))
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
        diesel_inbox_test::assert_processed_once(conn, inbox, event_id)
    }

    async fn assert_deliveries(
        conn: &mut B::Conn,
        inbox: &Inbox,
        event_id: &str,
        expected: u64,
    ) -> InboxRecord {
        diesel_inbox_test::assert_deliveries(conn, inbox, event_id, expected)
    }

    async fn assert_not_processed(conn: &mut B::Conn, inbox: &Inbox, event_id: &str) {
        diesel_inbox_test::assert_not_processed(conn, inbox, event_id);
    }

    async fn assert_dead_lettered(conn: &mut B::Conn, inbox: &Inbox, event_id: &str) -> DeadLetter {
        diesel_inbox_test::assert_dead_lettered(conn, inbox, event_id)
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
        diesel_inbox_test::assert_idempotent(conn, times, deliver, |conn| now(effects.call(conn)))
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
        diesel_inbox_test::run_schedule(conn, inbox, schedule, effect, |conn| {
            now(effects.call(conn))
        })
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
