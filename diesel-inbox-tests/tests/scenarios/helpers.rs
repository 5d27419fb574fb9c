//! The test kit's helpers (`diesel-inbox-test`) on every backend: they pass a correct handler, and they catch the
//! mistakes they exist to catch, with messages that say what went wrong.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use diesel::prelude::*;
use diesel_inbox::{outbox::Outbox, with_inbox, EventId, Inbox};
use diesel_inbox_test::{
    assert_deliveries, assert_idempotent_concurrently, run_schedule, Fault, Faults, Schedule,
    ScheduleOptions, Step,
};
use proptest::test_runner::{Config, TestRunner};

use futures_util::FutureExt;

use super::writes;
use crate::support::{readable, setup, setup_flavour, Backend, Flavour, TestConn, Tx};

/// The scenarios' effect, counted as the helpers count effects.
#[expect(
    clippy::unnecessary_wraps,
    reason = "the helpers take effect counters returning QueryResult"
)]
fn effects<C: TestConn>(conn: &mut C) -> QueryResult<i64> {
    Ok(i64::try_from(conn.effect_count()).expect("a small count"))
}

/// The positions of the outbox's rows, in enqueue order. Increasing, and nothing more: a
/// Galera node steps by its `auto_increment_increment` (1, 4, 7, .. on node 1 of 3), so a
/// scenario reads them here rather than counting from 1.
pub(crate) fn outbox_positions<C: TestConn>(conn: &mut C) -> Vec<i64> {
    let mut positions = Vec::new();
    loop {
        let after = positions.last().copied().unwrap_or(0);
        let page = readable(Outbox::list(conn, None, after, 100).unwrap());
        if page.is_empty() {
            return positions;
        }
        positions.extend(page.iter().map(|row| row.position));
    }
}

/// The message of the panic `future` raises; fails the test if it raises none.
async fn failure_in(future: impl Future) -> String {
    let payload = AssertUnwindSafe(future)
        .catch_unwind()
        .await
        .err()
        .expect("the helper should fail");
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => (*payload.downcast::<&str>().expect("a text message")).to_owned(),
    }
}

/// The effects, counted through the sync connection the scenario checks with.
fn counted(check: &Mutex<impl TestConn>) -> i64 {
    i64::try_from(check.lock().unwrap().effect_count()).expect("a small count")
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{part:?} missing from: {message}");
    }
}

/// What `run_schedule` must report for `schedule` as `(failed, duplicates)`, worked out from
/// its steps alone: a faulted delivery fails only while its event is not processed yet;
/// after, every delivery is a duplicate, faulted or not, since the effect (and the fault
/// with it) no longer runs.
fn expected_tally(schedule: &Schedule) -> (usize, usize) {
    let mut processed = BTreeSet::new();
    let (mut failed, mut duplicates) = (0, 0);
    for step in schedule.steps() {
        if processed.contains(step.event_id()) {
            duplicates += 1;
        } else if step.fault().is_some() {
            failed += 1;
        } else {
            processed.insert(step.event_id());
        }
    }
    (failed, duplicates)
}

pub async fn assert_idempotent_passes_a_handler_whose_effect_is_inside_the_inbox<F: Flavour>() {
    let (_db, check, mut conn) = setup_flavour::<F>().await;
    let check = Mutex::new(check);

    let deliver = async |conn: &mut F::Conn| F::with_inbox(conn, "evt-1", writes("evt-1")).await;
    let effects = async |_: &mut F::Conn| Ok(counted(&check));
    let report = F::assert_idempotent(&mut conn, 4, deliver, effects).await;

    assert_eq!(report.deliveries(), 4);
    assert_eq!(check.lock().unwrap().total_deliveries(), 4);
    F::assert_deliveries(&mut conn, &Inbox::default(), "evt-1", 4).await;
}

pub async fn assert_idempotent_catches_an_effect_written_outside_the_inbox_transaction<
    F: Flavour,
>() {
    let (_db, check, mut conn) = setup_flavour::<F>().await;
    let check = Mutex::new(check);

    let leaky = async |conn: &mut F::Conn| {
        conn.write_effect("evt-1").await?;
        let nothing = async |_: &mut F::Conn| QueryResult::Ok(());
        F::with_inbox(conn, "evt-1", nothing).await
    };
    let effects = async |_: &mut F::Conn| Ok(counted(&check));
    let message = failure_in(F::assert_idempotent(&mut conn, 3, leaky, effects)).await;

    assert_mentions(
        &message,
        &["took effect 3 times, expected once", "outside the inbox"],
    );
}

