//! A health check of the inbox's database: is the schema applied and current, is every table,
//! column and index that the migrations create there, are the backend's settings the ones the
//! inbox relies on.
//!
//! The objects checked are the migrations' own list (held against their SQL by a test), and a
//! missing one's check names the SQL that recreates it ([`Check::remedy`]): the `CREATE INDEX`,
//! `CREATE TABLE` or `ALTER TABLE .. ADD COLUMN` statement of its migration, for the backend.
//!
//! [`check`] reads only. Run it from the application, on one of its own connections (so the
//! connection settings it reports are the application's), or through `diesel-inbox doctor`.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_inbox::doctor::{self, CheckStatus};
//!
//! let dir = tempfile::tempdir()?;
//! let mut conn = SqliteConnection::establish(&dir.path().join("app.db").display().to_string())?;
//! diesel_inbox::SqliteSetup::default().apply(&mut conn)?;
//! diesel_inbox::run_pending_migrations(&mut conn)?;
//!
//! for check in doctor::check(&mut conn)? {
//!     assert_eq!(check.status, CheckStatus::Ok, "{}: {}", check.name, check.detail);
//! }
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use crate::check::{Check, CheckStatus};
use crate::engine::run_ready;
use crate::migrations::objects::{Index, Table, INDEXES, TABLES};
use crate::migrations::{created_table, version_of_migration, TRACKING_TABLE};
use crate::sql::{Blocking, Db, DoctorSql, MigrationsSql, Sql};
use crate::{Error, InboxConnection};

/// Checks `conn`'s database: every inbox migration applied; every table, column and index
/// the migrations create present (a missing one's check says which statement recreates it);
/// and the backend's settings (PostgreSQL: a UTF8 server encoding; SQLite: WAL journal and a
/// busy timeout on this connection; MySQL/MariaDB: binary key columns). Reads only.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::doctor::CheckStatus;
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let checks = diesel_inbox::doctor::check(&mut conn)?;
/// assert!(checks.iter().all(|check| check.status != CheckStatus::Fail), "{checks:?}");
/// // A connection without `SqliteSetup` applied: no WAL journal, no busy timeout.
/// let warned: Vec<_> = checks.iter().filter(|c| c.status == CheckStatus::Warn).map(|c| c.name).collect();
/// assert!(warned.contains(&"busy_timeout"), "{warned:?}");
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`Error::Database`] when a check's query fails for another reason than what it checks (a
/// lost connection, missing permissions on the catalog).
pub fn check<C: InboxConnection>(conn: &mut C) -> Result<Vec<Check>, Error> {
    run_ready(check_in::<Blocking, _>(conn))
}

/// [`check`] in either flavour.
pub(crate) async fn check_in<F, C: Db<F, Backend: Sql>>(conn: &mut C) -> Result<Vec<Check>, Error> {
    let mut checks = vec![schema(conn).await?];
    let mut missing_tables = Vec::new();
    for table in TABLES {
        let check = table_check(conn, table).await?;
        if check.status == CheckStatus::Fail && !C::Backend::table_exists(conn, table.name).await? {
            missing_tables.push(table.name);
        }
        checks.push(check);
    }
    for index in INDEXES {
        checks.push(index_check(conn, index, &missing_tables).await?);
    }
    checks.extend(C::Backend::backend_checks(conn).await?);
    Ok(checks)
}

/// Whether `table` exists with every column; if not, the statement that recreates what is
/// missing, from its migration's SQL.
async fn table_check<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    table: &Table,
) -> diesel::QueryResult<Check> {
    let created = created_table(<C::Backend as MigrationsSql>::DIALECT, table.name);
    if !C::Backend::table_exists(conn, table.name).await? {
        let found = format!(
            "missing, though created by migration {} ({})",
            version_of_migration(table.migration).unwrap_or_default(),
            table.migration
        );
        return Ok(match created {
            Some(created) => Check::fixed_by(table.check, &found, created.statement),
            None => Check::new(table.check, CheckStatus::Fail, found),
        });
    }
    let mut missing = Vec::new();
    for column in table.columns {
        if !C::Backend::column_exists(conn, table.name, column).await? {
            missing.push(*column);
        }
    }
    if missing.is_empty() {
        return Ok(Check::new(
            table.check,
            CheckStatus::Ok,
            format!("present, with its {} columns", table.columns.len()),
        ));
    }
    let definitions: Vec<String> = missing
        .iter()
        .filter_map(|column| {
            let created = created.as_ref()?;
            let (_, definition) = created.columns.iter().find(|(name, _)| name == column)?;
            Some(format!(
                "ALTER TABLE {} ADD COLUMN {definition}",
                table.name
            ))
        })
        .collect();
    let found = format!("missing the columns {}", missing.join(", "));
    Ok(Check::fixed_by(table.check, &found, definitions.join("; ")))
}

/// Whether `index` exists; if not, the statement that recreates it (after its table, when
/// that is missing too).
async fn index_check<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    index: &Index,
    missing_tables: &[&str],
) -> diesel::QueryResult<Check> {
    if missing_tables.contains(&index.table) {
        return Ok(Check::fixed_by(
            index.check,
            &format!(
                "missing with its table {} (recreate that first)",
                index.table
            ),
            index.create_statement(),
        ));
    }
    let exists = if index.unique {
        C::Backend::unique_index_exists(conn, index.table, index.name).await?
    } else {
        C::Backend::index_exists(conn, index.name).await?
    };
    Ok(if exists {
        Check::new(index.check, CheckStatus::Ok, "present")
    } else {
        Check::fixed_by(index.check, "missing", index.create_statement())
    })
}

