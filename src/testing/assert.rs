//! Assertions over the inbox table, with failure messages that show what it recorded.

use std::fmt::Write as _;

use crate::{DeadLetter, DeadLetterState, EventId, Inbox, IntoEventId};

use super::inspect::{first_records, inbox_record, InboxRecord};
use crate::InboxConnection;

/// How many rows a failure message lists when the expected one is missing.
const ROWS_SHOWN: usize = 10;

/// Asserts that `inbox`'s consumer processed `event_id`: the inbox holds its row, as
/// processed (not dead-lettered), and the primary key allows only one. Returns the row for
/// further checks.
///
/// The inbox row is the record that the effect committed; that it committed *once* per
/// delivery run is what [`assert_idempotent`](super::assert_idempotent) checks by counting the
/// effect itself.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel_inbox::testing::{assert_processed_once, TestDatabase};
/// use diesel_inbox::{with_inbox, Inbox};
///
/// let db = TestDatabase::sqlite();
/// let mut conn = db.connect();
/// let _ = with_inbox(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(()))?;
///
/// let record = assert_processed_once(&mut conn, &Inbox::default(), "evt-1");
/// assert_eq!(record.deliveries(), 1);
/// # }
/// # Ok::<(), diesel_inbox::Error>(())
/// ```
///
/// # Panics
///
/// When the inbox has no row for the event (the message lists the rows it has, to spot an id
/// or consumer that differs), when the id is invalid, or when the table cannot be read.
#[track_caller]
pub fn assert_processed_once<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) -> InboxRecord {
    let (event_id, record) = read(conn, inbox, event_id);
    match record {
        Some(record) if record.is_processed() => record,
        Some(record) => panic!(
            "expected event {event_id:?} of consumer {:?} to be processed once, but the inbox records it as given up on: {record}",
            inbox.consumer(),
        ),
        None => panic!(
            "{}",
            missing(conn, inbox, &event_id, "to be processed once")
        ),
    }
}

/// Asserts that the inbox counts exactly `expected` deliveries of `event_id` for `inbox`'s
/// consumer: the one that processed it and every duplicate since. Deliveries whose handler
/// failed rolled back and are not counted. Returns the row.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel_inbox::testing::{assert_deliveries, TestDatabase};
/// use diesel_inbox::{with_inbox, Inbox};
///
/// let db = TestDatabase::sqlite();
/// let mut conn = db.connect();
/// let _ = with_inbox(&mut conn, "evt-1", |_tx| Err::<(), _>(diesel::result::Error::RollbackTransaction));
/// for _ in 0..2 {
///     let _ = with_inbox(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(()))?;
/// }
///
/// assert_deliveries(&mut conn, &Inbox::default(), "evt-1", 2);
/// # }
/// # Ok::<(), diesel_inbox::Error>(())
/// ```
///
/// # Panics
///
/// When the inbox has no row for the event, when its count differs from `expected` (the
/// message shows the row), when the id is invalid, or when the table cannot be read.
#[track_caller]
pub fn assert_deliveries<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
    expected: u64,
) -> InboxRecord {
    let (event_id, record) = read(conn, inbox, event_id);
    let expectation = format!("to have {expected} {}", plural(expected, "delivery"));
    match record {
        Some(record) if record.deliveries() == expected => record,
        Some(record) => panic!(
            "expected event {event_id:?} of consumer {:?} {expectation}, but the inbox counts {}: {record}",
            inbox.consumer(),
            record.deliveries(),
        ),
        None => panic!("{}", missing(conn, inbox, &event_id, &expectation)),
    }
}

