//! The async flavour on diesel-async, against all three backends: the inbox's guarantees as
//! the sync scenarios pin them, and what a cancelled delivery leaves behind. Deliveries run on
//! the async connection; what they left is read back through a sync one.

#[macro_use]
#[allow(dead_code, unused_imports, unused_macros)]
mod scenarios;
#[allow(dead_code, unused_imports)]
mod support;

use diesel_inbox::AdminError;
use std::ops::DerefMut;
use std::sync::Mutex;
use std::time::Duration;

use diesel_inbox::asynch::{self, AsyncInboxConnection};
use diesel_inbox::{
    claim::{ClaimState, Claimed, Resolution},
    retention::{Pruned, Retention},
    Audit, Error, Outcome,
};

use support::{depth_of, setup, AsyncBackend, Pooled, TestConn, Tx};

/// A pooled connection that derefs to the connection itself, as a pool's own guard does.
struct Checkout<C>(Pooled<C>);

impl<C> std::ops::Deref for Checkout<C> {
    type Target = C;

    fn deref(&self) -> &C {
        &self.0
    }
}

impl<C> DerefMut for Checkout<C> {
    fn deref_mut(&mut self) -> &mut C {
        &mut self.0
    }
}

/// The effect count, read through the sync connection the scenarios check with.
fn counted_by(check: &Mutex<impl TestConn>) -> i64 {
    i64::try_from(check.lock().unwrap().effect_count()).unwrap()
}

async fn one_event_delivered_by_many_futures_at_once_takes_effect_once<B: AsyncBackend>() {
    let (db, check) = setup::<B>();
    let pool = B::pool(db.url(), 4);
    let check = Mutex::new(check);

    let report = diesel_inbox_test::asynch::assert_idempotent_concurrently(
        async || Checkout(B::get(&pool).await),
        8,
        async |conn: &mut B::Async| {
            let effect = async |tx: &mut B::Async| tx.write_effect("evt-1").await;
            asynch::with_inbox(conn, "evt-1", effect).await
        },
        async |_: &mut B::Async| Ok(counted_by(&check)),
    )
    .await;

    assert_eq!((report.processed(), report.duplicates()), (1, 7));
    let mut conn = B::get(&pool).await;
    diesel_inbox_test::asynch::assert_deliveries(
        &mut **conn,
        &asynch::Inbox::default(),
        "evt-1",
        8,
    )
    .await;
}

async fn a_claim_in_doubt_is_listed_and_resolved_by_ops<B: AsyncBackend>() {
    let (db, _check) = setup::<B>();
    let mut conn = B::connect(db.url()).await;
    let charges = asynch::Inbox::new("billing")
        .unwrap()
        .claims()
        .lease(Duration::from_millis(1));
    let Claimed::Acquired(claim) = charges.claim(&mut conn, "order-7:charge").await.unwrap() else {
        panic!("a first claim is acquired");
    };
    // The worker charges the card and dies before completing.
    std::mem::forget(claim);
    tokio::time::sleep(Duration::from_millis(10)).await;

    let in_doubt = charges.in_doubt(&mut conn).await.unwrap();
    let listed = charges.list(&mut conn, None, 10).await.unwrap();
    let shown = charges.show(&mut conn, "order-7:charge").await.unwrap();
    let consumers = asynch::Claims::consumers(&mut conn).await.unwrap();
    let audit = Audit::new("ops@example.com", "charge ch_81 found at the provider").unwrap();
    let found = Resolution::Completed("ch_81".into());
    let resolved = charges
        .resolve(&mut conn, "order-7:charge", found, &audit)
        .await
        .unwrap();
    let again = charges
        .resolve(&mut conn, "order-7:charge", Resolution::Retry, &audit)
        .await;

    assert_eq!(in_doubt.len(), 1);
    assert_eq!(in_doubt[0].state, ClaimState::InDoubt);
    assert_eq!(listed.len(), 1);
    assert_eq!(shown.unwrap().state, ClaimState::InDoubt);
    assert_eq!(consumers, ["billing"]);
    assert_eq!(resolved.state, ClaimState::Completed);
    assert!(
        matches!(again, Err(AdminError::ClaimNotInDoubt { .. })),
        "{again:?}"
    );
    let Claimed::Completed(done) = charges.claim(&mut conn, "order-7:charge").await.unwrap() else {
        panic!("the resolution completed the claim");
    };
    assert_eq!(done.result::<String>().unwrap(), "ch_81");
}

