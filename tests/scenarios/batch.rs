//! Batches: one statement records them all, effects for the new ones, one commit.

use std::panic::{self, AssertUnwindSafe};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_inbox::{DeadLetterState, Delivery, Error, Inbox, Outcome};

use super::{effect, HandlerError};
use crate::support::{concurrently, setup, transaction_depth, Backend, StatementLog, TestConn};

fn batch_effect<C: TestConn>(tx: &mut C, delivery: &Delivery) -> QueryResult<()> {
    tx.record_effect(delivery.id().as_str())
}

pub fn a_batch_runs_new_ids_once_and_reports_duplicates_in_order<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::default();
    assert!(inbox
        .process(&mut conn, "b", effect("b"))
        .unwrap()
        .is_processed());

    let results = inbox
        .process_batch(&mut conn, ["a", "b", "c", "a"], batch_effect)
        .unwrap();

    let outcomes: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    assert!(outcomes[0].is_processed() && outcomes[2].is_processed());
    assert_eq!(
        outcomes[1]
            .duplicate()
            .and_then(diesel_inbox::Duplicate::deliveries),
        Some(2)
    );
    assert_eq!(
        outcomes[3]
            .duplicate()
            .and_then(diesel_inbox::Duplicate::deliveries),
        Some(2)
    );
    assert_eq!((conn.effect_count(), conn.inbox_rows()), (3, 3));
}

pub fn a_failing_event_in_a_batch_loses_and_doubles_nothing<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::default();

    let results = inbox
        .process_batch(&mut conn, ["a", "bad", "c", ""], |tx, delivery| {
            tx.record_effect(delivery.id().as_str()).unwrap();
            if delivery.id().as_str() == "bad" {
                return Err(HandlerError::Refused);
            }
            Ok(())
        })
        .unwrap();

    assert_eq!(results[0], Ok(Outcome::Processed(())));
    assert_eq!(results[1], Err(HandlerError::Refused));
    assert_eq!(results[2], Ok(Outcome::Processed(())));
    assert!(
        matches!(results[3], Err(HandlerError::Inbox(_))),
        "the empty id alone is rejected"
    );
    assert_eq!((conn.effect_count(), conn.inbox_rows()), (2, 2));
    assert_eq!(
        inbox
            .dead_letters()
            .show(&mut conn, "bad")
            .unwrap()
            .attempts,
        1
    );
    assert!(inbox
        .process(&mut conn, "bad", effect("bad"))
        .unwrap()
        .is_processed());
    assert_eq!(conn.effect_count(), 3);
}

pub fn a_batch_dead_letters_an_event_at_max_attempts<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::default().max_attempts(1);

    let results = inbox
        .process_batch(&mut conn, ["ok", "poison"], |tx, delivery| {
            if delivery.id().as_str() == "poison" {
                return Err(Error::Database(diesel::result::Error::NotFound));
            }
            tx.record_effect("ok").map_err(Error::from)
        })
        .unwrap();

    assert!(results[0].as_ref().is_ok_and(Outcome::is_processed));
    assert!(results[1].as_ref().is_ok_and(Outcome::is_dead_lettered));
    let record = inbox.dead_letters().show(&mut conn, "poison").unwrap();
    assert_eq!(record.state, DeadLetterState::DeadLettered);
}

pub fn a_panic_in_a_batch_rolls_back_the_whole_batch<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::default();

    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        let _ = inbox.process_batch(&mut conn, ["a", "boom", "c"], |tx, delivery| {
            assert_ne!(delivery.id().as_str(), "boom", "handler bug");
            tx.record_effect(delivery.id().as_str())
        });
    }));

    assert!(caught.is_err(), "the panic continues");
    assert_eq!(transaction_depth(&mut conn), 0);
    assert_eq!((conn.effect_count(), conn.inbox_rows()), (0, 0));
    assert_eq!(
        inbox
            .dead_letters()
            .show(&mut conn, "boom")
            .unwrap()
            .attempts,
        1
    );
}

