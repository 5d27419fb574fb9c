//! The `metrics` feature: what a delivery records through the facade, read back from the
//! debugging recorder installed for this thread only.

use diesel::prelude::*;
use diesel_inbox::{Delivery, Error, Inbox};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;

/// A metric as the recorder holds it: kind, name, labels sorted by key.
type Id = (MetricKind, String, Vec<(String, String)>);

fn snapshot(snapshotter: &Snapshotter) -> Vec<(Id, DebugValue)> {
    let mut metrics: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _unit, _description, value)| {
            let (kind, key) = key.into_parts();
            let mut labels: Vec<_> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            ((kind, key.name().to_owned(), labels), value)
        })
        .collect();
    metrics.sort_by(|a, b| a.0.cmp(&b.0));
    metrics
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn counter(metrics: &[(Id, DebugValue)], name: &str, pairs: &[(&str, &str)]) -> Option<u64> {
    let id = (MetricKind::Counter, name.to_owned(), labels(pairs));
    metrics
        .iter()
        .find(|(i, _)| *i == id)
        .map(|(_, v)| match v {
            DebugValue::Counter(n) => *n,
            other => panic!("{name} is not a counter: {other:?}"),
        })
}

fn histogram(metrics: &[(Id, DebugValue)], name: &str, pairs: &[(&str, &str)]) -> Vec<f64> {
    let id = (MetricKind::Histogram, name.to_owned(), labels(pairs));
    match metrics.iter().find(|(i, _)| *i == id) {
        Some((_, DebugValue::Histogram(samples))) => samples.iter().map(|s| s.0).collect(),
        other => panic!("no histogram {name}{pairs:?}: {other:?}"),
    }
}

#[test]
fn deliveries_are_counted_and_timed_by_consumer_and_outcome() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    diesel_inbox::run_pending_migrations(&mut conn).unwrap();
    let inbox = Inbox::new("metered").unwrap().max_attempts(2);
    let ok = |_: &mut SqliteConnection| Ok::<_, Error>(());
    let refuse =
        |_: &mut SqliteConnection| Err::<(), _>(Error::Database(diesel::result::Error::NotFound));

    metrics::with_local_recorder(&recorder, || {
        diesel_inbox::describe_metrics();
        assert!(inbox
            .process(&mut conn, "evt-1", ok)
            .unwrap()
            .is_processed());
        assert!(inbox
            .process(&mut conn, "evt-1", ok)
            .unwrap()
            .is_duplicate());
        assert!(inbox.process(&mut conn, "evt-2", refuse).is_err());
        assert!(inbox
            .process(&mut conn, "evt-2", refuse)
            .unwrap()
            .is_dead_lettered());
        let first = Delivery::new("evt-3").unwrap().bytes(b"one".to_vec());
        let other = Delivery::new("evt-3").unwrap().bytes(b"two".to_vec());
        assert!(inbox.process(&mut conn, &first, ok).unwrap().is_processed());
        assert!(inbox.process(&mut conn, &other, ok).is_err());
        assert!(inbox.process(&mut conn, "", ok).is_err());
        let batch = inbox.process_batch(&mut conn, ["evt-1", "evt-4"], |_, _| Ok::<_, Error>(()));
        assert_eq!(batch.unwrap().len(), 2);
    });

    let metrics = snapshot(&snapshotter);
    let deliveries = "diesel_inbox_deliveries_total";
    let by_outcome = |outcome| {
        counter(
            &metrics,
            deliveries,
            &[("consumer", "metered"), ("outcome", outcome)],
        )
    };
    assert_eq!(by_outcome("processed"), Some(3), "{metrics:#?}");
    assert_eq!(by_outcome("duplicate"), Some(2));
    assert_eq!(by_outcome("failed"), Some(1));
    assert_eq!(by_outcome("dead_lettered"), Some(1));
    assert_eq!(by_outcome("payload_conflict"), Some(1));
    assert_eq!(by_outcome("error"), Some(1));
    let consumer = [("consumer", "metered")];
    assert_eq!(
        counter(&metrics, "diesel_inbox_failed_attempts_total", &consumer),
        Some(2)
    );
    assert_eq!(
        counter(&metrics, "diesel_inbox_dead_lettered_total", &consumer),
        Some(1)
    );
    let durations = histogram(
        &metrics,
        "diesel_inbox_delivery_duration_seconds",
        &[("consumer", "metered"), ("outcome", "processed")],
    );
    assert_eq!(durations.len(), 3);
    assert!(
        durations.iter().all(|s| (0.0..60.0).contains(s)),
        "{durations:?}"
    );
}

