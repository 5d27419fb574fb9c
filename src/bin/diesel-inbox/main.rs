//! `diesel-inbox`: the ops tool for an inbox database.
//!
//! ```text
//! diesel-inbox [--database-url URL] [--consumer NAME] [--format table|json] [--yes] <COMMAND>
//!
//!   dead-letters list [--limit N] [--after ID] [--all-consumers]
//!                                             dead letters awaiting a decision, a page at a time
//!   dead-letters show <ID>                    one failed event, with its history
//!   dead-letters export [--output FILE] [--after ID] [--limit N] [--all-consumers]
//!                                             JSON lines, one per dead letter, with payloads
//!   dead-letters discard <ID> --reason R      mark it discarded: never runs (needs --yes)
//!   dead-letters release <ID> --reason R      its next delivery runs it as new (needs --yes)
//!   stats [--recent 24h] [--all]              what the consumer did, in total and recently
//!   gaps [--stream S] [--all] [--limit N] [--after ID]
//!                                             where each sequence cursor stands, and its open gaps
//!   gaps resolve <ID> --reason R              give up an open gap's sequences (needs --yes)
//!   claims [--all] [--limit N] [--after ID]   claims in doubt: side effects that may have happened
//!   claims show <ID>                          one claim, with its payload, result and resolution
//!   claims resolve <ID> --completed RESULT_JSON | --retry | --abandon --reason R
//!                                             settle a claim in doubt (needs --yes)
//!   outbox [--pending | --all] [--limit N] [--after POSITION]
//!                                             the outbox's totals, then its failed rows
//!   outbox show <POSITION>                    one outbox row in full
//!   outbox retry <POSITION> --reason R        make a failed row pending again (needs --yes)
//!   outbox prune --older-than 7d [--batch-size N]
//!                                             delete rows published before then (needs --yes)
//!   prune --older-than 30d --redelivery-window 7d [--dry-run]
//!                                             remove settled events past the window (needs --yes)
//!   doctor                                    check the schema, indexes and settings
//!   migration print [--dialect D]             the inbox's SQL
//!   migration install <DIR> [--dialect D]     write the inbox's migrations into DIR
//! ```
//!
//! The database URL comes from `--database-url` or `DATABASE_URL`; its scheme picks the
//! backend (`postgres://` or `postgresql://`, `mysql://` or `mariadb://`, `sqlite://` or a
//! file path without a scheme for SQLite; any other scheme is bad usage).
//! A change to rows needs `--yes`: without it the command says what it would change and
//! exits with 2, changing nothing.
//!
//! Exit codes: 0 success; 1 error (database, not found, invalid transition; message on stderr);
//! 2 bad usage (clap's own, and a change without `--yes`); 3 `doctor` found a failing check.

/// Runs `$body` with `$conn` bound to the concrete connection: one dispatch, then generic code.
macro_rules! with_connection {
    ($db:expr, |$conn:ident| $body:expr) => {
        match &mut $db {
            Database::Postgres($conn) => $body,
            Database::Sqlite($conn) => $body,
            Database::Mysql($conn) => $body,
        }
    };
}

mod claims;
mod dead_letters;
mod doctor;
mod gaps;
mod migration;
mod outbox;
mod output;
mod prune;
mod stats;

use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use diesel::{Connection, MysqlConnection, PgConnection, SqliteConnection};
use diesel_inbox::migrations::Dialect;
use diesel_inbox::{Audit, Inbox};

const LONG_ABOUT: &str =
    "Operate a diesel-inbox database: stats, dead letters, sequence gaps, claims in doubt, the outbox, \
retention, health checks, migrations.

