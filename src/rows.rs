//! The rows the statements read and write, as plain values: what the decisions above the
//! backend judge and the statements below them bind. Imports nothing of the crate's but the
//! leaf value types.

use chrono::{DateTime, Utc};

use crate::state::{InboxState, UnknownState};

/// `(consumer, event_id)`: the inbox's key in every table.
pub(crate) type Key<'a> = (&'a str, &'a str);

/// `(consumer, stream)`: a sequence cursor's key.
pub(crate) type StreamKey<'a> = (&'a str, &'a str);

/// The inbox row of an event seen before.
#[derive(Debug)]
pub struct Existing {
    pub processed_at: DateTime<Utc>,
    pub deliveries: i64,
    pub state: InboxState,
    pub payload_hash: Option<Vec<u8>>,
    pub result: Option<String>,
}

/// The tables whose consumers
/// [`RetentionSql::consumers`](crate::retention::sql::RetentionSql::consumers) reads.
#[derive(Debug, Clone, Copy)]
pub enum ConsumerRows {
    /// The inbox, failure and counter tables: what stats count.
    Inbox,
    /// The cursor and gap tables.
    Streams,
    /// The claim table.
    Claims,
}

/// What recording a delivery found.
#[derive(Debug)]
pub enum Recorded {
    /// The row was inserted: run the effect.
    New,
    /// The row existed and now counts this delivery too.
    Seen(Existing),
}

/// A row of `diesel_inbox_events`, as tests and ops read it back.
#[derive(Debug)]
pub struct InboxRow {
    pub consumer: String,
    pub event_id: String,
    pub state: InboxState,
    pub processed_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    pub deliveries: i64,
}

/// A row as a statement read it, or, when one of its columns holds text this version does
/// not know, the row's key and that text: one such row fails neither the statement nor
/// its neighbours.
pub(crate) type Listed<R> = Result<R, Unreadable>;

/// A row whose column holds text this version does not know.
#[derive(Debug)]
pub struct Unreadable {
    /// The row's key within its listing, as text: the event id of a claim, the id of a
    /// gap or a history line, the position of an outbox row.
    pub key: String,
    /// The column and the text it holds.
    pub unknown: UnknownState,
}

/// A column's value as parsed, or, where this version cannot read it, the row's `key` and the
/// text: what a listing's row mapping returns for a state column.
pub(crate) fn listed_column<T>(key: &impl ToString, value: Result<T, UnknownState>) -> Listed<T> {
    value.map_err(|unknown| Unreadable {
        key: key.to_string(),
        unknown,
    })
}
