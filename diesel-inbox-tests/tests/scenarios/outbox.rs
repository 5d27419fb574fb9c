//! The transactional outbox and its relay, on every backend: enqueue commits or rolls back with
//! the business writes (inside an inbox effect too), the relay keeps order per aggregate,
//! retries with backoff, fails a poison row and goes on, shares the work with other relays, and
//! takes over rows of a relay that died holding them; producers of one aggregate in several
//! processes at once are published in enqueue order.
//!
//! The publisher here is [`Recorder`]: it keeps what it was given, in order, and refuses what
//! it is told to. The same relay against a real JetStream server is in `relay_crash.rs`.

use diesel_inbox::AdminError;
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_inbox::{
    envelope::{Envelope, SchemaVersions},
    outbox::{
        self, AsyncPublisher, Outbox, OutboxMessage, OutboxState, PublishError, Publisher, Relay,
    },
    Audit, Error, Inbox,
};

use super::helpers::outbox_positions;
use crate::support::{
    concurrently, readable, setup, setup_flavour, Backend, ChildTest, Flavour, TestConn, Tx,
};

/// A publisher that records what it publishes, and refuses the event ids it is told to.
#[derive(Clone, Default)]
pub struct Recorder {
    published: Arc<Mutex<Vec<OutboxMessage>>>,
    refuse: Arc<Mutex<BTreeMap<String, bool>>>,
}

impl Recorder {
    /// Refuses `event_id` from now on: permanently, or for now.
    fn refuse(&self, event_id: &str, permanently: bool) {
        self.refuse
            .lock()
            .unwrap()
            .insert(event_id.to_owned(), permanently);
    }

    fn accept(&self, event_id: &str) {
        self.refuse.lock().unwrap().remove(event_id);
    }

    /// The event ids published, in order.
    pub(super) fn ids(&self) -> Vec<String> {
        let published = self.published.lock().unwrap();
        published
            .iter()
            .map(|message| message.envelope.id().as_str().to_owned())
            .collect()
    }
}

impl Recorder {
    /// Publishes `message`, or refuses it as told.
    fn send(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        let id = message.envelope.id().as_str();
        match self.refuse.lock().unwrap().get(id) {
            Some(true) => return Err(PublishError::permanent(format!("{id} is too large"))),
            Some(false) => return Err(PublishError::transient("the broker is unreachable")),
            None => {}
        }
        self.published.lock().unwrap().push(message.clone());
        Ok(())
    }
}

impl Publisher for Recorder {
    fn publish(&mut self, message: &OutboxMessage) -> Result<(), PublishError> {
        self.send(message)
    }
}

impl AsyncPublisher for Recorder {
    fn publish(
        &self,
        message: &OutboxMessage,
    ) -> impl Future<Output = Result<(), PublishError>> + Send {
        std::future::ready(self.send(message))
    }
}

pub(super) fn outbox() -> Outbox {
    Outbox::new("orders-service").unwrap()
}

/// The `n`-th event of order `order`, with a readable id.
pub(super) fn placed(order: &str, n: usize) -> Envelope {
    Envelope::new("order.changed", "order", order)
        .with_id(format!("{order}-{n}"))
        .unwrap()
        .json(&serde_json::json!({"order": order, "n": n}))
        .unwrap()
}

/// A relay that retries at once, for tests.
pub(super) fn relay() -> Relay {
    Relay::new().backoff(Duration::ZERO, Duration::ZERO)
}

/// [`drain`] on flavour `F`.
async fn drain_on<F: Flavour>(relay: &Relay, conn: &mut F::Conn, recorder: &mut Recorder) {
    for _ in 0..1000 {
        if F::relay_once(relay, conn, recorder)
            .await
            .unwrap()
            .is_idle()
        {
            return;
        }
    }
    panic!("the relay did not drain the outbox in 1000 passes");
}

/// Runs passes until one is idle; returns how many passes published something.
fn drain<C: TestConn, P: Publisher>(relay: &Relay, conn: &mut C, publisher: &mut P) -> usize {
    for passes in 0..1000 {
        if relay.run_once(conn, publisher).unwrap().is_idle() {
            return passes;
        }
    }
    panic!("the relay did not drain the outbox in 1000 passes");
}

/// The ids of `order`'s events among `ids`, in the order given.
fn of_order<'a>(ids: &'a [String], order: &str) -> Vec<&'a str> {
    let prefix = format!("{order}-");
    ids.iter()
        .map(String::as_str)
        .filter(|id| id.starts_with(&prefix))
        .collect()
}

