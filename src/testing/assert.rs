//! Assertions over the inbox table, with failure messages that show what it recorded.

use std::fmt::Write as _;

use crate::{EventId, Inbox, IntoEventId};

use super::inspect::{first_records, inbox_record, InboxRecord, InspectInbox};

/// How many rows a failure message lists when the expected one is missing.
const ROWS_SHOWN: usize = 10;

/// Asserts that `inbox`'s consumer processed `event_id`: the inbox holds its row, and the
/// primary key allows only one. Returns the row for further checks.
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
pub fn assert_processed_once<C: InspectInbox>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) -> InboxRecord {
    let (event_id, record) = read(conn, inbox, event_id);
    match record {
        Some(record) => record,
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
pub fn assert_deliveries<C: InspectInbox>(
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
/// as after deliveries whose handler failed or panicked, or before any delivery.
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
pub fn assert_not_processed<C: InspectInbox>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) {
    let (event_id, record) = read(conn, inbox, event_id);
    if let Some(record) = record {
        panic!(
            "expected event {event_id:?} of consumer {:?} not to be processed, but the inbox records it: {record}",
            inbox.consumer(),
        );
    }
}

// Dead-lettering belongs here: `assert_dead_lettered(conn, inbox, event_id)`, beside
// `assert_not_processed`, reading the row's state, which `InboxRecord` gains along with the
// mode. Until then every inbox row is a processed event, and these assertions say so.

#[track_caller]
fn read<C: InspectInbox>(
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
fn missing<C: InspectInbox>(
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
