//! Sessions that die under the inbox: the errors must tell the truth. Run on the backends with
//! a server (PostgreSQL, MySQL/MariaDB); an embedded SQLite has no session to lose.

use std::sync::mpsc;
use std::time::Duration;

use diesel::connection::{Instrumentation, InstrumentationEvent, SimpleConnection};
use diesel::prelude::*;
use diesel_inbox::{with_inbox, Ack, Error, Inbox, RetryPolicy};

use crate::scenarios::{effect, HandlerError};
use crate::support::{setup, ServerBackend, TestConn, Wire};

pub(crate) fn a_handler_whose_session_dies_gets_its_own_error_back<B: ServerBackend>() {
    let (db, mut conn) = setup::<B>();
    let victim = B::session_id(&mut conn);
    let mut killer = db.connect();

    // Killed from another session, which rolls the transaction back on every server: a
    // Galera node commits it when a session kills itself inside it (MDEV-30307).
    let result = with_inbox(&mut conn, "evt-1", |tx| {
        tx.record_effect("evt-1").unwrap();
        B::kill_session(&mut killer, victim);
        Err::<(), _>(HandlerError::Refused)
    });

    assert_eq!(
        result,
        Err(HandlerError::Refused),
        "the handler's own error, unchanged"
    );
    let mut fresh = db.connect();
    assert_eq!((fresh.effect_count(), fresh.inbox_rows()), (0, 0));
    assert!(with_inbox(&mut fresh, "evt-1", effect("evt-1"))
        .unwrap()
        .is_processed());
}

pub(crate) fn a_handler_returning_the_dead_sessions_diesel_error_gets_that_error_back<
    B: ServerBackend,
>() {
    let (_db, mut conn) = setup::<B>();
    let mut seen_by_handler = None;

    let result = with_inbox(&mut conn, "evt-1", |tx| {
        let killed = tx.batch_execute(B::KILL_OWN_SESSION);
        seen_by_handler = killed.as_ref().err().map(ToString::to_string);
        killed
    });

    assert_eq!(Ack::of(&result), Ack::Redeliver);
    let error = result.expect_err("the session is gone");
    assert!(
        seen_by_handler.is_some(),
        "killing its own session failed the statement"
    );
    assert_eq!(Some(error.to_string()), seen_by_handler);
    assert!(
        Error::from_diesel(&error).is_none(),
        "not replaced by an inbox error: {error}"
    );
}

pub(crate) fn a_session_killed_before_commit_commits_nothing_and_asks_for_redelivery<
    B: ServerBackend,
>() {
    let (db, mut conn) = setup::<B>();
    let victim = B::session_id(&mut conn);
    let mut killer = db.connect();

    let result = with_inbox(&mut conn, "evt-1", |tx| {
        tx.record_effect("evt-1")?;
        B::kill_session(&mut killer, victim);
        QueryResult::Ok(())
    });

    assert_eq!(Ack::of(&result), Ack::Redeliver);
    let error = result.expect_err("the session died before COMMIT");
    // The check that the transaction is still open travels with the COMMIT, so a session
    // lost there may have committed, as far as the client can tell: unknown, and the
    // redelivery settles it.
    assert!(
        matches!(
            Error::from_diesel(&error),
            Some(Error::CommitUnknown { .. })
        ),
        "got {error:?}"
    );
    assert_eq!((killer.effect_count(), killer.inbox_rows()), (0, 0));
    assert!(with_inbox(&mut killer, "evt-1", effect("evt-1"))
        .unwrap()
        .is_processed());
    assert_eq!(killer.effect_count(), 1);
}

/// Kills the session of the connection it is installed on when that connection is about to
/// send its first COMMIT (the inbox sends it as a query of its own, so Diesel reports no
/// transaction event for it): the commit is then lost on the wire, as in a crash or failover.
struct KillAtCommit<B: ServerBackend + 'static> {
    killer: Option<B::Conn>,
    victim: i64,
}

impl<B: ServerBackend + 'static> Instrumentation for KillAtCommit<B> {
    fn on_connection_event(&mut self, event: InstrumentationEvent<'_>) {
        if let InstrumentationEvent::StartQuery { query, .. } = event {
            if query.to_string().contains("COMMIT") {
                if let Some(mut killer) = self.killer.take() {
                    B::kill_session(&mut killer, self.victim);
                }
            }
        }
    }
}

