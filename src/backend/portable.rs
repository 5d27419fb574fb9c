//! What the statements of every backend share, written once: the row mappings
//! (`row_mappings!`, which expands to a backend's `mod rows`), the row builders the inserts
//! take (`new_gap_row!`), and the catalogue checks of
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
            use $crate::rows::{CursorRow, GapRow, Listed, Unreadable};
            use $crate::state::UnknownState;
            use $schema::diesel_inbox_cursors as c;
            use $schema::diesel_inbox_gaps as g;

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