#[test]
fn contention_retries_are_counted_by_consumer() {
    use diesel::connection::SimpleConnection;
    use diesel_inbox::RetryPolicy;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("inbox.db").display().to_string();
    let mut conn = SqliteConnection::establish(&url).unwrap();
    diesel_inbox::run_pending_migrations(&mut conn).unwrap();
    conn.batch_execute("PRAGMA busy_timeout = 0").unwrap();
    // Another connection holds the write lock for the whole delivery.
    let mut holder = SqliteConnection::establish(&url).unwrap();
    holder.batch_execute("BEGIN IMMEDIATE").unwrap();
    let inbox = Inbox::new("locked-out")
        .unwrap()
        .retry(RetryPolicy::default().max_retries(2));

    metrics::with_local_recorder(&recorder, || {
        let outcome = inbox.process(&mut conn, "evt-1", |_| Ok::<_, Error>(()));
        assert!(
            matches!(outcome, Err(Error::RetriesExhausted { .. })),
            "{outcome:?}"
        );
    });
    holder.batch_execute("ROLLBACK").unwrap();

    let metrics = snapshot(&snapshotter);
    let consumer = [("consumer", "locked-out")];
    assert_eq!(
        counter(&metrics, "diesel_inbox_contention_retries_total", &consumer),
        Some(2),
        "{metrics:#?}"
    );
    let outcome = [("consumer", "locked-out"), ("outcome", "error")];
    assert_eq!(
        counter(&metrics, "diesel_inbox_deliveries_total", &outcome),
        Some(1)
    );
}

#[test]
fn gaps_are_counted_by_cause_once_committed_as_gaps_and_as_missing_sequences() {
    use diesel_inbox::cursor::Sequenced;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    diesel_inbox::run_pending_migrations(&mut conn).unwrap();
    let cursor = Inbox::new("sequenced").unwrap().cursor("orders-0").unwrap();
    let ok = |_: &mut SqliteConnection| Ok::<_, Error>(());
    let fail = |_: &mut SqliteConnection| Err::<(), _>(Error::transient("not now"));

    metrics::with_local_recorder(&recorder, || {
        assert!(cursor.process(&mut conn, 1, ok).unwrap().is_processed());
        // 2..=4 skipped; 5..=9 behind the broker's first available sequence, 10.
        assert_eq!(cursor.process(&mut conn, 5, ok).unwrap().gaps().len(), 1);
        let evicted = Sequenced::new(10).first_available(10);
        assert_eq!(
            cursor.process(&mut conn, evicted, ok).unwrap().gaps().len(),
            1
        );
        // A gap found by a transaction that rolls back is not counted.
        assert!(cursor.process(&mut conn, 20, fail).is_err());
    });

    let metrics = snapshot(&snapshotter);
    let by = |name, cause| {
        counter(
            &metrics,
            name,
            &[("cause", cause), ("consumer", "sequenced")],
        )
    };
    assert_eq!(
        (
            by("diesel_inbox_gaps_total", "skipped"),
            by("diesel_inbox_gaps_total", "evicted")
        ),
        (Some(1), Some(1)),
        "{metrics:#?}"
    );
    assert_eq!(
        (
            by("diesel_inbox_gap_sequences_total", "skipped"),
            by("diesel_inbox_gap_sequences_total", "evicted")
        ),
        (Some(3), Some(4))
    );
}

