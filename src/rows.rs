//! The rows the statements read and write, as plain values: what the decisions above the
//! backend judge and the statements below them bind. Imports nothing of the crate's but the
//! leaf value types.

use chrono::{DateTime, Utc};

use crate::state::{Counter, DeadLetterState, HistoryKind, InboxState, UnknownState};

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

/// A row of `diesel_inbox_failures`.
#[derive(Debug)]
pub struct FailureRow {
    pub event_id: String,
    /// Read as text and parsed per row, so that one row this version cannot read does
    /// not fail a listing.
    pub state: Result<DeadLetterState, UnknownState>,
    pub attempts: i64,
    pub last_error: String,
    pub first_failed_at: DateTime<Utc>,
    pub last_failed_at: DateTime<Utc>,
    pub payload: Option<Vec<u8>>,
    pub payload_kind: Option<String>,
    pub updated_at: DateTime<Utc>,
}

/// A row of `diesel_inbox_failure_log`.
#[derive(Debug)]
pub struct HistoryRow {
    pub kind: HistoryKind,
    pub attempt: Option<i64>,
    pub error: Option<String>,
    pub actor: Option<String>,
    pub reason: Option<String>,
    pub at: DateTime<Utc>,
}

/// What the inbox table holds for one consumer in one state.
#[derive(Debug)]
pub struct InboxTotals {
    /// Parsed from the text, so that a state this version cannot read is counted.
    pub state: Result<InboxState, UnknownState>,
    pub rows: i64,
    /// `SUM(deliveries - 1)`: the deliveries after the settling one.
    pub repeats: i64,
    pub payload_conflicts: i64,
}

/// What the failure table holds for one consumer in one state.
#[derive(Debug)]
pub struct FailureTotals {
    /// Parsed from the text, so that a state this version cannot read is counted.
    pub state: Result<DeadLetterState, UnknownState>,
    pub rows: i64,
    pub attempts: i64,
}

/// A position in a consumer's settled rows, in `(processed_at, event_id)` order: where a
/// prune batch stopped, and so where the next one starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneCursor {
    pub processed_at: DateTime<Utc>,
    pub event_id: String,
}

/// What a prune would delete now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneCounts {
    pub events: i64,
    pub failures: i64,
    pub history: i64,
    pub counters: i64,
    pub claims: i64,
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

/// A counter and its total; the counter parsed from the text, so that one this version
/// does not know is counted as unreadable rather than failing the stats.
pub(crate) type CounterTotal = (Result<Counter, UnknownState>, i64);

/// A row of `diesel_inbox_blocks`: a block a chain stream processed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRow {
    pub height: i64,
    pub hash: String,
    pub parent_hash: String,
}

/// A row of `diesel_inbox_block_events`: an event a block took effect for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockEventRow {
    pub height: i64,
    pub position: i64,
    pub event_id: String,
}

/// A reorg as the fork ledger records it.
#[derive(Debug)]
pub struct NewReorg<'a> {
    pub ancestor_height: i64,
    pub old_head: (i64, &'a str),
    pub new_head: (i64, &'a str),
    pub events_reverted: i64,
    pub at: DateTime<Utc>,
}

/// A row of `diesel_inbox_reorgs`.
#[derive(Debug)]
pub struct ReorgRow {
    pub id: i64,
    pub stream: String,
    pub ancestor_height: i64,
    pub old_head: (i64, String),
    pub new_head: (i64, String),
    pub events_reverted: i64,
    pub events_reapplied: i64,
    pub happened_at: DateTime<Utc>,
}

/// A row of `diesel_inbox_orphaned_effects`.
#[derive(Debug)]
pub struct OrphanedRow {
    pub reorg_id: i64,
    pub event_id: String,
    pub stream: String,
    pub height: i64,
    pub block_hash: String,
    pub claim_state: crate::claim::ClaimState,
    pub found_at: DateTime<Utc>,
}

/// A row of `diesel_inbox_replays`, its state, plan, counts and evidence as stored (read
/// above the backend).
#[derive(Debug)]
pub struct ReplayRow {
    pub id: i64,
    pub consumer: String,
    pub source: String,
    pub range: (Option<i64>, Option<i64>),
    pub plan: String,
    pub reason: String,
    pub requested_by: String,
    pub state: String,
    pub checkpoint: Option<i64>,
    pub counts: String,
    pub digest: String,
    pub fence: i64,
    pub lease_until: Option<DateTime<Utc>>,
    pub evidence: Option<String>,
    pub updated_at: DateTime<Utc>,
}

/// A replay as planned: what `diesel_inbox_replays` gets first.
#[derive(Debug)]
pub struct NewReplay<'a> {
    pub consumer: &'a str,
    pub source: &'a str,
    pub range: (Option<i64>, Option<i64>),
    pub plan: &'a str,
    pub reason: &'a str,
    pub requested_by: &'a str,
    pub counts: &'a str,
    pub digest: &'a str,
    pub now: DateTime<Utc>,
}

/// A replay's progress after an event: written with the fence that holds it.
#[derive(Debug)]
pub struct ReplayProgressRow<'a> {
    pub checkpoint: i64,
    pub counts: &'a str,
    pub digest: &'a str,
    pub lease_until: DateTime<Utc>,
    pub now: DateTime<Utc>,
}

/// A row of `diesel_inbox_replay_notes`.
#[derive(Debug, Clone)]
pub struct NoteRow {
    pub position: i64,
    pub kind: String,
    pub event_id: String,
    pub detail: String,
}

/// A row of `diesel_inbox_replay_transitions`, its states as stored.
#[derive(Debug)]
pub struct TransitionRow {
    pub from: Option<String>,
    pub to: String,
    pub actor: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}
