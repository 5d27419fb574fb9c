//! Assertions over the inbox table, with failure messages that show what it recorded.

use std::fmt::Write as _;

use diesel_inbox::{
    dead_letter::{DeadLetter, DeadLetterState},
    AdminError, EventId, Inbox, InboxConnection, InboxRecord, IntoEventId,
};

use crate::reach::{now, Reach};

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
/// use diesel_inbox_test::{assert_processed_once, TestDatabase};
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
    let seen = now(Seen::read(conn, inbox, id(event_id), false));
    processed_once(inbox.consumer(), seen)
}

/// [`assert_processed_once`]'s judgement of what it read.
#[track_caller]
pub(super) fn processed_once(consumer: &str, seen: Seen) -> InboxRecord {
    match seen.record {
        Some(record) if record.is_processed() => record,
        Some(record) => panic!(
            "expected event {:?} of consumer {:?} to be processed once, but the inbox records it as given up on: {record}",
            seen.event_id.as_str(),
            consumer,
        ),
        None => panic!("{}", seen.missing(consumer, "to be processed once")),
    }
}

/// Asserts that the inbox counts exactly `expected` deliveries of `event_id` for `inbox`'s
/// consumer: the one that processed it and every duplicate since. Deliveries whose handler
/// failed rolled back and are not counted. Returns the row.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel_inbox_test::{assert_deliveries, TestDatabase};
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
    let seen = now(Seen::read(conn, inbox, id(event_id), false));
    deliveries(inbox.consumer(), seen, expected)
}

/// [`assert_deliveries`]'s judgement of what it read.
#[track_caller]
pub(super) fn deliveries(consumer: &str, seen: Seen, expected: u64) -> InboxRecord {
    let expectation = format!("to have {expected} {}", plural(expected, "delivery"));
    match seen.record {
        Some(record) if record.deliveries() == expected => record,
        Some(record) => panic!(
            "expected event {:?} of consumer {:?} {expectation}, but the inbox counts {}: {record}",
            seen.event_id.as_str(),
            consumer,
            record.deliveries(),
        ),
        None => panic!("{}", seen.missing(consumer, &expectation)),
    }
}

/// Asserts that `inbox`'s consumer has not processed `event_id`: the inbox has no row for it,
/// as after deliveries whose handler failed or panicked, or before any delivery; or it holds
/// the event as dead-lettered, whose effect never ran.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel_inbox_test::{assert_not_processed, TestDatabase};
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
    let seen = now(Seen::read(conn, inbox, id(event_id), false));
    not_processed(inbox.consumer(), seen);
}

/// [`assert_not_processed`]'s judgement of what it read.
#[track_caller]
pub(super) fn not_processed(consumer: &str, seen: Seen) {
    if let Some(record) = seen.record.filter(InboxRecord::is_processed) {
        panic!(
            "expected event {:?} of consumer {:?} not to be processed, but the inbox records it: {record}",
            seen.event_id.as_str(),
            consumer,
        );
    }
}

/// Asserts that `inbox`'s consumer dead-lettered `event_id`: the inbox holds it as
/// dead-lettered, so deliveries skip it, and its dead letter awaits a decision. Returns the
/// dead letter, with its history, for further checks.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel_inbox_test::{assert_dead_lettered, TestDatabase};
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
    let seen = now(Seen::read(conn, inbox, id(event_id), true));
    dead_lettered(inbox.consumer(), seen)
}

/// [`assert_dead_lettered`]'s judgement of what it read.
#[track_caller]
pub(super) fn dead_lettered(consumer: &str, seen: Seen) -> DeadLetter {
    let letter = seen.letter.expect("read with the dead letter");
    match (seen.record, letter) {
        (Some(record), Ok(letter))
            if record.is_dead_lettered() && letter.state == DeadLetterState::DeadLettered =>
        {
            letter
        }
        (record, letter) => panic!(
            "expected event {:?} of consumer {:?} to be dead-lettered, but the inbox row is {} and the failure record is {}",
            seen.event_id.as_str(),
            consumer,
            record.map_or_else(|| "missing".to_owned(), |r| r.to_string()),
            letter.map_or_else(|e| e.to_string(), |l| format!("{} after {} attempt{} (last error: {})", l.state, l.attempts, if l.attempts == 1 { "" } else { "s" }, l.last_error)),
        ),
    }
}

/// An event id for an assertion, or a panic naming what is wrong with it.
#[track_caller]
pub(super) fn id(event_id: impl IntoEventId) -> EventId {
    event_id
        .into_event_id()
        .unwrap_or_else(|e| panic!("not an event id the inbox accepts: {e}"))
}

/// What an assertion reads of one event, before it judges: its inbox row; when there is
/// none, the table's first rows for the message; and its dead letter, where asked for.
pub(super) struct Seen {
    event_id: EventId,
    record: Option<InboxRecord>,
    /// The first rows of the table, when the event has none.
    others: Option<Result<Vec<InboxRecord>, String>>,
    letter: Option<Result<DeadLetter, AdminError>>,
}

impl Seen {
    /// Reads `event_id`'s row of `inbox`'s consumer (and its dead letter, `with_letter`).
    ///
    /// # Panics
    ///
    /// When the inbox table cannot be read.
    pub(super) async fn read<C>(
        conn: &mut C,
        inbox: &impl Reach<C>,
        event_id: EventId,
        with_letter: bool,
    ) -> Self {
        let record = inbox
            .record(conn, &event_id)
            .await
            .unwrap_or_else(|e| panic!("cannot read the inbox table: {e}"));
        let others = match record {
            Some(_) => None,
            None => Some(
                inbox
                    .records(conn, ROWS_SHOWN + 1)
                    .await
                    .map_err(|e| e.to_string()),
            ),
        };
        let letter = if with_letter {
            Some(inbox.dead_letter(conn, &event_id).await)
        } else {
            None
        };
        Self {
            event_id,
            record,
            others,
            letter,
        }
    }

    /// The message for a missing row: what was expected and what the table holds instead.
    fn missing(&self, consumer: &str, expectation: &str) -> String {
        let mut message = format!(
            "expected event {:?} of consumer {:?} {expectation}, but the inbox has no row for it",
            self.event_id.as_str(),
            consumer
        );
        match &self.others {
            Some(Ok(rows)) if rows.is_empty() => message.push_str("; the inbox table is empty"),
            Some(Ok(rows)) => {
                message.push_str("; it holds:");
                for row in rows.iter().take(ROWS_SHOWN) {
                    let _ = write!(message, "\n    {row}");
                }
                if rows.len() > ROWS_SHOWN {
                    message.push_str("\n    ...");
                }
            }
            Some(Err(e)) => {
                let _ = write!(message, "; listing its rows failed: {e}");
            }
            None => {}
        }
        message
    }
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