#[test]
fn reorgs_are_counted_once_committed_with_their_blocks_and_events_and_refused_forks_apart() {
    use diesel_inbox::chain::{Block, BlockId, ChainHandler};
    use diesel_inbox::EventId;

    /// Reverts fail while `refuse` is set: the reorg rolls back.
    struct Handler {
        refuse: bool,
    }
    impl ChainHandler<SqliteConnection> for Handler {
        type Event = ();
        type Error = Error;
        fn apply(
            &mut self,
            _: &mut SqliteConnection,
            _: &BlockId,
            _: &EventId,
            (): &(),
        ) -> Result<(), Error> {
            Ok(())
        }
        fn revert(
            &mut self,
            _: &mut SqliteConnection,
            _: &BlockId,
            _: &EventId,
        ) -> Result<(), Error> {
            if self.refuse {
                Err(Error::transient("not now"))
            } else {
                Ok(())
            }
        }
    }
    let block = |height, hash: &str, parent: &str, events: &[&str]| {
        let ids = events.iter().map(|e| (EventId::new(*e).unwrap(), ()));
        Block::new(height, hash, parent).unwrap().events_from(ids)
    };
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    diesel_inbox::run_pending_migrations(&mut conn).unwrap();
    let chain = Inbox::new("indexer").unwrap().chain("eth", 2).unwrap();
    let mut handler = Handler { refuse: false };

    metrics::with_local_recorder(&recorder, || {
        for b in [
            block(0, "0a", "g", &[]),
            block(1, "1a", "0a", &["t1"]),
            block(2, "2a", "1a", &["t2", "t3"]),
        ] {
            assert!(chain
                .process(&mut conn, &b, &mut handler)
                .unwrap()
                .is_processed());
        }
        // A reorg whose undo rolls back is not counted.
        handler.refuse = true;
        let replacing = block(1, "1b", "0a", &[]);
        assert!(chain.process(&mut conn, &replacing, &mut handler).is_err());
        handler.refuse = false;
        let outcome = chain.process(&mut conn, &replacing, &mut handler).unwrap();
        assert_eq!(outcome.reorg().map(|r| r.events_reverted), Some(3));
        for b in [block(2, "2b", "1b", &[]), block(3, "3b", "2b", &[])] {
            assert!(chain
                .process(&mut conn, &b, &mut handler)
                .unwrap()
                .is_processed());
        }
        // 1b is final now: a fork of it is refused.
        let deep = block(1, "1c", "0a", &[]);
        assert!(chain.process(&mut conn, &deep, &mut handler).is_err());
    });

    let metrics = snapshot(&snapshotter);
    let by = |name| counter(&metrics, name, &[("consumer", "indexer")]);
    assert_eq!(
        [
            by("diesel_inbox_reorgs_total"),
            by("diesel_inbox_reorg_blocks_total"),
            by("diesel_inbox_reorg_events_reverted_total"),
            by("diesel_inbox_reorgs_refused_total"),
        ],
        [Some(1), Some(2), Some(3), Some(1)],
        "{metrics:#?}"
    );
}

