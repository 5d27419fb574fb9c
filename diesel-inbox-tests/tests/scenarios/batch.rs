//! Batches: one statement records them all, effects for the new ones, one commit.

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;

use diesel::prelude::*;
use diesel_inbox::{dead_letter::DeadLetterState, Delivery, Error, Inbox, Outcome};
use futures_util::FutureExt;

use super::{writes, HandlerError};
use crate::support::{
    concurrently, setup, setup_flavour, Backend, Flavour, PerDelivery, TestConn, Tx,
};

fn batch_effect<C: TestConn>(tx: &mut C, delivery: &Delivery) -> QueryResult<()> {
    tx.record_effect(delivery.id().as_str())
}

/// [`batch_effect`] for a scenario written once over both flavours.
fn each_writes<F: Flavour>() -> impl PerDelivery<F, (), diesel::result::Error> {
    async |tx: &mut F::Conn, delivery: &Delivery| tx.write_effect(delivery.id().as_str()).await
}

/// The ids each call of a bulk effect received, in order.
#[derive(Default)]
struct Calls(Mutex<Vec<Vec<String>>>);

impl Calls {
    fn push(&self, new: &[&Delivery]) {
        let ids = ids(new).into_iter().map(str::to_owned).collect();
        self.0.lock().unwrap().push(ids);
    }

    fn take(&self) -> Vec<Vec<String>> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

pub async fn a_batch_runs_new_ids_once_and_reports_duplicates_in_order<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::default();
    let first = F::process(&inbox, &mut conn, "b", writes("b")).await;
    assert!(first.unwrap().is_processed());

    let results = F::process_batch(
        &inbox,
        &mut conn,
        vec!["a", "b", "c", "a"],
        each_writes::<F>(),
    )
    .await
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
    assert_eq!((check.effect_count(), check.inbox_rows()), (3, 3));
}

pub async fn a_failing_event_in_a_batch_loses_and_doubles_nothing<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::default();
    let refuse_bad = async |tx: &mut F::Conn, delivery: &Delivery| {
        tx.write_effect(delivery.id().as_str()).await.unwrap();
        if delivery.id().as_str() == "bad" {
            return Err(HandlerError::Refused);
        }
        Ok(())
    };

    let results = F::process_batch(&inbox, &mut conn, vec!["a", "bad", "c", ""], refuse_bad)
        .await
        .unwrap();

    assert_eq!(results[0], Ok(Outcome::Processed(())));
    assert_eq!(results[1], Err(HandlerError::Refused));
    assert_eq!(results[2], Ok(Outcome::Processed(())));
    assert!(
        matches!(results[3], Err(HandlerError::Inbox(_))),
        "the empty id alone is rejected"
    );
    assert_eq!((check.effect_count(), check.inbox_rows()), (2, 2));
    let record = F::show(&inbox, &mut conn, "bad").await.unwrap();
    assert_eq!(record.attempts, 1);
    let redelivered = F::process(&inbox, &mut conn, "bad", writes("bad")).await;
    assert!(redelivered.unwrap().is_processed());
    assert_eq!(check.effect_count(), 3);
}

pub async fn a_batch_dead_letters_an_event_at_max_attempts<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::default().max_attempts(1);
    let poisoned = async |tx: &mut F::Conn, delivery: &Delivery| {
        if delivery.id().as_str() == "poison" {
            return Err(Error::Database(diesel::result::Error::NotFound));
        }
        tx.write_effect("ok").await.map_err(Error::from)
    };

    let results = F::process_batch(&inbox, &mut conn, vec!["ok", "poison"], poisoned)
        .await
        .unwrap();

    assert!(results[0].as_ref().is_ok_and(Outcome::is_processed));
    assert!(results[1].as_ref().is_ok_and(Outcome::is_dead_lettered));
    let record = F::show(&inbox, &mut conn, "poison").await.unwrap();
    assert_eq!(record.state, DeadLetterState::DeadLettered);
}

