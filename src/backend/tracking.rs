//! The inbox's own record of the migrations it applied, `diesel_inbox_migrations`, and the
//! record of diesel-inbox 0.1 that it takes over from Diesel's `__diesel_schema_migrations`.
//! [`crate::migrations`] decides what to apply; these are its statements.

use diesel::{Connection, QueryResult};
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
use diesel::{ExpressionMethods, QueryDsl, RunQueryDsl};

/// The versions that diesel-inbox 0.1, before the inbox kept a record of its own, applied
/// through Diesel's harness and so recorded in the application's `__diesel_schema_migrations`;
/// back then the events table was named `diesel_inbox`.
const PRE_RELEASE_VERSIONS: [&str; 2] = ["20000101000001", "20000101000002"];

/// The inbox's own record of the migrations it applied, apart from the application's.
const CREATE_TRACKING_TABLE: &str = "CREATE TABLE IF NOT EXISTS diesel_inbox_migrations (
    version VARCHAR(50) PRIMARY KEY NOT NULL,
    run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
)";

mod tables {
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

/// The statements on `diesel_inbox_migrations`, for each concrete connection type (Diesel's
/// DSL is not generic over them).
pub trait TracksMigrations: Connection + 'static {
    /// Creates `diesel_inbox_migrations` where it does not exist yet.
    fn create_tracking_table(&mut self) -> QueryResult<()> {
        self.batch_execute(CREATE_TRACKING_TABLE)
    }
    /// Records `version` as applied.
    fn record(&mut self, version: &str) -> QueryResult<()>;
    /// Forgets `version`.
    fn forget(&mut self, version: &str) -> QueryResult<()>;
    /// The applied versions, newest first.
    fn applied(&mut self) -> QueryResult<Vec<String>>;
    /// The inbox's versions in Diesel's `__diesel_schema_migrations` (an error where that
    /// table does not exist).
    fn pre_release_versions(&mut self) -> QueryResult<Vec<String>>;
    /// Removes `version` from Diesel's `__diesel_schema_migrations`.
    fn forget_pre_release(&mut self, version: &str) -> QueryResult<()>;
}

/// Implements [`TracksMigrations`] for the connection type `$conn`.
macro_rules! tracks_migrations {
    ($conn:ty) => {
        impl TracksMigrations for $conn {
            fn record(&mut self, version: &str) -> QueryResult<()> {
                use tables::diesel_inbox_migrations as t;
                diesel::insert_into(t::table)
                    .values(t::version.eq(version))
                    .execute(self)
                    .map(drop)
            }

            fn forget(&mut self, version: &str) -> QueryResult<()> {
                use tables::diesel_inbox_migrations as t;
                diesel::delete(t::table.find(version))
                    .execute(self)
                    .map(drop)
            }

            fn applied(&mut self) -> QueryResult<Vec<String>> {
                use tables::diesel_inbox_migrations as t;
                t::table
                    .select(t::version)
                    .order(t::version.desc())
                    .load(self)
            }

            fn pre_release_versions(&mut self) -> QueryResult<Vec<String>> {
                use tables::__diesel_schema_migrations as d;
                d::table
                    .select(d::version)
                    .filter(d::version.eq_any(PRE_RELEASE_VERSIONS))
                    .order(d::version)
                    .load(self)
            }

            fn forget_pre_release(&mut self, version: &str) -> QueryResult<()> {
                use tables::__diesel_schema_migrations as d;
                diesel::delete(d::table.find(version))
                    .execute(self)
                    .map(drop)
            }
        }
    };
}

#[cfg(feature = "postgres")]
tracks_migrations!(diesel::PgConnection);
#[cfg(feature = "sqlite")]
tracks_migrations!(diesel::SqliteConnection);
#[cfg(feature = "mysql")]
tracks_migrations!(diesel::MysqlConnection);
