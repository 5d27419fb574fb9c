//! `diesel-inbox doctor`.

use diesel_inbox::doctor::{self, CheckStatus};
use diesel_inbox::InboxConnection;
use serde_json::json;

use crate::output;
use crate::{Failure, Format, Global, Outcome};

/// Runs the checks, prints them (a failure's detail ends with the SQL that fixes it, also
/// `remedy` in JSON), and fails (exit 3) when one failed.
/// On PostgreSQL, `url` is the one dialled: whether it reaches PgBouncer is checked too.
pub(crate) fn run<C: InboxConnection>(conn: &mut C, url: Option<&str>, global: &Global) -> Outcome {
    let mut checks = doctor::check(conn)?;
    if let Some(url) = url {
        checks.push(doctor::pooler(url));
    }
    match global.format {
        Format::Json => output::print_json(&json!(checks
            .iter()
            .map(|c| json!({"name": c.name, "status": c.status.to_string(), "detail": c.detail, "remedy": c.remedy}))
            .collect::<Vec<_>>())),
        Format::Table => {
            let rows: Vec<Vec<String>> = checks
                .iter()
                .map(|c| vec![c.status.to_string(), c.name.to_owned(), c.detail.clone()])
                .collect();
            print!("{}", output::table(&["status", "check", "detail"], &rows));
        }
    }
    if checks.iter().any(|c| c.status == CheckStatus::Fail) {
        return Err(Failure::CheckFailed);
    }
    Ok(())
}
