//! The `testing` helpers on every backend: they pass a correct handler, and they catch the
//! mistakes they exist to catch, with messages that say what went wrong.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::panic::{self, AssertUnwindSafe};

use diesel::prelude::*;
use diesel_inbox::testing::{
    assert_dead_lettered, assert_deliveries, assert_idempotent, assert_idempotent_concurrently,
    assert_not_processed, assert_processed_once, run_schedule, Fault, Faults, Schedule,
    ScheduleOptions, Step,
};
use diesel_inbox::{with_inbox, EventId, Inbox};
use proptest::test_runner::{Config, TestRunner};

use crate::support::{setup, Backend, TestConn};

/// The scenarios' effect, counted as the helpers count effects.
#[expect(
    clippy::unnecessary_wraps,
    reason = "the helpers take effect counters returning QueryResult"
)]
fn effects<C: TestConn>(conn: &mut C) -> QueryResult<i64> {
    Ok(i64::try_from(conn.effect_count()).expect("a small count"))
}

/// The message of the panic `f` raises; fails the test if it raises none.
fn failure_of(f: impl FnOnce()) -> String {
    let payload = panic::catch_unwind(AssertUnwindSafe(f)).expect_err("the helper should fail");
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => (*payload.downcast::<&str>().expect("a text message")).to_owned(),
    }
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

pub fn assert_idempotent_passes_a_handler_whose_effect_is_inside_the_inbox<B: Backend>() {
    let (_db, mut conn) = setup::<B>();

    let report = assert_idempotent(
        &mut conn,
        4,
        |conn| with_inbox(conn, "evt-1", |tx| tx.record_effect("evt-1")),
        effects,
    );

    assert_eq!(report.deliveries(), 4);
    assert_eq!(conn.total_deliveries(), 4);
    assert_deliveries(&mut conn, &Inbox::default(), "evt-1", 4);
}

pub fn assert_idempotent_catches_an_effect_written_outside_the_inbox_transaction<B: Backend>() {
    let (_db, mut conn) = setup::<B>();

    let message = failure_of(|| {
        assert_idempotent(
            &mut conn,
            3,
            |conn| {
                conn.record_effect("evt-1")?;
                with_inbox(conn, "evt-1", |_| QueryResult::Ok(()))
            },
            effects,
        );
    });

    assert_mentions(
        &message,
        &["took effect 3 times, expected once", "outside the inbox"],
    );
}

pub fn assert_idempotent_catches_a_handler_that_makes_up_a_new_id_per_delivery<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let mut deliveries = 0;

    let message = failure_of(|| {
        assert_idempotent(
            &mut conn,
            3,
            |conn| {
                deliveries += 1;
                let id = format!("evt-1/attempt-{deliveries}");
                with_inbox(conn, id.as_str(), |tx| tx.record_effect(&id))
            },
            effects,
        );
    });

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

pub fn inbox_assertions_show_the_recorded_row_when_they_fail<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::new("billing").unwrap();
    for _ in 0..2 {
        let _ = inbox
            .process(&mut conn, "evt-1", |tx| tx.record_effect("evt-1"))
            .unwrap();
    }

    let not_processed = failure_of(|| assert_not_processed(&mut conn, &inbox, "evt-1"));
    let wrong_count = failure_of(|| {
        assert_deliveries(&mut conn, &inbox, "evt-1", 5);
    });
    let other_id = failure_of(|| {
        assert_processed_once(&mut conn, &inbox, "EVT-1");
    });
    let other_consumer = failure_of(|| {
        assert_processed_once(&mut conn, &Inbox::default(), "evt-1");
    });

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
    assert_eq!(
        assert_processed_once(&mut conn, &inbox, "evt-1").deliveries(),
        2
    );
}