pub async fn a_panic_in_a_batch_rolls_back_the_whole_batch<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::default();
    let buggy = async |tx: &mut F::Conn, delivery: &Delivery| {
        assert_ne!(delivery.id().as_str(), "boom", "handler bug");
        tx.write_effect(delivery.id().as_str()).await
    };

    let batch = F::process_batch(&inbox, &mut conn, vec!["a", "boom", "c"], buggy);
    let caught = AssertUnwindSafe(batch).catch_unwind().await;

    assert!(caught.is_err(), "the panic continues");
    assert_eq!(F::depth(&mut conn), 0);
    assert_eq!((check.effect_count(), check.inbox_rows()), (0, 0));
    let record = F::show(&inbox, &mut conn, "boom").await.unwrap();
    assert_eq!(record.attempts, 1);
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

pub async fn a_swallowed_statement_error_in_a_batch_spoils_only_its_own_event<F: Flavour>() {
    // The effect writes, and for "sloppy" swallows a failed statement. Last in the batch, so
    // that no later statement of the effect trips over an aborted transaction: only the
    // inbox's own statements after it, and its commit, can see it.
    async fn sloppy<C: Tx>(tx: &mut C, id: &str) -> Result<(), Error> {
        tx.write_effect(id).await?;
        if id == "sloppy" {
            let _ignored = tx.execute("INSERT INTO no_such_table VALUES (1)").await;
        }
        Ok(())
    }
    let ids = vec!["a", "c", "sloppy"];
    for bulk in [false, true] {
        let (_db, mut check, mut conn) = setup_flavour::<F>().await;
        let inbox = Inbox::default();
        let results = if bulk {
            let all = async |tx: &mut F::Conn, new: &[&Delivery]| {
                for delivery in new {
                    sloppy(tx, delivery.id().as_str()).await?;
                }
                Ok(())
            };
            F::process_bulk(&inbox, &mut conn, ids.clone(), all).await
        } else {
            let each = async |tx: &mut F::Conn, d: &Delivery| sloppy(tx, d.id().as_str()).await;
            F::process_batch(&inbox, &mut conn, ids.clone(), each).await
        }
        .unwrap();

        assert!(results[0].as_ref().is_ok_and(Outcome::is_processed));
        assert!(results[1].as_ref().is_ok_and(Outcome::is_processed));
        if <F::Backend as Backend>::FAILED_STATEMENT_ABORTS_TRANSACTION {
            // The rerun, one event a savepoint, pins it on its event.
            assert!(
                matches!(results[2], Err(Error::TransactionAborted { .. })),
                "bulk {bulk}: {:?}",
                results[2]
            );
            assert_eq!((check.effect_count(), check.inbox_rows()), (2, 2));
        } else {
            assert!(results[2].as_ref().is_ok_and(Outcome::is_processed));
            assert_eq!((check.effect_count(), check.inbox_rows()), (3, 3));
        }
        assert_eq!(F::depth(&mut conn), 0);
    }
}

pub async fn an_effect_that_ends_the_transaction_stops_the_batch_before_anything_commits<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::default().retry(diesel_inbox::RetryPolicy::none());

    // What a deadlock does on MySQL, or an I/O error on SQLite: the database ends the whole
    // transaction, and whatever ran next would autocommit.
    let ending = async |tx: &mut F::Conn, delivery: &Delivery| {
        let id = delivery.id().as_str();
        tx.write_effect(id).await?;
        if id == "poison" {
            tx.execute("ROLLBACK").await?;
        }
        QueryResult::Ok(())
    };
    let result = F::process_batch(&inbox, &mut conn, vec!["e1", "poison", "e2"], ending).await;

    assert!(result.is_err(), "{result:?}");
    assert_eq!(F::depth(&mut conn), 0);
    assert_eq!(
        (check.effect_count(), check.inbox_rows()),
        (0, 0),
        "nothing may commit"
    );
}

/// The ids of `new`, as a bulk effect receives them.
fn ids<'a>(new: &[&'a Delivery]) -> Vec<&'a str> {
    new.iter().map(|d| d.id().as_str()).collect()
}

