//! Consume, transform, produce: a tokio service on diesel-async, embedded SQLite and NATS
//! JetStream, with no blocking pool: every database step is awaited on a pooled
//! `SyncConnectionWrapper<SqliteConnection>` from diesel-async's deadpool pool.
//!
//! 1. The "orders" service enqueues six `order.placed` events through its outbox, one
//!    transaction each: orders 1 to 5 at schema version 2, and order 6 at version 3.
//! 2. One relay task publishes the outbox to JetStream (`<run>.orders.placed`), sleeping a
//!    little whenever a pass finds nothing to do.
//! 3. The "billing" consumer pulls each order and runs its async inbox handler, up to four
//!    at a time, each on a task of its own (see `bill_orders`): it writes
//!    the invoice and enqueues `invoice.issued` in the same transaction, and acks
//!    the message only after that commit. Its consumer "crashes" after committing order 3 and
//!    before acking it: JetStream redelivers it after `ack_wait`, and the inbox skips the
//!    effect. Version 3 is one billing does not read: the inbox dead-letters it and the
//!    message is acked, so it does not come back.
//! 4. The same relay publishes the `invoice.issued` events, and a second consumer counts them.
//!
//! Both services share one database and one relay here; in production each has its own.
//! Every stream is named after a fresh run id and deleted at the end.
//!
//! ```sh
//! source scripts/services   # NATS with JetStream on 127.0.0.1:4222 (NATS_URL overrides)
//! cargo run --example async_service --features async,nats,sqlite
//! ```

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, PullConsumer};
use async_nats::jetstream::{self, stream, AckKind, Context};
use diesel::sql_types::{BigInt, Text};
use diesel::{Connection, QueryableByName, SqliteConnection};
use diesel_async::pooled_connection::deadpool::{Object, Pool};
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use diesel_inbox::asynch::{self, Inbox, Outbox, Relay};
use diesel_inbox::{
    envelope::{Envelope, SchemaVersions},
    Ack, Outcome, SqliteSetup,
};
use diesel_inbox_nats::{envelope_of, JetStreamPublisher};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::{JoinError, JoinSet};
use tokio::time::{sleep, timeout};

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
/// SQLite through diesel-async: each statement runs on tokio's blocking pool, out of sight.
type Conn = SyncConnectionWrapper<SqliteConnection>;
type SqlitePool = Pool<Conn>;

/// Orders 1 to 5 at schema version 2; one more at version 3.
const ORDERS: u32 = 5;
const PUBLISHED: usize = ORDERS as usize + 1;
/// The order whose consumer dies between its commit and its ack.
const CRASHED_ORDER: &str = "3";
/// How many deliveries billing runs at once.
const AT_ONCE: usize = 4;
/// The whole flow's bound.
const DEADLINE: Duration = Duration::from_secs(60);
/// One network step's bound (connecting, making and deleting streams).
const STEP: Duration = Duration::from_secs(10);
/// Short, so that JetStream redelivers the unacked order within the example.
const ACK_WAIT: Duration = Duration::from_secs(1);
/// How long billing waits on a quiet stream before it counts itself done: longer than
/// `ACK_WAIT`, so a redelivery still to come is seen.
const QUIET: Duration = Duration::from_secs(2);
/// The relay's nap when a pass finds nothing due.
const IDLE: Duration = Duration::from_millis(50);

#[derive(Serialize, Deserialize)]
struct OrderPlaced {
    order_id: String,
    total: i64,
}

#[derive(Serialize)]
struct InvoiceIssued {
    order_id: String,
    total: i64,
}

/// One run's streams and subjects, named after its id so that runs never collide.
struct Names {
    run: String,
}

impl Names {
    fn orders_stream(&self) -> String {
        format!("ORDERS_{}", self.run)
    }

    fn invoices_stream(&self) -> String {
        format!("INVOICES_{}", self.run)
    }