/// Whether every embedded migration is recorded as applied; where the tables exist but no
/// migration is recorded, the schema came another way (installed into the application's
/// migrations), which this cannot see into. Missing tables are the tables' own checks.
async fn schema<F, C: Db<F, Backend: Sql>>(conn: &mut C) -> diesel::QueryResult<Check> {
    const NAME: &str = "schema";
    let mut none = true;
    for table in TABLES {
        none &= !C::Backend::table_exists(conn, table.name).await?;
    }
    let tracked = C::Backend::table_exists(conn, TRACKING_TABLE).await?;
    if none && !tracked {
        return Ok(Check::new(
            NAME,
            CheckStatus::Fail,
            "no inbox table and no inbox migration applied: call diesel_inbox::run_pending_migrations at the application's start-up, or install them into its migrations folder with `diesel-inbox migration install` and run them with the Diesel CLI",
        ));
    }
    let installed = "diesel_inbox_migrations records no inbox migration (installed into the app's migrations?): cannot tell whether the schema is current; the table, column and index checks below still apply";
    if !tracked {
        return Ok(Check::new(NAME, CheckStatus::Warn, installed));
    }
    let pending = crate::migrations::pending(conn).await?;
    Ok(match pending.len() {
        0 => Check::new(NAME, CheckStatus::Ok, "every inbox migration is applied"),
        n if n == crate::migrations::COUNT => Check::new(NAME, CheckStatus::Warn, installed),
        _ => Check::new(
            NAME,
            CheckStatus::Fail,
            format!(
                "inbox migrations not applied: {}; call diesel_inbox::run_pending_migrations at the application's start-up (or print their SQL with `diesel-inbox migration print` and run it)",
                pending.join(", ")
            ),
        ),
    })
}

/// Whether the PostgreSQL URL `url` reaches PgBouncer rather than the server itself, as the
/// check `pooler`, and what follows. Opens a second connection, to the same host and port and
/// user, asking for PgBouncer's own database `pgbouncer`: PgBouncer's console answers there (it
/// refuses the prepared `SET` Diesel sends on connecting, `extended query protocol not
/// supported by admin console`, or a user that is not its admin with `not allowed`), where
/// PostgreSQL has no such database.
/// Anything else is taken for PostgreSQL itself.
///
/// Behind PgBouncer in transaction pooling mode, each transaction may run on another server
/// connection. The inbox takes no lock of a session there (its locks are transaction-scoped or
/// lease rows) and sets nothing on a session (`SET LOCAL` only); the application must disable
/// Diesel's prepared statement cache on every connection
/// (`set_prepared_statement_cache_size(CacheSize::Disabled)`), unless PgBouncer is 1.21 or
/// later with `max_prepared_statements` set. The check warns with that.
#[cfg(feature = "postgres")]
pub fn pooler(url: &str) -> Check {
    use diesel::connection::SimpleConnection;
    use diesel::Connection;

    let console = match diesel::PgConnection::establish(&with_database(url, "pgbouncer")) {
        Ok(mut conn) => SimpleConnection::batch_execute(&mut conn, "SHOW VERSION")
            .is_ok()
            .then_some("its console answers"),
        // Diesel sets the time zone when it connects, in a prepared statement, which the
        // console refuses (`extended query protocol not supported by admin console`); a user
        // that is not the console's is not allowed there.
        Err(error) => {
            let error = error.to_string();
            if error.contains("admin console") || error.contains("use SHOW HELP") {
                Some("its console answers")
            } else if error.contains("not allowed") {
                Some("its console refuses this user: not allowed")
            } else {
                None
            }
        }
    };
    match console {
        Some(how) => Check {
            name: "pooler",
            status: CheckStatus::Warn,
            detail: format!(
                "PgBouncer, not PostgreSQL, answers at this URL ({how}). In transaction pooling \
                 mode each transaction may run on another server connection: disable Diesel's \
                 statement cache on every connection (set_prepared_statement_cache_size(\
                 CacheSize::Disabled)), unless PgBouncer is 1.21 or later with \
                 max_prepared_statements; the inbox itself takes no session locks and sets \
                 nothing on the session"
            ),
            remedy: None,
        },
        None => Check {
            name: "pooler",
            status: CheckStatus::Ok,
            detail: "no PgBouncer answers at this URL".to_owned(),
            remedy: None,
        },
    }
}

/// `url` with its database (the path after the host) replaced by `name`; its query kept.
#[cfg(feature = "postgres")]
pub(crate) fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority = base.find("://").map_or(0, |i| i + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    match query {
        Some(query) => format!("{}/{name}?{query}", &base[..path]),
        None => format!("{}/{name}", &base[..path]),
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::with_database;

    #[test]
    fn with_database_replaces_only_the_path() {
        assert_eq!(
            with_database("postgres://root@127.0.0.1:5432/test", "t1"),
            "postgres://root@127.0.0.1:5432/t1"
        );
        assert_eq!(
            with_database("mysql://root@localhost:3306/test?ssl_mode=disabled", "t1"),
            "mysql://root@localhost:3306/t1?ssl_mode=disabled"
        );
        assert_eq!(with_database("postgres://host", "t1"), "postgres://host/t1");
    }
}
