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
//!   gaps [--stream S] [--all] [--limit N] [--after ID] [--all-consumers]
//!                                             where each sequence cursor stands, and its open gaps
//!   gaps resolve <ID> --reason R              give up an open gap's sequences (needs --yes)
//!   reorgs [--stream S] [--limit N] [--after ID]
//!                                             the chain streams' fork ledger, and orphaned side effects
//!   claims [--all] [--limit N] [--after ID] [--all-consumers]
//!                                             claims in doubt: side effects that may have happened
//!   claims show <ID>                          one claim, with its payload, result and resolution
//!   claims resolve <ID> --completed RESULT_JSON | --retry | --abandon --reason R
//!                                             settle a claim in doubt (needs --yes)
//!   outbox [--pending | --all] [--limit N] [--after POSITION]
//!                                             the outbox's totals, then its failed rows
//!   outbox show <POSITION>                    one outbox row in full
//!   outbox retry <POSITION> --reason R        make a failed row pending again (needs --yes)
//!   outbox prune --older-than 7d [--batch-size N]
//!                                             delete rows published before then (needs --yes)
//!   replays plan --consumer NAME (--isolated DESTINATION | --live)
//!          (--first N --last M | --ids A,B | --from T1 --to T2) --reason R [--actor A]
//!          [--aggregate TYPE:ID] [--accept TYPE:V1,V2]... [--expect E]
//!          [--redirect-enqueues TOPIC] [--allow-calls] [--dry-run]
//!                                             record a replay of the outbox (or preview it)
//!   replays list [--after ID] [--limit N]     replays: state, target, range, counts, evidence
//!   replays show <ID> [--after POSITION] [--limit N]
//!                                             one replay: plan, evidence, history, notes
//!   replays run <ID> [--batch-size N] [--aggregate TYPE:ID]
//!                                             probe the live consumer: what would run twice
//!   replays reconcile <ID> [--aggregate TYPE:ID]
//!                                             compute its evidence (exit 3 when it differs)
//!   replays accept <ID> --reason R [--override]
//!                                             accept a reconciled replay (needs --yes)
//!   replays reject <ID> --reason R            reject a finished replay (needs --yes)
//!   replays abort <ID> --reason R             abort a planned or running one (needs --yes)
//!   replays prune --older-than 90d            delete decided replays (needs --yes)
//!   prune --older-than 30d --redelivery-window 7d [--dry-run]
//!                                             remove settled events past the window (needs --yes)
//!   doctor                                    check the schema, indexes and settings
//!   migration print [--dialect D]             the inbox's SQL
//!   migration install <DIR> [--dialect D]     write the inbox's migrations into DIR
//! ```
//!
//! The database URL comes from `--database-url` or `DATABASE_URL`; its scheme alone picks the
//! backend (`postgres://` or `postgresql://`, `mysql://` or `mariadb://`, `sqlite://`, `file:`,
//! in any case; a path without a scheme, i.e. no `:` before its first `/`, is a SQLite file;
//! anything else is bad usage, see `Dialect::parse_database_url`). A SQLite database is never
//! created: a missing file is an error. Passwords never reach the output: every message and
//! log line (`RUST_LOG`) goes through `diesel_inbox::redact::redact_url_secrets`.
//! A change to rows needs `--yes`: without it the command says what it would change and
//! exits with 2, changing nothing.
//!
//! Exit codes: 0 success, and a stdout closed by its reader (`| head`); 1 error (database, not
//! found, invalid transition; message on stderr); 2 bad usage (clap's own, and a change
//! without `--yes`); 3 a check ran and found a problem: `doctor` a failing check, `replays
//! reconcile` evidence that differs from the plan's expectation.

/// Every `print!` of the tool writes through [`output::write_stdout`], which ends the command
/// quietly (exit 0) when the reader has closed stdout, where std's would panic.
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

