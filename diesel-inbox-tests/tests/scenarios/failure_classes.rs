//! Which handler failures count toward dead-lettering, which are retried or redelivered
//! without counting, and what a broker loop acks, on every backend.

use diesel_inbox::AdminError;
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_inbox::{
    dead_letter::{DeadLetterState, HistoryKind},
    Ack, Delivery, Error, FailureKind, HandlerError, Inbox, Outcome, RetryPolicy,
};

use super::writes;
use crate::support::{concurrently, setup, setup_flavour, Backend, Flavour, TestConn, Tx};

/// A handler's error type of its own, exposing its Diesel error through [`HandlerError`].
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    #[error(transparent)]
    Db(#[from] diesel::result::Error),
    #[error(transparent)]
    Inbox(#[from] Error),
    #[error("unknown order")]
    UnknownOrder,
}

impl HandlerError for OrderError {
    fn diesel_error(&self) -> Option<&diesel::result::Error> {
        match self {
            OrderError::Db(error) => Some(error),
            OrderError::Inbox(error) => error.diesel_error(),
            OrderError::UnknownOrder => None,
        }
    }

    fn inbox_error(&self) -> Option<&Error> {
        match self {
            OrderError::Inbox(error) => Some(error),
            _ => None,
        }
    }

    fn failure_kind(&self) -> FailureKind {
        match self {
            OrderError::UnknownOrder => FailureKind::Permanent,
            _ => FailureKind::Counted,
        }
    }
}

/// Waits until `parties` have arrived, or `limit` has passed (a single-writer database lets
/// only one handler in at a time, so the other never arrives while the first waits).
fn meet(arrived: &AtomicUsize, parties: usize, limit: Duration) {
    arrived.fetch_add(1, Ordering::SeqCst);
    let deadline = Instant::now() + limit;
    while arrived.load(Ordering::SeqCst) < parties && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn bump<C: Connection>(conn: &mut C, account: i32) -> QueryResult<()> {
    conn.batch_execute(&format!(
        "UPDATE accounts SET n = n + 1 WHERE id = {account}"
    ))
}

/// Two healthy handlers with `max_attempts(1)` update two rows in opposite order, meeting in
/// between, so a database with row locks must pick a deadlock victim. Both end processed;
/// nothing is recorded as a failure.
fn two_handlers_deadlock<B: Backend, E>(wrap: fn(diesel::result::Error) -> E)
where
    E: HandlerError + Debug + Send,
{
    let (db, mut conn) = setup::<B>();
    conn.batch_execute(
        "CREATE TABLE accounts (id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
         INSERT INTO accounts VALUES (1, 0), (2, 0);",
    )
    .unwrap();
    let inbox = Inbox::new("transfers")
        .unwrap()
        .max_attempts(1)
        .retry(RetryPolicy::default().max_retries(30));
    let (arrived, runs) = (AtomicUsize::new(0), AtomicUsize::new(0));

    let results = concurrently(&db, 2, |thread, tx| {
        let (first, second) = if thread == 0 { (1, 2) } else { (2, 1) };
        let id = format!("transfer-{thread}");
        inbox.process(tx, id.as_str(), |tx| {
            runs.fetch_add(1, Ordering::SeqCst);
            bump(tx, first).map_err(wrap)?;
            meet(&arrived, 2, Duration::from_secs(1));
            bump(tx, second).map_err(wrap)?;
            tx.record_effect(&id).map_err(wrap)
        })
    });

    for result in &results {
        assert!(
            matches!(result, Ok(Outcome::Processed(()))),
            "a deadlock victim is retried, not dead-lettered: {result:?}"
        );
    }
    assert_eq!(conn.effect_count(), 2);
    assert!(inbox
        .dead_letters()
        .list(&mut conn, None, 100)
        .unwrap()
        .is_empty());
    for thread in 0..2 {
        let record = inbox
            .dead_letters()
            .show(&mut conn, format!("transfer-{thread}"));
        assert!(
            matches!(record, Err(AdminError::DeadLetterNotFound { .. })),
            "contention is never a failed attempt: {record:?}"
        );
    }
    if !B::SINGLE_WRITER {
        assert!(
            runs.load(Ordering::SeqCst) > 2,
            "the scenario must deadlock where there are row locks"
        );
    }
}

pub fn a_handler_deadlock_with_max_attempts_1_ends_processed<B: Backend>() {
    two_handlers_deadlock::<B, diesel::result::Error>(|error| error);
}

pub fn handler_contention_in_its_own_error_type_is_retried_and_never_counted<B: Backend>() {
    two_handlers_deadlock::<B, OrderError>(OrderError::Db);
}

pub async fn a_permanent_failure_is_dead_lettered_at_the_first_attempt<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    // No max_attempts: counted failures would be retried forever.
    let inbox = Inbox::new("orders").unwrap();

    let unknown = async |_: &mut F::Conn| Err::<(), _>(OrderError::UnknownOrder);
    let result = F::process(&inbox, &mut conn, "order-404", unknown).await;

    assert!(matches!(result, Ok(Outcome::DeadLettered(_))), "{result:?}");
    assert_eq!(Ack::of(&result), Ack::Ack);
    let dead = F::show(&inbox, &mut conn, "order-404").await.unwrap();
    assert_eq!(
        (dead.state, dead.attempts),
        (DeadLetterState::DeadLettered, 1)
    );
    assert_eq!(dead.last_error, "unknown order");
    let last = dead.history.last().unwrap();
    assert_eq!(last.kind, HistoryKind::DeadLettered);
    assert!(
        last.reason.as_deref().unwrap().contains("permanent"),
        "{last:?}"
    );

    let again = F::process(&inbox, &mut conn, "order-404", writes("order-404")).await;
    assert!(matches!(again, Ok(Outcome::DeadLettered(_))), "{again:?}");
    assert_eq!(check.effect_count(), 0);

    let missing =
        async |_: &mut F::Conn| Err::<(), _>(Error::permanent("order 405 does not exist"));
    let marked = F::process(&inbox, &mut conn, "order-405", missing).await;
    assert!(matches!(marked, Ok(Outcome::DeadLettered(_))), "{marked:?}");
}

pub async fn a_transient_failure_is_redelivered_and_never_counted<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("pricing").unwrap().max_attempts(1);
    let down = async |_: &mut F::Conn| {
        Err::<(), diesel::result::Error>(Error::transient("pricing service down").into())
    };

    for _ in 0..3 {
        let result = F::process(&inbox, &mut conn, "quote-1", down).await;
        assert_eq!(Ack::of(&result), Ack::Redeliver);
        let error = result.expect_err("a transient failure comes back");
        assert!(
            matches!(Error::from_diesel(&error), Some(Error::Transient(_))),
            "{error:?}"
        );
    }
    assert!(matches!(
        F::show(&inbox, &mut conn, "quote-1").await,
        Err(AdminError::DeadLetterNotFound { .. })
    ));

    let result = F::process(&inbox, &mut conn, "quote-1", writes("quote-1")).await;
    assert!(matches!(result, Ok(Outcome::Processed(()))), "{result:?}");
    assert_eq!(check.effect_count(), 1);
}

