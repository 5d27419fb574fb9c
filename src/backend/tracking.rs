//! The inbox's own record of the migrations it applied, `diesel_inbox_migrations`, and the
//! record of diesel-inbox 0.1 that it takes over from Diesel's `__diesel_schema_migrations`:
//! the `MigrationsSql` statements that read the same on every backend, written once. A
//! backend's `impl MigrationsSql` takes them all with `tracking_statements!()`; the trait, and
//! what each statement does, is [`crate::sql::MigrationsSql`].

/// The versions that diesel-inbox 0.1, before the inbox kept a record of its own, applied
/// through Diesel's harness and so recorded in the application's `__diesel_schema_migrations`;
/// back then the events table was named `diesel_inbox`.
pub(crate) const PRE_RELEASE_VERSIONS: [&str; 2] = ["20000101000001", "20000101000002"];

pub(crate) mod tables {
    diesel::table! {
        diesel_inbox_migrations (version) {
            version -> VarChar,
            run_on -> Timestamp,
        }
    }

    diesel::table! {
        /// Diesel's own record, where diesel-inbox 0.1 kept the inbox's versions.
        __diesel_schema_migrations (version) {
            version -> VarChar,
            run_on -> Timestamp,
        }
    }
}

/// The record's statements, in a backend's `impl MigrationsSql`.
macro_rules! tracking_statements {
    () => {
        async fn record_migration<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            version: &str,
        ) -> QueryResult<()> {
            use $crate::backend::tracking::tables::diesel_inbox_migrations as t;
            use $crate::sql::Run;
            diesel::insert_into(t::table)
                .values(t::version.eq(version))
                .execute_on(conn)
                .await
                .map(drop)
        }

        async fn applied_migrations<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
        ) -> QueryResult<Vec<String>> {
            use $crate::backend::tracking::tables::diesel_inbox_migrations as t;
            use $crate::sql::Run;
            t::table.select(t::version).load_on(conn).await
        }

        async fn pre_release_versions<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
        ) -> QueryResult<Vec<String>> {
            use $crate::backend::tracking::tables::__diesel_schema_migrations as d;
            use $crate::backend::tracking::PRE_RELEASE_VERSIONS;
            use $crate::sql::Run;
            d::table
                .select(d::version)
                .filter(d::version.eq_any(PRE_RELEASE_VERSIONS))
                .order(d::version)
                .load_on(conn)
                .await
        }

        async fn forget_pre_release<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            version: &str,
        ) -> QueryResult<()> {
            use $crate::backend::tracking::tables::__diesel_schema_migrations as d;
            use $crate::sql::Run;
            diesel::delete(d::table.find(version))
                .execute_on(conn)
                .await
                .map(drop)
        }
    };
}
