//! Operating the inbox: releasing dead letters to be published again, and the doctor's checks.

use diesel::connection::SimpleConnection;
use diesel_inbox::doctor::{Check, CheckStatus};
use diesel_inbox::AdminError;
use diesel_inbox::{
    dead_letter::{DeadLetterState, HistoryKind},
    Audit, Inbox, Outcome,
};

use super::{refuse, writes, HandlerError};
use crate::support::{setup_flavour, Backend, Flavour, TestConn};

fn ops(reason: &str) -> Audit {
    Audit::new("ops", reason).unwrap()
}

/// An inbox that gives up after `max_attempts`, and `event_id` dead-lettered by it.
async fn dead_lettered<F: Flavour>(conn: &mut F::Conn, event_id: &str, max_attempts: u32) -> Inbox {
    let inbox = Inbox::new("orders").unwrap().max_attempts(max_attempts);
    for _ in 1..max_attempts {
        let failed = F::process(&inbox, conn, event_id, refuse::<F>()).await;
        assert_eq!(failed, Err(HandlerError::Refused));
    }
    let last = F::process(&inbox, conn, event_id, refuse::<F>()).await;
    let last = last.unwrap();
    assert!(last.is_dead_lettered(), "{last:?}");
    inbox
}

pub async fn a_released_dead_letter_runs_once_on_its_next_delivery<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = dead_lettered::<F>(&mut conn, "evt-1", 2).await;

    let fixed = ops("re-published after the fix");
    F::release(&inbox, &mut conn, "evt-1", &fixed)
        .await
        .unwrap();

    let record = F::show(&inbox, &mut conn, "evt-1").await.unwrap();
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
    let listed = F::list(&inbox, &mut conn, None, 100).await.unwrap();
    assert!(listed.is_empty());

    let next = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    assert_eq!(next.unwrap(), Outcome::Processed(()));
    let copy = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    let copy = copy.unwrap();
    assert!(copy.is_duplicate(), "{copy:?}");
    assert_eq!(check.effect_count(), 1);
}

pub async fn releasing_twice_or_a_retrying_event_is_an_invalid_transition<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let inbox = dead_lettered::<F>(&mut conn, "evt-1", 1).await;
    F::release(&inbox, &mut conn, "evt-1", &ops("first"))
        .await
        .unwrap();

    let again = F::release(&inbox, &mut conn, "evt-1", &ops("second")).await;
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
    let failed = F::process(&retrying, &mut conn, "evt-2", refuse::<F>()).await;
    assert_eq!(failed, Err(HandlerError::Refused));
    assert!(matches!(
        F::release(&inbox, &mut conn, "evt-2", &ops("too early")).await,
        Err(AdminError::InvalidTransition {
            state: DeadLetterState::Retrying,
            ..
        })
    ));
    assert!(matches!(
        F::release(&inbox, &mut conn, "nope", &ops("why")).await,
        Err(AdminError::DeadLetterNotFound { .. })
    ));
    let history = F::show(&inbox, &mut conn, "evt-1").await.unwrap().history;
    let released = history
        .iter()
        .filter(|h| h.kind == HistoryKind::Released)
        .count();
    assert_eq!(released, 1, "a refused release writes no history");
}

pub async fn a_released_event_that_fails_max_attempts_again_is_dead_lettered_again<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = dead_lettered::<F>(&mut conn, "evt-1", 2).await;
    F::release(&inbox, &mut conn, "evt-1", &ops("retry upstream"))
        .await
        .unwrap();

    assert_eq!(
        F::process(&inbox, &mut conn, "evt-1", refuse::<F>()).await,
        Err(HandlerError::Refused),
        "the first failure after the release is attempt 1 of 2"
    );
    assert_eq!(
        F::show(&inbox, &mut conn, "evt-1").await.unwrap().state,
        DeadLetterState::Retrying,
        "failing again, as before it was dead-lettered"
    );
    let second = F::process(&inbox, &mut conn, "evt-1", refuse::<F>()).await;
    let second = second.unwrap();
    assert!(second.is_dead_lettered(), "{second:?}");

    let record = F::show(&inbox, &mut conn, "evt-1").await.unwrap();
    assert_eq!(
        (record.state, record.attempts),
        (DeadLetterState::DeadLettered, 2)
    );
    let later = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    let later = later.unwrap();
    assert!(later.is_dead_lettered(), "held back again: {later:?}");
    assert_eq!(check.effect_count(), 0);
    let listed = F::list(&inbox, &mut conn, None, 100).await.unwrap();
    assert_eq!(listed.len(), 1);
}