pub fn concurrent_overlapping_batches_take_effect_once_per_id<B: Backend>() {
    const THREADS: usize = 4;
    const IDS: usize = 60;
    let (db, mut conn) = setup::<B>();

    let processed: usize = concurrently(&db, THREADS, |t, conn| {
        let mut ids: Vec<String> = (0..IDS).map(|i| format!("evt-{i}")).collect();
        fastrand::Rng::with_seed(t as u64).shuffle(&mut ids);
        let mut processed = 0;
        for batch in ids.chunks(15) {
            let results = Inbox::default()
                .process_batch(conn, batch, batch_effect)
                .unwrap_or_else(|e| panic!("batch failed: {e}"));
            for result in results {
                processed += usize::from(result.expect("no delivery may fail").is_processed());
            }
        }
        processed
    })
    .into_iter()
    .sum();
    assert_eq!(processed, IDS);
    assert_eq!((conn.effect_count(), conn.inbox_rows()), (IDS, IDS));
    assert_eq!(conn.total_deliveries(), THREADS * IDS);
}

pub fn a_swallowed_statement_error_in_a_batch_spoils_only_its_own_event<B: Backend>() {
    // The effect writes, and for "sloppy" swallows a failed statement. Last in the batch, so
    // that no later statement of the effect trips over an aborted transaction: only the
    // inbox's own statements after it, and its commit, can see it.
    fn sloppy<C: TestConn>(tx: &mut C, id: &str) -> Result<(), Error> {
        tx.record_effect(id)?;
        if id == "sloppy" {
            let _ignored = tx.batch_execute("INSERT INTO no_such_table VALUES (1)");
        }
        Ok(())
    }
    let ids = ["a", "c", "sloppy"];
    for bulk in [false, true] {
        let (_db, mut conn) = setup::<B>();
        let inbox = Inbox::default();
        let results = if bulk {
            inbox.process_bulk(&mut conn, ids, |tx, new| {
                new.iter().try_for_each(|d| sloppy(tx, d.id().as_str()))
            })
        } else {
            inbox.process_batch(&mut conn, ids, |tx, d| sloppy(tx, d.id().as_str()))
        }
        .unwrap();

        assert!(results[0].as_ref().is_ok_and(Outcome::is_processed));
        assert!(results[1].as_ref().is_ok_and(Outcome::is_processed));
        if B::FAILED_STATEMENT_ABORTS_TRANSACTION {
            // The rerun, one event a savepoint, pins it on its event.
            assert!(
                matches!(results[2], Err(Error::TransactionAborted { .. })),
                "bulk {bulk}: {:?}",
                results[2]
            );
            assert_eq!((conn.effect_count(), conn.inbox_rows()), (2, 2));
        } else {
            assert!(results[2].as_ref().is_ok_and(Outcome::is_processed));
            assert_eq!((conn.effect_count(), conn.inbox_rows()), (3, 3));
        }
        assert_eq!(transaction_depth(&mut conn), 0);
    }
}

pub fn an_effect_that_ends_the_transaction_stops_the_batch_before_anything_commits<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::default().retry(diesel_inbox::RetryPolicy::none());

    // What a deadlock does on MySQL, or an I/O error on SQLite: the database ends the whole
    // transaction, and whatever ran next would autocommit.
    let result = inbox.process_batch(&mut conn, ["e1", "poison", "e2"], |tx, delivery| {
        let id = delivery.id().as_str();
        tx.record_effect(id)?;
        if id == "poison" {
            tx.batch_execute("ROLLBACK")?;
        }
        QueryResult::Ok(())
    });

    assert!(result.is_err(), "{result:?}");
    assert_eq!(transaction_depth(&mut conn), 0);
    assert_eq!(
        (conn.effect_count(), conn.inbox_rows()),
        (0, 0),
        "nothing may commit"
    );
}

/// The ids of `new`, as a bulk effect receives them.
fn ids<'a>(new: &[&'a Delivery]) -> Vec<&'a str> {
    new.iter().map(|d| d.id().as_str()).collect()
}

