//! What the statements of every backend share, written once: the row mappings
//! (`row_mappings!`, which expands to a backend's `mod rows`), the row builders the inserts
//! take (`new_inbox_row!`), and the catalogue checks of
//! `DoctorSql` (`catalogue_statement!`).
//!
//! Each takes what it needs as explicit arguments: `schema` is the backend's module of
//! [`crate::schema`], `codec` its module of key and time conversions (`key`, `key_string`,
//! `time`, `utc`, `Time`, `KeyOwned`, and `sum_i64`, its `SUM` of an integer column as a
//! `BIGINT`), and `rows` its module of row mappings. Nothing else is taken from the scope.

/// The select lists and row conversions shared by the statements that read rows back.
/// Expands to `mod rows`.
macro_rules! row_mappings {
    (schema = $schema:ident, codec = $codec:ident) => {
        /// The select lists of the inbox's tables and their conversion into rows.
        mod rows {
            use super::{$codec, $schema};
            use $crate::rows::{Existing, FailureRow, HistoryRow, InboxRow, Listed, Unreadable};
            use $crate::state::{InboxState, UnknownState};
            use $schema::diesel_inbox_events as t;
            use $schema::diesel_inbox_failure_log as l;
            use $schema::diesel_inbox_failures as f;

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

/// One `DoctorSql` catalogue read whose shape is the same on every backend, by name.
macro_rules! catalogue_statement {
    // `column_exists`; `columns`: the backend's query counting a table's columns by name, in
    // two parts: the SQL before the table's name is bound, and the SQL before the column's.
    ($method:ident, columns = ($before_table:expr, $before_column:expr)) => {
        async fn $method<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            table: &str,
            column: &str,
        ) -> QueryResult<bool> {
            use $crate::sql::Run as _;
            diesel::dsl::sql::<diesel::sql_types::BigInt>($before_table)
                .bind::<diesel::sql_types::Text, _>(table)
                .sql($before_column)
                .bind::<diesel::sql_types::Text, _>(column)
                .get_result_on::<i64>(conn)
                .await
                .map(|found| found > 0)
        }
    };
    // `index_exists` or `table_exists`; `catalogue`: the backend's query counting the current
    // database's indexes or tables by name, the name bound last.
    ($method:ident, catalogue = $query:expr) => {
        async fn $method<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            name: &str,
        ) -> QueryResult<bool> {
            use $crate::sql::Run as _;
            diesel::dsl::sql::<diesel::sql_types::BigInt>($query)
                .bind::<diesel::sql_types::Text, _>(name)
                .get_result_on::<i64>(conn)
                .await
                .map(|found| found > 0)
        }
    };
}
