//! The catalogue reads of `DoctorSql` whose shape is the same on every backend, written once
//! (`catalogue_statement!`), with each backend's query as an explicit argument.

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
