//! Statements that read the same on every backend, written once.
//!
//! A backend's `impl BackendSql` takes each one by name, `statement!(reset_attempts, schema,
//! codec)`: `schema` is the backend's module of [`crate::schema`], `codec` its module of key and
//! time conversions (`key`, `key_string`, `time`, `utc`, `Time`, `KeyOwned`, and `sum_i64`, its
//! `SUM` of an integer column as a `BIGINT`), and `rows` its
//! module of row mappings, made by `row_mappings!`. Nothing else is taken from the scope.

/// The select lists and row conversions shared by the statements that read rows back.
/// Expands to `mod rows`.
macro_rules! row_mappings {
    (schema = $schema:ident, codec = $codec:ident) => {
        /// The select lists of the inbox's tables and their conversion into rows.
        mod rows {
            use super::{$codec, $schema};
            use $crate::rows::{
                ClaimRow, CursorRow, Existing, FailureRow, GapRow, HistoryRow, InboxRow, Listed,
                Unreadable,
            };
            use $crate::state::{InboxState, UnknownState};
            use $schema::diesel_inbox_claims as k;
            use $schema::diesel_inbox_cursors as c;
            use $schema::diesel_inbox_events as t;
            use $schema::diesel_inbox_failure_log as l;
            use $schema::diesel_inbox_failures as f;
            use $schema::diesel_inbox_gaps as g;

            /// The state is read as text, and parsed per row: see [`Listed`].
            pub(super) type ExistingColumns =
                ($codec::Time, i64, String, Option<Vec<u8>>, Option<String>);

            pub(super) fn existing_columns() -> (
                t::processed_at,
                t::deliveries,
                t::state,
                t::payload_hash,
                t::result,
            ) {
                (
                    t::processed_at,
                    t::deliveries,
                    t::state,
                    t::payload_hash,
                    t::result,
                )
            }

            pub(super) fn existing(row: ExistingColumns) -> Result<Existing, UnknownState> {
                let (processed_at, deliveries, state, payload_hash, result) = row;
                Ok(Existing {
                    processed_at: $codec::utc(processed_at),
                    deliveries,
                    state: state.parse()?,
                    payload_hash,
                    result,
                })
            }

            pub(super) type InboxColumns = (
                $codec::KeyOwned,
                $codec::KeyOwned,
                InboxState,
                $codec::Time,
                $codec::Time,
                i64,
            );

            pub(super) fn inbox_columns() -> (
                t::consumer,
                t::event_id,
                t::state,
                t::processed_at,
                t::last_seen_at,
                t::deliveries,
            ) {
                (
                    t::consumer,
                    t::event_id,
                    t::state,
                    t::processed_at,
                    t::last_seen_at,
                    t::deliveries,
                )
            }

            pub(super) fn inbox_row(row: InboxColumns) -> InboxRow {
                let (consumer, event_id, state, processed_at, last_seen_at, deliveries) = row;
                InboxRow {
                    consumer: $codec::key_string(consumer),
                    event_id: $codec::key_string(event_id),
                    state,
                    processed_at: $codec::utc(processed_at),
                    last_seen_at: $codec::utc(last_seen_at),
                    deliveries,
                }
            }

            /// The failure row's columns but its payload: what a listing reads.
            pub(super) type FailureSummaryColumns = (
                $codec::KeyOwned,
                String,
                i64,
                String,
                $codec::Time,
                $codec::Time,
                Option<String>,
                $codec::Time,
            );

            pub(super) type FailureSummarySelect = (
                f::event_id,
                f::state,
                f::attempts,
                f::last_error,
                f::first_failed_at,
                f::last_failed_at,
                f::payload_kind,
                f::updated_at,
            );

            pub(super) fn failure_summary_columns() -> FailureSummarySelect {
                (
                    f::event_id,
                    f::state,
                    f::attempts,
                    f::last_error,
                    f::first_failed_at,
                    f::last_failed_at,
                    f::payload_kind,
                    f::updated_at,
                )
            }

            pub(super) fn failure_summary_row(row: FailureSummaryColumns) -> FailureRow {
                let (event_id, state, attempts, last_error, first, last, kind, updated) = row;
                FailureRow {
                    event_id: $codec::key_string(event_id),
                    state: state.parse(),
                    attempts,
                    last_error,
                    first_failed_at: $codec::utc(first),
                    last_failed_at: $codec::utc(last),
                    payload: None,
                    payload_kind: kind,
                    updated_at: $codec::utc(updated),
                }
            }

            /// The whole failure row: the summary, and the payload.
            pub(super) type FailureColumns = (FailureSummaryColumns, Option<Vec<u8>>);

            pub(super) fn failure_columns() -> (FailureSummarySelect, f::payload) {
                (failure_summary_columns(), f::payload)
            }

            pub(super) fn failure_row((summary, payload): FailureColumns) -> FailureRow {
                FailureRow {
                    payload,
                    ..failure_summary_row(summary)
                }
            }

            pub(super) type HistoryColumns = (
                i64,
                String,
                Option<i64>,
                Option<String>,
                Option<String>,
                Option<String>,
                $codec::Time,
            );

            pub(super) fn history_columns() -> (
                l::id,
                l::entry,
                l::attempt,
                l::error,
                l::actor,
                l::reason,
                l::at,
            ) {
                (
                    l::id,
                    l::entry,
                    l::attempt,
                    l::error,
                    l::actor,
                    l::reason,
                    l::at,
                )
            }

            /// A history line, or its id and the kind this version cannot read.
            pub(super) fn history_row(row: HistoryColumns) -> Listed<HistoryRow> {
                let (id, kind, attempt, error, actor, reason, at) = row;
                Ok(HistoryRow {
                    kind: known(id, kind.parse())?,
                    attempt,
                    error,
                    actor,
                    reason,
                    at: $codec::utc(at),
                })
            }

            /// A column's value, or the row's key and the text this version cannot read.
            fn known<T>(key: impl ToString, value: Result<T, UnknownState>) -> Listed<T> {
                value.map_err(|unknown| Unreadable {
                    key: key.to_string(),
                    unknown,
                })
            }

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

            /// A claim's columns but its payload and the payload's hash: what a listing
            /// reads. The state is read as text, and parsed per row: see [`Listed`].
            pub(super) type ClaimSummaryColumns = (
                $codec::KeyOwned,
                String,
                i64,
                i64,
                $codec::Time,
                $codec::Time,
                $codec::Time,
                Option<$codec::Time>,
                Option<String>,
                Option<String>,
                Option<String>,
                Option<String>,
                Option<String>,
            );

            pub(super) type ClaimSummarySelect = (
                k::event_id,
                k::state,
                k::attempt,
                k::deliveries,
                k::lease_until,
                k::claimed_at,
                k::updated_at,
                k::completed_at,
                k::payload_kind,
                k::result,
                k::last_error,
                k::resolved_by,
                k::resolution,
            );

            pub(super) fn claim_summary_columns() -> ClaimSummarySelect {
                (
                    k::event_id,
                    k::state,
                    k::attempt,
                    k::deliveries,
                    k::lease_until,
                    k::claimed_at,
                    k::updated_at,
                    k::completed_at,
                    k::payload_kind,
                    k::result,
                    k::last_error,
                    k::resolved_by,
                    k::resolution,
                )
            }

            pub(super) fn claim_summary_row(row: ClaimSummaryColumns) -> Listed<ClaimRow> {
                let (
                    event_id,
                    state,
                    attempt,
                    deliveries,
                    lease_until,
                    claimed_at,
                    updated_at,
                    completed_at,
                    payload_kind,
                    result,
                    last_error,
                    resolved_by,
                    resolution,
                ) = row;
                let event_id = $codec::key_string(event_id);
                Ok(ClaimRow {
                    state: known(&event_id, state.parse())?,
                    event_id,
                    attempt,
                    deliveries,
                    lease_until: $codec::utc(lease_until),
                    claimed_at: $codec::utc(claimed_at),
                    updated_at: $codec::utc(updated_at),
                    completed_at: completed_at.map($codec::utc),
                    payload_hash: None,
                    payload: None,
                    payload_kind,
                    result,
                    last_error,
                    resolved_by,
                    resolution,
                })
            }

            /// The whole claim: the summary, and the payload's hash and bytes.
            pub(super) type ClaimColumns =
                (ClaimSummaryColumns, (Option<Vec<u8>>, Option<Vec<u8>>));

            pub(super) fn claim_columns() -> (ClaimSummarySelect, (k::payload_hash, k::payload)) {
                (claim_summary_columns(), (k::payload_hash, k::payload))
            }

            pub(super) fn claim_row((summary, payload): ClaimColumns) -> Listed<ClaimRow> {
                let (payload_hash, payload) = payload;
                Ok(ClaimRow {
                    payload_hash,
                    payload,
                    ..claim_summary_row(summary)?
                })
            }

            pub(super) fn gap_row(row: GapColumns) -> Listed<GapRow> {
                let (id, stream, first, last, cause, state, detected, closed, by, why) = row;
                Ok(GapRow {
                    id,
                    stream: $codec::key_string(stream),
                    first,
                    last,
                    cause: known(id, cause.parse())?,
                    state: known(id, state.parse())?,
                    detected_at: $codec::utc(detected),
                    closed_at: closed.map($codec::utc),
                    resolved_by: by,
                    resolution: why,
                })
            }
        }
    };
}

