//! A health check of the inbox's database: is the schema applied and current, are its indexes
//! there, are the backend's settings the ones the inbox relies on.
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

use crate::backend::sealed::InboxSql;
pub use crate::check::{Check, CheckStatus};
use crate::{Error, InboxConnection};

/// The indexes the inbox's and the outbox's operations read through (migrations 000003 to
/// 000006), and their checks' names.
const INDEXES: [(&str, &str); 7] = [
    (
        "diesel_inbox_events_settled",
        "index diesel_inbox_events_settled",
    ),
    (
        "diesel_inbox_failures_state",
        "index diesel_inbox_failures_state",
    ),
    ("diesel_inbox_gaps_open", "index diesel_inbox_gaps_open"),
    ("diesel_inbox_claims_open", "index diesel_inbox_claims_open"),
    (
        "diesel_inbox_outbox_state",
        "index diesel_inbox_outbox_state",
    ),
    (
        "diesel_inbox_outbox_aggregate",
        "index diesel_inbox_outbox_aggregate",
    ),
    (
        "diesel_inbox_outbox_published",
        "index diesel_inbox_outbox_published",
    ),
];

/// Where `run_pending_migrations` records the inbox's versions.
const TRACKING_TABLE: &str = "diesel_inbox_migrations";

/// The inbox's tables, and the outbox's.
const TABLES: [&str; 9] = [
    "diesel_inbox_events",
    "diesel_inbox_failures",
    "diesel_inbox_failure_log",
    "diesel_inbox_counters",
    "diesel_inbox_cursors",
    "diesel_inbox_gaps",
    "diesel_inbox_event_sequences",
    "diesel_inbox_claims",
    "diesel_inbox_outbox",
];

/// Checks `conn`'s database: every inbox migration applied, the inbox's indexes present, and
/// the backend's settings (PostgreSQL: a UTF8 server encoding; SQLite: WAL journal and a busy
/// timeout on this connection; MySQL/MariaDB: binary key columns). Reads only.
///
/// # Errors
///
/// [`Error::Database`] when a check's query fails for another reason than what it checks (a
/// lost connection, missing permissions on the catalog).
pub fn check<C: InboxConnection>(conn: &mut C) -> Result<Vec<Check>, Error> {
    let sql = conn.sql();
    let mut checks = vec![schema(sql)?];
    for (index, name) in INDEXES {
        let exists = sql.index_exists(index)?;
        checks.push(Check::ok_if(
            name,
            exists,
            "present",
            (
                CheckStatus::Fail,
                "missing: apply the inbox migrations (diesel_inbox::run_pending_migrations), or recreate it from `diesel-inbox migration print`".to_owned(),
            ),
        ));
    }
    checks.extend(sql.backend_checks()?);
    Ok(checks)
}

/// Whether the inbox's tables exist and every embedded migration is recorded as applied;
/// where the tables exist but no migration is recorded, the schema came another way
/// (installed into the application's migrations), which this cannot see into.
fn schema<S: InboxSql>(sql: &mut S) -> diesel::QueryResult<Check> {
    const NAME: &str = "schema";
    let mut missing = Vec::new();
    for table in TABLES {
        if !sql.table_exists(table)? {
            missing.push(table);
        }
    }
    if !missing.is_empty() {
        return Ok(Check::new(
            NAME,
            CheckStatus::Fail,
            format!(
                "missing {}: apply the inbox migrations (diesel_inbox::run_pending_migrations, or `diesel-inbox migration install` into the app's migrations)",
                missing.join(", ")
            ),
        ));
    }
    let installed = "the inbox tables exist, but diesel_inbox_migrations records no inbox migration (installed into the app's migrations?): cannot tell whether the schema is current";
    if !sql.table_exists(TRACKING_TABLE)? {
        return Ok(Check::new(NAME, CheckStatus::Warn, installed));
    }
    let pending = sql.pending_migrations()?;
    Ok(match pending.len() {
        0 => Check::new(NAME, CheckStatus::Ok, "every inbox migration is applied"),
        n if n == crate::migrations::COUNT => Check::new(NAME, CheckStatus::Warn, installed),
        _ => Check::new(
            NAME,
            CheckStatus::Fail,
            format!(
                "inbox migrations not applied: {}; run diesel_inbox::run_pending_migrations",
                pending.join(", ")
            ),
        ),
    })
}