/// [`print!`] with a newline.
macro_rules! println {
    () => {
        $crate::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

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
mod consumers;
mod dead_letters;
mod doctor;
mod errors;
mod gaps;
mod migration;
mod outbox;
mod output;
mod prune;
#[cfg(test)]
mod reference;
mod reorgs;
mod replays;
mod stats;

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::OnceLock;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use diesel::{Connection, MysqlConnection, PgConnection, SqliteConnection};
use diesel_inbox::migrations::Dialect;
use diesel_inbox::{Audit, Inbox};

const LONG_ABOUT: &str =
    "Operate a diesel-inbox database: stats, dead letters, sequence gaps, chain reorgs, claims in doubt, \
the outbox, governed replays, retention, health checks, migrations.

The database URL comes from --database-url or DATABASE_URL; its scheme alone picks the backend \
(postgres:// or postgresql://, mysql:// or mariadb://, sqlite:// or file: for SQLite, in any case). \
Text with no `:` before its first `/` is a SQLite file path (./inbox.db); any other scheme is bad \
usage. A missing SQLite file is an error: the tool never creates one. Passwords are never printed: \
messages and log lines (RUST_LOG=debug, to stderr) have them replaced by ***.

Audited commands record --actor, or else $USER, else $LOGNAME, else the OS user name, and say \
on stderr which they used.

Commands that change rows (dead-letters discard, dead-letters release, gaps resolve, \
claims resolve, outbox retry, outbox prune, replays accept, replays reject, replays abort, \
replays prune, prune) need --yes: \
without it they print what they would change and exit with 2, changing nothing. A replay's own \
steps (replays plan, run, reconcile) record themselves in its history and need no --yes; \
replays plan --dry-run records nothing.

Durations read as a number and a unit: 90s, 15m, 24h, 30d, 2w.

Exit codes:
  0  success, or stdout closed by its reader (as by `| head`): the command stops quietly
  1  error: database, dead letter, gap, claim, outbox row or replay not found, invalid transition \
(message on stderr)
  2  bad usage, or a change without --yes
  3  a check ran and found a problem: doctor a failing check, replays reconcile evidence that \
differs from the plan's expectation";

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
    /// A consumer with no cursors or gaps is told which consumers have some; --all-consumers
    /// lists each of them (as JSON, an array of those objects). A gap this version cannot read
    /// is shown in its place as unreadable, with the repair. Exits 0 whatever it finds.
    #[allow(
        clippy::doc_markdown,
        reason = "the doc comment is the --help text, read as plain text"
    )]
    Gaps(gaps::GapsArgs),
    /// The fork ledger of the consumer's chain streams: every reorg, and the side effects
    /// outside the database that reorgs orphaned.
    ///
    /// Lists the reorgs, oldest first: ledger id, chain stream, the ancestor's height (the
    /// last block both branches share), the orphaned branch's head and the block that revealed
    /// the fork (height and hash, cut; whole in JSON), depth (blocks orphaned), events whose
    /// effect was reverted and, of those, how many took effect again since (each counted in
    /// the reorg that reverted it), and when. --limit at a time (default 100); when the page
    /// is full it says where the next one starts: rerun with --after <last id>. Then every
    /// side effect a reorg orphaned: a
    /// claim (an email, a payout) made for an event only the orphaned branch had, which the
    /// inbox cannot undo; look at it with `claims show`. As JSON, an object with consumer,
    /// reorgs, more_after (the id to pass to --after, or null) and orphaned_effects. Exits 0
    /// whatever it finds.
    #[allow(
        clippy::doc_markdown,
        reason = "the doc comment is the --help text, read as plain text"
    )]
    Reorgs(reorgs::ReorgsArgs),
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
    /// to --after, or null). A consumer with no claims is told which consumers have some;
    /// --all-consumers lists each of them (as JSON, an array of those objects). A claim this
    /// version cannot read is shown in its place (with --all) as unreadable, with the repair.
    /// Exits 0 whatever it finds.
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
    /// last position of each list cut short). A row this version cannot read is shown in its
    /// place as unreadable, with the repair. Exits 0 whatever it finds.
    #[allow(
        clippy::doc_markdown,
        reason = "the doc comment is the --help text, read as plain text"
    )]
    Outbox(outbox::OutboxArgs),
    /// Governed replays of the outbox into a target consumer: plan, probe, reconcile, decide.
    ///
    /// A replay is a bounded, recorded re-run of past outbox events into a target consumer:
    /// isolated (a consumer of its own writing into shadow tables, run by the service with the
    /// app's handler) or the live consumer (run here as a probe: no effect runs, and every
    /// event the consumer has processed comes back a duplicate). plan records it (--dry-run previews
    /// it); run probes a live one; reconcile computes its evidence (exit 3 when it differs from
    /// the plan's expectation); accept, reject or abort decide it (with --actor and --reason,
    /// and --yes); list, show and prune keep track. Every transition is kept with who made it
    /// and why (replays show). A replay planned with --aggregate is run and reconciled with the
    /// same --aggregate: its record does not keep it.
    #[allow(
        clippy::doc_markdown,
        reason = "the doc comment is the --help text, read as plain text"
    )]
    Replays {
        #[command(subcommand)]
        command: replays::Command,
    },
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
    /// Whether the command line gave `--consumer`, rather than its default: `replays plan`
    /// needs its target named.
    consumer_given: bool,
}

