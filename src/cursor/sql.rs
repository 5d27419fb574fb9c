//! The cursor area's statements: a stream's cursor (its watermark and epoch), the gap ledger,
//! and the sequences recorded per event. The trait a backend implements, the rows it reads
//! and writes, and its statements for every backend, written once.
//!
//! Each backend's file stamps the whole area with one line,
//! `cursor_statements!(Pg, schema = schema, codec = codec, ..)`: the backend type, its module
//! of [`crate::tables`] and its codec (how it binds keys and times) are explicit arguments,
//! and the options name the variants a backend needs (`insert_cursor =
//! on_conflict_do_nothing`, or `insert_or_ignore` on MySQL; `gap_id = returning`, or
//! `last_insert_id` on MySQL; `lock = for_update` where it has row locks; `begin_and_advance
//! = compound` where the `BEGIN` and the in-order advance go as one statement, MySQL).
//! Adding a statement touches this file alone: the trait's method and its arm below.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use super::gap::Gap;
use super::state::{GapCause, GapState};
use super::watermark::{unstored, OpenGap};
use crate::audit::Audit;
use crate::rows::{Listed, StreamKey};
use crate::sql::{Db, TransactionSql};

/// A row of `diesel_inbox_cursors`.
#[derive(Debug)]
pub struct CursorRow {
    pub watermark: Option<i64>,
    pub high: Option<i64>,
    pub epoch: i64,
    pub owner: Option<String>,
    pub updated_at: DateTime<Utc>,
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

/// The ledger's reading of a gap row.
impl Gap {
    pub(crate) fn from_row(row: GapRow) -> Self {
        let resolution = match (row.resolved_by, row.resolution) {
            (Some(actor), Some(reason)) => Audit::new(actor, reason).ok(),
            _ => None,
        };
        Self {
            id: row.id,
            stream: row.stream,
            first: unstored(row.first),
            last: unstored(row.last),
            cause: row.cause,
            state: row.state,
            detected_at: row.detected_at,
            closed_at: row.closed_at,
            resolution,
        }
    }