fn state_of<C: TestConn>(conn: &mut C, event_id: &str) -> OutboxState {
    readable(Outbox::list(conn, None, 0, 10_000).unwrap())
        .into_iter()
        .find(|record| record.event_id == event_id)
        .unwrap_or_else(|| panic!("{event_id} is in the outbox"))
        .state
}

pub async fn an_enqueued_event_commits_with_the_business_writes_or_not_at_all<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let outbox = outbox();

    // The payment is declined: the caller rolls back.
    F::begin(&mut conn).await;
    conn.write_effect("order-1").await.unwrap();
    F::enqueue(&outbox, &mut conn, "orders", &placed("1", 1))
        .await
        .unwrap();
    F::end(&mut conn, false).await;
    let stats = F::outbox_stats(&mut conn).await.unwrap();
    assert_eq!(stats.pending, 0, "no outbox row");
    assert_eq!(check.effect_count(), 0);

    F::begin(&mut conn).await;
    conn.write_effect("order-1").await.unwrap();
    F::enqueue(&outbox, &mut conn, "orders", &placed("1", 1))
        .await
        .unwrap();
    F::end(&mut conn, true).await;
    assert_eq!(F::outbox_stats(&mut conn).await.unwrap().pending, 1);
    assert_eq!(check.effect_count(), 1);

    // A second enqueue of the id is refused and leaves its transaction usable (on
    // PostgreSQL too, where a failed statement would abort it).
    F::begin(&mut conn).await;
    conn.write_effect("order-2").await.unwrap();
    let again = F::enqueue(&outbox, &mut conn, "orders", &placed("1", 1)).await;
    assert!(
        matches!(again, Err(Error::Outbox(outbox::Refused::AlreadyEnqueued { ref event_id })) if event_id.as_str() == "1-1"),
        "{again:?}"
    );
    F::end(&mut conn, true).await;
    assert_eq!(check.effect_count(), 2, "the business write committed");
    let empty_topic = F::enqueue(&outbox, &mut conn, "", &placed("1", 2)).await;
    assert!(matches!(
        empty_topic,
        Err(Error::Outbox(outbox::Refused::InvalidEnvelope(_)))
    ));
    assert_eq!(F::outbox_stats(&mut conn).await.unwrap().pending, 1);
}

pub async fn a_follow_up_event_enqueued_in_an_inbox_effect_is_enqueued_once_per_event<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let outbox = outbox();
    let payments = Inbox::new("payments").unwrap();
    let incoming = placed("7", 1);
    let charge = async |tx: &mut F::Conn| {
        tx.write_effect("order-7").await?;
        let charged = Envelope::new("payment.charged", "order", "7");
        F::enqueue(&outbox, tx, "payments", &charged).await
    };

    for _delivery in 0..3 {
        let outcome = F::process(&payments, &mut conn, &incoming, charge).await;
        let outcome = outcome.unwrap();
        assert!(outcome.is_processed() || outcome.is_duplicate());
    }
    // A failing effect takes its follow-up event with it.
    let declined = async |tx: &mut F::Conn| {
        let charged = Envelope::new("payment.charged", "order", "8");
        F::enqueue(&outbox, tx, "payments", &charged).await?;
        Err::<(), _>(Error::transient("card network down"))
    };
    let failed = F::process(&payments, &mut conn, &placed("8", 1), declined).await;
    assert!(failed.is_err());

    assert_eq!(check.effect_count(), 1);
    let stats = F::outbox_stats(&mut conn).await.unwrap();
    assert_eq!(
        stats.pending, 1,
        "one follow-up event, for the one processed delivery"
    );
}

pub async fn the_relay_publishes_in_order_per_aggregate_and_marks_rows_published<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let outbox = outbox();
    for n in 1..=5 {
        for order in ["a", "b", "c"] {
            F::enqueue(&outbox, &mut conn, "orders", &placed(order, n))
                .await
                .unwrap();
        }
    }
    let mut recorder = Recorder::default();

    let pass = F::relay_once(&relay().batch_size(4), &mut conn, &mut recorder).await;
    let pass = pass.unwrap();
    // A pass takes at most a batch: the first rows of each aggregate, and on PostgreSQL and
    // SQLite the rows after them.
    assert!(
        pass.taken() <= 4 && pass.published == pass.taken(),
        "{pass:?}"
    );
    drain_on::<F>(&relay().batch_size(4), &mut conn, &mut recorder).await;

    let ids = recorder.ids();
    assert_eq!(ids.len(), 15, "each event once: {ids:?}");
    for order in ["a", "b", "c"] {
        let expected: Vec<String> = (1..=5).map(|n| format!("{order}-{n}")).collect();
        assert_eq!(of_order(&ids, order), expected, "order of {order}");
    }
    let published = recorder.published.lock().unwrap().clone();
    let first = &published[0];
    assert_eq!(first.topic, "orders");
    assert_eq!(
        first.envelope.producer(),
        "orders-service",
        "stamped by the outbox"
    );
    let expected = placed("a", 1)
        .with_producer("orders-service")
        .with_occurred_at(first.envelope.occurred_at());
    assert_eq!(first.envelope, expected, "the envelope as enqueued");
    let stats = F::outbox_stats(&mut conn).await.unwrap();
    assert_eq!((stats.pending, stats.published, stats.failed), (0, 15, 0));
    assert!(stats.oldest_pending.is_none());
}