#[test]
fn claims_count_each_state_they_enter_once_and_fenced_writes_apart() {
    use diesel_inbox::claim::{Claimed, InDoubtPolicy};
    use std::time::Duration;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    diesel_inbox::run_pending_migrations(&mut conn).unwrap();
    let lease = Duration::from_millis(50);
    let hold = Inbox::new("mailer").unwrap().claims().lease(lease);
    let rerun = hold.clone().policy(InDoubtPolicy::RerunAfterLease);
    let send = |_: &diesel_inbox::claim::Claim| Ok::<_, Error>("msg".to_owned());

    metrics::with_local_recorder(&recorder, || {
        assert!(hold.run(&mut conn, "sent", send).unwrap().has_run());
        // A holder dies: its claim is in doubt once, however often it is redelivered.
        let Claimed::Acquired(dead) = hold.claim(&mut conn, "lost").unwrap() else {
            panic!("acquired")
        };
        std::mem::forget(dead);
        std::thread::sleep(2 * lease);
        assert!(hold.run(&mut conn, "lost", send).unwrap().is_in_doubt());
        assert!(hold.run(&mut conn, "lost", send).unwrap().is_in_doubt());
        // A slow holder is taken over, and its late completion is fenced.
        let Claimed::Acquired(slow) = rerun.claim(&mut conn, "slow").unwrap() else {
            panic!("acquired")
        };
        std::thread::sleep(2 * lease);
        assert!(rerun.run(&mut conn, "slow", send).unwrap().has_run());
        assert!(slow.complete(&mut conn, &"late").is_err());
        assert_eq!(hold.in_doubt(&mut conn).unwrap().len(), 1);
    });

    let metrics = snapshot(&snapshotter);
    let entered = |state| {
        counter(
            &metrics,
            "diesel_inbox_claim_transitions_total",
            &[("consumer", "mailer"), ("state", state)],
        )
    };
    assert_eq!(
        (
            entered("in_progress"),
            entered("completed"),
            entered("in_doubt")
        ),
        (Some(4), Some(2), Some(1)),
        "{metrics:#?}"
    );
    assert_eq!(
        counter(
            &metrics,
            "diesel_inbox_claims_fenced_total",
            &[("consumer", "mailer")]
        ),
        Some(1)
    );
    let gauge = (
        MetricKind::Gauge,
        "diesel_inbox_claims_in_doubt".to_owned(),
        labels(&[("consumer", "mailer")]),
    );
    let in_doubt = metrics.iter().find(|(id, _)| *id == gauge).map(|(_, v)| v);
    assert!(
        matches!(in_doubt, Some(DebugValue::Gauge(n)) if (n.into_inner() - 1.0).abs() < f64::EPSILON),
        "{in_doubt:?}"
    );
}

/// Refuses `bad-1` for good; publishes the rest.
struct RefusesBad;

impl diesel_inbox::outbox::Publisher for RefusesBad {
    fn publish(
        &mut self,
        message: &diesel_inbox::outbox::OutboxMessage,
    ) -> Result<(), diesel_inbox::outbox::PublishError> {
        if message.envelope.id().as_str() == "bad-1" {
            return Err(diesel_inbox::outbox::PublishError::permanent("too large"));
        }
        Ok(())
    }
}

#[test]
fn the_outbox_counts_enqueued_published_and_failed_events_by_topic_and_gauges_pending_rows() {
    use diesel_inbox::{
        envelope::Envelope,
        outbox::{Outbox, Relay},
    };

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    diesel_inbox::run_pending_migrations(&mut conn).unwrap();
    let outbox = Outbox::new("orders-service").unwrap();
    let event = |id: &str, order: &str| {
        Envelope::new("order.placed", "order", order)
            .with_id(id)
            .unwrap()
            .bytes(b"{}".to_vec())
    };

    let pending = metrics::with_local_recorder(&recorder, || {
        diesel_inbox::describe_metrics();
        outbox
            .enqueue(&mut conn, "orders", &event("ok-1", "1"))
            .unwrap();
        outbox
            .enqueue(&mut conn, "orders", &event("ok-2", "2"))
            .unwrap();
        outbox
            .enqueue(&mut conn, "refunds", &event("bad-1", "3"))
            .unwrap();
        // An enqueue that rolls back leaves no row, but was counted at its INSERT.
        let rolled_back: Result<(), diesel_inbox::Error> = conn.transaction(|tx| {
            outbox.enqueue(tx, "orders", &event("gone-1", "4"))?;
            Err(diesel_inbox::Error::permanent("the order was declined"))
        });
        assert!(rolled_back.is_err());
        let pass = Relay::new().run_once(&mut conn, &mut RefusesBad).unwrap();
        assert_eq!((pass.published, pass.failed), (2, 1), "{pass:?}");
        outbox
            .enqueue(&mut conn, "orders", &event("late-1", "5"))
            .unwrap();
        Outbox::stats(&mut conn).unwrap().pending
    });
    assert_eq!(pending, 1);

    let metrics = snapshot(&snapshotter);
    let topic = |name, topic| counter(&metrics, name, &[("topic", topic)]);
    let enqueued = "diesel_inbox_outbox_enqueued_total";
    assert_eq!(
        (topic(enqueued, "orders"), topic(enqueued, "refunds")),
        (Some(4), Some(1)),
        "{metrics:#?}"
    );
    let published = "diesel_inbox_outbox_published_total";
    assert_eq!(
        (topic(published, "orders"), topic(published, "refunds")),
        (Some(2), None)
    );
    let failures = "diesel_inbox_outbox_publish_failures_total";
    let failed = |outcome, topic| {
        counter(
            &metrics,
            failures,
            &[("outcome", outcome), ("topic", topic)],
        )
    };
    assert_eq!(
        (
            failed("failed", "refunds"),
            failed("retry", "refunds"),
            failed("failed", "orders")
        ),
        (Some(1), None, None)
    );
    let gauge = (
        MetricKind::Gauge,
        "diesel_inbox_outbox_pending".to_owned(),
        Vec::new(),
    );
    let pending = metrics.iter().find(|(id, _)| *id == gauge).map(|(_, v)| v);
    assert!(
        matches!(pending, Some(DebugValue::Gauge(n)) if (n.into_inner() - 1.0).abs() < f64::EPSILON),
        "{pending:?}"
    );
}