/// How many prunes the prune scenario cuts short, at random points within `PRUNE_CUT_US`
/// microseconds, over how many old rows pruned one per batch.
const CUT_PRUNES: usize = 30;
const PRUNE_CUT_US: u64 = 2_000;
const OLD_ROWS: usize = 300;

/// `retention`'s prune on `conn` once no other session holds the prune lock: a broken
/// connection's session ends, and frees it, once the server notices it closed. Bounded.
async fn prune_once_free<C: AsyncInboxConnection>(
    inbox: &asynch::Inbox,
    conn: &mut C,
    retention: &Retention,
) -> Pruned {
    for _ in 0..100 {
        match inbox.prune(conn, retention).await {
            Err(AdminError::PruneRunning) => tokio::time::sleep(Duration::from_millis(20)).await,
            result => return result.unwrap(),
        }
    }
    panic!("a closed session's prune lock is freed within 2 s");
}

async fn a_prune_cut_short_anywhere_never_leaves_its_lock_on_a_usable_connection<
    B: AsyncBackend,
>() {
    let (db, mut check) = setup::<B>();
    let inbox = asynch::Inbox::new("orders").unwrap();
    let ok = async |_: &mut B::Async| Ok::<_, Error>(());
    let mut other = B::connect(db.url()).await;
    assert!(inbox
        .process(&mut other, "young", ok)
        .await
        .unwrap()
        .is_processed());
    let month_ago = chrono::Utc::now() - chrono::TimeDelta::days(30);
    let old = B::fill_sql("orders", "old-", OLD_ROWS, month_ago);
    diesel::connection::SimpleConnection::batch_execute(&mut check, &old).unwrap();
    let retention = Retention::older_than(Duration::from_secs(7 * 24 * 60 * 60)).batch_size(1);
    // Prunes nothing (no row is a year old), but takes and releases the lock: a probe.
    let probe = Retention::older_than(Duration::from_secs(365 * 24 * 60 * 60));
    let mut rng = fastrand::Rng::with_seed(11);
    let (mut broken, mut usable) = (0, 0);

    // SQLite has no prune lock of its own (its writer lock serialises the batches): a prune
    // cut short there is a transaction cut short, as a delivery's is. PostgreSQL's is the
    // lease row, no lock of a session: nothing stays on the connection, and a prune cut short
    // leaves the lease until it expires (`PRUNE_LEASE_TERM`).
    let rounds = if B::PRUNE_LOCK.is_some() {
        CUT_PRUNES
    } else {
        0
    };
    for round in 0..rounds {
        let _free = prune_once_free(&inbox, &mut other, &probe).await;
        let mut conn = B::connect(db.url()).await;
        let cut = Duration::from_micros(rng.u64(0..PRUNE_CUT_US));
        let pruning = inbox.prune(&mut conn, &retention);
        match tokio::time::timeout(cut, pruning).await {
            Ok(result) => assert!(result.is_ok(), "round {round}: {result:?}"),
            Err(_) if depth_of(&mut conn).is_none() => broken += 1,
            Err(_) => {
                usable += 1;
                let after = inbox.prune(&mut other, &probe).await;
                assert!(
                    after.is_ok(),
                    "round {round}: cut short at {cut:?}, usable, and still holding the lock: {after:?}"
                );
            }
        }
    }
    println!("{rounds} prunes cut short: {broken} connections marked broken, {usable} left usable");

    let rest = prune_once_free(&inbox, &mut other, &retention.batch_size(100)).await;
    assert!(rest.events <= OLD_ROWS as u64, "{rest:?}");
    assert_eq!(check.inbox_rows_like("orders", "old-"), 0);
    assert!(check.has_inbox_row("orders", "young"));
    if rounds > 0 {
        assert!(broken > 0, "no prune was cut short while it held the lock");
    }
}