pub async fn a_failing_publish_is_retried_and_holds_back_only_its_own_aggregate<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let outbox = outbox();
    for n in 1..=3 {
        for order in ["a", "b"] {
            F::enqueue(&outbox, &mut conn, "orders", &placed(order, n))
                .await
                .unwrap();
        }
    }
    let mut recorder = Recorder::default();
    recorder.refuse("a-2", false);
    // Due again 1 to 2 s later (the backoff's jitter): the passes that follow come first.
    let backoff = Duration::from_secs(2);
    let relay = Relay::new().backoff(backoff, backoff);

    drain_on::<F>(&relay, &mut conn, &mut recorder).await;
    let ids = recorder.ids();
    assert_eq!(
        of_order(&ids, "a"),
        ["a-1"],
        "a-2 retried, and a-3 held back behind it"
    );
    assert_eq!(of_order(&ids, "b"), ["b-1", "b-2", "b-3"], "b goes on");
    let pending = F::outbox_list(&mut conn, Some(OutboxState::Pending), 0, 10).await;
    let pending = readable(pending.unwrap());
    let a2 = pending.iter().find(|r| r.event_id == "a-2").unwrap();
    assert_eq!(a2.attempts, 1, "tried once, then waiting out its backoff");
    assert!(a2.last_error.as_deref().unwrap().contains("unreachable"));
    assert!(a2.available_at > chrono::Utc::now());

    recorder.accept("a-2");
    std::thread::sleep(backoff);
    drain_on::<F>(&relay, &mut conn, &mut recorder).await;
    let ids = recorder.ids();
    assert_eq!(of_order(&ids, "a"), ["a-1", "a-2", "a-3"]);
    assert_eq!(ids.len(), 6);
}

pub async fn a_poison_row_is_failed_with_its_reason_and_the_rows_after_it_are_published<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let outbox = outbox();
    for (order, n) in [("a", 1), ("a", 2), ("a", 3), ("b", 1)] {
        F::enqueue(&outbox, &mut conn, "orders", &placed(order, n))
            .await
            .unwrap();
    }
    // b-1's row (the fourth enqueued) no longer reads back as an envelope; a-2 is refused by
    // the broker.
    let b1 = outbox_positions(&mut check)[3];
    check
        .batch_execute(&format!(
            "UPDATE diesel_inbox_outbox SET headers = 'not json' WHERE position = {b1}"
        ))
        .unwrap();
    let mut recorder = Recorder::default();
    recorder.refuse("a-2", true);

    drain_on::<F>(&relay(), &mut conn, &mut recorder).await;
    assert_eq!(recorder.ids(), ["a-1", "a-3"]);
    let failed = F::outbox_list(&mut conn, Some(OutboxState::Failed), 0, 10).await;
    let failed = readable(failed.unwrap());
    let reasons: Vec<(&str, &str)> = failed
        .iter()
        .map(|r| (r.event_id.as_str(), r.last_error.as_deref().unwrap()))
        .collect();
    assert_eq!(reasons.len(), 2);
    assert!(
        reasons[0].0 == "a-2" && reasons[0].1.contains("a-2 is too large"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].0 == "b-1" && reasons[1].1.contains("does not read back"),
        "{reasons:?}"
    );

    // A transient failure fails the row after the last attempt, and the rest go on too.
    for n in 1..=2 {
        F::enqueue(&outbox, &mut conn, "orders", &placed("c", n))
            .await
            .unwrap();
    }
    recorder.refuse("c-1", false);
    let two_tries = relay().max_attempts(2);
    drain_on::<F>(&two_tries, &mut conn, &mut recorder).await;
    assert_eq!(state_of(&mut check, "c-1"), OutboxState::Failed);
    assert_eq!(recorder.ids(), ["a-1", "a-3", "c-2"]);

    // Ops fix it and retry: published, after the rows that went on without it.
    recorder.accept("a-2");
    let audit = Audit::new("ops@example.com", "raised the broker's max_payload").unwrap();
    let position = failed[0].position;
    F::outbox_retry(&mut conn, position, &audit).await.unwrap();
    assert!(matches!(
        F::outbox_retry(&mut conn, position, &audit).await,
        Err(AdminError::OutboxRowNotFailed {
            state: OutboxState::Pending,
            ..
        })
    ));
    assert!(matches!(
        F::outbox_retry(&mut conn, 999_999, &audit).await,
        Err(AdminError::OutboxRowNotFound { position: 999_999 })
    ));
    drain_on::<F>(&relay(), &mut conn, &mut recorder).await;
    assert_eq!(recorder.ids(), ["a-1", "a-3", "c-2", "a-2"]);
    assert_eq!(
        F::outbox_stats(&mut conn).await.unwrap().failed,
        2,
        "b-1 and c-1 wait for ops"
    );

    // Retention deletes published rows only.
    let pruned = F::outbox_prune(&mut conn, Duration::ZERO, 2).await.unwrap();
    assert_eq!(pruned, 4);
    let stats = F::outbox_stats(&mut conn).await.unwrap();
    assert_eq!((stats.pending, stats.published, stats.failed), (0, 0, 2));
}