pub async fn every_delivery_result_says_what_to_ack<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("orders").unwrap().max_attempts(2);
    let first = Delivery::new("evt-1")
        .unwrap()
        .json(serde_json::json!({"qty": 1}));
    let reused = Delivery::new("evt-1")
        .unwrap()
        .json(serde_json::json!({"qty": 9}));

    let processed = F::process(&inbox, &mut conn, &first, writes("evt-1")).await;
    assert_eq!(Ack::of(&processed), Ack::Ack);
    let duplicate = F::process(&inbox, &mut conn, &first, writes("evt-1")).await;
    assert!(matches!(duplicate, Ok(Outcome::Duplicate(_))));
    assert_eq!(Ack::of(&duplicate), Ack::Ack);

    // A reused id is recorded and acked on every redelivery: it never loops.
    for conflicts in 1..=2 {
        let conflict = F::process(&inbox, &mut conn, &reused, writes("evt-1")).await;
        assert_eq!(Ack::of(&conflict), Ack::Ack, "{conflict:?}");
        assert_eq!(check.payload_conflicts("evt-1"), conflicts);
    }
    assert_eq!(check.effect_count(), 1);

    // A counted failure is redelivered until the limit, then dead-lettered and acked.
    let failing = async |_: &mut F::Conn| Err::<(), _>(diesel::result::Error::NotFound);
    let attempt_1 = F::process(&inbox, &mut conn, "evt-2", failing).await;
    assert_eq!(Ack::of(&attempt_1), Ack::Redeliver);
    let attempt_2 = F::process(&inbox, &mut conn, "evt-2", failing).await;
    assert!(matches!(attempt_2, Ok(Outcome::DeadLettered(_))));
    assert_eq!(Ack::of(&attempt_2), Ack::Ack);

    // An id that can never be valid goes to the broker's dead-letter path.
    let invalid = F::process(&inbox, &mut conn, "", writes("")).await;
    assert_eq!(Ack::of(&invalid), Ack::Reject);
}