pub async fn assert_idempotent_catches_a_handler_that_makes_up_a_new_id_per_delivery<F: Flavour>() {
    let (_db, check, mut conn) = setup_flavour::<F>().await;
    let check = Mutex::new(check);
    let deliveries = AtomicUsize::new(0);

    let made_up = async |conn: &mut F::Conn| {
        let n = deliveries.fetch_add(1, Ordering::SeqCst) + 1;
        let id = format!("evt-1/attempt-{n}");
        let write = async |tx: &mut F::Conn| tx.write_effect(&id).await;
        F::with_inbox(conn, id.as_str(), write).await
    };
    let effects = async |_: &mut F::Conn| Ok(counted(&check));
    let message = failure_in(F::assert_idempotent(&mut conn, 3, made_up, effects)).await;

    assert_mentions(&message, &["deliveries [1, 2, 3] of 3", "same event id"]);
}

pub fn delivering_one_event_from_many_threads_at_once_takes_effect_once<B: Backend>() {
    let (db, mut conn) = setup::<B>();
    let pool = db.pool(4);

    let report = assert_idempotent_concurrently(
        &pool,
        8,
        |conn: &mut B::Conn| with_inbox(conn, "evt-1", |tx| tx.record_effect("evt-1")),
        effects,
    );

    assert_eq!(report.deliveries(), 8);
    assert_eq!(conn.total_deliveries(), 8);
    assert_deliveries(&mut conn, &Inbox::default(), "evt-1", 8);
}

