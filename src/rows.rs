//! The rows the statements read and write, as plain values: what the decisions above the
//! backend judge and the statements below them bind. Imports nothing of the crate's but the
//! leaf value types.

use chrono::{DateTime, Utc};

use crate::state::{GapCause, GapState, InboxState, OutboxState, UnknownState};

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

/// The tables whose consumers [`InboxSql::consumers`] reads.
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

/// A row of `diesel_inbox_cursors`.
#[derive(Debug)]
pub struct CursorRow {
    pub watermark: Option<i64>,
    pub high: Option<i64>,
    pub epoch: i64,
    pub owner: Option<String>,
    pub updated_at: DateTime<Utc>,
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

/// An outbox row as [`enqueue`](crate::Outbox::enqueue) inserts it: pending, due now.
#[derive(Debug)]
pub struct NewOutboxRow<'a> {
    pub event_id: &'a str,
    pub topic: &'a str,
    pub aggregate_type: &'a str,
    pub aggregate_id: &'a str,
    pub event_type: &'a str,
    /// The message headers as a JSON object.
    pub headers: &'a str,
    pub body: &'a [u8],
    pub now: DateTime<Utc>,
}

/// A row of `diesel_inbox_outbox`.
#[derive(Debug, Clone)]
pub struct OutboxRow {
    pub position: i64,
    pub event_id: String,
    pub topic: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    pub headers: String,
    pub body: Vec<u8>,
    pub state: OutboxState,
    pub attempts: i64,
    pub available_at: DateTime<Utc>,
    pub lease_until: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub enqueued_at: DateTime<Utc>,
    pub published_at: Option<DateTime<Utc>>,
}

/// An outbox state, its rows, and the oldest one's enqueue time; the state parsed from
/// the text, so that one this version cannot read is counted rather than failing.
pub(crate) type OutboxTotals = (
    Result<OutboxState, UnknownState>,
    i64,
    Option<DateTime<Utc>>,
);

/// What a relay writes to rows it holds, once their publish is over. Each clears the lease.
#[derive(Debug, Clone, Copy)]
pub enum OutboxChange<'a> {
    /// The broker accepted them.
    Published,
    /// The publish failed and may pass later: one more attempt counted, due again `at`.
    Retry { error: &'a str, at: DateTime<Utc> },
    /// The publish failed for good: one more attempt counted, failed with `error`.
    Failed { error: &'a str },
    /// Not attempted (an earlier row of the aggregate failed): as they were.
    Released,
}

/// A row of `diesel_inbox_gaps`.
#[derive(Debug, Clone)]
pub struct GapRow {
    pub id: i64,
    pub stream: String,
    pub first: i64,
    pub last: i64,
    pub cause: GapCause,
    pub state: GapState,
    pub detected_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    pub resolved_by: Option<String>,
    pub resolution: Option<String>,
}