The database URL comes from --database-url or DATABASE_URL; its scheme picks the backend \
(postgres:// or postgresql://, mysql:// or mariadb://, sqlite:// or a file path for SQLite).

Commands that change rows (dead-letters discard, dead-letters release, gaps resolve, \
claims resolve, outbox retry, outbox prune, prune) need --yes: \
without it they print what they would change and exit with 2, changing nothing.

Durations read as a number and a unit: 90s, 15m, 24h, 30d, 2w.

Exit codes:
  0  success
  1  error: database, dead letter, gap, claim or outbox row not found, invalid transition \
(message on stderr)
  2  bad usage, or a change without --yes
  3  doctor found a failing check";

/// The command line.
#[derive(Debug, Parser)]
#[command(name = "diesel-inbox", version, about, long_about = LONG_ABOUT)]
struct Cli {
    /// The database URL; its scheme picks the backend.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    database_url: Option<String>,
    /// The inbox consumer to operate on.
    #[arg(long, global = true, default_value = diesel_inbox::DEFAULT_CONSUMER)]
    consumer: String,
    /// Output: aligned columns, or JSON (one document per command; JSON lines for export).
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Really change rows; without it, a change is only described (exit code 2).
    #[arg(long, global = true)]
    yes: bool,
    #[command(subcommand)]
    command: Command,
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Aligned plain columns.
    Table,
    /// JSON.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// What the consumer did: processed, duplicates, failures, dead letters, payload conflicts.
    Stats(stats::StatsArgs),
    /// List, show, export, discard or release dead letters.
    DeadLetters {
        #[command(subcommand)]
        command: dead_letters::Command,
    },
    /// Where each sequence cursor stands and the gaps in its streams; resolve a gap given up on.
    ///
    /// Lists each of the consumer's streams: its watermark (every sequence at or below it is
    /// settled), the highest sequence settled, the sequence to resume the broker at ("fresh"
    /// before the first), the fencing epoch and its owner. Then the open gaps: id (to resolve
    /// by), stream, first..last, how many sequences are missing, cause (skipped: may still
    /// arrive; evicted: behind the broker's retention, never will), state, when detected.
    /// With --all also the filled and resolved ones, with when they closed, who resolved them
    /// and why. Gaps come in id order, --limit at a time (default 100); when the page is full
    /// it says where the next one starts: rerun with --after <last id>. As JSON, an object
    /// with consumer, cursors, gaps and more_after (the id to pass to --after, or null).
    /// Exits 0 whatever it finds.
    #[allow(
        clippy::doc_markdown,
        reason = "the doc comment is the --help text, read as plain text"
    )]
    Gaps(gaps::GapsArgs),
    /// Claims in doubt: side effects outside the database that may or may not have happened;
    /// show one, or resolve it once you know.
    ///
    /// Lists the consumer's claims in doubt, in event id order: event id, state, attempt (the
    /// holder's, whose outcome is unknown), deliveries seen, since when (the end of the lapsed
    /// lease, or the failure that left it in doubt), the idempotency key the side effect was
    /// given (look it up downstream), and why. With --all every claim, with when it completed,
    /// its result and reason. Then a count. --limit at a time (default 100); when the page
    /// is full it says where the next one starts: rerun with --after <last event id>. As
    /// JSON, an object with consumer, in_doubt, claims and more_after (the event id to pass
    /// to --after, or null). Exits 0 whatever it finds.
    #[allow(
        clippy::doc_markdown,
        reason = "the doc comment is the --help text, read as plain text"
    )]
    Claims(claims::ClaimsArgs),
    /// The transactional outbox: its totals and the rows that failed to publish; show a row,
    /// retry a failed one, prune published ones.
    ///
    /// Prints the totals: pending rows (waiting for the relay), published (accepted by the
    /// broker, kept until pruned), failed (refused for good or out of attempts, waiting for
    /// ops), and when the oldest pending row was enqueued and how long ago (the relay's lag).
    /// Then the failed rows, oldest first: position (to show or retry by), event id, topic
    /// (where it is published), aggregate (type/id: the rows of one aggregate are published in
    /// position order), event type, attempts (failed publishes), and the last error. With
    /// --pending also the pending rows, with when the relay may take each next (its backoff);
    /// with --all every row, with its state, when it was enqueued and published. Each list
    /// stops at --limit rows and says where the next page starts (--after). As JSON, an
    /// object with totals, rows (each row in full, in position order) and more_after (the
    /// last position of each list cut short). Exits 0 whatever it finds.
    #[allow(
        clippy::doc_markdown,
        reason = "the doc comment is the --help text, read as plain text"
    )]
    Outbox(outbox::OutboxArgs),
    /// Remove processed events older than the redelivery window, in short batches (needs --yes).
    Prune(prune::PruneArgs),
    /// Check the inbox schema, its indexes and the backend's settings (exit 3 on a failure).
    Doctor,
    /// Print or install the inbox migrations.
    Migration {
        #[command(subcommand)]
        command: migration::Command,
    },
}

/// Options every command gets.
#[derive(Debug)]
struct Global {
    format: Format,
    yes: bool,
}

/// Who makes an audited transition and why: kept in the dead letter's history, the gap
/// ledger, or on the claim; for an outbox retry, logged only.
#[derive(Debug, clap::Args)]
struct AuditArgs {
    /// Who makes the change (default: $USER).
    #[arg(long, env = "USER")]
    actor: String,
    /// Why (required).
    #[arg(long)]
    reason: String,
}

impl AuditArgs {
    /// The audit; bad usage when the actor or the reason is blank.
    fn audit(&self) -> Result<Audit, Failure> {
        Audit::new(self.actor.as_str(), self.reason.as_str())
            .map_err(|e| Failure::Usage(format!("error: {e}")))
    }
}

/// Why a command did not succeed, and its exit code.
#[derive(Debug)]
enum Failure {
    /// Exit 1: the operation failed.
    Error(String),
    /// Exit 2: bad usage, or a change without `--yes`.
    Usage(String),
    /// Exit 3: doctor found a failing check (the report is printed already).
    CheckFailed,
}

