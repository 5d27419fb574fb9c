//! The inbox's traces: a span per call with its consumer and event id, and an event per
//! outcome at the level the README promises.
//!
//! A test binary of its own, with one test: `tracing` caches per call site whether anyone
//! listens, and tests on other threads, running without a subscriber, would race that cache.
//! The traces come from backend-independent code, so SQLite stands for all backends here.

use std::io;
use std::sync::{Arc, Mutex};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_inbox::testing::TestDatabase;
use diesel_inbox::Inbox;

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
    let processed = line("processed");
    assert!(
        processed.contains("DEBUG")
            && processed.contains(r#"inbox{consumer="billing" event_id="evt-7"}"#),
        "{processed}"
    );
    let duplicate = line("duplicate delivery");
    assert!(
        duplicate.contains("INFO") && duplicate.contains("deliveries=2"),
        "{duplicate}"
    );
    let failed = line("handler failed");
    assert!(
        failed.contains("WARN")
            && failed.contains(r#"event_id="evt-8""#)
            && failed.contains("attempts=1"),
        "{failed}"
    );
}
