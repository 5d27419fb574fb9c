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

use std::fmt;

use crate::backend::sealed::InboxSql;
use crate::{Error, InboxConnection};

/// The indexes the inbox's operations read through (migration 000003).
const INDEXES: [&str; 2] = ["diesel_inbox_events_settled", "diesel_inbox_failures_state"];

/// The inbox's tables.
const TABLES: [&str; 4] = [
    "diesel_inbox_events",
    "diesel_inbox_failures",
    "diesel_inbox_failure_log",
    "diesel_inbox_counters",
];

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CheckStatus {
    /// As the inbox expects.
    Ok,
    /// Works, but not as well or as safely as it could: the detail says what to change.
    Warn,
    /// Broken: the inbox cannot work correctly until it is fixed.
    Fail,
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "fail",
        })
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Check {
    /// What was checked, a stable short name: `schema`, `index diesel_inbox_events_settled`,
    /// `server_encoding`, `journal_mode`, `busy_timeout`, `binary_keys`.
    pub name: &'static str,
    /// How it came out.
    pub status: CheckStatus,
    /// What was found, and for a warning or a failure, what to do.
    pub detail: String,
}

impl Check {
    pub(crate) fn new(name: &'static str, status: CheckStatus, detail: impl Into<String>) -> Self {
        Self {
            name,
            status,
            detail: detail.into(),
        }
    }

    /// An `Ok` check when `ok`, else one with `otherwise`'s status and detail.
    pub(crate) fn ok_if(
        name: &'static str,
        ok: bool,
        detail: impl Into<String>,
        otherwise: (CheckStatus, String),
    ) -> Self {
        if ok {
            Self::new(name, CheckStatus::Ok, detail)
        } else {
            Self::new(name, otherwise.0, otherwise.1)
        }
    }
}

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
    let mut checks = vec![schema(sql)];
    for index in INDEXES {
        let exists = sql.index_exists(index)?;
        checks.push(Check::ok_if(
            index_check_name(index),
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

fn index_check_name(index: &str) -> &'static str {
    match index {
        "diesel_inbox_events_settled" => "index diesel_inbox_events_settled",
        _ => "index diesel_inbox_failures_state",
    }
}

/// Whether every embedded migration is recorded as applied; where none is but the tables
/// exist, the schema came another way (installed into the application's migrations).
fn schema<S: InboxSql>(sql: &mut S) -> Check {
    const NAME: &str = "schema";
    let missing_tables: Vec<&str> = TABLES
        .into_iter()
        .filter(|table| {
            let probe = format!("SELECT 1 FROM {table} WHERE 1 = 0");
            sql.transaction(|tx| tx.batch_execute(&probe)).is_err()
        })
        .collect();
    let pending = sql.pending_migrations();
    match (pending, missing_tables.is_empty()) {
        (Ok(pending), _) if pending.is_empty() => Check::new(
            NAME,
            CheckStatus::Ok,
            "every inbox migration is applied",
        ),
        (_, false) => Check::new(
            NAME,
            CheckStatus::Fail,
            format!(
                "missing {}: apply the inbox migrations (diesel_inbox::run_pending_migrations, or `diesel-inbox migration install` into the app's migrations)",
                missing_tables.join(", ")
            ),
        ),
        (Ok(pending), true) if pending.len() < crate::migrations::COUNT => Check::new(
            NAME,
            CheckStatus::Fail,
            format!(
                "inbox migrations not applied: {}; run diesel_inbox::run_pending_migrations",
                pending.join(", ")
            ),
        ),
        // The tables exist, and diesel_inbox_migrations records none of them (or is missing):
        // installed through the application's own migrations, which this cannot see.
        (_, true) => Check::new(
            NAME,
            CheckStatus::Warn,
            "the inbox tables exist, but diesel_inbox_migrations records no inbox migration (installed into the app's migrations?): cannot tell whether the schema is current",
        ),
    }
}
