//! `diesel-inbox`: the ops tool for an inbox database.
//!
//! ```text
//! diesel-inbox [--database-url URL] [--consumer NAME] [--format table|json] [--yes] <COMMAND>
//!
//!   dead-letters list                         dead letters awaiting a decision
//!   dead-letters show <ID>                    one failed event, with its history
//!   dead-letters export [--output FILE]       JSON lines, one per dead letter, with payloads
//!   dead-letters discard <ID> --reason R      mark it discarded: never runs (needs --yes)
//!   dead-letters release <ID> --reason R      its next delivery runs it as new (needs --yes)
//!   doctor                                    check the schema, indexes and settings
//!   migration print [--dialect D]             the inbox's SQL
//!   migration install <DIR> [--dialect D]     write the inbox's migrations into DIR
//! ```
//!
//! The database URL comes from `--database-url` or `DATABASE_URL`; its scheme picks the
//! backend (`postgres://`, `mysql://` or `mariadb://`, anything else a SQLite file).
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

mod dead_letters;
mod doctor;
mod migration;
mod output;

use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use diesel::{Connection, MysqlConnection, PgConnection, SqliteConnection};
use diesel_inbox::migrations::Dialect;
use diesel_inbox::Inbox;

const LONG_ABOUT: &str = "Operate a diesel-inbox database: dead letters, health checks, migrations.

The database URL comes from --database-url or DATABASE_URL; its scheme picks the backend \
(postgres:// or postgresql://, mysql:// or mariadb://, sqlite:// or a file path for SQLite).

Commands that change rows (dead-letters discard, dead-letters release) need --yes: without it \
they print what they would change and exit with 2, changing nothing.

Exit codes:
  0  success
  1  error: database, dead letter not found, invalid transition (message on stderr)
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
    /// List, show, export, discard or release dead letters.
    DeadLetters {
        #[command(subcommand)]
        command: dead_letters::Command,
    },
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
    match cli.command {
        Command::Migration { command } => migration::run(&command, url.as_deref(), &global),
        Command::DeadLetters { command } => {
            let inbox = Inbox::new(cli.consumer.as_str())
                .map_err(|e| Failure::Usage(format!("error: --consumer: {e}")))?;
            let mut db = Database::connect(url.as_deref())?;
            with_connection!(db, |conn| dead_letters::run(
                conn, &inbox, &command, &global
            ))
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