pub(crate) fn a_connection_lost_at_commit_is_an_unknown_outcome_that_redelivery_settles<
    B: ServerBackend + 'static,
>() {
    let (db, mut conn) = setup::<B>();
    let victim = B::session_id(&mut conn);
    conn.set_instrumentation(KillAtCommit::<B> {
        killer: Some(db.connect()),
        victim,
    });

    let result = with_inbox(&mut conn, "evt-1", effect("evt-1"));

    assert_eq!(Ack::of(&result), Ack::Redeliver, "the outcome is unknown");
    let error = result.expect_err("the connection died during COMMIT");
    match Error::from_diesel(&error) {
        Some(unknown @ Error::CommitUnknown { .. }) => {
            assert!(unknown.to_string().contains("unknown"), "{unknown}");
        }
        other => panic!("expected CommitUnknown, got {other:?} from {error:?}"),
    }
    // The session died before the server saw COMMIT: nothing applied, and the redelivery
    // runs the effect. Had it applied, the redelivery would be a duplicate; one effect either way.
    let mut fresh = db.connect();
    let redelivered = with_inbox(&mut fresh, "evt-1", effect("evt-1")).unwrap();
    assert!(redelivered.is_processed() || redelivered.is_duplicate());
    assert_eq!(fresh.effect_count(), 1);
}

/// Whether `error` is the inbox's word for a lost connection: nothing committed, or (at the
/// commit) not known.
fn is_lost_connection(error: &diesel::result::Error) -> bool {
    matches!(
        Error::from_diesel(error),
        Some(Error::ConnectionLost { .. } | Error::CommitUnknown { .. })
    )
}

pub(crate) fn a_connection_cut_on_the_wire_is_a_lost_connection_and_so_is_every_later_call<
    B: ServerBackend,
>() {
    let (db, mut direct) = setup::<B>();
    let wire = Wire::to(db.url());
    let mut conn = B::connect_to(wire.url());
    assert!(with_inbox(&mut conn, "evt-1", effect("evt-1"))
        .unwrap()
        .is_processed());

    wire.cut();

    // The first call reads the end of the stream (under TLS, `SSL SYSCALL error: EOF
    // detected`); the ones after it are made on a connection already dead.
    for id in ["evt-2", "evt-3", "evt-4"] {
        let result = with_inbox(&mut conn, id, effect(id));
        assert_eq!(Ack::of(&result), Ack::Redeliver, "{id}");
        let error = result.expect_err("the connection is cut");
        assert!(is_lost_connection(&error), "{id}: {error:?}");
    }
    assert_eq!((direct.effect_count(), direct.inbox_rows()), (1, 1));
}

pub(crate) fn a_server_that_stops_answering_ends_the_delivery_at_the_idle_timeout<
    B: ServerBackend,
>() {
    let (db, mut direct) = setup::<B>();
    let wire = Wire::to(db.url());
    let mut conn = B::connect_to(wire.url());
    if let Some(sql) = B::SERVER_IDLE_TIMEOUT_OF_ONE_SECOND {
        conn.batch_execute(sql).unwrap();
    }
    let inbox = Inbox::new("billing")
        .unwrap()
        .retry(RetryPolicy::default().idle_timeout(Duration::from_secs(1)));
    let (done, outcome) = mpsc::channel();

    // On a thread of its own, so that a delivery that never returns fails the test instead of
    // hanging it.
    std::thread::spawn(move || {
        let result = inbox.process(&mut conn, "evt-1", |tx| {
            tx.record_effect("evt-1")?;
            // What the handler sends from here on never reaches the server: the commit (or the
            // check before it) waits for a reply that never comes.
            wire.go_deaf();
            QueryResult::Ok(())
        });
        done.send(result).unwrap();
    });
    let result = outcome
        .recv_timeout(Duration::from_secs(120))
        .expect("the delivery returned: the server ended the stalled session");

    assert_eq!(Ack::of(&result), Ack::Redeliver);
    let error = result.expect_err("the server ended the session");
    assert!(is_lost_connection(&error), "{error:?}");
    assert_eq!((direct.effect_count(), direct.inbox_rows()), (0, 0));
    assert!(with_inbox(&mut direct, "evt-1", effect("evt-1"))
        .unwrap()
        .is_processed());
}