pub async fn inbox_assertions_show_the_recorded_row_when_they_fail<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("billing").unwrap();
    for _ in 0..2 {
        let _ = F::process(&inbox, &mut conn, "evt-1", writes("evt-1"))
            .await
            .unwrap();
    }

    let not_processed = failure_in(F::assert_not_processed(&mut conn, &inbox, "evt-1")).await;
    let wrong_count = failure_in(F::assert_deliveries(&mut conn, &inbox, "evt-1", 5)).await;
    let other_id = failure_in(F::assert_processed_once(&mut conn, &inbox, "EVT-1")).await;
    let default = Inbox::default();
    let other_consumer = failure_in(F::assert_processed_once(&mut conn, &default, "evt-1")).await;

    let row = [
        r#"consumer: "billing""#,
        r#"event_id: "evt-1""#,
        "deliveries: 2",
    ];
    assert_mentions(&not_processed, &row);
    assert_mentions(&wrong_count, &row);
    assert_mentions(&wrong_count, &["to have 5 deliveries", "counts 2"]);
    assert_mentions(&other_id, &[r#""EVT-1""#, "no row for it"]);
    assert_mentions(&other_id, &row);
    assert_mentions(&other_consumer, &[r#"consumer "default""#, "no row"]);
    assert_mentions(&other_consumer, &row);
    let record = F::assert_processed_once(&mut conn, &inbox, "evt-1").await;
    assert_eq!(record.deliveries(), 2);
}

pub async fn inbox_assertions_tell_a_dead_lettered_event_from_a_processed_one<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("billing").unwrap().max_attempts(2);
    let refuse = async |_: &mut F::Conn| Err::<(), _>(diesel::result::Error::RollbackTransaction);
    assert!(F::process(&inbox, &mut conn, "evt-1", refuse)
        .await
        .is_err());

    let still_retrying = failure_in(F::assert_dead_lettered(&mut conn, &inbox, "evt-1")).await;
    assert_mentions(
        &still_retrying,
        &[
            "to be dead-lettered",
            "retrying after 1 attempt (last error",
        ],
    );

    let second = F::process(&inbox, &mut conn, "evt-1", refuse).await;
    assert!(second.unwrap().is_dead_lettered());
    let dead = F::assert_dead_lettered(&mut conn, &inbox, "evt-1").await;
    assert_eq!(dead.attempts, 2);
    F::assert_not_processed(&mut conn, &inbox, "evt-1").await;
    let processed = failure_in(F::assert_processed_once(&mut conn, &inbox, "evt-1")).await;
    assert_mentions(&processed, &["given up on", "state: dead_lettered"]);
}

pub async fn failed_and_panicking_deliveries_leave_no_row_and_are_not_counted<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::default();
    let errors = Faults::on_attempts([1]);
    let panics = Faults::on_attempts([1]).fault(Fault::Panic);
    let failing = async |tx: &mut F::Conn| {
        tx.write_effect("evt-1").await?;
        errors.inject().map_err(diesel::result::Error::from)
    };
    let panicking = async |tx: &mut F::Conn| {
        tx.write_effect("evt-1").await?;
        panics.inject().map_err(diesel::result::Error::from)
    };

    let failed = F::with_inbox(&mut conn, "evt-1", failing).await;
    assert!(failed.is_err(), "{failed:?}");
    F::assert_not_processed(&mut conn, &inbox, "evt-1").await;
    let message = failure_in(F::with_inbox(&mut conn, "evt-1", panicking)).await;
    assert_mentions(&message, &["fault injected on attempt 1"]);
    F::assert_not_processed(&mut conn, &inbox, "evt-1").await;

    // The retry path: the next deliveries succeed, and only they are counted.
    for _ in 0..2 {
        let _ = F::with_inbox(&mut conn, "evt-1", failing).await.unwrap();
    }
    // A duplicate skips the effect, and with it the fault planned for its attempt.
    let duplicate = F::with_inbox(&mut conn, "evt-1", panicking).await;
    assert!(duplicate.unwrap().is_duplicate());

    assert_eq!((panics.attempts(), panics.injected()), (1, 1));
    assert_eq!((errors.attempts(), errors.injected()), (2, 1));
    F::assert_deliveries(&mut conn, &inbox, "evt-1", 3).await;
    assert_eq!(check.effect_count(), 1);
}

pub async fn random_schedules_with_failures_take_effect_once_per_distinct_event<F: Flavour>() {
    let (_db, check, mut conn) = setup_flavour::<F>().await;
    let check = Mutex::new(check);
    let options = ScheduleOptions::default().events(8).failure_rate(0.4);

    for seed in 0..4 {
        // Schedules reuse the ids evt-0, evt-1, ...: a consumer per run keeps them apart.
        let inbox = Inbox::new(&format!("schedule-{seed}")).unwrap();
        let schedule = options.random(seed);
        let tally = || {
            let mut check = check.lock().unwrap();
            (check.inbox_rows(), check.total_deliveries())
        };
        let (rows, deliveries) = tally();
        let effect = async |tx: &mut F::Conn, id: &EventId| tx.write_effect(id.as_str()).await;
        let effects = async |_: &mut F::Conn| Ok(counted(&check));
        let report = F::run_schedule(&mut conn, &inbox, &schedule, effect, effects).await;

        let (failed, duplicates) = expected_tally(&schedule);
        assert_eq!(
            (report.failed(), report.duplicates()),
            (failed, duplicates),
            "{schedule}"
        );
        let (rows_after, deliveries_after) = tally();
        assert_eq!(rows_after - rows, 8, "{schedule}");
        assert_eq!(
            deliveries_after - deliveries,
            schedule.steps().len() - failed,
            "only deliveries that did not fail are counted: {schedule}"
        );
    }
}

pub fn proptest_schedules_take_effect_once_per_distinct_event<B: Backend>() {
    let (_db, conn) = setup::<B>();
    let conn = std::cell::RefCell::new(conn);
    let runs = Cell::new(0_u32);
    let mut runner = TestRunner::new(Config {
        cases: 8,
        failure_persistence: None,
        ..Config::default()
    });

    runner
        .run(
            &ScheduleOptions::default().events(4).strategy(),
            |schedule| {
                runs.set(runs.get() + 1);
                let inbox = Inbox::new(&format!("case-{}", runs.get())).unwrap();
                let conn = &mut *conn.borrow_mut();
                let (rows, deliveries) = (conn.inbox_rows(), conn.total_deliveries());
                let report = run_schedule(
                    conn,
                    &inbox,
                    &schedule,
                    |tx, id| tx.record_effect(id.as_str()),
                    effects,
                );
                let (failed, duplicates) = expected_tally(&schedule);
                proptest::prop_assert_eq!(
                    (report.failed(), report.duplicates()),
                    (failed, duplicates)
                );
                proptest::prop_assert_eq!(conn.inbox_rows() - rows, schedule.distinct_events());
                proptest::prop_assert_eq!(
                    conn.total_deliveries() - deliveries,
                    schedule.steps().len() - failed
                );
                Ok(())
            },
        )
        .unwrap();
}

pub async fn run_schedule_catches_an_effect_that_outlives_a_failed_delivery<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let id = EventId::new("evt-1").unwrap();
    let schedule = Schedule::new([
        Step::new(id.clone(), Some(Fault::Error)),
        Step::new(id.clone(), Some(Fault::Panic)),
        Step::new(id, None),
    ]);
    // An email, say: sent from inside the handler, and not rolled back with it.
    let emails_sent = AtomicUsize::new(0);

    let email = async |_: &mut F::Conn, _: &EventId| {
        emails_sent.fetch_add(1, Ordering::SeqCst);
        QueryResult::Ok(())
    };
    let sent =
        async |_: &mut F::Conn| Ok(i64::try_from(emails_sent.load(Ordering::SeqCst)).unwrap());
    let inbox = Inbox::default();
    let message = failure_in(F::run_schedule(&mut conn, &inbox, &schedule, email, sent)).await;

    assert_mentions(
        &message,
        &[
            "2 failed by injected faults",
            "took effect 3 times, expected 1",
            "evt-1 (error), evt-1 (panic), evt-1",
        ],
    );
}
