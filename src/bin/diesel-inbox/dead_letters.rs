//! `diesel-inbox dead-letters list|show|export|discard|release`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use clap::Subcommand;
use diesel_inbox::{DeadLetter, DeadLetterState, Inbox, InboxConnection};
use serde_json::{json, Value};

use crate::output::{self, payload_kind, payload_value};
use crate::{AuditArgs, Failure, Format, Global, Outcome};

/// The `dead-letters` subcommands.
#[derive(Debug, Subcommand)]
#[allow(
    clippy::doc_markdown,
    reason = "the doc comments are the --help text, read as plain text"
)]
pub(crate) enum Command {
    /// The consumer's dead letters awaiting a decision, oldest first.
    List,
    /// One failed event, in any state, with its history.
    Show {
        /// The event id.
        id: String,
    },
    /// Every dead letter awaiting a decision as JSON lines, with its payload, to re-publish.
    ///
    /// One object per line: consumer, event_id, state, attempts, last_error, first_failed_at,
    /// last_failed_at (RFC 3339), payload_kind ("json", "bytes" or null) and payload (the JSON
    /// value; for bytes, a standard base64 string).
    Export {
        /// Write to this file instead of stdout.
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Mark a dead letter discarded: kept for the record, never run (needs --yes).
    Discard {
        /// The event id.
        id: String,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Release a dead letter to be published again: its next delivery runs the effect as new,
    /// with its attempts counted afresh (needs --yes).
    Release {
        /// The event id.
        id: String,
        #[command(flatten)]
        audit: AuditArgs,
    },
}

pub(crate) fn run<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    command: &Command,
    global: &Global,
) -> Outcome {
    let dead = inbox.dead_letters();
    let consumer = inbox.consumer();
    match command {
        Command::List => {
            let letters = dead.list(conn)?;
            match global.format {
                Format::Json => output::print_json(&Value::Array(
                    letters.iter().map(|d| summary(consumer, d)).collect(),
                )),
                Format::Table => {
                    let rows: Vec<Vec<String>> = letters
                        .iter()
                        .map(|d| {
                            vec![
                                d.event_id.as_str().to_owned(),
                                d.attempts.to_string(),
                                output::time(d.last_failed_at),
                                output::cell(&d.last_error, 60),
                            ]
                        })
                        .collect();
                    print!(
                        "{}",
                        output::table(
                            &["event id", "attempts", "last failed", "last error"],
                            &rows
                        )
                    );
                }
            }
        }
        Command::Show { id } => {
            let letter = dead.show(conn, id.as_str())?;
            match global.format {
                Format::Json => output::print_json(&detailed(consumer, &letter)),
                Format::Table => print_detailed(consumer, &letter),
            }
        }
        Command::Export { output } => {
            let letters = dead.list(conn)?;
            let mut out: Box<dyn Write> = match output {
                Some(path) => Box::new(BufWriter::new(File::create(path).map_err(|e| {
                    Failure::Error(format!("cannot write {}: {e}", path.display()))
                })?)),
                None => Box::new(BufWriter::new(io::stdout().lock())),
            };
            for letter in &letters {
                let mut line = summary(consumer, letter);
                line["payload"] = payload_value(letter.payload.as_ref());
                writeln!(out, "{line}")?;
            }
            out.flush()?;
            if let Some(path) = output {
                eprintln!(
                    "exported {} dead letters to {}",
                    letters.len(),
                    path.display()
                );
            }
        }
        Command::Discard { id, audit } => {
            transition(conn, inbox, id, audit, global, Change::Discard)?;
        }
        Command::Release { id, audit } => {
            transition(conn, inbox, id, audit, global, Change::Release)?;
        }
    }
    Ok(())
}

/// The changes to a dead letter this tool makes.
#[derive(Debug, Clone, Copy)]
enum Change {
    Discard,
    Release,
}

impl Change {
    fn verb(self) -> &'static str {
        match self {
            Self::Discard => "discard",
            Self::Release => "release",
        }
    }