/// Who makes an audited transition and why: kept in the dead letter's history, the gap
/// ledger, or on the claim; for an outbox retry, logged only.
#[derive(Debug, clap::Args)]
struct AuditArgs {
    /// Who makes the change (default: $USER, else $LOGNAME, else the OS user name).
    #[arg(long)]
    actor: Option<String>,
    /// Why (required).
    #[arg(long)]
    reason: String,
}

impl AuditArgs {
    /// The audit; bad usage when the actor or the reason is blank, or no actor is found.
    /// An actor not given with `--actor` is named on stderr, with where it came from.
    fn audit(&self) -> Result<Audit, Failure> {
        let actor = if let Some(actor) = &self.actor {
            actor.clone()
        } else {
            let (actor, source) = default_actor().ok_or_else(|| {
                Failure::Usage(
                    "error: no actor: pass --actor (neither $USER, $LOGNAME nor the OS user name is set)"
                        .to_owned(),
                )
            })?;
            let _ = writeln!(std::io::stderr(), "actor: {actor} (from {source})");
            actor
        };
        Audit::new(actor.as_str(), self.reason.as_str())
            .map_err(|e| Failure::Usage(format!("error: {}", errors::message(&e))))
    }
}

/// The actor when `--actor` is not given, and where it came from: `$USER`, `$LOGNAME`, then
/// the OS user name (`id -un`: the crate forbids the unsafe a `getpwuid` call needs, and one
/// process spawn beats a dependency for a line of audit).
fn default_actor() -> Option<(String, &'static str)> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    if let Some(user) = var("USER") {
        return Some((user, "$USER"));
    }
    if let Some(user) = var("LOGNAME") {
        return Some((user, "$LOGNAME"));
    }
    let output = std::process::Command::new("id").arg("-un").output().ok()?;
    let name = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (output.status.success() && !name.is_empty()).then_some((name, "the OS user name"))
}

/// Why a command did not succeed, and its exit code.
#[derive(Debug)]
enum Failure {
    /// Exit 1: the operation failed.
    Error(String),
    /// Exit 2: bad usage, or a change without `--yes`.
    Usage(String),
    /// Exit 3: a check ran and found a problem (the report is printed already): doctor's
    /// failing check, a replay's evidence that differs from its plan's expectation.
    CheckFailed,
    /// Exit 0, quietly: the reader closed stdout (`| head`), so there is no one to tell.
    Closed,
}

impl From<diesel_inbox::AdminError> for Failure {
    fn from(error: diesel_inbox::AdminError) -> Self {
        Self::Error(errors::message(&error))
    }
}

impl From<diesel_inbox::Error> for Failure {
    fn from(error: diesel_inbox::Error) -> Self {
        diesel_inbox::AdminError::from(error).into()
    }
}