pub fn inbox_assertions_tell_a_dead_lettered_event_from_a_processed_one<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::new("billing").unwrap().max_attempts(2);
    let refuse = |_: &mut B::Conn| Err::<(), _>(diesel::result::Error::RollbackTransaction);
    assert!(inbox.process(&mut conn, "evt-1", refuse).is_err());

    let still_retrying = failure_of(|| {
        assert_dead_lettered(&mut conn, &inbox, "evt-1");
    });
    assert_mentions(
        &still_retrying,
        &[
            "to be dead-lettered",
            "retrying after 1 attempt (last error",
        ],
    );

    assert!(inbox
        .process(&mut conn, "evt-1", refuse)
        .unwrap()
        .is_dead_lettered());
    let dead = assert_dead_lettered(&mut conn, &inbox, "evt-1");
    assert_eq!(dead.attempts, 2);
    assert_not_processed(&mut conn, &inbox, "evt-1");
    let processed = failure_of(|| {
        assert_processed_once(&mut conn, &inbox, "evt-1");
    });
    assert_mentions(&processed, &["given up on", "state: dead_lettered"]);
}

pub fn failed_and_panicking_deliveries_leave_no_row_and_are_not_counted<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::default();
    let errors = Faults::on_attempts([1]);
    let panics = Faults::on_attempts([1]).fault(Fault::Panic);
    let mut failing = errors.wrap(|tx: &mut B::Conn| tx.record_effect("evt-1"));
    let mut panicking = panics.wrap(|tx: &mut B::Conn| tx.record_effect("evt-1"));

    let failed = with_inbox(&mut conn, "evt-1", &mut failing);
    assert!(failed.is_err(), "{failed:?}");
    assert_not_processed(&mut conn, &inbox, "evt-1");
    let message = failure_of(|| {
        let _ = with_inbox(&mut conn, "evt-1", &mut panicking);
    });
    assert_mentions(&message, &["fault injected on attempt 1"]);
    assert_not_processed(&mut conn, &inbox, "evt-1");

    // The retry path: the next deliveries succeed, and only they are counted.
    for _ in 0..2 {
        let _ = with_inbox(&mut conn, "evt-1", &mut failing).unwrap();
    }
    // A duplicate skips the effect, and with it the fault planned for its attempt.
    assert!(with_inbox(&mut conn, "evt-1", &mut panicking)
        .unwrap()
        .is_duplicate());

    assert_eq!((panics.attempts(), panics.injected()), (1, 1));
    assert_eq!((errors.attempts(), errors.injected()), (2, 1));
    assert_deliveries(&mut conn, &inbox, "evt-1", 3);
    assert_eq!(conn.effect_count(), 1);
}

pub fn random_schedules_with_failures_take_effect_once_per_distinct_event<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let options = ScheduleOptions::default().events(8).failure_rate(0.4);

    for seed in 0..4 {
        // Schedules reuse the ids evt-0, evt-1, ...: a consumer per run keeps them apart.
        let inbox = Inbox::new(&format!("schedule-{seed}")).unwrap();
        let schedule = options.random(seed);
        let (rows, deliveries) = (conn.inbox_rows(), conn.total_deliveries());
        let report = run_schedule(
            &mut conn,
            &inbox,
            &schedule,
            |tx, id| tx.record_effect(id.as_str()),
            effects,
        );

        let (failed, duplicates) = expected_tally(&schedule);
        assert_eq!(
            (report.failed(), report.duplicates()),
            (failed, duplicates),
            "{schedule}"
        );
        assert_eq!(conn.inbox_rows() - rows, 8, "{schedule}");
        assert_eq!(
            conn.total_deliveries() - deliveries,
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

pub fn run_schedule_catches_an_effect_that_outlives_a_failed_delivery<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let id = EventId::new("evt-1").unwrap();
    let schedule = Schedule::new([
        Step::new(id.clone(), Some(Fault::Error)),
        Step::new(id.clone(), Some(Fault::Panic)),
        Step::new(id, None),
    ]);
    // An email, say: sent from inside the handler, and not rolled back with it.
    let emails_sent = Cell::new(0);

    let message = failure_of(|| {
        run_schedule(
            &mut conn,
            &Inbox::default(),
            &schedule,
            |_, _| {
                emails_sent.set(emails_sent.get() + 1);
                QueryResult::Ok(())
            },
            |_| Ok(emails_sent.get()),
        );
    });

    assert_mentions(
        &message,
        &[
            "2 failed by injected faults",
            "took effect 3 times, expected 1",
            "evt-1 (error), evt-1 (panic), evt-1",
        ],
    );
}