/// The values of a fresh inbox row, as every recording statement inserts it: one delivery,
/// processed and last seen `now`, with the payload's fingerprint if any.
macro_rules! new_inbox_row {
    ($schema:ident, $codec:ident, $consumer:expr, $event_id:expr, $now:expr, $payload_hash:expr) => {{
        use $schema::diesel_inbox_events as t;
        (
            t::consumer.eq($codec::key($consumer)),
            t::event_id.eq($codec::key($event_id)),
            t::processed_at.eq($now),
            t::last_seen_at.eq($now),
            t::deliveries.eq(1),
            t::payload_hash.eq($payload_hash),
        )
    }};
}

/// The values of a new gap ledger row: open, as the cursor found it.
macro_rules! new_gap_row {
    ($schema:ident, $codec:ident, $key:expr, $sequences:expr, $cause:expr, $detected_at:expr) => {{
        use $schema::diesel_inbox_gaps as g;
        (
            g::consumer.eq($codec::key($key.0)),
            g::stream.eq($codec::key($key.1)),
            g::first_sequence.eq($sequences.0),
            g::last_sequence.eq($sequences.1),
            g::cause.eq($cause),
            g::state.eq($crate::state::GapState::Open),
            g::detected_at.eq($codec::time($detected_at)),
        )
    }};
}