impl From<std::io::Error> for Failure {
    fn from(error: std::io::Error) -> Self {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            return Self::Closed;
        }
        Self::Error(error.to_string())
    }
}

type Outcome = Result<(), Failure>;

/// The database URL, for the redaction of every message and log line.
static URL: OnceLock<String> = OnceLock::new();

/// `text` without the URL's secrets, nor any password a URL or connection string carries.
fn redacted(text: &str) -> String {
    match URL.get() {
        Some(url) => diesel_inbox::redact::redact_url_secrets(text, url),
        None => diesel_inbox::redact::redact(text),
    }
}

/// Log lines to stderr, as `RUST_LOG` asks (nothing without it), each redacted whole.
fn install_logging() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() else {
        return;
    };
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(|| RedactedLine(Vec::new()))
                .with_ansi(false),
        )
        .with(filter)
        .try_init();
}

/// One log line, buffered, written redacted to stderr when the formatter is done with it.
struct RedactedLine(Vec<u8>);

impl std::io::Write for RedactedLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RedactedLine {
    fn drop(&mut self) {
        let line = redacted(&String::from_utf8_lossy(&self.0));
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli =
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.format(&mut Cli::command()).exit());
    let consumer_given =
        matches.value_source("consumer") == Some(clap::parser::ValueSource::CommandLine);
    if let Some(url) = &cli.database_url {
        let _ = URL.set(url.clone());
    }
    install_logging();
    let say = |message: &str| {
        let _ = writeln!(std::io::stderr(), "{}", redacted(message));
    };
    match run(cli, consumer_given) {
        Ok(()) | Err(Failure::Closed) => ExitCode::SUCCESS,
        Err(Failure::Error(message)) => {
            say(&format!("error: {message}"));
            ExitCode::from(1)
        }
        Err(Failure::Usage(message)) => {
            say(&message);
            ExitCode::from(2)
        }
        Err(Failure::CheckFailed) => ExitCode::from(3),
    }
}

