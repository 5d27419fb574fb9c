//! `diesel-inbox migration print|install`: no database needed when `--dialect` is given.

use std::path::PathBuf;

use clap::Subcommand;
use diesel_inbox::migrations::{self, Dialect};
use serde_json::json;

use crate::{dialect_of, output, require_url, Failure, Format, Global, Outcome};

/// The `migration` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print the inbox's SQL (up migrations, in order).
    Print {
        /// postgres, sqlite or mysql (default: the database URL's).
        #[arg(long)]
        dialect: Option<Dialect>,
    },
    /// Write the inbox migrations into an application's Diesel migrations folder.
    Install {
        /// The application's migrations folder (it must exist).
        dir: PathBuf,
        /// postgres, sqlite or mysql (default: the database URL's).
        #[arg(long)]
        dialect: Option<Dialect>,
    },
}

pub(crate) fn run(command: &Command, url: Option<&str>, global: &Global) -> Outcome {
    let dialect = |given: Option<Dialect>| -> Result<Dialect, Failure> {
        match given {
            Some(dialect) => Ok(dialect),
            None => dialect_of(require_url(url).map_err(|_| {
                Failure::Usage(
                    "error: no dialect: pass --dialect, --database-url or set DATABASE_URL"
                        .to_owned(),
                )
            })?),
        }
    };
    match command {
        Command::Print { dialect: given } => {
            let sql = migrations::sql(dialect(*given)?);
            match global.format {
                Format::Json => output::print_json(&json!(sql
                    .iter()
                    .map(|m| json!({"name": m.name, "up": m.up, "down": m.down}))
                    .collect::<Vec<_>>())),
                Format::Table => {
                    for migration in sql {
                        println!("-- {}\n{}", migration.name, migration.up.trim_end());
                        println!();
                    }
                }
            }
        }
        Command::Install {
            dir,
            dialect: given,
        } => {
            let written = migrations::install(dir, dialect(*given)?)?;
            let paths: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
            match global.format {
                Format::Json => output::print_json(&json!(paths)),
                Format::Table if paths.is_empty() => {
                    println!(
                        "the inbox migrations are already installed in {}",
                        dir.display()
                    );
                }
                Format::Table => {
                    for path in paths {
                        println!("{path}");
                    }
                }
            }
        }
    }
    Ok(())
}
