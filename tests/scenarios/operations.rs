//! Operating the inbox: releasing dead letters to be published again, and the doctor's checks.

use diesel::connection::SimpleConnection;
use diesel_inbox::doctor::{self, CheckStatus};
use diesel_inbox::AdminError;
use diesel_inbox::{Audit, DeadLetterState, HistoryKind, Inbox, Outcome};

use super::{effect, HandlerError};
use crate::support::{setup, Backend, TestConn};

fn refuse<C>(_: &mut C) -> Result<(), HandlerError> {
    Err(HandlerError::Refused)
}

fn ops(reason: &str) -> Audit {
    Audit::new("ops", reason).unwrap()
}

/// An inbox that gives up after `max_attempts`, and `event_id` dead-lettered by it.
fn dead_lettered<C: TestConn>(conn: &mut C, event_id: &str, max_attempts: u32) -> Inbox {
    let inbox = Inbox::new("orders").unwrap().max_attempts(max_attempts);
    for _ in 1..max_attempts {
        assert_eq!(
            inbox.process(conn, event_id, refuse),
            Err(HandlerError::Refused)
        );
    }
    let last = inbox.process(conn, event_id, refuse).unwrap();
    assert!(last.is_dead_lettered(), "{last:?}");
    inbox
}

pub fn a_released_dead_letter_runs_once_on_its_next_delivery<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = dead_lettered(&mut conn, "evt-1", 2);
    let dead = inbox.dead_letters();

    dead.release(&mut conn, "evt-1", &ops("re-published after the fix"))
        .unwrap();

    let record = dead.show(&mut conn, "evt-1").unwrap();
    assert_eq!(record.state, DeadLetterState::Released);
    assert_eq!(record.attempts, 0, "counted afresh");
    let last = record.history.last().unwrap();
    assert_eq!(
        (last.kind, last.actor.as_deref(), last.reason.as_deref()),
        (
            HistoryKind::Released,
            Some("ops"),
            Some("re-published after the fix")
        )
    );
    assert!(dead.list(&mut conn, None, 100).unwrap().is_empty());

    let next = inbox.process(&mut conn, "evt-1", effect("evt-1")).unwrap();
    assert_eq!(next, Outcome::Processed(()));
    let copy = inbox.process(&mut conn, "evt-1", effect("evt-1")).unwrap();
    assert!(copy.is_duplicate(), "{copy:?}");
    assert_eq!(conn.effect_count(), 1);
}

pub fn releasing_twice_or_a_retrying_event_is_an_invalid_transition<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = dead_lettered(&mut conn, "evt-1", 1);
    let dead = inbox.dead_letters();
    dead.release(&mut conn, "evt-1", &ops("first")).unwrap();

    let again = dead.release(&mut conn, "evt-1", &ops("second"));
    assert!(
        matches!(
            again,
            Err(AdminError::InvalidTransition {
                state: DeadLetterState::Released,
                attempted: DeadLetterState::Released,
                ..
            })
        ),
        "{again:?}"
    );
    let retrying = Inbox::new("orders").unwrap().max_attempts(3);
    assert_eq!(
        retrying.process(&mut conn, "evt-2", refuse),
        Err(HandlerError::Refused)
    );
    assert!(matches!(
        dead.release(&mut conn, "evt-2", &ops("too early")),
        Err(AdminError::InvalidTransition {
            state: DeadLetterState::Retrying,
            ..
        })
    ));
    assert!(matches!(
        dead.release(&mut conn, "nope", &ops("why")),
        Err(AdminError::DeadLetterNotFound { .. })
    ));
    let history = dead.show(&mut conn, "evt-1").unwrap().history;
    let released = history
        .iter()
        .filter(|h| h.kind == HistoryKind::Released)
        .count();
    assert_eq!(released, 1, "a refused release writes no history");
}

pub fn a_released_event_that_fails_max_attempts_again_is_dead_lettered_again<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = dead_lettered(&mut conn, "evt-1", 2);
    let dead = inbox.dead_letters();
    dead.release(&mut conn, "evt-1", &ops("retry upstream"))
        .unwrap();

    assert_eq!(
        inbox.process(&mut conn, "evt-1", refuse),
        Err(HandlerError::Refused),
        "the first failure after the release is attempt 1 of 2"
    );
    assert_eq!(
        dead.show(&mut conn, "evt-1").unwrap().state,
        DeadLetterState::Retrying,
        "failing again, as before it was dead-lettered"
    );
    let second = inbox.process(&mut conn, "evt-1", refuse).unwrap();
    assert!(second.is_dead_lettered(), "{second:?}");

    let record = dead.show(&mut conn, "evt-1").unwrap();
    assert_eq!(
        (record.state, record.attempts),
        (DeadLetterState::DeadLettered, 2)
    );
    let later = inbox.process(&mut conn, "evt-1", effect("evt-1")).unwrap();
    assert!(later.is_dead_lettered(), "held back again: {later:?}");
    assert_eq!(conn.effect_count(), 0);
    assert_eq!(dead.list(&mut conn, None, 100).unwrap().len(), 1);
}

pub fn the_doctor_passes_a_healthy_database<B: Backend>() {
    let (_db, mut conn) = setup::<B>();

    let checks = doctor::check(&mut conn).unwrap();

    let names: Vec<&str> = checks.iter().map(|c| c.name).collect();
    assert!(names.contains(&"schema"), "{names:?}");
    assert!(
        names.contains(&"index diesel_inbox_events_settled"),
        "{names:?}"
    );
    assert!(
        names.contains(&"index diesel_inbox_failures_state"),
        "{names:?}"
    );
    assert!(checks.len() > 3, "backend checks too: {names:?}");
    for check in &checks {
        // The test connections are set up as the inbox expects (SQLite: SqliteSetup).
        assert_eq!(check.status, CheckStatus::Ok, "{check:?}");
    }
}