fn run(cli: Cli, consumer_given: bool) -> Outcome {
    let global = Global {
        format: cli.format,
        yes: cli.yes,
        consumer_given,
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
        Command::Reorgs(args) => {
            let inbox = inbox()?;
            let mut db = Database::connect(url.as_deref())?;
            with_connection!(db, |conn| reorgs::run(conn, &inbox, args, &global))
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
        Command::Replays { command } => {
            let consumer = cli.consumer.as_str();
            let mut db = Database::connect(url.as_deref())?;
            with_connection!(db, |conn| replays::run(conn, consumer, command, &global))
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
            let postgres_url = match &db {
                Database::Postgres(_) => url.as_deref().map(driver_url),
                _ => None,
            };
            with_connection!(db, |conn| doctor::run(
                conn,
                postgres_url.as_deref(),
                &global
            ))
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
        let url = driver_url(url);
        let failed = |e: diesel::ConnectionError| Failure::Error(format!("cannot connect: {e}"));
        Ok(match dialect {
            Dialect::Postgres => {
                // An ops command sends few statements: without Diesel's statement cache it
                // works behind a pooler in transaction mode (PgBouncer) too.
                let mut conn = PgConnection::establish(&url).map_err(failed)?;
                conn.set_prepared_statement_cache_size(diesel::connection::CacheSize::Disabled);
                Self::Postgres(conn)
            }
            Dialect::Mysql => Self::Mysql(MysqlConnection::establish(&url).map_err(failed)?),
            _ => {
                let (path, uri) = sqlite_open(&url);
                if let Some(path) = path {
                    if !Path::new(path).exists() {
                        return Err(no_sqlite_database(path));
                    }
                }
                Self::Sqlite(SqliteConnection::establish(&uri).map_err(|e| match &e {
                    diesel::ConnectionError::BadConnection(m) if m.contains("unable to open") => {
                        no_sqlite_database(path.unwrap_or(&url))
                    }
                    _ => failed(e),
                })?)
            }
        })
    }
}

fn no_sqlite_database(path: &str) -> Failure {
    Failure::Error(format!(
        "no SQLite database at {path}: this tool never creates one; check the path, or create the database with the app's migrations"
    ))
}

/// `url` as its driver takes it: the scheme lowercased (libpq takes only lowercase
/// `postgres://` and `postgresql://`), and `mariadb://` as `mysql://` (Diesel's MySQL client
/// takes that scheme only; MariaDB speaks it).
fn driver_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    if scheme.contains(['/', '@', ':']) {
        return url.to_owned();
    }
    match scheme.to_ascii_lowercase().as_str() {
        "mariadb" => format!("mysql://{rest}"),
        lower => format!("{lower}://{rest}"),
    }
}

/// How the tool opens a SQLite URL: the file path when it names one (to check it exists), and
/// the URI to open, read-write but never created (`mode=rw`). `sqlite://` and plain paths
/// become `file:` URIs (`%`, `?` and `#` escaped); a `file:` URI keeps its parameters, with
/// `mode=rwc` made `mode=rw`; `:memory:` stays as it is.
fn sqlite_open(url: &str) -> (Option<&str>, String) {
    if url == ":memory:" {
        return (None, url.to_owned());
    }
    if url.len() >= 5 && url[..5].eq_ignore_ascii_case("file:") {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut params: Vec<String> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((key, "rwc")) if key.eq_ignore_ascii_case("mode") => "mode=rw".to_owned(),
                _ => p.to_owned(),
            })
            .collect();
        if !params
            .iter()
            .any(|p| p.to_ascii_lowercase().starts_with("mode="))
        {
            params.push("mode=rw".to_owned());
        }
        return (None, format!("file:{}?{}", &base[5..], params.join("&")));
    }
    let path = if url.len() >= 9 && url[..9].eq_ignore_ascii_case("sqlite://") {
        &url[9..]
    } else {
        url
    };
    let escaped = path
        .replace('%', "%25")
        .replace('?', "%3f")
        .replace('#', "%23");
    (Some(path), format!("file:{escaped}?mode=rw"))
}

fn require_url(url: Option<&str>) -> Result<&str, Failure> {
    url.ok_or_else(|| {
        Failure::Usage("error: no database URL: pass --database-url or set DATABASE_URL".to_owned())
    })
}

fn dialect_of(url: &str) -> Result<Dialect, Failure> {
    Dialect::parse_database_url(url).map_err(|e| Failure::Usage(format!("error: {e}")))
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

    use super::{driver_url, parse_duration, sqlite_open};

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

    #[test]
    fn drivers_get_a_lowercase_scheme_and_mariadb_as_mysql() {
        assert_eq!(driver_url("POSTGRES://a:b@h/db"), "postgres://a:b@h/db");
        assert_eq!(driver_url("Postgresql://h/db"), "postgresql://h/db");
        assert_eq!(driver_url("MariaDB://root@h/db"), "mysql://root@h/db");
        assert_eq!(driver_url("./inbox.db"), "./inbox.db");
    }

    #[test]
    fn sqlite_is_opened_read_write_and_never_created() {
        assert_eq!(
            sqlite_open("./in?box.db"),
            (Some("./in?box.db"), "file:./in%3fbox.db?mode=rw".to_owned())
        );
        assert_eq!(
            sqlite_open("sqlite:///var/x.db"),
            (Some("/var/x.db"), "file:/var/x.db?mode=rw".to_owned())
        );
        assert_eq!(sqlite_open("file:x.db").1, "file:x.db?mode=rw");
        assert_eq!(
            sqlite_open("file:x.db?mode=rwc&cache=shared").1,
            "file:x.db?mode=rw&cache=shared"
        );
        assert_eq!(sqlite_open("file:x.db?mode=ro").1, "file:x.db?mode=ro");
        assert_eq!(sqlite_open(":memory:"), (None, ":memory:".to_owned()));
    }
}
