//! The delivery harness: one event delivered again and again through a handler, one effect.

use std::fmt::Debug;
use std::panic;
use std::sync::Barrier;
use std::thread;

use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};
use diesel::QueryResult;

use diesel_inbox::Outcome;

/// What a run of deliveries came to, returned once the harness's checks have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryReport {
    pub(super) deliveries: usize,
    pub(super) processed: usize,
    pub(super) duplicates: usize,
    pub(super) failed: usize,
    pub(super) effects: i64,
}

impl DeliveryReport {
    /// Deliveries made.
    pub fn deliveries(&self) -> usize {
        self.deliveries
    }

    /// Deliveries that reported [`Outcome::Processed`].
    pub fn processed(&self) -> usize {
        self.processed
    }

    /// Deliveries that reported [`Outcome::Duplicate`].
    pub fn duplicates(&self) -> usize {
        self.duplicates
    }

    /// Deliveries that an injected fault failed (always 0 for [`assert_idempotent`]).
    pub fn failed(&self) -> usize {
        self.failed
    }

    /// How much the observed effect count grew over the run.
    pub fn effects(&self) -> i64 {
        self.effects
    }
}

/// How one delivery ended.
pub(super) enum Delivered {
    Processed,
    Duplicate,
    /// An outcome this version of the harness does not know (a later mode's).
    Other,
    /// The handler's error or the inbox's, as text.
    Failed(String),
}

impl Delivered {
    pub(super) fn of<T, E: Debug>(result: Result<Outcome<T>, E>) -> Self {
        match result {
            // Asked, not matched: later modes add outcomes, and those are `Other` here.
            Ok(outcome) if outcome.is_processed() => Self::Processed,
            Ok(outcome) if outcome.is_duplicate() => Self::Duplicate,
            Ok(_) => Self::Other,
            Err(e) => Self::Failed(format!("{e:?}")),
        }
    }
}

/// Delivers one event `times` times in a row through `handler` on `conn`, and asserts that it
/// took effect exactly once.
///
/// `handler` is your whole delivery handler, the code that calls
/// [`with_inbox`](diesel_inbox::with_inbox) or [`Inbox::process`](diesel_inbox::Inbox::process) with the
/// event's id, so the test covers how it derives the id and which consumer it uses.
/// `effects` counts the effect as it stands in the database: the rows of a ledger with one
/// row per event, a balance divided by the amount, a counter. It is read before the first and
/// after the last delivery.
///
/// The checks: every delivery returns `Ok`; exactly one reports [`Outcome::Processed`] and the
/// rest [`Outcome::Duplicate`]; the effect count grows by exactly 1.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::connection::SimpleConnection;
/// use diesel::dsl::sql;
/// use diesel::prelude::*;
/// use diesel::sql_types::BigInt;
/// use diesel_inbox_test::{assert_idempotent, TestDatabase};
/// use diesel_inbox::{with_inbox, Outcome};
///
/// fn handle(conn: &mut SqliteConnection, event_id: &str) -> QueryResult<Outcome<usize>> {
///     with_inbox(conn, event_id, |tx| {
///         diesel::sql_query("UPDATE wallet SET cents = cents + 500").execute(tx)
///     })
/// }
///
/// let db = TestDatabase::sqlite();
/// let mut conn = db.connect();
/// conn.batch_execute("CREATE TABLE wallet (cents BIGINT NOT NULL); INSERT INTO wallet VALUES (0);")?;
///
/// let report = assert_idempotent(
///     &mut conn,
///     5,
///     |conn| handle(conn, "payment-1"),
///     |conn| sql::<BigInt>("SELECT cents / 500 FROM wallet").get_result(conn),
/// );
/// assert_eq!(report.duplicates(), 4);
/// # }
/// # Ok::<(), diesel::result::Error>(())
/// ```
///
/// # Panics
///
/// When a check fails (the message says which delivery and what it reported), when `times`
/// is 0, or when counting the effect fails. A panic in `handler` propagates.
#[track_caller]
pub fn assert_idempotent<C, T, E, H, O>(
    conn: &mut C,
    times: usize,
    mut handler: H,
    mut effects: O,
) -> DeliveryReport
where
    H: FnMut(&mut C) -> Result<Outcome<T>, E>,
    E: Debug,
    O: FnMut(&mut C) -> QueryResult<i64>,
{
    assert!(times > 0, "assert_idempotent needs at least one delivery");
    let before = observe(&mut effects, conn, "before the first delivery");
    let delivered: Vec<Delivered> = (0..times).map(|_| Delivered::of(handler(conn))).collect();
    let after = observe(&mut effects, conn, "after the last delivery");
    check(&delivered, before, after, "one after another")
}