/// Applies nothing; a real one writes into the target.
struct Applies;

impl diesel_inbox::replay::ReplayHandler<SqliteConnection> for Applies {
    type Error = diesel_inbox::Error;

    fn apply(
        &mut self,
        _: &mut SqliteConnection,
        _: &diesel_inbox::envelope::Envelope,
        _: &diesel_inbox::replay::Replayed,
    ) -> Result<(), diesel_inbox::Error> {
        Ok(())
    }
}

#[test]
fn a_replay_counts_each_event_it_settles_by_target_and_outcome() {
    use diesel_inbox::replay::{Interpretation, OutboxSource, Plan, Range, Replays, Target};
    use diesel_inbox::{
        envelope::{Envelope, SchemaVersions},
        outbox::Outbox,
        Audit, Inbox,
    };

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let mut conn = SqliteConnection::establish(":memory:").unwrap();
    diesel_inbox::run_pending_migrations(&mut conn).unwrap();
    let outbox = Outbox::new("points-service").unwrap();
    for (id, version) in [("e1", 1), ("e2", 1), ("e3", 9)] {
        let event = Envelope::new("points.awarded", "user", "u1")
            .with_id(id)
            .unwrap()
            .with_schema_version(version);
        outbox.enqueue(&mut conn, "points", &event).unwrap();
    }
    let target = Inbox::new("rebuild").unwrap();
    let _ = target.process(&mut conn, "e1", |_| Ok::<_, diesel_inbox::Error>(()));
    let versions = SchemaVersions::new().accept("points.awarded", [1]);
    let plan = Plan::new(
        Target::isolated("rebuild", "shadow").unwrap(),
        Range::positions(1, 3).unwrap(),
    )
    .interpretation(Interpretation::Versions(versions))
    .expect(diesel_inbox::replay::Expectation::Any);
    let replays = Replays::new();
    let audit = Audit::new("ops", "rebuild").unwrap();

    metrics::with_local_recorder(&recorder, || {
        let planned = replays
            .plan(&mut conn, &OutboxSource::new(), &plan, &audit)
            .unwrap();
        let run = replays
            .run(
                &mut conn,
                planned.id,
                &mut OutboxSource::new(),
                &mut Applies,
            )
            .unwrap();
        assert!(run.finished);
    });

    let metrics = snapshot(&snapshotter);
    let outcome = |outcome| {
        counter(
            &metrics,
            "diesel_inbox_replay_events_total",
            &[("consumer", "rebuild"), ("outcome", outcome)],
        )
    };
    assert_eq!(
        (
            outcome("processed"),
            outcome("duplicate"),
            outcome("skipped")
        ),
        (Some(1), Some(1), Some(1)),
        "{metrics:#?}"
    );
}
