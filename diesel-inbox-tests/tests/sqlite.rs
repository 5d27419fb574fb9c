//! The inbox scenarios against Sqlite.

#[macro_use]
mod scenarios;
mod support;

backend_tests!(support::Sqlite);

/// SQLite's own contention raised by a handler's statement: `database is locked`.
mod sqlite_only {
    use diesel::connection::SimpleConnection;
    use diesel_inbox::{Ack, AdminError, Inbox, RetryPolicy};

    use crate::support::{setup, Sqlite, TestConn};

    /// The handler writes through a second connection while the inbox's transaction holds
    /// the writer lock: every attempt meets a locked database. Each is retried, none is
    /// counted, and when the retries run out the handler's own error comes back, to redeliver.
    #[test]
    fn a_locked_database_met_by_the_handler_is_retried_and_never_counted() {
        let (db, mut conn) = setup::<Sqlite>();
        let mut other = db.connect();
        other.batch_execute("PRAGMA busy_timeout = 0").unwrap();
        let inbox = Inbox::new("audited")
            .unwrap()
            .max_attempts(1)
            .retry(RetryPolicy::default().max_retries(2));

        let mut runs = 0;
        let result = inbox.process(&mut conn, "evt-1", |_tx| {
            runs += 1;
            other.record_effect("evt-1")
        });

        assert_eq!(runs, 3, "the first attempt and two retries");
        assert_eq!(Ack::of(&result), Ack::Redeliver);
        let error = result.expect_err("the lock never clears");
        assert!(error.to_string().contains("locked"), "{error}");
        assert!(matches!(
            inbox.dead_letters().show(&mut conn, "evt-1"),
            Err(AdminError::DeadLetterNotFound { .. })
        ));
        assert_eq!(conn.effect_count(), 0);
    }
}