impl From<diesel_inbox::Error> for Failure {
    fn from(error: diesel_inbox::Error) -> Self {
        Self::Error(error.to_string())
    }
}

impl From<std::io::Error> for Failure {
    fn from(error: std::io::Error) -> Self {
        Self::Error(error.to_string())
    }
}

type Outcome = Result<(), Failure>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Error(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(1)
        }
        Err(Failure::Usage(message)) => {
            eprintln!("{message}");
            ExitCode::from(2)
        }
        Err(Failure::CheckFailed) => ExitCode::from(3),
    }
}

fn run(cli: Cli) -> Outcome {
    let global = Global {
        format: cli.format,
        yes: cli.yes,
    };
    let url = cli.database_url;
    let inbox = || {
        Inbox::new(cli.consumer.as_str())
            .map_err(|e| Failure::Usage(format!("error: --consumer: {e}")))
    };
    match &cli.command {
        Command::Migration { command } => migration::run(command, url.as_deref(), &global),
        Command::DeadLetters { command } => {
            let inbox = inbox()?;
            let mut db = Database::connect(url.as_deref())?;
            with_connection!(db, |conn| dead_letters::run(conn, &inbox, command, &global))
        }
        Command::Gaps(args) => {
            let inbox = inbox()?;
            let mut db = Database::connect(url.as_deref())?;
            with_connection!(db, |conn| gaps::run(conn, &inbox, args, &global))
        }
        Command::Claims(args) => {
            let inbox = inbox()?;
            let mut db = Database::connect(url.as_deref())?;
            with_connection!(db, |conn| claims::run(conn, &inbox, args, &global))
        }
        Command::Outbox(args) => {
            let mut db = Database::connect(url.as_deref())?;
            with_connection!(db, |conn| outbox::run(conn, args, &global))
        }
        Command::Stats(args) => {
            let inbox = inbox()?;
            let mut db = Database::connect(url.as_deref())?;
            with_connection!(db, |conn| stats::run(conn, &inbox, args, &global))
        }
        Command::Prune(args) => {
            let inbox = inbox()?;
            let mut db = Database::connect(url.as_deref())?;
            with_connection!(db, |conn| prune::run(conn, &inbox, args, &global))
        }
        Command::Doctor => {
            let mut db = Database::connect(url.as_deref())?;
            with_connection!(db, |conn| doctor::run(conn, &global))
        }
    }
}

/// A connection to whichever backend the URL names.
enum Database {
    Postgres(PgConnection),
    Sqlite(SqliteConnection),
    Mysql(MysqlConnection),
}

impl Database {
    fn connect(url: Option<&str>) -> Result<Self, Failure> {
        let url = require_url(url)?;
        let dialect = dialect_of(url)?;
        let failed = |e: diesel::ConnectionError| Failure::Error(format!("cannot connect: {e}"));
        Ok(match dialect {
            Dialect::Postgres => Self::Postgres(PgConnection::establish(url).map_err(failed)?),
            Dialect::Mysql => {
                // Diesel's MySQL client takes the mysql:// scheme only; MariaDB speaks it.
                let url = match url.split_once("://") {
                    Some((_, rest)) => format!("mysql://{rest}"),
                    None => url.to_owned(),
                };
                Self::Mysql(MysqlConnection::establish(&url).map_err(failed)?)
            }
            _ => {
                // SQLite would create a missing file and report on an empty database.
                let path = url.strip_prefix("sqlite://").unwrap_or(url);
                if !path.starts_with("file:") && path != ":memory:" && !Path::new(path).exists() {
                    return Err(Failure::Error(format!("no SQLite database at {path}")));
                }
                Self::Sqlite(SqliteConnection::establish(url).map_err(failed)?)
            }
        })
    }
}

fn require_url(url: Option<&str>) -> Result<&str, Failure> {
    url.ok_or_else(|| {
        Failure::Usage("error: no database URL: pass --database-url or set DATABASE_URL".to_owned())
    })
}

fn dialect_of(url: &str) -> Result<Dialect, Failure> {
    Dialect::from_database_url(url).ok_or_else(|| {
        Failure::Usage(format!(
            "error: cannot tell the backend from the database URL's scheme ({}): use postgres://, mysql://, mariadb://, sqlite:// or a file path",
            url.split_once("://").map_or(url, |(scheme, _)| scheme)
        ))
    })
}

/// A duration as people type it: a whole number and a unit, `s`, `m`, `h`, `d` or `w`.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (amount, unit) = text.split_at(split);
    let amount: u64 = amount
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: write a number and a unit, e.g. 30d"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => {
            return Err(format!(
                "{text:?}: the unit must be s, m, h, d or w, e.g. 30d"
            ))
        }
    };
    amount
        .checked_mul(seconds)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse_duration;

    #[test]
    fn durations_read_as_a_number_and_a_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(14 * 86_400)));
        for bad in ["", "d", "30", "30 d", "1.5h", "-1d", "30y"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
