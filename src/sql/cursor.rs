//! The cursor area's statements: a stream's cursor (its watermark and epoch), the gap ledger,
//! and the sequences recorded per event.
//!
//! Implemented for each backend in its file under `backend/`; the bodies shared by all three
//! are `backend/cursor.rs`.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use super::{Db, TransactionSql};
use crate::rows::{CursorRow, GapRow, Listed, StreamKey};
use crate::state::{GapCause, GapState};

/// The cursor area's statements for one database, on a connection of either flavour. Sealed.
pub trait CursorSql: TransactionSql {
    /// Moves the cursor to `sequence` if it is the next one, no gap is open and `epoch`
    /// is the cursor's: the in-order fast path. `false` when any of that does not hold.
    fn advance_cursor<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        sequence: i64,
        epoch: i64,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Opens the top-level transaction and tries the in-order advance in it, as
    /// [`begin_top`](TransactionSql::begin_top) and then
    /// [`advance_cursor`](Self::advance_cursor) would, in one round trip: `None`, having sent
    /// nothing, where the backend cannot send both as one. A failure leaves no transaction
    /// open.
    fn begin_and_advance_cursor<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        idle_timeout: Option<Duration>,
        key: StreamKey<'_>,
        sequence: i64,
        epoch: i64,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Option<QueryResult<bool>>> + Send {
        let _ = (conn, idle_timeout, key, sequence, epoch, now);
        std::future::ready(None)
    }

    /// The cursor row, locked for the rest of the transaction where the backend has row
    /// locks (SQLite's immediate transaction holds the whole database instead).
    fn cursor<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
    ) -> impl Future<Output = QueryResult<Option<CursorRow>>> + Send;

    /// Every cursor of the consumer, by stream name.
    fn cursors<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
    ) -> impl Future<Output = QueryResult<Vec<(String, CursorRow)>>> + Send;

    /// The cursor row, locked as [`cursor`](Self::cursor) locks it; inserted first, with no
    /// sequence yet, when the stream has none.
    fn cursor_or_insert<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<CursorRow>> + Send {
        async move {
            if let Some(row) = Self::cursor(conn, key).await? {
                return Ok(row);
            }
            Self::insert_cursor(conn, key, now).await?;
            Self::cursor(conn, key)
                .await?
                .ok_or(diesel::result::Error::NotFound)
        }
    }

    /// Inserts a cursor row with no sequence yet, unless one exists.
    fn insert_cursor<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Writes the cursor's watermark and highest sequence.
    fn save_cursor<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        watermark: Option<i64>,
        high: Option<i64>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Adds one to the cursor's epoch and names its owner.
    fn bump_epoch<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        owner: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// The consumer's gaps, of one stream and in one state where given (and those whose
    /// state this version cannot read), by stream and first sequence.
    fn gaps<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        stream: Option<&str>,
        state: Option<GapState>,
    ) -> impl Future<Output = QueryResult<Vec<Listed<GapRow>>>> + Send;

    /// Up to `limit` of the consumer's gaps after id `after`, of one stream and in one
    /// state where given (and those whose state this version cannot read), in id order:
    /// a page of a listing.
    fn gap_page<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        stream: Option<&str>,
        state: Option<GapState>,
        after: i64,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<Listed<GapRow>>>> + Send;

    /// The consumer, stream and state of the gap `id`, if there is one.
    fn gap_by_id<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        id: i64,
    ) -> impl Future<Output = QueryResult<Option<(String, String, GapState)>>> + Send;

    /// Inserts an open gap of `sequences`, found at `detected_at`; returns its id.
    fn insert_gap<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        sequences: (i64, i64),
        cause: GapCause,
        detected_at: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<i64>> + Send;

    /// Writes an open gap's range and cause.
    fn update_gap<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        id: i64,
        sequences: (i64, i64),
        cause: GapCause,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Closes the open gap `id` (filled, or resolved by `audit`); `false` when it was not
    /// open.
    fn close_gap<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        id: i64,
        state: GapState,
        audit: Option<&crate::Audit>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Records the sequence an event id was settled at.
    fn insert_event_sequence<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        sequence: i64,
        event_id: &str,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Up to `limit` of the stream's `(sequence, event id)` pairs at or below `up_to`, in
    /// sequence order.
    fn sequenced_events<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        up_to: i64,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<(i64, String)>>> + Send;

    /// Deletes the processed inbox rows of `event_ids` and the stream's sequence records
    /// at or below `up_to`; returns how many inbox rows it deleted.
    fn delete_sequenced_events<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        up_to: i64,
        event_ids: &[&str],
    ) -> impl Future<Output = QueryResult<usize>> + Send;
}