pub fn the_doctor_fails_a_database_missing_an_index_or_a_migration<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    conn.batch_execute(B::DROP_SETTLED_INDEX).unwrap();

    let checks = doctor::check(&mut conn).unwrap();
    let status = |name: &str| checks.iter().find(|c| c.name == name).unwrap().status;
    assert_eq!(
        status("index diesel_inbox_events_settled"),
        CheckStatus::Fail
    );
    assert_eq!(status("index diesel_inbox_failures_state"), CheckStatus::Ok);
    assert_eq!(status("schema"), CheckStatus::Ok);

    conn.batch_execute("DELETE FROM diesel_inbox_migrations WHERE version = '20000101000003'")
        .unwrap();
    let checks = doctor::check(&mut conn).unwrap();
    let schema = checks.iter().find(|c| c.name == "schema").unwrap();
    assert_eq!(schema.status, CheckStatus::Fail, "{schema:?}");
    assert!(schema.detail.contains("20000101000003"), "{schema:?}");

    conn.batch_execute("DROP TABLE diesel_inbox_migrations; DROP TABLE diesel_inbox_counters")
        .unwrap();
    let checks = doctor::check(&mut conn).unwrap();
    let schema = checks.iter().find(|c| c.name == "schema").unwrap();
    assert_eq!(schema.status, CheckStatus::Warn, "{schema:?}");
    let counters = checks
        .iter()
        .find(|c| c.name == "table diesel_inbox_counters")
        .unwrap();
    assert_eq!(counters.status, CheckStatus::Fail, "{counters:?}");
    assert!(
        counters
            .detail
            .contains("CREATE TABLE IF NOT EXISTS diesel_inbox_counters"),
        "{counters:?}"
    );
}

pub fn the_doctor_catches_every_dropped_index_and_its_remedy_restores_it<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let all_ok = |conn: &mut B::Conn| {
        for check in doctor::check(conn).unwrap() {
            assert_eq!(check.status, CheckStatus::Ok, "{check:?}");
        }
    };
    all_ok(&mut conn);
    let indexes: Vec<(String, String)> = doctor::check(&mut conn)
        .unwrap()
        .iter()
        .filter_map(|c| c.name.strip_prefix("index ").map(str::to_owned))
        .map(|index| {
            let table = index_table(&index);
            (index, table)
        })
        .collect();
    assert!(
        indexes
            .iter()
            .any(|(i, _)| i == "diesel_inbox_failure_log_event"),
        "{indexes:?}"
    );
    let mut caught = 0;
    for (index, table) in &indexes {
        // SQLite cannot drop a unique constraint's index.
        if B::SINGLE_WRITER && index == "diesel_inbox_outbox_event" {
            continue;
        }
        B::drop_index(&mut conn, table, index);
        let checks = doctor::check(&mut conn).unwrap();
        let failed: Vec<_> = checks
            .iter()
            .filter(|c| c.status == CheckStatus::Fail)
            .collect();
        assert_eq!(failed.len(), 1, "{index}: {failed:?}");
        assert_eq!(failed[0].name, format!("index {index}"));
        let remedy = failed[0].remedy.clone().expect("a remedy");
        assert!(failed[0].detail.contains(&remedy), "{:?}", failed[0]);
        conn.batch_execute(&remedy).unwrap();
        all_ok(&mut conn);
        caught += 1;
    }
    println!(
        "dropped {caught} of {} indexes one at a time: each caught and restored",
        indexes.len()
    );
}

/// The table an index of the inbox is on, as its name says.
fn index_table(index: &str) -> String {
    let tables = [
        "diesel_inbox_failure_log",
        "diesel_inbox_failures",
        "diesel_inbox_events",
        "diesel_inbox_gaps",
        "diesel_inbox_claims",
        "diesel_inbox_outbox_aggregates",
        "diesel_inbox_outbox",
    ];
    tables
        .iter()
        .find(|t| index.starts_with(*t))
        .unwrap_or_else(|| panic!("no table for {index}"))
        .to_string()
}

pub fn the_doctor_names_the_sql_for_a_missing_column_or_table_and_it_restores_them<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    // A missing column (SQLite drops columns since 3.35).
    conn.batch_execute("ALTER TABLE diesel_inbox_events DROP COLUMN result")
        .unwrap();
    let checks = doctor::check(&mut conn).unwrap();
    let table = checks
        .iter()
        .find(|c| c.name == "table diesel_inbox_events")
        .unwrap();
    assert_eq!(table.status, CheckStatus::Fail, "{table:?}");
    assert!(table.detail.contains("result"), "{table:?}");
    conn.batch_execute(table.remedy.as_deref().unwrap())
        .unwrap();

    // A missing table, with its index.
    conn.batch_execute("DROP TABLE diesel_inbox_failure_log")
        .unwrap();
    let checks = doctor::check(&mut conn).unwrap();
    let failed: Vec<_> = checks
        .iter()
        .filter(|c| c.status == CheckStatus::Fail)
        .collect();
    let names: Vec<&str> = failed.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "table diesel_inbox_failure_log",
            "index diesel_inbox_failure_log_event"
        ],
        "{failed:?}"
    );
    for check in failed {
        conn.batch_execute(check.remedy.as_deref().unwrap())
            .unwrap();
    }
    for check in doctor::check(&mut conn).unwrap() {
        assert_eq!(check.status, CheckStatus::Ok, "{check:?}");
    }
}