pub(crate) fn the_doctor_reports_the_servers_replication_cluster_and_stall_bound<
    B: ServerBackend,
>() {
    let (_db, mut conn) = setup::<B>();
    if let Some(sql) = B::SERVER_IDLE_TIMEOUT_OF_ONE_SECOND {
        conn.batch_execute(sql).unwrap();
    }

    let checks = diesel_inbox::doctor::check(&mut conn).unwrap();

    let find = |name: &str| checks.iter().find(|check| check.name == name);
    if B::SERVER_IDLE_TIMEOUT_OF_ONE_SECOND.is_some() {
        let idle = find("idle_transaction_timeout").expect("MariaDB's stall bound is checked");
        assert_eq!(
            (idle.status, idle.detail.starts_with("1 s")),
            (diesel_inbox::doctor::CheckStatus::Ok, true),
            "{idle:?}"
        );
        assert!(find("cluster").is_some(), "{checks:?}");
    } else {
        let replication = find("replication").expect("PostgreSQL's replication is checked");
        assert_ne!(
            replication.status,
            diesel_inbox::doctor::CheckStatus::Fail,
            "the suite runs on a primary: {replication:?}"
        );
    }
}

/// A publisher that accepts every message.
struct Accepting;

impl diesel_inbox::outbox::Publisher for Accepting {
    fn publish(
        &mut self,
        _message: &diesel_inbox::outbox::OutboxMessage,
    ) -> Result<(), diesel_inbox::outbox::PublishError> {
        Ok(())
    }
}

pub(crate) fn a_relay_pass_and_a_prune_bound_their_transactions_by_their_idle_timeout<
    B: ServerBackend,
>() {
    let (_db, mut conn) = setup::<B>();
    let policy = RetryPolicy::default().idle_timeout(Duration::from_millis(1500));
    let outbox = diesel_inbox::outbox::Outbox::new("orders-service").unwrap();
    let envelope = diesel_inbox::envelope::Envelope::new("order.placed", "order", "o-1")
        .with_id("o-1-placed")
        .unwrap();
    outbox.enqueue(&mut conn, "orders", &envelope).unwrap();
    let log = crate::support::StatementLog::install(&mut conn);

    let pass = diesel_inbox::outbox::Relay::new()
        .retry(policy)
        .run_once(&mut conn, &mut Accepting)
        .unwrap();
    let retention =
        diesel_inbox::retention::Retention::older_than(Duration::from_secs(30 * 24 * 3600));
    let pruned = Inbox::new("billing")
        .unwrap()
        .retry(policy)
        .prune(&mut conn, &retention)
        .unwrap();

    assert_eq!((pass.published, pruned.events), (1, 0));
    let begins: Vec<String> = log
        .take()
        .into_iter()
        // MariaDB's commit and rollback are compound statements too, `BEGIN NOT ATOMIC ..
        // COMMIT; .. END` and `BEGIN NOT ATOMIC ROLLBACK; .. END`.
        .filter(|sent| {
            sent.starts_with("BEGIN")
                && !sent.contains("COMMIT")
                && !sent.starts_with("BEGIN NOT ATOMIC ROLLBACK")
        })
        .collect();
    assert!(begins.len() >= 3, "take, mark, prune: {begins:?}");
    // PostgreSQL bounds each transaction in its BEGIN; MariaDB's bound is the server's, and
    // costs no statement here: its BEGIN is the fenced one.
    let expected = if B::SERVER_IDLE_TIMEOUT_OF_ONE_SECOND.is_none() {
        "BEGIN; SET LOCAL idle_in_transaction_session_timeout = 1500"
    } else {
        crate::support::MYSQL_BEGIN
    };
    for begin in &begins {
        let statement = begin.split(" -- binds").next().unwrap();
        assert_eq!(statement, expected, "{begins:?}");
    }
}