pub fn concurrent_relays_publish_every_row_once_in_order_per_aggregate<B: Backend>() {
    let (db, mut conn) = setup::<B>();
    let outbox = outbox();
    let orders = ["a", "b", "c", "d", "e", "f"];
    for n in 1..=10 {
        for order in orders {
            outbox
                .enqueue(&mut conn, "orders", &placed(order, n))
                .unwrap();
        }
    }
    let recorder = Recorder::default();

    concurrently(&db, 4, |_, conn| {
        let mut publisher = recorder.clone();
        drain(&relay().batch_size(5), conn, &mut publisher);
    });

    let ids = recorder.ids();
    let distinct: HashSet<&String> = ids.iter().collect();
    assert_eq!((ids.len(), distinct.len()), (60, 60), "each once: {ids:?}");
    for order in orders {
        let expected: Vec<String> = (1..=10).map(|n| format!("{order}-{n}")).collect();
        assert_eq!(of_order(&ids, order), expected, "order of {order}");
    }
    assert_eq!(Outbox::stats(&mut conn).unwrap().published, 60);
}

pub fn a_relay_outliving_its_lease_is_taken_over_and_its_marks_are_fenced<B: Backend>() {
    let (db, mut conn) = setup::<B>();
    let outbox = outbox();
    for order in ["a", "b", "c"] {
        outbox
            .enqueue(&mut conn, "orders", &placed(order, 1))
            .unwrap();
    }
    let lease = Duration::from_millis(300);
    let recorder = Recorder::default();
    // The first relay takes the rows, then stalls past its lease before its first publish.
    let (stalling, stalled) = std::sync::mpsc::channel();
    let mut stalling = Stalling {
        inner: recorder.clone(),
        stall: Some(lease * 6),
        says: stalling,
    };
    let mut other = db.connect();

    let (first, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| {
            relay()
                .lease(lease)
                .run_once(&mut conn, &mut stalling)
                .unwrap()
        });
        stalled
            .recv_timeout(Duration::from_secs(30))
            .expect("the first relay took the rows");
        std::thread::sleep(lease * 2);
        let second = relay().run_once(&mut other, &mut recorder.clone()).unwrap();
        (first.join().unwrap(), second)
    });

    assert_eq!(
        second.published, 3,
        "the second relay took the lapsed rows over"
    );
    assert_eq!(
        (first.published, first.fenced),
        (3, 3),
        "the first one's marks changed nothing"
    );
    assert_eq!(
        recorder.ids(),
        ["a-1", "b-1", "c-1", "a-1", "b-1", "c-1"],
        "published twice, each time in order: the broker's dedup and the inbox absorb it"
    );
    let stats = Outbox::stats(&mut conn).unwrap();
    assert_eq!((stats.pending, stats.published), (0, 3));
}

/// A publisher that sleeps once, before its first publish, saying so first.
struct Stalling {
    inner: Recorder,
    stall: Option<Duration>,
    says: std::sync::mpsc::Sender<()>,
}

impl Publisher for Stalling {
    fn publish(&mut self, message: &OutboxMessage) -> Result<(), PublishError> {
        if let Some(stall) = self.stall.take() {
            let _ = self.says.send(());
            std::thread::sleep(stall);
        }
        self.inner.send(message)
    }
}