pub async fn a_bulk_effect_receives_the_new_deliveries_once_in_one_call<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::default();
    let first = F::process(&inbox, &mut conn, "b", writes("b")).await;
    assert!(first.unwrap().is_processed());
    let calls = Calls::default();
    let log = F::log(&mut conn);

    let all = async |tx: &mut F::Conn, new: &[&Delivery]| {
        calls.push(new);
        tx.write_effects(&ids(new)).await.map_err(Error::from)
    };
    let results = F::process_bulk(&inbox, &mut conn, vec!["a", "b", "c", "a", ""], all)
        .await
        .unwrap();

    assert_eq!(
        calls.take(),
        [["a", "c"]],
        "one call, with the new ids in order"
    );
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
    assert_eq!((check.effect_count(), check.inbox_rows()), (3, 3));

    let none = async |_: &mut F::Conn, new: &[&Delivery]| {
        calls.push(new);
        Ok::<_, Error>(())
    };
    let again = F::process_bulk(&inbox, &mut conn, vec!["a", "c"], none)
        .await
        .unwrap();
    assert!(again
        .iter()
        .all(|r| r.as_ref().is_ok_and(Outcome::is_duplicate)));
    let calls = calls.take();
    assert!(calls.is_empty(), "no new delivery, no call: {calls:?}");
}

pub async fn a_failing_bulk_effect_runs_again_event_by_event_and_only_the_failing_one_rolls_back<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::default();
    let calls = Calls::default();

    let all = async |tx: &mut F::Conn, new: &[&Delivery]| {
        calls.push(new);
        tx.write_effects(&ids(new)).await.unwrap();
        if ids(new).contains(&"bad") {
            return Err(HandlerError::Refused);
        }
        Ok(())
    };
    let results = F::process_bulk(&inbox, &mut conn, vec!["a", "bad", "c"], all)
        .await
        .unwrap();

    assert_eq!(
        calls.take(),
        [vec!["a", "bad", "c"], vec!["a"], vec!["bad"], vec!["c"]],
        "all at once, then one by one in savepoints"
    );
    assert_eq!(results[0], Ok(Outcome::Processed(())));
    assert_eq!(results[1], Err(HandlerError::Refused));
    assert_eq!(results[2], Ok(Outcome::Processed(())));
    assert_eq!((check.effect_count(), check.inbox_rows()), (2, 2));
    assert_eq!(check.effects_of("bad"), 0);
    let record = F::show(&inbox, &mut conn, "bad").await.unwrap();
    assert_eq!(record.attempts, 1);
}

pub async fn a_poison_event_panicking_in_a_bulk_effect_is_dead_lettered_and_the_batch_gets_past_it<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::default().max_attempts(2);
    let decode_all = async |tx: &mut F::Conn, new: &[&Delivery]| {
        for id in ids(new) {
            assert_ne!(id, "poison", "cannot decode the poison event");
            tx.write_effect(id).await?;
        }
        Ok::<_, Error>(())
    };

    for _ in 0..2 {
        let batch = F::process_bulk(&inbox, &mut conn, vec!["a", "poison"], decode_all);
        let caught = AssertUnwindSafe(batch).catch_unwind().await;
        assert!(caught.is_err(), "the panic continues");
        assert_eq!(F::depth(&mut conn), 0);
        assert_eq!(check.effect_count(), 0, "the whole batch rolled back");
    }
    let results = F::process_bulk(&inbox, &mut conn, vec!["a", "poison"], decode_all)
        .await
        .unwrap();

    assert!(results[0].as_ref().is_ok_and(Outcome::is_processed));
    assert!(results[1].as_ref().is_ok_and(Outcome::is_dead_lettered));
    let record = F::show(&inbox, &mut conn, "poison").await.unwrap();
    assert_eq!(
        (record.state, record.attempts),
        (DeadLetterState::DeadLettered, 2)
    );
    assert_eq!((check.effect_count(), check.effects_of("a")), (1, 1));
}