pub fn a_bulk_effect_receives_the_new_deliveries_once_in_one_call<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::default();
    assert!(inbox
        .process(&mut conn, "b", effect("b"))
        .unwrap()
        .is_processed());
    let mut calls: Vec<Vec<String>> = Vec::new();
    let log = StatementLog::install(&mut conn);

    let results = inbox
        .process_bulk(&mut conn, ["a", "b", "c", "a", ""], |tx, new| {
            calls.push(ids(new).into_iter().map(str::to_owned).collect());
            tx.record_effects(&ids(new)).map_err(Error::from)
        })
        .unwrap();

    assert_eq!(calls, [["a", "c"]], "one call, with the new ids in order");
    let effect_statements = log
        .take()
        .iter()
        .filter(|sql| sql.contains("INSERT INTO") && sql.contains("effects"))
        .count();
    assert_eq!(
        effect_statements, 1,
        "the effect wrote them in one statement"
    );
    assert!(results[0].as_ref().is_ok_and(Outcome::is_processed));
    assert!(results[1].as_ref().is_ok_and(Outcome::is_duplicate));
    assert!(results[2].as_ref().is_ok_and(Outcome::is_processed));
    assert!(results[3].as_ref().is_ok_and(Outcome::is_duplicate));
    assert!(
        matches!(results[4], Err(Error::InvalidEventId(_))),
        "{:?}",
        results[4]
    );
    assert_eq!((conn.effect_count(), conn.inbox_rows()), (3, 3));

    calls.clear();
    let again = inbox
        .process_bulk(&mut conn, ["a", "c"], |_, new| {
            calls.push(ids(new).into_iter().map(str::to_owned).collect());
            Ok::<_, Error>(())
        })
        .unwrap();
    assert!(again
        .iter()
        .all(|r| r.as_ref().is_ok_and(Outcome::is_duplicate)));
    assert!(calls.is_empty(), "no new delivery, no call: {calls:?}");
}

pub fn a_failing_bulk_effect_runs_again_event_by_event_and_only_the_failing_one_rolls_back<
    B: Backend,
>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::default();
    let mut calls: Vec<Vec<String>> = Vec::new();

    let results = inbox
        .process_bulk(&mut conn, ["a", "bad", "c"], |tx, new| {
            calls.push(ids(new).into_iter().map(str::to_owned).collect());
            tx.record_effects(&ids(new)).unwrap();
            if ids(new).contains(&"bad") {
                return Err(HandlerError::Refused);
            }
            Ok(())
        })
        .unwrap();

    assert_eq!(
        calls,
        [vec!["a", "bad", "c"], vec!["a"], vec!["bad"], vec!["c"]],
        "all at once, then one by one in savepoints"
    );
    assert_eq!(results[0], Ok(Outcome::Processed(())));
    assert_eq!(results[1], Err(HandlerError::Refused));
    assert_eq!(results[2], Ok(Outcome::Processed(())));
    assert_eq!((conn.effect_count(), conn.inbox_rows()), (2, 2));
    assert_eq!(conn.effects_of("bad"), 0);
    assert_eq!(
        inbox
            .dead_letters()
            .show(&mut conn, "bad")
            .unwrap()
            .attempts,
        1
    );
}

pub fn a_poison_event_panicking_in_a_bulk_effect_is_dead_lettered_and_the_batch_gets_past_it<
    B: Backend,
>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::default().max_attempts(2);
    let decode_all = |tx: &mut B::Conn, new: &[&Delivery]| {
        for id in ids(new) {
            assert_ne!(id, "poison", "cannot decode the poison event");
            tx.record_effect(id)?;
        }
        Ok::<_, Error>(())
    };

    for _ in 0..2 {
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            let _ = inbox.process_bulk(&mut conn, ["a", "poison"], decode_all);
        }));
        assert!(caught.is_err(), "the panic continues");
        assert_eq!(transaction_depth(&mut conn), 0);
        assert_eq!(conn.effect_count(), 0, "the whole batch rolled back");
    }
    let results = inbox
        .process_bulk(&mut conn, ["a", "poison"], decode_all)
        .unwrap();

    assert!(results[0].as_ref().is_ok_and(Outcome::is_processed));
    assert!(results[1].as_ref().is_ok_and(Outcome::is_dead_lettered));
    let record = inbox.dead_letters().show(&mut conn, "poison").unwrap();
    assert_eq!(
        (record.state, record.attempts),
        (DeadLetterState::DeadLettered, 2)
    );
    assert_eq!((conn.effect_count(), conn.effects_of("a")), (1, 1));
}