/// `anyhow` handlers: a deadlock under a context layer is still contention.
#[cfg(feature = "anyhow")]
pub fn an_anyhow_handler_meeting_a_deadlock_under_context_is_retried_and_never_counted<
    B: Backend,
>() {
    two_handlers_deadlock::<B, anyhow::Error>(|error| {
        anyhow::Error::new(error).context("moving funds")
    });
}

/// `eyre` handlers, the same.
#[cfg(feature = "eyre")]
pub fn an_eyre_handler_meeting_a_deadlock_under_context_is_retried_and_never_counted<B: Backend>() {
    two_handlers_deadlock::<B, eyre::Report>(|error| {
        eyre::Report::new(error).wrap_err("moving funds")
    });
}

/// An `anyhow` handler runs its effect with `?` over Diesel calls; its permanent and transient
/// inbox errors keep their kind under context, and a plain error counts toward dead-lettering.
#[cfg(feature = "anyhow")]
pub fn an_anyhow_handler_takes_effect_once_and_its_failures_keep_their_kind<B: Backend>() {
    use anyhow::Context as _;

    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::new("orders").unwrap().max_attempts(2);
    let credit = |tx: &mut B::Conn| -> anyhow::Result<()> {
        tx.record_effect("order-1").context("crediting order 1")?;
        Ok(())
    };
    assert!(inbox
        .process(&mut conn, "order-1", credit)
        .unwrap()
        .is_processed());
    assert!(inbox
        .process(&mut conn, "order-1", credit)
        .unwrap()
        .is_duplicate());
    assert_eq!(conn.effect_count(), 1);

    let unknown = inbox.process(&mut conn, "order-404", |_tx| {
        Err::<(), _>(anyhow::Error::from(Error::permanent("unknown order")).context("order 404"))
    });
    assert!(
        matches!(unknown, Ok(Outcome::DeadLettered(_))),
        "{unknown:?}"
    );

    let later = inbox.process(&mut conn, "order-2", |_tx| {
        Err::<(), _>(anyhow::Error::from(Error::transient("pricing down")).context("order 2"))
    });
    assert_eq!(Ack::of(&later), Ack::Redeliver);
    assert!(matches!(
        inbox.dead_letters().show(&mut conn, "order-2"),
        Err(AdminError::DeadLetterNotFound { .. })
    ));

    let plain = |_tx: &mut B::Conn| Err::<(), _>(anyhow::anyhow!("the ledger refused"));
    assert!(inbox.process(&mut conn, "order-3", plain).is_err());
    let second = inbox.process(&mut conn, "order-3", plain).unwrap();
    assert!(second.is_dead_lettered(), "{second:?}");
    let dead = inbox.dead_letters().show(&mut conn, "order-3").unwrap();
    assert_eq!(
        (dead.attempts, dead.last_error.as_str()),
        (2, "the ledger refused")
    );
}

/// Contention the handler returns as its own error (a serialization failure, as PostgreSQL's
/// SERIALIZABLE raises): retried after the backoff (on the runtime's timer in the async
/// flavour), each attempt rolled back, and never counted.
pub async fn contention_the_handler_returns_is_retried_and_each_attempt_rolled_back<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let attempts = AtomicUsize::new(0);
    let contended = async |tx: &mut F::Conn| {
        tx.write_effect("evt-1").await?;
        if attempts.fetch_add(1, Ordering::SeqCst) == 0 {
            let kind = diesel::result::DatabaseErrorKind::SerializationFailure;
            return Err(diesel::result::Error::DatabaseError(
                kind,
                Box::new(String::from("could not serialize access")),
            ));
        }
        Ok(())
    };

    let outcome = F::with_inbox(&mut conn, "evt-1", contended).await;

    assert_eq!(outcome.unwrap(), Outcome::Processed(()));
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(
        check.effects_of("evt-1"),
        1,
        "the first attempt rolled back"
    );
    let record = F::show(&Inbox::default(), &mut conn, "evt-1").await;
    assert!(
        matches!(record, Err(AdminError::DeadLetterNotFound { .. })),
        "contention is never a failed attempt: {record:?}"
    );
}