async fn a_delivery_dropped_mid_handler_commits_nothing_and_breaks_its_connection<
    B: AsyncBackend,
>() {
    let (db, mut check) = setup::<B>();
    let mut conn = B::connect(db.url()).await;
    let stalled = async |tx: &mut B::Async| {
        tx.write_effect("evt-1").await?;
        std::future::pending::<()>().await;
        Ok::<_, Error>(())
    };

    let delivery = asynch::with_inbox(&mut conn, "evt-1", stalled);
    let cancelled = tokio::time::timeout(Duration::from_millis(50), delivery).await;

    assert!(cancelled.is_err(), "the handler never finishes");
    assert_eq!(
        depth_of(&mut conn),
        None,
        "marked broken, not left inside a transaction"
    );
    let reused = asynch::with_inbox(&mut conn, "evt-2", async |tx: &mut B::Async| {
        tx.write_effect("evt-2").await
    })
    .await;
    let error = reused.expect_err("a broken connection takes no new transaction");
    assert!(
        matches!(
            Error::from_diesel(&error),
            Some(Error::ConnectionLost {
                source: diesel::result::Error::BrokenTransactionManager
            })
        ),
        "a lost connection: reconnect; {error:?}"
    );
    drop(conn);
    let mut fresh = B::connect(db.url()).await;
    let redelivered = asynch::with_inbox(&mut fresh, "evt-1", async |tx: &mut B::Async| {
        tx.write_effect("evt-1").await
    })
    .await;
    assert_eq!(redelivered.unwrap(), Outcome::Processed(()));
    assert_eq!(check.effects_of("evt-1"), 1);
    assert_eq!(check.effects_of("evt-2"), 0);
}

/// bb8 checks a connection when it takes it back: the one a cancelled delivery broke is
/// closed then (ending its transaction on the server), and the pool's next checkout is a
/// fresh connection, on which the redelivery takes effect once.
async fn over_bb8_a_cancelled_deliverys_connection_is_discarded_on_return<B: AsyncBackend>() {
    let (db, mut check) = setup::<B>();
    let pool = B::bb8(db.url(), 1).await;
    let mut conn = B::get_bb8(&pool).await;
    let first = asynch::with_inbox(&mut **conn, "evt-1", async |tx: &mut B::Async| {
        tx.write_effect("evt-1").await
    })
    .await;
    assert_eq!(first.unwrap(), Outcome::Processed(()));
    let stalled = async |tx: &mut B::Async| {
        tx.write_effect("evt-2").await?;
        std::future::pending::<()>().await;
        Ok::<_, Error>(())
    };

    let delivery = asynch::with_inbox(&mut **conn, "evt-2", stalled);
    let cancelled = tokio::time::timeout(Duration::from_millis(50), delivery).await;
    assert!(cancelled.is_err(), "the handler never finishes");
    assert_eq!(depth_of(&mut **conn), None, "marked broken");
    drop(conn);

    let mut fresh = B::get_bb8(&pool).await;
    assert_eq!(
        depth_of(&mut **fresh),
        Some(0),
        "the pool's only connection, new"
    );
    let redelivered = asynch::with_inbox(&mut **fresh, "evt-2", async |tx: &mut B::Async| {
        tx.write_effect("evt-2").await
    })
    .await;
    assert_eq!(redelivered.unwrap(), Outcome::Processed(()));
    let again = asynch::with_inbox(&mut **fresh, "evt-1", async |tx: &mut B::Async| {
        tx.write_effect("evt-1").await
    })
    .await;
    assert!(again.unwrap().is_duplicate());
    assert_eq!(
        (check.effects_of("evt-1"), check.effects_of("evt-2")),
        (1, 1)
    );
}

/// How many events the cancellation scenario delivers, on how many tasks and pooled
/// connections, and how often each event may be redelivered before the test gives up.
const EVENTS: usize = 60;
const WORKERS: usize = 4;
const MAX_DELIVERIES: usize = 400;