    /// The gap `row` as an operator's resolution at `now` leaves it.
    pub(crate) fn resolved(row: GapRow, audit: &Audit, now: DateTime<Utc>) -> Self {
        Self {
            state: GapState::Resolved,
            closed_at: Some(now),
            resolution: Some(audit.clone()),
            ..Self::from_row(row)
        }
    }
}

impl From<GapRow> for OpenGap {
    fn from(row: GapRow) -> Self {
        Self {
            id: Some(row.id),
            first: row.first,
            last: row.last,
            cause: row.cause,
            detected_at: row.detected_at,
        }
    }
}

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

/// Implements [`CursorSql`] for a backend: `cursor_statements!(Backend, schema = .., codec =
/// .., insert_cursor = on_conflict_do_nothing | insert_or_ignore, gap_id = returning |
/// last_insert_id $(, lock = for_update)? $(, begin_and_advance = compound)?)`.
///
/// `schema` is the backend's module of [`crate::tables`]; `codec` its module of key and time
/// conversions (`key`, `key_string`, `time`, `utc`, `Time`, `KeyOwned`). Nothing else is
/// taken from the caller's scope. Expands to the impl and, beside it, `mod cursor_rows`: the
/// select lists and row conversions the statements share.
macro_rules! cursor_statements {
    (
        $backend:ty,
        schema = $schema:ident,
        codec = $codec:ident,
        insert_cursor = $insert:ident,
        gap_id = $gap_id:ident
        $(, lock = $lock:ident)?
        $(, begin_and_advance = $begin:ident)? $(,)?
    ) => {
        /// The cursor and gap tables' select lists and their conversion into rows.
        mod cursor_rows {
            use super::{$codec, $schema};
            use $crate::cursor::sql::{CursorRow, GapRow};
            use $crate::rows::Listed;
            use $schema::diesel_inbox_cursors as c;
            use $schema::diesel_inbox_gaps as g;

            pub(super) type CursorColumns = (
                $codec::KeyOwned,
                Option<i64>,
                Option<i64>,
                i64,
                Option<String>,
                $codec::Time,
            );

            pub(super) fn cursor_columns() -> (
                c::stream,
                c::watermark,
                c::high,
                c::epoch,
                c::owner,
                c::updated_at,
            ) {
                (
                    c::stream,
                    c::watermark,
                    c::high,
                    c::epoch,
                    c::owner,
                    c::updated_at,
                )
            }

            /// The stream's name, and its cursor.
            pub(super) fn cursor_row(row: CursorColumns) -> (String, CursorRow) {
                let (stream, watermark, high, epoch, owner, updated_at) = row;
                let cursor = CursorRow {
                    watermark,
                    high,
                    epoch,
                    owner,
                    updated_at: $codec::utc(updated_at),
                };
                ($codec::key_string(stream), cursor)
            }

            /// The cause and state are read as text, and parsed per row: see [`Listed`].
            pub(super) type GapColumns = (
                i64,
                $codec::KeyOwned,
                i64,
                i64,
                String,
                String,
                $codec::Time,
                Option<$codec::Time>,
                Option<String>,
                Option<String>,
            );

            pub(super) fn gap_columns() -> (
                g::id,
                g::stream,
                g::first_sequence,
                g::last_sequence,
                g::cause,
                g::state,
                g::detected_at,
                g::closed_at,
                g::resolved_by,
                g::resolution,
            ) {
                (
                    g::id,
                    g::stream,
                    g::first_sequence,
                    g::last_sequence,
                    g::cause,
                    g::state,
                    g::detected_at,
                    g::closed_at,
                    g::resolved_by,
                    g::resolution,
                )
            }

            pub(super) fn gap_row(row: GapColumns) -> Listed<GapRow> {
                let (id, stream, first, last, cause, state, detected, closed, by, why) = row;
                Ok(GapRow {
                    id,
                    stream: $codec::key_string(stream),
                    first,
                    last,
                    cause: $crate::rows::listed_column(&id, cause.parse())?,
                    state: $crate::rows::listed_column(&id, state.parse())?,
                    detected_at: $codec::utc(detected),
                    closed_at: closed.map($codec::utc),
                    resolved_by: by,
                    resolution: why,
                })
            }
        }

        impl $crate::cursor::sql::CursorSql for $backend {
            // Sequence cursors. `advance_cursor` is the in-order fast path: one update, which
            // finds the row only when the sequence is the next one, no gap is open and the
            // epoch matches.
            async fn advance_cursor<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
                sequence: i64,
                epoch: i64,
                now: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<bool> {
                use $crate::sql::Run;
                use $schema::diesel_inbox_cursors::dsl as c;
                $crate::cursor::sql::AdvanceCursor::<
                    <c::consumer as diesel::Expression>::SqlType,
                    <c::updated_at as diesel::Expression>::SqlType,
                    _,
                    _,
                >::new($codec::key(key.0), $codec::key(key.1), sequence, epoch, $codec::time(now))
                .execute_on(conn)
                .await
                .map(|changed| changed == 1)
            }

            $(
                $crate::cursor::sql::cursor_statements!(
                    @begin_and_advance_cursor $begin, $schema, $codec
                );
            )?

            // `lock`: `for_update` where the backend has row locks; SQLite's immediate
            // transaction holds the whole database instead.
            async fn cursor<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
            ) -> diesel::QueryResult<Option<$crate::cursor::sql::CursorRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_cursors::dsl as c;
                c::diesel_inbox_cursors
                    .find(($codec::key(key.0), $codec::key(key.1)))
                    .select(cursor_rows::cursor_columns())
                    $(.$lock())?
                    .limit(1)
                    .get_result_on::<cursor_rows::CursorColumns>(conn)
                    .await
                    .optional()
                    .map(|row| row.map(|row| cursor_rows::cursor_row(row).1))
            }

            async fn cursors<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
            ) -> diesel::QueryResult<Vec<(String, $crate::cursor::sql::CursorRow)>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_blocks::dsl as b;
                use $schema::diesel_inbox_cursors::dsl as c;
                // A chain stream's row (it has blocks) is not a sequence cursor's.
                let chain = b::diesel_inbox_blocks
                    .filter(b::consumer.eq(c::consumer))
                    .filter(b::stream.eq(c::stream));
                c::diesel_inbox_cursors
                    .filter(c::consumer.eq($codec::key(consumer)))
                    .filter(diesel::dsl::not(diesel::dsl::exists(chain)))
                    .order(c::stream)
                    .select(cursor_rows::cursor_columns())
                    .load_on::<cursor_rows::CursorColumns>(conn)
                    .await
                    .map(|rows| rows.into_iter().map(cursor_rows::cursor_row).collect())
            }

            // `insert_cursor`: `insert_into` with `on_conflict_do_nothing` (PostgreSQL,
            // SQLite), or `insert_or_ignore_into` (MySQL).
            async fn insert_cursor<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
                now: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_cursors::dsl as c;
                $crate::cursor::sql::cursor_statements!(
                    @insert_cursor $insert,
                    c::diesel_inbox_cursors,
                    (
                        c::consumer.eq($codec::key(key.0)),
                        c::stream.eq($codec::key(key.1)),
                        c::updated_at.eq($codec::time(now)),
                    )
                )
                .execute_on(conn)
                .await
                .map(drop)
            }

            async fn save_cursor<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
                watermark: Option<i64>,
                high: Option<i64>,
                now: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_cursors::dsl as c;
                diesel::update(c::diesel_inbox_cursors.find(($codec::key(key.0), $codec::key(key.1))))
                    .set((
                        c::watermark.eq(watermark),
                        c::high.eq(high),
                        c::updated_at.eq($codec::time(now)),
                    ))
                    .execute_on(conn)
                    .await
                    .map(drop)
            }

            async fn bump_epoch<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
                owner: &str,
                now: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_cursors::dsl as c;
                diesel::update(c::diesel_inbox_cursors.find(($codec::key(key.0), $codec::key(key.1))))
                    .set((
                        c::epoch.eq(c::epoch + 1),
                        c::owner.eq(owner),
                        c::updated_at.eq($codec::time(now)),
                    ))
                    .execute_on(conn)
                    .await
                    .map(drop)
            }

            async fn gaps<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                stream: Option<&str>,
                state: Option<$crate::cursor::state::GapState>,
            ) -> diesel::QueryResult<Vec<$crate::rows::Listed<$crate::cursor::sql::GapRow>>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_gaps::dsl as g;
                let mut query = g::diesel_inbox_gaps
                    .filter(g::consumer.eq($codec::key(consumer)))
                    .into_boxed();
                if let Some(stream) = stream {
                    query = query.filter(g::stream.eq($codec::key(stream)));
                }
                // The state is compared as text: a row whose state this version cannot read
                // is listed too, as unreadable, rather than left out.
                if let Some(state) = state {
                    query = query.filter(
                        g::state
                            .eq(state)
                            .or(g::state.ne_all($crate::cursor::state::GapState::TEXTS)),
                    );
                }
                query
                    .order((g::stream, g::first_sequence, g::id))
                    .select(cursor_rows::gap_columns())
                    .load_on::<cursor_rows::GapColumns>(conn)
                    .await
                    .map(|rows| rows.into_iter().map(cursor_rows::gap_row).collect())
            }

            async fn gap_page<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                stream: Option<&str>,
                state: Option<$crate::cursor::state::GapState>,
                after: i64,
                limit: i64,
            ) -> diesel::QueryResult<Vec<$crate::rows::Listed<$crate::cursor::sql::GapRow>>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_gaps::dsl as g;
                let mut query = g::diesel_inbox_gaps
                    .filter(g::consumer.eq($codec::key(consumer)))
                    .filter(g::id.gt(after))
                    .into_boxed();
                if let Some(stream) = stream {
                    query = query.filter(g::stream.eq($codec::key(stream)));
                }
                // The state is compared as text: a row whose state this version cannot read
                // is listed too, as unreadable, rather than left out.
                if let Some(state) = state {
                    query = query.filter(
                        g::state
                            .eq(state)
                            .or(g::state.ne_all($crate::cursor::state::GapState::TEXTS)),
                    );
                }
                query
                    .order(g::id)
                    .limit(limit)
                    .select(cursor_rows::gap_columns())
                    .load_on::<cursor_rows::GapColumns>(conn)
                    .await
                    .map(|rows| rows.into_iter().map(cursor_rows::gap_row).collect())
            }

            async fn gap_by_id<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                id: i64,
            ) -> diesel::QueryResult<Option<(String, String, $crate::cursor::state::GapState)>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_gaps::dsl as g;
                g::diesel_inbox_gaps
                    .find(id)
                    .select((g::consumer, g::stream, g::state))
                    .limit(1)
                    .get_result_on::<($codec::KeyOwned, $codec::KeyOwned, $crate::cursor::state::GapState)>(conn)
                    .await
                    .optional()
                    .map(|row| {
                        row.map(|(c, s, state)| ($codec::key_string(c), $codec::key_string(s), state))
                    })
            }

            $crate::cursor::sql::cursor_statements!(@insert_gap $gap_id, $schema, $codec);

            async fn update_gap<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                id: i64,
                sequences: (i64, i64),
                cause: $crate::cursor::state::GapCause,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_gaps::dsl as g;
                diesel::update(g::diesel_inbox_gaps.find(id))
                    .set((
                        g::first_sequence.eq(sequences.0),
                        g::last_sequence.eq(sequences.1),
                        g::cause.eq(cause),
                    ))
                    .execute_on(conn)
                    .await
                    .map(drop)
            }

            async fn close_gap<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                id: i64,
                state: $crate::cursor::state::GapState,
                audit: Option<&$crate::Audit>,
                now: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::cursor::state::GapState;
                use $crate::sql::Run;
                use $schema::diesel_inbox_gaps::dsl as g;
                diesel::update(g::diesel_inbox_gaps.find(id).filter(g::state.eq(GapState::Open)))
                    .set((
                        g::state.eq(state),
                        g::closed_at.eq(Some($codec::time(now))),
                        g::resolved_by.eq(audit.map($crate::Audit::actor)),
                        g::resolution.eq(audit.map($crate::Audit::reason)),
                    ))
                    .execute_on(conn)
                    .await
                    .map(|changed| changed == 1)
            }

            async fn insert_event_sequence<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
                sequence: i64,
                event_id: &str,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_event_sequences::dsl as q;
                diesel::insert_into(q::diesel_inbox_event_sequences)
                    .values((
                        q::consumer.eq($codec::key(key.0)),
                        q::stream.eq($codec::key(key.1)),
                        q::sequence.eq(sequence),
                        q::event_id.eq($codec::key(event_id)),
                    ))
                    .execute_on(conn)
                    .await
                    .map(drop)
            }

            async fn sequenced_events<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
                up_to: i64,
                limit: i64,
            ) -> diesel::QueryResult<Vec<(i64, String)>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_event_sequences::dsl as q;
                q::diesel_inbox_event_sequences
                    .filter(q::consumer.eq($codec::key(key.0)))
                    .filter(q::stream.eq($codec::key(key.1)))
                    .filter(q::sequence.le(up_to))
                    .order(q::sequence)
                    .limit(limit)
                    .select((q::sequence, q::event_id))
                    .load_on::<(i64, $codec::KeyOwned)>(conn)
                    .await
                    .map(|rows| rows.into_iter().map(|(s, id)| (s, $codec::key_string(id))).collect())
            }

            async fn delete_sequenced_events<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
                up_to: i64,
                event_ids: &[&str],
            ) -> diesel::QueryResult<usize> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $crate::state::InboxState;
                use $schema::diesel_inbox_event_sequences::dsl as q;
                use $schema::diesel_inbox_events::dsl as t;
                let ids: Vec<_> = event_ids.iter().map(|id| $codec::key(id)).collect();
                let events = diesel::delete(
                    t::diesel_inbox_events
                        .filter(t::consumer.eq($codec::key(key.0)))
                        .filter(t::event_id.eq_any(ids))
                        .filter(t::state.eq(InboxState::Processed)),
                )
                .execute_on(conn)
                .await?;
                diesel::delete(
                    q::diesel_inbox_event_sequences
                        .filter(q::consumer.eq($codec::key(key.0)))
                        .filter(q::stream.eq($codec::key(key.1)))
                        .filter(q::sequence.le(up_to)),
                )
                .execute_on(conn)
                .await?;
                Ok(events)
            }
        }
    };

    // MySQL: the fenced `BEGIN` and the in-order advance as one compound statement.
    (@begin_and_advance_cursor compound, $schema:ident, $codec:ident) => {
        async fn begin_and_advance_cursor<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            idle_timeout: Option<std::time::Duration>,
            key: $crate::rows::StreamKey<'_>,
            sequence: i64,
            epoch: i64,
            now: chrono::DateTime<chrono::Utc>,
        ) -> Option<diesel::QueryResult<bool>> {
            use $schema::diesel_inbox_cursors::dsl as c;
            // No variable lasts one transaction here: the idle bound is the server's (`begin_top`).
            let _ = idle_timeout;
            let advance = $crate::cursor::sql::AdvanceCursor::<
                <c::consumer as diesel::Expression>::SqlType,
                <c::updated_at as diesel::Expression>::SqlType,
                _,
                _,
            >::new(
                $codec::key(key.0),
                $codec::key(key.1),
                sequence,
                epoch,
                $codec::time(now),
            );
            let changed = $crate::sql::compound(conn, $crate::sql::BeginThen(advance)).await?;
            Some(changed.map(|changed| changed == 1))
        }
    };

    // The insert of a cursor row that leaves an existing one as it is.
    (@insert_cursor on_conflict_do_nothing, $table:expr, $values:expr) => {
        diesel::insert_into($table)
            .values($values)
            .on_conflict_do_nothing()
    };
    (@insert_cursor insert_or_ignore, $table:expr, $values:expr) => {
        diesel::insert_or_ignore_into($table).values($values)
    };

    // `gap_id`: how the backend learns the new row's id.
    (@insert_gap returning, $schema:ident, $codec:ident) => {
        async fn insert_gap<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::rows::StreamKey<'_>,
            sequences: (i64, i64),
            cause: $crate::cursor::state::GapCause,
            detected_at: chrono::DateTime<chrono::Utc>,
        ) -> diesel::QueryResult<i64> {
            use diesel::prelude::*;
            use $crate::sql::Run;
            use $schema::diesel_inbox_gaps::dsl as g;
            diesel::insert_into(g::diesel_inbox_gaps)
                .values($crate::cursor::sql::cursor_statements!(
                    @new_gap_row $schema, $codec, key, sequences, cause, detected_at
                ))
                .returning(g::id)
                .get_result_on::<i64>(conn)
                .await
        }
    };
    (@insert_gap last_insert_id, $schema:ident, $codec:ident) => {
        async fn insert_gap<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::rows::StreamKey<'_>,
            sequences: (i64, i64),
            cause: $crate::cursor::state::GapCause,
            detected_at: chrono::DateTime<chrono::Utc>,
        ) -> diesel::QueryResult<i64> {
            use diesel::prelude::*;
            use $crate::sql::Run;
            use $schema::diesel_inbox_gaps::dsl as g;
            diesel::insert_into(g::diesel_inbox_gaps)
                .values($crate::cursor::sql::cursor_statements!(
                    @new_gap_row $schema, $codec, key, sequences, cause, detected_at
                ))
                .execute_on(conn)
                .await?;
            diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
                "CAST(LAST_INSERT_ID() AS SIGNED)",
            ))
            .get_result_on::<i64>(conn)
            .await
        }
    };

    // The values of a new gap ledger row: open, as the cursor found it.
    (@new_gap_row $schema:ident, $codec:ident, $key:expr, $sequences:expr, $cause:expr, $detected_at:expr) => {{
        use $schema::diesel_inbox_gaps as g;
        (
            g::consumer.eq($codec::key($key.0)),
            g::stream.eq($codec::key($key.1)),
            g::first_sequence.eq($sequences.0),
            g::last_sequence.eq($sequences.1),
            g::cause.eq($cause),
            g::state.eq($crate::cursor::state::GapState::Open),
            g::detected_at.eq($codec::time($detected_at)),
        )
    }};
}
pub(crate) use cursor_statements;