/// The values of a new claim: in progress, attempt 1, one delivery, with the payload and its
/// fingerprint if any.
macro_rules! new_claim_row {
    ($schema:ident, $codec:ident, $key:expr, $claim:expr) => {{
        use $schema::diesel_inbox_claims as k;
        let claim: &$crate::rows::NewClaim<'_> = $claim;
        let now = $codec::time(claim.now);
        (
            k::consumer.eq($codec::key($key.0)),
            k::event_id.eq($codec::key($key.1)),
            k::state.eq($crate::state::ClaimState::InProgress),
            k::attempt.eq(1_i64),
            k::deliveries.eq(1_i64),
            k::lease_until.eq($codec::time(claim.lease_until)),
            k::claimed_at.eq(now),
            k::updated_at.eq(now),
            k::payload_hash.eq(claim.payload_hash),
            k::payload.eq(claim.payload.map($crate::Payload::to_bytes)),
            k::payload_kind.eq(claim.payload.map($crate::Payload::kind)),
        )
    }};
}

/// One `BackendSql` method whose SQL reads the same on every backend, by name.
macro_rules! statement {
    // Sequence cursors. `advance_cursor` is the in-order fast path: one update, which finds
    // the row only when the sequence is the next one, no gap is open and the epoch matches.
    (advance_cursor, $schema:ident, $codec:ident) => {
        fn advance_cursor(
            &mut self,
            key: $crate::backend::StreamKey<'_>,
            sequence: i64,
            epoch: i64,
            now: DateTime<Utc>,
        ) -> QueryResult<bool> {
            use $schema::diesel_inbox_cursors::dsl as c;
            let row = c::diesel_inbox_cursors
                .find(($codec::key(key.0), $codec::key(key.1)))
                .filter(c::high.eq(sequence - 1))
                .filter(c::watermark.eq(sequence - 1))
                .filter(c::epoch.eq(epoch));
            diesel::update(row)
                .set((
                    c::watermark.eq(sequence),
                    c::high.eq(sequence),
                    c::updated_at.eq($codec::time(now)),
                ))
                .execute(self)
                .map(|changed| changed == 1)
        }
    };
    // `lock`: `for_update` where the backend has row locks; SQLite's immediate transaction
    // holds the whole database instead.
    (cursor, $schema:ident, $codec:ident, $rows:ident $(, lock = $lock:ident)?) => {
        fn cursor(
            &mut self,
            key: $crate::backend::StreamKey<'_>,
        ) -> QueryResult<Option<$crate::rows::CursorRow>> {
            use $schema::diesel_inbox_cursors::dsl as c;
            c::diesel_inbox_cursors
                .find(($codec::key(key.0), $codec::key(key.1)))
                .select($rows::cursor_columns())
                $(.$lock())?
                .first::<$rows::CursorColumns>(self)
                .optional()
                .map(|row| row.map(|row| $rows::cursor_row(row).1))
        }
    };
    (cursors, $schema:ident, $codec:ident, $rows:ident) => {
        fn cursors(
            &mut self,
            consumer: &str,
        ) -> QueryResult<Vec<(String, $crate::rows::CursorRow)>> {
            use $schema::diesel_inbox_cursors::dsl as c;
            c::diesel_inbox_cursors
                .filter(c::consumer.eq($codec::key(consumer)))
                .order(c::stream)
                .select($rows::cursor_columns())
                .load::<$rows::CursorColumns>(self)
                .map(|rows| rows.into_iter().map($rows::cursor_row).collect())
        }
    };
    // `insert`: `insert_into` with `on_conflict_do_nothing` (PostgreSQL, SQLite), or
    // `insert_or_ignore_into` (MySQL).
    (insert_cursor, $schema:ident, $codec:ident, $insert:ident $(, $on_conflict:ident)?) => {
        fn insert_cursor(
            &mut self,
            key: $crate::backend::StreamKey<'_>,
            now: DateTime<Utc>,
        ) -> QueryResult<()> {
            use $schema::diesel_inbox_cursors::dsl as c;
            diesel::$insert(c::diesel_inbox_cursors)
                .values((
                    c::consumer.eq($codec::key(key.0)),
                    c::stream.eq($codec::key(key.1)),
                    c::updated_at.eq($codec::time(now)),
                ))
                $(.$on_conflict())?
                .execute(self)
                .map(drop)
        }
    };
    (save_cursor, $schema:ident, $codec:ident) => {
        fn save_cursor(
            &mut self,
            key: $crate::backend::StreamKey<'_>,
            watermark: Option<i64>,
            high: Option<i64>,
            now: DateTime<Utc>,
        ) -> QueryResult<()> {
            use $schema::diesel_inbox_cursors::dsl as c;
            diesel::update(c::diesel_inbox_cursors.find(($codec::key(key.0), $codec::key(key.1))))
                .set((
                    c::watermark.eq(watermark),
                    c::high.eq(high),
                    c::updated_at.eq($codec::time(now)),
                ))
                .execute(self)
                .map(drop)
        }
    };
    (bump_epoch, $schema:ident, $codec:ident) => {
        fn bump_epoch(
            &mut self,
            key: $crate::backend::StreamKey<'_>,
            owner: &str,
            now: DateTime<Utc>,
        ) -> QueryResult<()> {
            use $schema::diesel_inbox_cursors::dsl as c;
            diesel::update(c::diesel_inbox_cursors.find(($codec::key(key.0), $codec::key(key.1))))
                .set((
                    c::epoch.eq(c::epoch + 1),
                    c::owner.eq(owner),
                    c::updated_at.eq($codec::time(now)),
                ))
                .execute(self)
                .map(drop)
        }
    };
    (gaps, $schema:ident, $codec:ident, $rows:ident) => {
        fn gaps(
            &mut self,
            consumer: &str,
            stream: Option<&str>,
            state: Option<$crate::state::GapState>,
        ) -> QueryResult<Vec<$crate::rows::Listed<$crate::rows::GapRow>>> {
            use $schema::diesel_inbox_gaps::dsl as g;
            let mut query = g::diesel_inbox_gaps
                .filter(g::consumer.eq($codec::key(consumer)))
                .into_boxed();
            if let Some(stream) = stream {
                query = query.filter(g::stream.eq($codec::key(stream)));
            }
            // The state is compared as text: a row whose state this version cannot read is
            // listed too, as unreadable, rather than left out.
            if let Some(state) = state {
                query = query.filter(
                    g::state
                        .eq(state)
                        .or(g::state.ne_all($crate::state::GapState::TEXTS)),
                );
            }
            query
                .order((g::stream, g::first_sequence, g::id))
                .select($rows::gap_columns())
                .load::<$rows::GapColumns>(self)
                .map(|rows| rows.into_iter().map($rows::gap_row).collect())
        }
    };
    (gap_page, $schema:ident, $codec:ident, $rows:ident) => {
        fn gap_page(
            &mut self,
            consumer: &str,
            stream: Option<&str>,
            state: Option<$crate::state::GapState>,
            after: i64,
            limit: i64,
        ) -> QueryResult<Vec<$crate::rows::Listed<$crate::rows::GapRow>>> {
            use $schema::diesel_inbox_gaps::dsl as g;
            let mut query = g::diesel_inbox_gaps
                .filter(g::consumer.eq($codec::key(consumer)))
                .filter(g::id.gt(after))
                .into_boxed();
            if let Some(stream) = stream {
                query = query.filter(g::stream.eq($codec::key(stream)));
            }
            // The state is compared as text: a row whose state this version cannot read is
            // listed too, as unreadable, rather than left out.
            if let Some(state) = state {
                query = query.filter(
                    g::state
                        .eq(state)
                        .or(g::state.ne_all($crate::state::GapState::TEXTS)),
                );
            }
            query
                .order(g::id)
                .limit(limit)
                .select($rows::gap_columns())
                .load::<$rows::GapColumns>(self)
                .map(|rows| rows.into_iter().map($rows::gap_row).collect())
        }
    };
    // `returning`: how the backend learns the new row's id.
    (insert_gap, $schema:ident, $codec:ident, returning) => {
        fn insert_gap(
            &mut self,
            key: $crate::backend::StreamKey<'_>,
            sequences: (i64, i64),
            cause: $crate::state::GapCause,
            detected_at: DateTime<Utc>,
        ) -> QueryResult<i64> {
            use $schema::diesel_inbox_gaps::dsl as g;
            diesel::insert_into(g::diesel_inbox_gaps)
                .values(new_gap_row!($schema, $codec, key, sequences, cause, detected_at))
                .returning(g::id)
                .get_result(self)
        }
    };
    (insert_gap, $schema:ident, $codec:ident, last_insert_id) => {
        fn insert_gap(
            &mut self,
            key: $crate::backend::StreamKey<'_>,
            sequences: (i64, i64),
            cause: $crate::state::GapCause,
            detected_at: DateTime<Utc>,
        ) -> QueryResult<i64> {
            use $schema::diesel_inbox_gaps::dsl as g;
            diesel::insert_into(g::diesel_inbox_gaps)
                .values(new_gap_row!($schema, $codec, key, sequences, cause, detected_at))
                .execute(self)?;
            diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
                "CAST(LAST_INSERT_ID() AS SIGNED)",
            ))
            .get_result(self)
        }
    };
    (update_gap, $schema:ident, $codec:ident) => {
        fn update_gap(
            &mut self,
            id: i64,
            sequences: (i64, i64),
            cause: $crate::state::GapCause,
        ) -> QueryResult<()> {
            use $schema::diesel_inbox_gaps::dsl as g;
            diesel::update(g::diesel_inbox_gaps.find(id))
                .set((
                    g::first_sequence.eq(sequences.0),
                    g::last_sequence.eq(sequences.1),
                    g::cause.eq(cause),
                ))
                .execute(self)
                .map(drop)
        }
    };
    (close_gap, $schema:ident, $codec:ident) => {
        fn close_gap(
            &mut self,
            id: i64,
            state: $crate::state::GapState,
            audit: Option<&$crate::Audit>,
            now: DateTime<Utc>,
        ) -> QueryResult<bool> {
            use $crate::state::GapState;
            use $schema::diesel_inbox_gaps::dsl as g;
            diesel::update(g::diesel_inbox_gaps.find(id).filter(g::state.eq(GapState::Open)))
                .set((
                    g::state.eq(state),
                    g::closed_at.eq(Some($codec::time(now))),
                    g::resolved_by.eq(audit.map($crate::Audit::actor)),
                    g::resolution.eq(audit.map($crate::Audit::reason)),
                ))
                .execute(self)
                .map(|changed| changed == 1)
        }
    };
    (gap_by_id, $schema:ident, $codec:ident) => {
        fn gap_by_id(
            &mut self,
            id: i64,
        ) -> QueryResult<Option<(String, String, $crate::state::GapState)>> {
            use $schema::diesel_inbox_gaps::dsl as g;
            g::diesel_inbox_gaps
                .find(id)
                .select((g::consumer, g::stream, g::state))
                .first::<($codec::KeyOwned, $codec::KeyOwned, $crate::state::GapState)>(self)
                .optional()
                .map(|row| {
                    row.map(|(c, s, state)| ($codec::key_string(c), $codec::key_string(s), state))
                })
        }
    };
    (insert_event_sequence, $schema:ident, $codec:ident) => {
        fn insert_event_sequence(
            &mut self,
            key: $crate::backend::StreamKey<'_>,
            sequence: i64,
            event_id: &str,
        ) -> QueryResult<()> {
            use $schema::diesel_inbox_event_sequences::dsl as q;
            diesel::insert_into(q::diesel_inbox_event_sequences)
                .values((
                    q::consumer.eq($codec::key(key.0)),
                    q::stream.eq($codec::key(key.1)),
                    q::sequence.eq(sequence),
                    q::event_id.eq($codec::key(event_id)),
                ))
                .execute(self)
                .map(drop)
        }
    };
    (sequenced_events, $schema:ident, $codec:ident) => {
        fn sequenced_events(
            &mut self,
            key: $crate::backend::StreamKey<'_>,
            up_to: i64,
            limit: i64,
        ) -> QueryResult<Vec<(i64, String)>> {
            use $schema::diesel_inbox_event_sequences::dsl as q;
            q::diesel_inbox_event_sequences
                .filter(q::consumer.eq($codec::key(key.0)))
                .filter(q::stream.eq($codec::key(key.1)))
                .filter(q::sequence.le(up_to))
                .order(q::sequence)
                .limit(limit)
                .select((q::sequence, q::event_id))
                .load::<(i64, $codec::KeyOwned)>(self)
                .map(|rows| rows.into_iter().map(|(s, id)| (s, $codec::key_string(id))).collect())
        }
    };
    (delete_sequenced_events, $schema:ident, $codec:ident) => {
        fn delete_sequenced_events(
            &mut self,
            key: $crate::backend::StreamKey<'_>,
            up_to: i64,
            event_ids: &[&str],
        ) -> QueryResult<usize> {
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
            .execute(self)?;
            diesel::delete(
                q::diesel_inbox_event_sequences
                    .filter(q::consumer.eq($codec::key(key.0)))
                    .filter(q::stream.eq($codec::key(key.1)))
                    .filter(q::sequence.le(up_to)),
            )
            .execute(self)?;
            Ok(events)
        }
    };
    // Where the backend has `INSERT .. ON CONFLICT .. RETURNING` (PostgreSQL, SQLite).
    (record_claim, $schema:ident, $codec:ident, $rows:ident, upsert_returning) => {
        fn record_claim(
            &mut self,
            key: $crate::backend::Key<'_>,
            claim: &$crate::rows::NewClaim<'_>,
        ) -> QueryResult<Option<$crate::rows::ClaimRow>> {
            use $schema::diesel_inbox_claims::dsl as k;
            // A second claimant of the same key blocks here until the first commits. A
            // delivery counts on the row and keeps it from retention.
            let row = diesel::insert_into(k::diesel_inbox_claims)
                .values(new_claim_row!($schema, $codec, key, claim))
                .on_conflict((k::consumer, k::event_id))
                .do_update()
                .set((
                    k::deliveries.eq(k::deliveries + 1),
                    k::updated_at.eq($codec::time(claim.now)),
                ))
                .returning($rows::claim_columns())
                .get_result::<$rows::ClaimColumns>(self)?;
            let row = $crate::backend::readable($rows::claim_row(row))?;
            Ok((row.deliveries > 1).then_some(row))
        }
    };
    (claim, $schema:ident, $codec:ident, $rows:ident $(, lock = $lock:ident)?) => {
        fn claim(
            &mut self,
            key: $crate::backend::Key<'_>,
            lock: bool,
        ) -> QueryResult<Option<$crate::rows::ClaimRow>> {
            use $schema::diesel_inbox_claims::dsl as k;
            let row = k::diesel_inbox_claims
                .find(($codec::key(key.0), $codec::key(key.1)))
                .select($rows::claim_columns());
            $(
                if lock {
                    return row
                        .$lock()
                        .first::<$rows::ClaimColumns>(self)
                        .optional()?
                        .map(|row| $crate::backend::readable($rows::claim_row(row)))
                        .transpose();
                }
            )?
            let _ = lock;
            row.first::<$rows::ClaimColumns>(self)
                .optional()?
                .map(|row| $crate::backend::readable($rows::claim_row(row)))
                .transpose()
        }
    };
    (claims, $schema:ident, $codec:ident, $rows:ident) => {
        fn claims(
            &mut self,
            consumer: &str,
            states: Option<&[$crate::state::ClaimState]>,
            after: Option<&str>,
            limit: i64,
        ) -> QueryResult<Vec<$crate::rows::Listed<$crate::rows::ClaimRow>>> {
            use $schema::diesel_inbox_claims::dsl as k;
            let mut query = k::diesel_inbox_claims
                .filter(k::consumer.eq($codec::key(consumer)))
                .into_boxed();
            if let Some(states) = states {
                query = query.filter(k::state.eq_any(states.to_vec()));
            }
            if let Some(after) = after {
                query = query.filter(k::event_id.gt($codec::key(after)));
            }
            query
                .order(k::event_id)
                .limit(limit)
                .select($rows::claim_summary_columns())
                .load::<$rows::ClaimSummaryColumns>(self)
                .map(|rows| rows.into_iter().map($rows::claim_summary_row).collect())
        }
    };
    (update_claim, $schema:ident, $codec:ident) => {
        fn update_claim(
            &mut self,
            key: $crate::backend::Key<'_>,
            attempt: i64,
            from: &[$crate::state::ClaimState],
            change: &$crate::rows::ClaimChange<'_>,
        ) -> QueryResult<bool> {
            use $crate::state::ClaimState;
            use $schema::diesel_inbox_claims::dsl as k;
            let now = $codec::time(change.now);
            let row = k::diesel_inbox_claims
                .find(($codec::key(key.0), $codec::key(key.1)))
                .filter(k::attempt.eq(attempt))
                .filter(k::state.eq_any(from.to_vec()));
            // `None` leaves a column as it is.
            diesel::update(row)
                .set((
                    k::state.eq(change.state),
                    change.acquire.then(|| k::attempt.eq(k::attempt + 1)),
                    change.lease_until.map(|until| k::lease_until.eq($codec::time(until))),
                    change.result.map(|json| k::result.eq(Some(json))),
                    (change.state == ClaimState::Completed)
                        .then(|| k::completed_at.eq(Some(now))),
                    // A new holder starts without the last one's reason.
                    if change.acquire { Some(None) } else { change.note.map(Some) }
                        .map(|note| k::last_error.eq(note)),
                    change.audit.map(|audit| {
                        (
                            k::resolved_by.eq(Some(audit.actor())),
                            k::resolution.eq(Some(audit.reason())),
                        )
                    }),
                    k::updated_at.eq(now),
                ))
                .execute(self)
                .map(|changed| changed == 1)
        }
    };
    // `column_exists`; `columns`: the backend's query counting a table's columns by name, in
    // two parts: the SQL before the table's name is bound, and the SQL before the column's.
    ($method:ident, columns = ($before_table:expr, $before_column:expr)) => {
        fn $method(&mut self, table: &str, column: &str) -> QueryResult<bool> {
            diesel::dsl::sql::<diesel::sql_types::BigInt>($before_table)
                .bind::<diesel::sql_types::Text, _>(table)
                .sql($before_column)
                .bind::<diesel::sql_types::Text, _>(column)
                .get_result::<i64>(self)
                .map(|found| found > 0)
        }
    };
    // `index_exists` or `table_exists`; `catalogue`: the backend's query counting the current
    // database's indexes or tables by name, the name bound last.
    ($method:ident, catalogue = $query:expr) => {
        fn $method(&mut self, name: &str) -> QueryResult<bool> {
            diesel::dsl::sql::<diesel::sql_types::BigInt>($query)
                .bind::<diesel::sql_types::Text, _>(name)
                .get_result::<i64>(self)
                .map(|found| found > 0)
        }
    };
}
