//! A transaction the server ends under the handler (a deadlock; on a Galera node, a
//! brute-force abort): whatever the handler runs after that takes no effect outside the
//! inbox's transaction. Run on the backends with a server; SQLite's writers queue on one lock
//! and do not deadlock.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_inbox::with_inbox;

use crate::support::{setup, ServerBackend, TestConn};

/// The handler's first run deadlocks with another transaction, loses, swallows the error and
/// goes on to write its effect. On MySQL/MariaDB the deadlock ended the transaction, so that
/// write would autocommit on its own, and the retry would write it again; on PostgreSQL it
/// aborted the transaction, so the write fails. Either way one effect is written, once the
/// event is settled, and the session autocommits again afterwards.
pub(crate) fn a_handler_that_swallows_a_deadlock_and_goes_on_takes_effect_once<B: ServerBackend>() {
    let (db, mut conn) = setup::<B>();
    let rows: Vec<String> = (1..=50).map(|id| format!("({id}, 0)")).collect();
    conn.batch_execute(&format!(
        "CREATE TABLE contended (id INT PRIMARY KEY, n INT NOT NULL); \
         INSERT INTO contended (id, n) VALUES {}",
        rows.join(", ")
    ))
    .unwrap();
    let (holds_row_1, row_1_held) = mpsc::channel();
    let (holds_row_2, row_2_held) = mpsc::channel();
    let mut other = db.connect();
    let other = thread::spawn(move || {
        row_1_held.recv().unwrap();
        other.transaction(|other| {
            // Heavier than the handler's transaction, so that MySQL's deadlock detector rolls
            // the handler's back; PostgreSQL's ends the waiter that checks first, which is the
            // handler, waiting the longer.
            other.batch_execute("UPDATE contended SET n = n + 1 WHERE id >= 2")?;
            holds_row_2.send(()).unwrap();
            thread::sleep(Duration::from_millis(500));
            other.batch_execute("UPDATE contended SET n = n + 1 WHERE id = 1")
        })
    });

    let mut runs = 0;
    let mut swallowed = None;
    let mut answers = Vec::new();
    for _ in 0..3 {
        let answer = with_inbox(&mut conn, "evt-1", |tx| {
            runs += 1;
            if runs == 1 {
                tx.batch_execute("UPDATE contended SET n = n + 1 WHERE id = 1")?;
                holds_row_1.send(()).unwrap();
                row_2_held.recv().unwrap();
                swallowed = tx
                    .batch_execute("UPDATE contended SET n = n + 1 WHERE id = 2")
                    .err()
                    .map(|error| error.to_string());
            }
            // Goes on, whatever happened: a handler that ignores its errors.
            let _ = tx.record_effect("evt-1");
            QueryResult::Ok(())
        });
        answers.push(format!("{answer:?}"));
        if answer.is_ok_and(|outcome| outcome.is_processed()) {
            break;
        }
    }
    other.join().unwrap().unwrap();

    let swallowed = swallowed.expect("the handler lost the deadlock");
    assert!(swallowed.contains("eadlock"), "{swallowed}");
    let mut fresh = db.connect();
    assert_eq!(
        (fresh.effect_count(), fresh.inbox_rows()),
        (1, 1),
        "runs {runs}, answers {answers:?}"
    );
    assert!(answers.last().unwrap().contains("Processed"), "{answers:?}");
    // The session autocommits as before: a write outside any transaction is seen at once.
    conn.record_effect("after").unwrap();
    assert_eq!(
        fresh.effects_of("after"),
        1,
        "the inbox left the session without autocommit"
    );
}
