//! The result of one health check: what the doctor reports and each backend's checks return.

use std::fmt;

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
    /// What was checked, a stable short name: `schema`, `table diesel_inbox_events`,
    /// `index diesel_inbox_events_settled`,
    /// `server_encoding`, `journal_mode`, `busy_timeout`, `binary_keys`.
    pub name: &'static str,
    /// How it came out.
    pub status: CheckStatus,
    /// What was found, and for a warning or a failure, what to do.
    pub detail: String,
    /// For a failure that one SQL statement fixes (a missing index, table or column), that
    /// statement, for this backend; the detail names it too.
    pub remedy: Option<String>,
}

impl Check {
    pub(crate) fn new(name: &'static str, status: CheckStatus, detail: impl Into<String>) -> Self {
        Self {
            name,
            status,
            detail: detail.into(),
            remedy: None,
        }
    }

    /// A failed check that running `sql` fixes; the detail is `found`, then the statement.
    pub(crate) fn fixed_by(name: &'static str, found: &str, sql: String) -> Self {
        Self {
            name,
            status: CheckStatus::Fail,
            detail: format!("{found}: run {sql}"),
            remedy: Some(sql),
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