async fn cancelled_deliveries_over_a_pool_take_effect_exactly_once<B: AsyncBackend>() {
    let (db, mut check) = setup::<B>();
    let pool = B::pool(db.url(), WORKERS);

    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(worker as u64);
                let (mut deliveries, mut cancelled, mut found_in_transaction) = (0, 0, 0);
                for event in (worker..EVENTS).step_by(WORKERS) {
                    let id = format!("evt-{event}");
                    loop {
                        assert!(deliveries < MAX_DELIVERIES, "{id} never got through");
                        deliveries += 1;
                        let mut conn = B::get(&pool).await;
                        if depth_of(&mut **conn) != Some(0) {
                            found_in_transaction += 1;
                        }
                        let handler = async |tx: &mut B::Async| {
                            tx.write_effect(&id).await?;
                            tokio::task::yield_now().await;
                            tx.write_effect(&id).await
                        };
                        let delivery = asynch::with_inbox(&mut **conn, id.as_str(), handler);
                        // Two in three attempts are cut short at a random point, within 3 ms;
                        // the others get a second, so that none waits long on a lock that a
                        // cancelled connection idle in the pool still holds.
                        let limit = if rng.u8(0..3) == 0 {
                            Duration::from_secs(1)
                        } else {
                            Duration::from_micros(rng.u64(0..3_000))
                        };
                        let result = tokio::time::timeout(limit, delivery).await;
                        match result {
                            Ok(Ok(Outcome::Processed(()) | Outcome::Duplicate(_))) => break,
                            Ok(Ok(other)) => panic!("{id}: {other:?}"),
                            // The broken connection of an earlier cancel, or contention.
                            Ok(Err(_)) => {}
                            Err(_) => cancelled += 1,
                        }
                    }
                }
                (deliveries, cancelled, found_in_transaction)
            })
        })
        .collect();
    let (mut deliveries, mut cancelled, mut found_in_transaction) = (0, 0, 0);
    for worker in workers {
        let (d, c, f) = worker.await.unwrap();
        (deliveries, cancelled, found_in_transaction) =
            (deliveries + d, cancelled + c, found_in_transaction + f);
    }
    println!("{EVENTS} events: {deliveries} deliveries, {cancelled} cancelled");

    assert_eq!(
        found_in_transaction, 0,
        "no pooled connection handed out in a transaction"
    );
    assert!(cancelled > 0, "the scenario cancelled nothing");
    assert_eq!(check.inbox_rows(), EVENTS);
    assert_eq!(
        check.effect_count(),
        2 * EVENTS,
        "each event's two rows, once"
    );
    for event in 0..EVENTS {
        assert_eq!(check.effects_of(&format!("evt-{event}")), 2, "evt-{event}");
    }
}

/// The one-task consumer's events, how many it runs at once, and its whole run's bound: it
/// takes about a second, and a cut that held up the task until a sibling's SQLite write lock
/// timed out would cost the busy timeout (5 s) each.
const ONE_TASK_EVENTS: usize = 40;
const AT_ONCE: usize = 4;
const ONE_TASK_BOUND: Duration = Duration::from_secs(60);