    fn done(self) -> &'static str {
        match self {
            Self::Discard => "discarded: kept for the record, never run",
            Self::Release => {
                "released: re-publish the message (see `dead-letters export`); its next delivery runs the effect"
            }
        }
    }
}

/// Checks the dead letter, then with `--yes` makes the change; without, says what it would do.
fn transition<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    id: &str,
    audit: &AuditArgs,
    global: &Global,
    change: Change,
) -> Outcome {
    let audit = audit.audit()?;
    let dead = inbox.dead_letters();
    let letter = dead.show(conn, id)?;
    if letter.state != DeadLetterState::DeadLettered {
        return Err(Failure::Error(format!(
            "dead letter {id:?} is {}; only a dead-lettered event can be {}d",
            letter.state,
            change.verb()
        )));
    }
    if !global.yes {
        return Err(Failure::Usage(format!(
            "would {} dead letter {id:?} of consumer {:?} ({} attempts, last error: {}) as {:?} because {:?}; nothing changed: rerun with --yes to do it",
            change.verb(),
            inbox.consumer(),
            letter.attempts,
            output::cell(&letter.last_error, 80),
            audit.actor(),
            audit.reason(),
        )));
    }
    match change {
        Change::Discard => dead.discard(conn, id, &audit)?,
        Change::Release => dead.release(conn, id, &audit)?,
    }
    let after = dead.show(conn, id)?;
    match global.format {
        Format::Json => output::print_json(&summary(inbox.consumer(), &after)),
        Format::Table => println!("{id}: {}", change.done()),
    }
    Ok(())
}

/// A dead letter without payload or history.
fn summary(consumer: &str, letter: &DeadLetter) -> Value {
    json!({
        "consumer": consumer,
        "event_id": letter.event_id.as_str(),
        "state": letter.state.to_string(),
        "attempts": letter.attempts,
        "last_error": letter.last_error,
        "first_failed_at": output::time(letter.first_failed_at),
        "last_failed_at": output::time(letter.last_failed_at),
        "updated_at": output::time(letter.updated_at),
        "payload_kind": payload_kind(letter.payload.as_ref()),
    })
}

/// A dead letter with its payload and history.
fn detailed(consumer: &str, letter: &DeadLetter) -> Value {
    let mut value = summary(consumer, letter);
    value["payload"] = payload_value(letter.payload.as_ref());
    value["history"] = letter
        .history
        .iter()
        .map(|h| {
            json!({
                "kind": h.kind.to_string(),
                "attempt": h.attempt,
                "error": h.error,
                "actor": h.actor,
                "reason": h.reason,
                "at": output::time(h.at),
            })
        })
        .collect();
    value
}

fn print_detailed(consumer: &str, letter: &DeadLetter) {
    let payload = output::payload_text(letter.payload.as_ref());
    print!(
        "{}",
        output::fields(&[
            ("consumer", consumer.to_owned()),
            ("event id", letter.event_id.as_str().to_owned()),
            ("state", letter.state.to_string()),
            ("attempts", letter.attempts.to_string()),
            ("first failed", output::time(letter.first_failed_at)),
            ("last failed", output::time(letter.last_failed_at)),
            ("last error", letter.last_error.clone()),
            ("payload", output::cell(&payload, 200)),
        ])
    );
    println!();
    let rows: Vec<Vec<String>> = letter
        .history
        .iter()
        .map(|h| {
            vec![
                output::time(h.at),
                h.kind.to_string(),
                h.attempt.map(|a| a.to_string()).unwrap_or_default(),
                h.actor.clone().unwrap_or_default(),
                output::cell(h.reason.as_deref().or(h.error.as_deref()).unwrap_or(""), 60),
            ]
        })
        .collect();
    print!(
        "{}",
        output::table(
            &["at", "entry", "attempt", "actor", "reason / error"],
            &rows
        )
    );
}