pub async fn an_unknown_schema_version_is_dead_lettered_with_its_reason_and_never_runs<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("billing").unwrap();
    let accepted = SchemaVersions::new().accept("order.changed", [1, 2]);
    let v3 = placed("9", 1).with_schema_version(3);
    let apply = async |tx: &mut F::Conn, envelope: &Envelope| {
        accepted.check(envelope)?;
        tx.write_effect("order-9").await.map_err(Error::from)
    };

    for _delivery in 0..2 {
        let outcome = F::process(&inbox, &mut conn, &v3, async |tx: &mut F::Conn| {
            apply(tx, &v3).await
        })
        .await;
        assert_eq!(diesel_inbox::Ack::of(&outcome), diesel_inbox::Ack::Ack);
        assert!(outcome.unwrap().is_dead_lettered());
    }
    assert_eq!(check.effect_count(), 0);
    let letter = F::show(&inbox, &mut conn, v3.id().as_str()).await.unwrap();
    assert!(
        letter.last_error.contains("schema version 3"),
        "{}",
        letter.last_error
    );

    let v2 = placed("9", 2).with_schema_version(2);
    let outcome = F::process(&inbox, &mut conn, &v2, async |tx: &mut F::Conn| {
        apply(tx, &v2).await
    })
    .await;
    assert!(outcome.unwrap().is_processed());
}

/// Set in a producer child of the race below: the database URL, the child's part (`first` or
/// `second`), and the order (aggregate) of the round.
const PRODUCER_CHILD: &str = "DIESEL_INBOX_PRODUCER_CHILD";
const PRODUCER_PART: &str = "DIESEL_INBOX_PRODUCER_PART";
const PRODUCER_ORDER: &str = "DIESEL_INBOX_PRODUCER_ORDER";
/// How long the first producer keeps its transaction open after its enqueue.
const FIRST_HOLDS: Duration = Duration::from_millis(300);
const RACE_ROUNDS: usize = 6;

/// A producer child: enqueues its event of `order` in a transaction; the first keeps the
/// transaction open a while after its enqueue, as a slow producer does.
fn produce<B: Backend>(url: &str, part: &str, order: &str) {
    let mut conn = B::connect_to(url);
    let first = part == "first";
    conn.transaction(|tx| {
        outbox().enqueue(tx, "orders", &placed(order, if first { 1 } else { 2 }))?;
        println!("{part} enqueued");
        if first {
            std::thread::sleep(FIRST_HOLDS);
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    println!("{part} committed");
}

pub fn two_producers_of_one_aggregate_in_two_processes_publish_in_enqueue_order<B: Backend>() {
    const TEST: &str = "two_producers_of_one_aggregate_in_two_processes_publish_in_enqueue_order";
    if let Ok(url) = std::env::var(PRODUCER_CHILD) {
        let var = |name| std::env::var(name).unwrap();
        produce::<B>(&url, &var(PRODUCER_PART), &var(PRODUCER_ORDER));
        return;
    }
    let (db, mut conn) = setup::<B>();
    let (relay, mut recorder) = (relay(), Recorder::default());
    let wait = Duration::from_secs(60);
    for round in 0..RACE_ROUNDS {
        let order = format!("race{round}");
        let vars = |part| {
            [
                (PRODUCER_CHILD, db.url()),
                (PRODUCER_PART, part),
                (PRODUCER_ORDER, order.as_str()),
            ]
        };
        // The first enqueues (the lower position) and holds its transaction open; the second
        // enqueues for the same order meanwhile, and commits as soon as it may.
        let mut first = ChildTest::spawn(TEST, &vars("first"));
        first.wait_for("first enqueued", wait);
        let mut second = ChildTest::spawn(TEST, &vars("second"));
        // Relay passes all along, so that one runs between the two commits if the second may
        // commit first.
        let deadline = Instant::now() + wait;
        while of_order(&recorder.ids(), &order).len() < 2 {
            assert!(
                Instant::now() < deadline,
                "round {round}: not both published"
            );
            let _pass = relay.run_once(&mut conn, &mut recorder).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        first.wait_for("first committed", wait);
        second.wait_for("second committed", wait);
        let ids = recorder.ids();
        assert_eq!(
            of_order(&ids, &order),
            [format!("{order}-1"), format!("{order}-2")],
            "round {round}: published in enqueue order"
        );
    }
    println!(
        "{RACE_ROUNDS} rounds of two producer processes racing on one order: each published in enqueue order"
    );
}