/// The in-order advance, written out: Diesel prepares every `UPDATE` anew (its SQL can vary
/// with the values), a round trip more each time, and keeps this one prepared, by its type.
/// `K` and `T` are the backend's SQL types of keys and times.
pub(crate) struct AdvanceCursor<K, T, Key, Time> {
    consumer: Key,
    stream: Key,
    sequence: i64,
    /// The sequence before it, where the row must stand.
    previous: i64,
    epoch: i64,
    now: Time,
    types: std::marker::PhantomData<fn() -> (K, T)>,
}

impl<K, T, Key, Time> AdvanceCursor<K, T, Key, Time> {
    pub(crate) fn new(consumer: Key, stream: Key, sequence: i64, epoch: i64, now: Time) -> Self {
        Self {
            consumer,
            stream,
            sequence,
            previous: sequence - 1,
            epoch,
            now,
            types: std::marker::PhantomData,
        }
    }
}

impl<DB, K, T, Key, Time> diesel::query_builder::QueryFragment<DB>
    for AdvanceCursor<K, T, Key, Time>
where
    DB: diesel::backend::Backend
        + diesel::sql_types::HasSqlType<K>
        + diesel::sql_types::HasSqlType<T>
        + diesel::sql_types::HasSqlType<diesel::sql_types::BigInt>,
    Key: diesel::serialize::ToSql<K, DB>,
    Time: diesel::serialize::ToSql<T, DB>,
    i64: diesel::serialize::ToSql<diesel::sql_types::BigInt, DB>,
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, DB>,
    ) -> diesel::QueryResult<()> {
        use diesel::sql_types::BigInt;
        out.push_sql("UPDATE diesel_inbox_cursors SET watermark = ");
        out.push_bind_param::<BigInt, _>(&self.sequence)?;
        out.push_sql(", high = ");
        out.push_bind_param::<BigInt, _>(&self.sequence)?;
        out.push_sql(", updated_at = ");
        out.push_bind_param::<T, _>(&self.now)?;
        out.push_sql(" WHERE consumer = ");
        out.push_bind_param::<K, _>(&self.consumer)?;
        out.push_sql(" AND stream = ");
        out.push_bind_param::<K, _>(&self.stream)?;
        // The row moves only from the sequence before: settled up to it, no gap open.
        out.push_sql(" AND high = ");
        out.push_bind_param::<BigInt, _>(&self.previous)?;
        out.push_sql(" AND watermark = high AND epoch = ");
        out.push_bind_param::<BigInt, _>(&self.epoch)
    }
}

/// One statement per backend, so the type names it in the connection's statement cache.
impl<K: 'static, T: 'static, Key, Time> diesel::query_builder::QueryId
    for AdvanceCursor<K, T, Key, Time>
{
    type QueryId = AdvanceCursor<K, T, (), ()>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<K, T, Key, Time, Conn> diesel::RunQueryDsl<Conn> for AdvanceCursor<K, T, Key, Time> {}