    fn subject(&self, rest: &str) -> String {
        format!("{}.{rest}", self.run)
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("async_service failed: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Connects, makes the run's streams, plays the flow within the deadline, and deletes the
/// streams whatever became of it.
async fn run() -> Result {
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".to_owned());
    let client = timeout(STEP, async_nats::connect(&url))
        .await
        .map_err(|_| format!("connecting to NATS at {url} timed out"))?
        .map_err(|error| {
            format!("NATS is not reachable at {url} ({error}); run `source scripts/services`")
        })?;
    let js = jetstream::new(client);
    let names = Names {
        run: uuid::Uuid::new_v4().simple().to_string(),
    };
    let flow = match create_streams(&js, &names).await {
        Ok(()) => timeout(DEADLINE, flow(&js, &names))
            .await
            .unwrap_or_else(|_| Err(format!("the flow took longer than {DEADLINE:?}").into())),
        Err(error) => Err(error),
    };
    let cleanup = delete_streams(&js, &names).await;
    flow.and(cleanup)
}

/// Everything between making the streams and deleting them.
async fn flow(js: &Context, names: &Names) -> Result {
    let dir = tempfile::tempdir()?;
    let pool = sqlite_pool(&dir.path().join("services.db")).await?;
    let (stop, stopped) = watch::channel(false);
    let publisher = JetStreamPublisher::new(js.clone());
    let relay = tokio::spawn(relay_task(pool.clone(), publisher, stopped.clone()));
    let audit = consumer(js, &names.invoices_stream(), "invoice-audit").await?;
    let invoices = tokio::spawn(count_invoices(audit, stopped));

    let enqueued = place_orders(&pool, names).await?;
    println!("orders-service: {enqueued} order.placed events enqueued, one transaction each");
    let billing = Billing {
        pool: pool.clone(),
        inbox: Inbox::new("billing")?,
        versions: SchemaVersions::new().accept("order.placed", [1, 2]),
        outbox: Outbox::new("billing")?,
        invoices_topic: names.subject("invoices.issued"),
    };
    let orders = consumer(js, &names.orders_stream(), "billing").await?;
    let billed = bill_orders(billing, orders).await?;

    // Every invoice.issued event has reached its stream once the outbox has nothing pending.
    while outbox_stats(&pool).await?.pending > 0 {
        sleep(IDLE).await;
    }
    stop.send(true)?;
    let relayed = relay.await??;
    let issued = invoices.await??;
    let counts = Counts {
        relayed,
        billed,
        issued,
        orders_stored: stored(js, &names.orders_stream()).await?,
        invoices_stored: stored(js, &names.invoices_stream()).await?,
    };
    report(&pool, &counts).await
}

/// A deadpool pool over a SQLite file: WAL and a busy timeout on each connection, so that the
/// relay and the consumer write side by side; the inbox and outbox tables, and billing's.
async fn sqlite_pool(path: &Path) -> Result<SqlitePool> {
    let mut config = ManagerConfig::<Conn>::default();
    config.custom_setup = Box::new(|url| {
        let url = url.to_owned();
        Box::pin(async move {
            let mut conn = Conn::new(SqliteConnection::establish(&url)?);
            let setup = |conn: &mut SqliteConnection| SqliteSetup::default().apply(conn);
            conn.spawn_blocking(setup)
                .await
                .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
            Ok(conn)
        })
    });
    let manager = AsyncDieselConnectionManager::new_with_config(path.display().to_string(), config);
    let pool = Pool::builder(manager).max_size(4).build()?;
    let mut conn = pool.get().await?;
    diesel_inbox::asynch::run_pending_migrations(&mut *conn).await?;
    conn.batch_execute("CREATE TABLE invoices (order_id TEXT PRIMARY KEY, total BIGINT)")
        .await?;
    Ok(pool)
}

/// A pooled connection; pool errors (none to give within deadpool's wait) are the flow's.
async fn connection(pool: &SqlitePool) -> Result<Object<Conn>> {
    Ok(pool.get().await?)
}

/// The orders service: each order's event enqueued in a transaction of its own (where its
/// business writes would go too).
async fn place_orders(pool: &SqlitePool, names: &Names) -> Result<usize> {
    let outbox = Outbox::new("orders-service")?;
    let topic = names.subject("orders.placed");
    let mut events = Vec::new();
    for id in 1..=ORDERS {
        let order = OrderPlaced {
            order_id: id.to_string(),
            total: i64::from(id) * 1250,
        };
        events.push(
            placed(&order.order_id)
                .with_schema_version(2)
                .json(&order)?,
        );
    }
    // A version billing does not read yet: a new field, as the orders service now sends it.
    let future = serde_json::json!({"order_id": "6", "total": 990, "currency": "EUR"});
    events.push(placed("6").with_schema_version(3).json(&future)?);
    let mut conn = connection(pool).await?;
    for event in &events {
        // Outside a transaction: the enqueue commits in one of its own.
        outbox.enqueue(&mut *conn, &topic, event).await?;
    }
    Ok(events.len())
}

fn placed(order_id: &str) -> Envelope {
    Envelope::new("order.placed", "order", order_id)
}

/// The relay: passes until told to stop, napping when one finds nothing due; each pass on a
/// connection of its own from the pool. A failed pass (a busy database, a broker away) is
/// logged and tried again.
async fn relay_task(
    pool: SqlitePool,
    publisher: JetStreamPublisher,
    mut stop: watch::Receiver<bool>,
) -> Result<usize> {
    let relay = Relay::new();
    let mut relayed = 0;
    while !*stop.borrow() {
        let pass = match connection(&pool).await {
            Ok(mut conn) => relay
                .run_once(&mut *conn, &publisher)
                .await
                .map_err(Into::into),
            Err(error) => Err(error),
        };
        match pass {
            Ok(pass) if !pass.is_idle() => {
                relayed += pass.published;
                continue;
            }
            Ok(_idle) => {}
            Err(error) => eprintln!("relay: pass failed, trying again: {error}"),
        }
        tokio::select! {
            changed = stop.changed() => if changed.is_err() { break },
            () = sleep(IDLE) => {}
        }
    }
    Ok(relayed)
}

/// A durable pull consumer on `stream`.
async fn consumer(js: &Context, stream: &str, name: &str) -> Result<PullConsumer> {
    let config = pull::Config {
        durable_name: Some(name.to_owned()),
        ack_wait: ACK_WAIT,
        ..Default::default()
    };
    Ok(js.get_stream(stream).await?.create_consumer(config).await?)
}

/// The billing service: its inbox, the schema versions it reads, and its own outbox.
struct Billing {
    pool: SqlitePool,
    inbox: Inbox,
    versions: SchemaVersions,
    outbox: Outbox,
    invoices_topic: String,
}

impl Billing {
    /// The invoice and its `invoice.issued` event, in the inbox's transaction. The outer
    /// error is the pool's; the inner one is the inbox's answer, for `Ack::of`.
    async fn process(
        &self,
        envelope: &Envelope,
    ) -> Result<std::result::Result<Outcome<()>, diesel_inbox::Error>> {
        let mut conn = connection(&self.pool).await?;
        let bill = async |tx: &mut Conn| {
            self.versions.check(envelope)?;
            let order: OrderPlaced = envelope.decode_json()?;
            diesel::sql_query("INSERT INTO invoices (order_id, total) VALUES (?, ?)")
                .bind::<Text, _>(&order.order_id)
                .bind::<BigInt, _>(order.total)
                .execute(tx)
                .await?;
            let issued = Envelope::new("invoice.issued", "order", envelope.aggregate_id()).json(
                &InvoiceIssued {
                    order_id: order.order_id,
                    total: order.total,
                },
            )?;
            self.outbox.enqueue(tx, &self.invoices_topic, &issued).await
        };
        Ok(self.inbox.process(&mut *conn, envelope, bill).await)
    }
}

/// What billing did with its deliveries.
#[derive(Debug, Default)]
struct Billed {
    deliveries: usize,
    /// Messages acked or terminated: JetStream will not deliver them again.
    settled: usize,
}

/// Billing's loop: up to `AT_ONCE` deliveries at a time, until every order is settled and the
/// stream has been quiet for a while. Each delivery runs on a task of its own, which takes
/// its own pooled connection: one that is given up on (a timeout, a shutdown) runs on to its
/// end there. Dropped half-way on `SyncConnectionWrapper`, a delivery would block the task
/// that dropped it until its statement returned, and every delivery sharing that task with
/// it: one waiting for SQLite's write lock that a sibling holds, for the whole busy timeout.
async fn bill_orders(billing: Billing, consumer: PullConsumer) -> Result<Billed> {
    let billing = Arc::new(billing);
    let mut messages = consumer.messages().await?;
    let mut running = JoinSet::new();
    let mut billed = Billed::default();
    loop {
        while running.len() >= AT_ONCE {
            billed.count(running.join_next().await)?;
        }
        match timeout(QUIET, messages.next()).await {
            Ok(Some(message)) => {
                let (billing, message) = (billing.clone(), message?);
                running.spawn(async move { consume_one(&billing, &message).await });
            }
            Ok(None) => return Err("the billing consumer's messages ended".into()),
            Err(_quiet) if running.is_empty() && billed.settled >= PUBLISHED => return Ok(billed),
            Err(_quiet) => {
                while let Some(done) = running.try_join_next() {
                    billed.count(Some(done))?;
                }
            }
        }
    }
}

impl Billed {
    /// Counts a finished delivery: whether its message was settled.
    fn count(&mut self, done: Option<std::result::Result<Result<bool>, JoinError>>) -> Result {
        let settled = done.ok_or("no delivery was running")???;
        self.deliveries += 1;
        self.settled += usize::from(settled);
        Ok(())
    }
}

/// One delivery: decode, process, then ack as `Ack::of` says. Whether the message is settled
/// (acked or terminated), so that JetStream will not deliver it again.
async fn consume_one(billing: &Billing, message: &jetstream::Message) -> Result<bool> {
    let envelope = match envelope_of(message) {
        Ok(envelope) => envelope,
        Err(error) => {
            eprintln!(
                "billing: {} is not an event envelope: {error}",
                message.subject
            );
            message.ack_with(AckKind::Term).await?;
            return Ok(true);
        }
    };
    let first_delivery = message.info()?.delivered == 1;
    let order = envelope.aggregate_id().to_owned();
    let version = envelope.schema_version();
    let result = billing.process(&envelope).await?;
    match &result {
        Ok(Outcome::Duplicate(_)) => {
            println!("billing: duplicate delivery of order {order}: effect skipped");
        }
        Ok(Outcome::DeadLettered(_)) => {
            println!("billing: order {order} (schema v{version}) dead-lettered");
        }
        Ok(_) => println!("billing: order {order} invoiced"),
        Err(error) => println!("billing: order {order} failed: {error}"),
    }
    if order == CRASHED_ORDER && first_delivery && matches!(result, Ok(Outcome::Processed(()))) {
        println!("billing: crashed after committing order {order}, before its ack");
        return Ok(false);
    }
    match Ack::of(&result) {
        Ack::Ack => message.ack().await?,
        Ack::Redeliver => {
            // Later, not at once: a database that is down stays down for a while.
            let later = Some(std::time::Duration::from_millis(500));
            message.ack_with(AckKind::Nak(later)).await?;
            return Ok(false);
        }
        // Reject, and any answer a later version adds: JetStream's own dead-letter path.
        _ => message.ack_with(AckKind::Term).await?,
    }
    Ok(true)
}

/// The invoices stream's consumer: counts `invoice.issued` events until told to stop and
/// then quiet for a while.
async fn count_invoices(consumer: PullConsumer, stop: watch::Receiver<bool>) -> Result<usize> {
    let mut messages = consumer.messages().await?;
    let (mut issued, mut stopping) = (0, false);
    loop {
        match timeout(QUIET / 4, messages.next()).await {
            Ok(Some(message)) => {
                let message = message?;
                if envelope_of(&message)?.event_type() == "invoice.issued" {
                    issued += 1;
                }
                message.ack().await?;
            }
            Ok(None) => return Err("the invoices consumer's messages ended".into()),
            Err(_quiet) if stopping => return Ok(issued),
            Err(_quiet) => stopping = *stop.borrow(),
        }
    }
}

async fn outbox_stats(pool: &SqlitePool) -> Result<diesel_inbox::outbox::OutboxStats> {
    Ok(Outbox::stats(&mut *connection(pool).await?).await?)
}

/// Messages a stream holds.
async fn stored(js: &Context, stream: &str) -> Result<u64> {
    Ok(js.get_stream(stream).await?.info().await?.state.messages)
}

/// What the run observed, for the report.
struct Counts {
    relayed: usize,
    billed: Billed,
    issued: usize,
    orders_stored: u64,
    invoices_stored: u64,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Prints the counts next to what they must be; fails on any mismatch.
async fn report(pool: &SqlitePool, counts: &Counts) -> Result {
    let mut conn = connection(pool).await?;
    let invoices = diesel::sql_query("SELECT COUNT(*) AS n FROM invoices")
        .get_result::<Count>(&mut *conn)
        .await?
        .n;
    let billing = asynch::Inbox::new("billing")?;
    let stats = billing.stats(&mut *conn, Duration::from_secs(3600)).await?;
    drop(conn);
    let pending = outbox_stats(pool).await?.pending;
    let checks = [
        ("orders published", counts.orders_stored, 6),
        (
            "deliveries seen by billing",
            counts.billed.deliveries as u64,
            7,
        ),
        ("invoices written", invoices.unsigned_abs(), 5),
        ("dead letters", stats.totals.dead_lettered, 1),
        ("invoice.issued events counted", counts.issued as u64, 5),
        (
            "invoice.issued events in the stream",
            counts.invoices_stored,
            5,
        ),
        ("relay publishes", counts.relayed as u64, 11),
        ("outbox pending", pending.unsigned_abs(), 0),
    ];
    let mut mismatches = 0;
    for (what, got, want) in checks {
        let mark = if got == want { "ok" } else { "MISMATCH" };
        println!("  {what}: {got} (expected {want}) {mark}");
        mismatches += usize::from(got != want);
    }
    if mismatches > 0 {
        return Err(format!("{mismatches} counts did not match").into());
    }
    println!("five orders, five invoices: one effect each despite the redelivery, and the v3 event parked for ops");
    Ok(())
}

async fn create_streams(js: &Context, names: &Names) -> Result {
    for (name, subjects) in [
        (names.orders_stream(), names.subject("orders.>")),
        (names.invoices_stream(), names.subject("invoices.>")),
    ] {
        let config = stream::Config {
            name,
            subjects: vec![subjects],
            storage: stream::StorageType::Memory,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        };
        timeout(STEP, js.create_stream(config)).await??;
    }
    Ok(())
}

/// Deletes the run's streams (those that exist), then checks that none is left.
async fn delete_streams(js: &Context, names: &Names) -> Result {
    for name in [names.orders_stream(), names.invoices_stream()] {
        if let Ok(Ok(_)) = timeout(STEP, js.get_stream(&name)).await {
            timeout(STEP, js.delete_stream(&name)).await??;
        }
    }
    let mut left = 0;
    let mut streams = js.stream_names();
    while let Some(name) = timeout(STEP, streams.next()).await? {
        left += usize::from(name?.contains(&names.run));
    }
    println!("streams left from this run: {left}");
    if left > 0 {
        return Err(format!("{left} streams of run {} were not deleted", names.run).into());
    }
    Ok(())
}
