//! The inbox's traces: a span per call with its consumer and event id, and an event per
//! outcome at the level the crate docs promise; a cursor's gaps and claims in doubt at warn.
//!
//! A test binary of its own: `tracing` caches per call site whether anyone listens, and tests
//! of other binaries' kinds, running without a subscriber on other threads, would race that
//! cache. Both tests here install a subscriber.
//! The traces come from backend-independent code, so SQLite stands for all backends here.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_inbox::{Inbox, RetryPolicy};
use diesel_inbox_test::TestDatabase;

/// Collects what the subscriber writes, for the test to read back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn every_call_is_traced_with_its_consumer_and_event_id() {
    let db = TestDatabase::sqlite();
    let mut conn = db.connect();
    conn.batch_execute("CREATE TABLE effects (event_id TEXT NOT NULL)")
        .unwrap();
    let effect = |tx: &mut SqliteConnection| {
        diesel::sql_query("INSERT INTO effects VALUES ('x')").execute(tx)
    };
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let inbox = Inbox::new("billing").unwrap();

    tracing::subscriber::with_default(subscriber, || {
        let _ = inbox.process(&mut conn, "evt-7", effect).unwrap();
        let _ = inbox.process(&mut conn, "evt-7", effect).unwrap();
        let failed = inbox.process(&mut conn, "evt-8", |_| {
            Err::<(), _>(diesel::result::Error::RollbackTransaction)
        });
        assert!(failed.is_err());
    });

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = |needle: &str| {
        log.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in the trace:\n{log}"))
            .to_owned()
    };
    let (evt_7, evt_8) = (
        r#"inbox{consumer="billing" event_id="evt-7"}"#,
        r#"inbox{consumer="billing" event_id="evt-8"}"#,
    );
    let processed = line("processed");
    assert!(
        processed.contains("DEBUG") && processed.contains(evt_7),
        "{processed}"
    );
    let duplicate = line("duplicate delivery");
    assert!(
        duplicate.contains("INFO")
            && duplicate.contains(evt_7)
            && duplicate.contains("deliveries=2"),
        "{duplicate}"
    );
    let failed = line("handler failed");
    assert!(
        failed.contains("WARN")
            && failed.contains(evt_8)
            && failed.contains(r#"event_id="evt-8""#)
            && failed.contains("attempts=1"),
        "{failed}"
    );
}

#[test]
fn at_warn_level_failures_still_name_their_consumer_and_event_and_retries_stay_quiet() {
    let db = TestDatabase::sqlite();
    let mut conn = db.connect();
    // A second connection without SqliteSetup (no busy timeout), while the first holds the
    // write lock: every attempt meets "database is locked".
    let mut bare = SqliteConnection::establish(db.url()).unwrap();
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let inbox = Inbox::new("billing").unwrap().max_attempts(2);
    let refuse =
        |_: &mut SqliteConnection| Err::<(), _>(diesel::result::Error::RollbackTransaction);
    let impatient = Inbox::new("billing").unwrap().retry(
        RetryPolicy::default()
            .max_retries(3)
            .base_delay(Duration::from_millis(1)),
    );

    tracing::subscriber::with_default(subscriber, || {
        assert!(inbox.process(&mut conn, "evt-8", refuse).is_err());
        assert!(inbox
            .process(&mut conn, "evt-8", refuse)
            .unwrap()
            .is_dead_lettered());
        conn.batch_execute("BEGIN IMMEDIATE").unwrap();
        for _ in 0..2 {
            let locked =
                impatient.process(&mut bare, "evt-9", |_| Ok::<_, diesel_inbox::Error>(()));
            assert!(
                matches!(
                    locked,
                    Err(diesel_inbox::Error::RetriesExhausted { attempts: 4, .. })
                ),
                "{locked:?}"
            );
        }
        conn.batch_execute("ROLLBACK").unwrap();
        let cursor = inbox.cursor("orders-0").unwrap();
        let ok = |_: &mut SqliteConnection| Ok::<_, diesel_inbox::Error>(());
        assert!(cursor.process(&mut conn, 1, ok).unwrap().is_processed());
        assert_eq!(cursor.process(&mut conn, 4, ok).unwrap().gaps().len(), 1);
        let unknown = inbox.claims().run(&mut conn, "evt-10", |_| {
            Err::<(), Box<dyn std::error::Error + Send + Sync>>("read timed out".into())
        });
        assert!(unknown.unwrap().is_in_doubt());
    });

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines = |needle: &str| {
        log.lines()
            .filter(|l| l.contains(needle))
            .collect::<Vec<_>>()
    };
    for needle in ["handler failed;", "dead-lettered", "outlasted the retries"] {
        let found = lines(needle);
        assert!(!found.is_empty(), "no {needle:?} in the trace:\n{log}");
        for line in found {
            let event = if needle == "outlasted the retries" {
                "evt-9"
            } else {
                "evt-8"
            };
            assert!(
                line.contains(r#"consumer="billing""#)
                    && line.contains(&format!(r#"event_id="{event}""#)),
                "{line}"
            );
        }
    }
    let gap = lines("gap in the stream");
    assert!(
        matches!(&gap[..], [line] if line.contains(r#"consumer="billing""#)
            && line.contains(r#"stream="orders-0""#)
            && line.contains("first=2 last=3 cause=skipped")),
        "one gap line, with its stream and range:\n{log}"
    );
    let doubt = lines("claim in doubt");
    assert!(
        matches!(&doubt[..], [line] if line.contains(r#"consumer="billing""#)
            && line.contains(r#"event_id="evt-10""#)
            && line.contains("read timed out")),
        "one in-doubt line, with its claim and reason:\n{log}"
    );
    assert_eq!(
        lines("SqliteSetup").len(),
        1,
        "warned once about the busy timeout:\n{log}"
    );
    assert!(
        lines("retrying").is_empty(),
        "each retry logged at warn:\n{log}"
    );
}