/// Delivers one event `times` times at once, each delivery on its own thread with a
/// connection from `pool`, and asserts that it took effect exactly once.
///
/// The threads start together and then take their connection, so a pool smaller than `times`
/// is fine: deliveries queue for connections as a consumer's workers would. `handler` and
/// `effects` are as for [`assert_idempotent`]; `handler` gets the pooled connection's inner
/// connection, so the same handler serves both. `effects` runs on a connection from the pool.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::connection::SimpleConnection;
/// use diesel::dsl::sql;
/// use diesel::prelude::*;
/// use diesel::sql_types::BigInt;
/// use diesel_inbox_test::{assert_idempotent_concurrently, TestDatabase};
/// use diesel_inbox::with_inbox;
///
/// let db = TestDatabase::sqlite();
/// db.connect().batch_execute("CREATE TABLE sent (event_id TEXT NOT NULL)")?;
/// let pool = db.pool(4);
///
/// let report = assert_idempotent_concurrently(
///     &pool,
///     8,
///     |conn: &mut SqliteConnection| {
///         with_inbox(conn, "evt-1", |tx| {
///             diesel::sql_query("INSERT INTO sent VALUES ('evt-1')").execute(tx)
///         })
///     },
///     |conn| sql::<BigInt>("SELECT COUNT(*) FROM sent").get_result(conn),
/// );
/// assert_eq!(report.processed(), 1);
/// # }
/// # Ok::<(), diesel::result::Error>(())
/// ```
///
/// # Panics
///
/// As [`assert_idempotent`]; also when the pool gives no connection in its timeout. A panic
/// in `handler` on any thread propagates.
#[track_caller]
pub fn assert_idempotent_concurrently<C, T, E, H, O>(
    pool: &Pool<ConnectionManager<C>>,
    times: usize,
    handler: H,
    mut effects: O,
) -> DeliveryReport
where
    C: R2D2Connection + Send + 'static,
    H: Fn(&mut C) -> Result<Outcome<T>, E> + Sync,
    E: Debug,
    O: FnMut(&mut C) -> QueryResult<i64>,
{
    assert!(
        times > 0,
        "assert_idempotent_concurrently needs at least one delivery"
    );
    let before = observe(
        &mut effects,
        &mut *checkout(pool),
        "before the first delivery",
    );
    let start = Barrier::new(times);
    let delivered: Vec<Delivered> = thread::scope(|scope| {
        let workers: Vec<_> = (0..times)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    match pool.get() {
                        Ok(mut conn) => Delivered::of(handler(&mut conn)),
                        Err(e) => Delivered::Failed(format!("no connection from the pool: {e}")),
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap_or_else(|p| panic::resume_unwind(p)))
            .collect()
    });
    let after = observe(
        &mut effects,
        &mut *checkout(pool),
        "after the last delivery",
    );
    check(
        &delivered,
        before,
        after,
        "all at once, from several threads",
    )
}

#[track_caller]
fn checkout<C: R2D2Connection + Send + 'static>(
    pool: &Pool<ConnectionManager<C>>,
) -> diesel::r2d2::PooledConnection<ConnectionManager<C>> {
    pool.get()
        .unwrap_or_else(|e| panic!("no connection from the pool to count the effect: {e}"))
}

#[track_caller]
pub(super) fn observe<C, O>(effects: &mut O, conn: &mut C, when: &str) -> i64
where
    O: FnMut(&mut C) -> QueryResult<i64>,
{
    counted(effects(conn), when)
}

/// The effect count read `when`, or a panic that says where counting failed.
#[track_caller]
pub(super) fn counted(count: QueryResult<i64>, when: &str) -> i64 {
    count.unwrap_or_else(|e| panic!("counting the effect {when} failed: {e}"))
}

#[track_caller]
pub(super) fn check(delivered: &[Delivered], before: i64, after: i64, how: &str) -> DeliveryReport {
    let times = delivered.len();
    let mut processed = Vec::new();
    let mut duplicates = 0;
    for (n, delivery) in (1..).zip(delivered) {
        match delivery {
            Delivered::Processed => processed.push(n),
            Delivered::Duplicate => duplicates += 1,
            Delivered::Other => {
                panic!("delivery {n} of {times} ({how}) ended neither processed nor duplicate")
            }
            Delivered::Failed(e) => panic!(
                "delivery {n} of {times} ({how}) failed: {e}; every delivery is expected to \
                 succeed here (test failing deliveries with Faults or run_schedule)"
            ),
        }
    }
    match processed.len() {
        1 => {}
        0 => panic!(
            "none of the {times} deliveries ({how}) reported Outcome::Processed: was the event \
             processed before the test began?"
        ),
        _ => panic!(
            "deliveries {processed:?} of {times} ({how}) each reported Outcome::Processed: the \
             handler does not give the inbox the same event id and consumer on every delivery"
        ),
    }
    let effects = after - before;
    if effects != 1 {
        let hint = if effects > 1 {
            "the handler writes outside the inbox transaction (through another connection, or \
             before or after calling the inbox), so every delivery repeats that write"
        } else {
            "does `effects` count what the handler writes, on the database it writes to?"
        };
        panic!(
            "{times} deliveries of one event ({how}) took effect {effects} times, expected once \
             (the effect count went from {before} to {after}): {hint}"
        );
    }
    DeliveryReport {
        deliveries: times,
        processed: 1,
        duplicates,
        failed: 0,
        effects,
    }
}