/// Asserts that `inbox`'s consumer has not processed `event_id`: the inbox has no row for it,
/// as after deliveries whose handler failed or panicked, or before any delivery; or it holds
/// the event as dead-lettered, whose effect never ran.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel_inbox::testing::{assert_not_processed, TestDatabase};
/// use diesel_inbox::{with_inbox, Inbox};
///
/// let db = TestDatabase::sqlite();
/// let mut conn = db.connect();
/// let failed = with_inbox(&mut conn, "evt-1", |_tx| Err::<(), _>(diesel::result::Error::RollbackTransaction));
/// assert!(failed.is_err());
///
/// assert_not_processed(&mut conn, &Inbox::default(), "evt-1");
/// # }
/// # Ok::<(), diesel_inbox::Error>(())
/// ```
///
/// # Panics
///
/// When the inbox has a row for the event (the message shows it), when the id is invalid, or
/// when the table cannot be read.
#[track_caller]
pub fn assert_not_processed<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) {
    let (event_id, record) = read(conn, inbox, event_id);
    if let Some(record) = record.filter(InboxRecord::is_processed) {
        panic!(
            "expected event {event_id:?} of consumer {:?} not to be processed, but the inbox records it: {record}",
            inbox.consumer(),
        );
    }
}

/// Asserts that `inbox`'s consumer dead-lettered `event_id`: the inbox holds it as
/// dead-lettered, so deliveries skip it, and its dead letter awaits a decision. Returns the
/// dead letter, with its history, for further checks.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel_inbox::testing::{assert_dead_lettered, TestDatabase};
/// use diesel_inbox::Inbox;
///
/// let db = TestDatabase::sqlite();
/// let mut conn = db.connect();
/// let inbox = Inbox::new("orders")?.max_attempts(2);
/// for _ in 0..2 {
///     let _ = inbox.process(&mut conn, "evt-1", |_tx| Err::<(), _>(diesel::result::Error::RollbackTransaction));
/// }
///
/// let dead = assert_dead_lettered(&mut conn, &inbox, "evt-1");
/// assert_eq!(dead.attempts, 2);
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Panics
///
/// When the event is processed, still retrying, or unknown (the message shows what the inbox
/// holds), when the id is invalid, or when the tables cannot be read.
#[track_caller]
pub fn assert_dead_lettered<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) -> DeadLetter {
    let (event_id, record) = read(conn, inbox, event_id);
    let letter = inbox.dead_letters().show(conn, &event_id);
    match (record, letter) {
        (Some(record), Ok(letter))
            if record.is_dead_lettered() && letter.state == DeadLetterState::DeadLettered =>
        {
            letter
        }
        (record, letter) => panic!(
            "expected event {event_id:?} of consumer {:?} to be dead-lettered, but the inbox row is {} and the failure record is {}",
            inbox.consumer(),
            record.map_or_else(|| "missing".to_owned(), |r| r.to_string()),
            letter.map_or_else(|e| e.to_string(), |l| format!("{} after {} attempt{} (last error: {})", l.state, l.attempts, if l.attempts == 1 { "" } else { "s" }, l.last_error)),
        ),
    }
}

#[track_caller]
fn read<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) -> (EventId, Option<InboxRecord>) {
    let event_id = event_id
        .into_event_id()
        .unwrap_or_else(|e| panic!("not an event id the inbox accepts: {e}"));
    let record = inbox_record(conn, inbox, &event_id)
        .unwrap_or_else(|e| panic!("cannot read the inbox table: {e}"));
    (event_id, record)
}

/// The message for a missing row: what was expected and what the table holds instead.
fn missing<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: &EventId,
    expectation: &str,
) -> String {
    let mut message = format!(
        "expected event {:?} of consumer {:?} {expectation}, but the inbox has no row for it",
        event_id.as_str(),
        inbox.consumer()
    );
    match first_records(conn, ROWS_SHOWN + 1) {
        Ok(rows) if rows.is_empty() => message.push_str("; the inbox table is empty"),
        Ok(rows) => {
            message.push_str("; it holds:");
            for row in rows.iter().take(ROWS_SHOWN) {
                let _ = write!(message, "\n    {row}");
            }
            if rows.len() > ROWS_SHOWN {
                message.push_str("\n    ...");
            }
        }
        Err(e) => {
            let _ = write!(message, "; listing its rows failed: {e}");
        }
    }
    message
}

fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        word.to_owned()
    } else if let Some(stem) = word.strip_suffix('y') {
        format!("{stem}ies")
    } else {
        format!("{word}s")
    }
}