pub async fn the_doctor_passes_a_healthy_database<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;

    let checks = F::doctor(&mut conn).await.unwrap();

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
    // The test connections are set up as the inbox expects (SQLite: SqliteSetup).
    assert_all_ok(&checks);
}

pub async fn the_doctor_fails_a_database_missing_an_index_or_a_migration<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    check
        .batch_execute(<F::Backend as Backend>::DROP_SETTLED_INDEX)
        .unwrap();

    let checks = F::doctor(&mut conn).await.unwrap();
    let status = |name: &str| checks.iter().find(|c| c.name == name).unwrap().status;
    assert_eq!(
        status("index diesel_inbox_events_settled"),
        CheckStatus::Fail
    );
    assert_eq!(status("index diesel_inbox_failures_state"), CheckStatus::Ok);
    assert_eq!(status("schema"), CheckStatus::Ok);

    check
        .batch_execute("DELETE FROM diesel_inbox_migrations WHERE version = '20000101000003'")
        .unwrap();
    let checks = F::doctor(&mut conn).await.unwrap();
    let schema = checks.iter().find(|c| c.name == "schema").unwrap();
    assert_eq!(schema.status, CheckStatus::Fail, "{schema:?}");
    assert!(schema.detail.contains("20000101000003"), "{schema:?}");

    check
        .batch_execute("DROP TABLE diesel_inbox_migrations; DROP TABLE diesel_inbox_counters")
        .unwrap();
    let checks = F::doctor(&mut conn).await.unwrap();
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

pub async fn the_doctor_catches_every_dropped_index_and_its_remedy_restores_it<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let checks = F::doctor(&mut conn).await.unwrap();
    assert_all_ok(&checks);
    let indexes: Vec<(String, String)> = checks
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
        if <F::Backend as Backend>::SINGLE_WRITER && index == "diesel_inbox_outbox_event" {
            continue;
        }
        <F::Backend as Backend>::drop_index(&mut check, table, index);
        let checks = F::doctor(&mut conn).await.unwrap();
        let failed: Vec<_> = checks
            .iter()
            .filter(|c| c.status == CheckStatus::Fail)
            .collect();
        assert_eq!(failed.len(), 1, "{index}: {failed:?}");
        assert_eq!(failed[0].name, format!("index {index}"));
        let remedy = failed[0].remedy.clone().expect("a remedy");
        assert!(failed[0].detail.contains(&remedy), "{:?}", failed[0]);
        check.batch_execute(&remedy).unwrap();
        assert_all_ok(&F::doctor(&mut conn).await.unwrap());
        caught += 1;
    }
    println!(
        "dropped {caught} of {} indexes one at a time: each caught and restored",
        indexes.len()
    );
}

/// Every check passed.
#[track_caller]
fn assert_all_ok(checks: &[Check]) {
    for check in checks {
        if !crate::support::SERVER_CHECKS.contains(&check.name) {
            assert_eq!(check.status, CheckStatus::Ok, "{check:?}");
        }
    }
}

/// The table an index of the inbox is on, as its name says.
fn index_table(index: &str) -> String {
    let tables = [
        "diesel_inbox_failure_log",
        "diesel_inbox_failures",
        "diesel_inbox_events",
        "diesel_inbox_gaps",
        "diesel_inbox_claims",
        "diesel_inbox_reorgs",
        "diesel_inbox_replay_transitions",
        "diesel_inbox_replays",
        "diesel_inbox_outbox_aggregates",
        "diesel_inbox_outbox",
    ];
    tables
        .iter()
        .find(|t| index.starts_with(*t))
        .unwrap_or_else(|| panic!("no table for {index}"))
        .to_string()
}

pub async fn the_doctor_names_the_sql_for_a_missing_column_or_table_and_it_restores_them<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    // A missing column (SQLite drops columns since 3.35).
    check
        .batch_execute("ALTER TABLE diesel_inbox_events DROP COLUMN result")
        .unwrap();
    let checks = F::doctor(&mut conn).await.unwrap();
    let table = checks
        .iter()
        .find(|c| c.name == "table diesel_inbox_events")
        .unwrap();
    assert_eq!(table.status, CheckStatus::Fail, "{table:?}");
    assert!(table.detail.contains("result"), "{table:?}");
    check
        .batch_execute(table.remedy.as_deref().unwrap())
        .unwrap();

    // A missing table, with its index.
    check
        .batch_execute("DROP TABLE diesel_inbox_failure_log")
        .unwrap();
    let checks = F::doctor(&mut conn).await.unwrap();
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
    for failed in failed {
        check
            .batch_execute(failed.remedy.as_deref().unwrap())
            .unwrap();
    }
    assert_all_ok(&F::doctor(&mut conn).await.unwrap());
}