/// A consumer's one task runs `AT_ONCE` deliveries at a time and gives up on many of them at
/// random (a timeout), as the crate says to: each delivery on a task of its own, which takes
/// its own pooled connection, so that a delivery given up on runs on to its end. (Dropped
/// half-way on `SyncConnectionWrapper`, a delivery blocks the task that drops it until its
/// statement returns: with a sibling in the same task holding SQLite's write lock, for the
/// whole busy timeout.) Every event is redelivered until it is answered; the run ends in
/// bounded time, and each event takes effect once.
async fn deliveries_given_up_on_by_one_consumer_task_never_stall_it<B: AsyncBackend>() {
    use futures_util::StreamExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let (db, mut check) = setup::<B>();
    let pool = B::pool(db.url(), AT_ONCE);
    let rng = Mutex::new(fastrand::Rng::with_seed(46));
    let (given_up, deliveries) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let still_running = Mutex::new(Vec::new());
    let deliver = |event: usize| {
        let (pool, rng, given_up, deliveries) = (&pool, &rng, &given_up, &deliveries);
        let still_running = &still_running;
        async move {
            let id = format!("evt-{event}");
            for _ in 0..MAX_DELIVERIES {
                deliveries.fetch_add(1, Ordering::Relaxed);
                let (pool, id) = (pool.clone(), id.clone());
                let mut delivery = tokio::spawn(async move {
                    let mut conn = B::get(&pool).await;
                    // Holds the write lock across an await, as a handler that calls out does.
                    let handler = async |tx: &mut B::Async| {
                        tx.write_effect(&id).await?;
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        tx.write_effect(&id).await
                    };
                    asynch::with_inbox(&mut **conn, id.as_str(), handler).await
                });
                let wait = {
                    let mut rng = rng.lock().unwrap();
                    if rng.bool() {
                        Duration::from_micros(rng.u64(0..3_000))
                    } else {
                        ONE_TASK_BOUND
                    }
                };
                match tokio::time::timeout(wait, &mut delivery).await {
                    Ok(Ok(Ok(Outcome::Processed(()) | Outcome::Duplicate(_)))) => return,
                    Ok(Ok(Ok(other))) => panic!("evt-{event}: {other:?}"),
                    Ok(Ok(Err(_contention))) => {}
                    Ok(Err(panicked)) => panic!("evt-{event}: {panicked}"),
                    Err(_gave_up) => {
                        given_up.fetch_add(1, Ordering::Relaxed);
                        still_running.lock().unwrap().push(delivery);
                    }
                }
            }
            panic!("evt-{event} never got through");
        }
    };
    let all = futures_util::stream::iter(0..ONE_TASK_EVENTS).for_each_concurrent(AT_ONCE, deliver);

    let ran = tokio::time::timeout(ONE_TASK_BOUND, all).await;
    let (given_up, deliveries) = (given_up.into_inner(), deliveries.into_inner());
    println!(
        "{ONE_TASK_EVENTS} events in one task: {deliveries} deliveries, {given_up} given up on"
    );
    assert!(
        ran.is_ok(),
        "the consumer's task stalled: not done within {ONE_TASK_BOUND:?}"
    );
    assert!(given_up > 0, "the scenario gave up on no delivery");
    // The deliveries given up on ran on to their end: each answered, or met contention.
    for delivery in still_running.into_inner().unwrap() {
        let answer = tokio::time::timeout(ONE_TASK_BOUND, delivery).await;
        assert!(matches!(answer, Ok(Ok(_))), "{answer:?}");
    }
    assert_eq!(check.inbox_rows(), ONE_TASK_EVENTS);
    for event in 0..ONE_TASK_EVENTS {
        assert_eq!(check.effects_of(&format!("evt-{event}")), 2, "evt-{event}");
    }
}

/// A test of the async flavour, on tokio's multi-thread runtime (a cancelled delivery on
/// `SyncConnectionWrapper` needs it).
macro_rules! async_test {
    ($scenario:ident, $flavour:ty) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $scenario() {
            $crate::scenarios::$scenario::<$flavour>().await;
        }
    };
}

/// Each scenario against each backend: those written once over both flavours, and the async
/// flavour's own.
macro_rules! async_backend_tests {
    ($($backend:ident),*) => {$(
        #[allow(non_snake_case)]
        mod $backend {
            use super::*;

            flavour_tests!(async_test, support::Async<support::$backend>);

            async_backend_tests!(@each support::$backend:
                one_event_delivered_by_many_futures_at_once_takes_effect_once,
                a_claim_in_doubt_is_listed_and_resolved_by_ops,
                a_prune_cut_short_anywhere_never_leaves_its_lock_on_a_usable_connection,
                a_delivery_dropped_mid_handler_commits_nothing_and_breaks_its_connection,
                over_bb8_a_cancelled_deliverys_connection_is_discarded_on_return,
                cancelled_deliveries_over_a_pool_take_effect_exactly_once,
                deliveries_given_up_on_by_one_consumer_task_never_stall_it
            );
        }
    )*};
    (@each $backend:path: $($scenario:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $scenario() {
            super::$scenario::<$backend>().await;
        }
    )*};
}

async_backend_tests!(Postgres, Mysql, Sqlite);
