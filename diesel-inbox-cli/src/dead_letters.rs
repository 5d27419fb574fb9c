//! `diesel-inbox dead-letters list|show|export|discard|release`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use clap::Subcommand;
use diesel_inbox::{
    dead_letter::{DeadLetter, DeadLetterState},
    retention::Stats,
    CorruptRow, Inbox, InboxConnection,
};
use serde_json::{json, Value};

use crate::consumers;
use crate::output::{self, payload_value};
use crate::{AuditArgs, Failure, Format, Global, Outcome};

/// The `dead-letters list` options.
#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// At most this many dead letters (of each consumer with --all-consumers).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    limit: u64,
    /// Only dead letters after this event id: the next page starts after the last one shown.
    #[arg(long, conflicts_with = "all_consumers")]
    after: Option<String>,
    /// Every consumer's dead letters, not only --consumer's.
    #[arg(long)]
    all_consumers: bool,
}

/// Rows an export reads at a time: with their payloads, these are all it holds in memory.
const EXPORT_PAGE: usize = 16;

/// The `dead-letters` subcommands.
#[derive(Debug, Subcommand)]
#[allow(
    clippy::doc_markdown,
    reason = "the doc comments are the --help text, read as plain text"
)]
pub(crate) enum Command {
    /// The consumer's dead letters awaiting a decision, in event id order, a page at a time.
    ///
    /// Reads no payloads. A row this version cannot read (a state it does not know, an
    /// invalid event id) is listed in its place as "unreadable: <why>"; as JSON, with state
    /// "unreadable" and an error field. When the page is full, says where the next one
    /// starts: rerun with --after <last event id shown>. When the consumer has none, names
    /// the consumers that have some.
    List(ListArgs),
    /// One failed event, in any state, with its history.
    Show {
        /// The event id.
        id: String,
    },
    /// Every dead letter awaiting a decision as JSON lines, with its payload, to re-publish.
    ///
    /// One object per line, in event id order: consumer, event_id, state, attempts,
    /// last_error, first_failed_at, last_failed_at (RFC 3339), payload_kind ("json",
    /// "bytes" or null) and payload (the JSON value; for bytes, a standard base64 string).
    /// Streams a few rows at a time, so memory stays small whatever the payloads weigh. A
    /// row this version cannot read is written as a line with consumer, event_id, state
    /// "unreadable" and an error field, and the command then exits 1 after every other row
    /// is written.
    Export {
        /// Write to this file instead of stdout.
        #[arg(long)]
        output: Option<PathBuf>,
        /// Only dead letters after this event id (to continue an export).
        #[arg(long, conflicts_with = "all_consumers")]
        after: Option<String>,
        /// At most this many dead letters (default: every one).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        limit: Option<u64>,
        /// Every consumer's dead letters, consumer by consumer, not only --consumer's.
        #[arg(long)]
        all_consumers: bool,
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
    match command {
        Command::List(args) => list(conn, inbox, args, global)?,
        Command::Show { id } => {
            let letter = inbox.dead_letters().show(conn, id.as_str())?;
            match global.format {
                Format::Json => output::print_json(&detailed(inbox.consumer(), &letter)),
                Format::Table => print_detailed(inbox.consumer(), &letter),
            }
        }
        Command::Export {
            output,
            after,
            limit,
            all_consumers,
        } => {
            let mut out: Box<dyn Write> = match output {
                Some(path) => Box::new(BufWriter::new(File::create(path).map_err(|e| {
                    Failure::Error(format!("cannot write {}: {e}", path.display()))
                })?)),
                None => Box::new(BufWriter::new(io::stdout().lock())),
            };
            let mut totals = Exported::default();
            for inbox in consumers::chosen(inbox, *all_consumers, || with_dead_letters(conn))? {
                let left = limit.map(|l| l.saturating_sub(totals.rows));
                let done = export(conn, &inbox, after.as_deref(), left, &mut out)?;
                totals.rows += done.rows;
                totals.unreadable += done.unreadable;
            }
            out.flush()?;
            if let Some(path) = output {
                eprintln!(
                    "exported {} dead letters to {}",
                    totals.rows,
                    path.display()
                );
            }
            if totals.unreadable > 0 {
                return Err(Failure::Error(format!(
                    "{} dead-letter row{} could not be read and {} exported as lines with an error field (the rest were exported): repair them as the error says, then export again",
                    totals.unreadable,
                    if totals.unreadable == 1 { "" } else { "s" },
                    if totals.unreadable == 1 { "was" } else { "were" },
                )));
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

/// Every consumer with dead letters awaiting a decision (or unreadable failure rows).
fn with_dead_letters<C: InboxConnection>(conn: &mut C) -> Result<Vec<String>, Failure> {
    Ok(Stats::all(conn, std::time::Duration::ZERO)?
        .into_iter()
        .filter(|s| s.totals.dead_lettered + s.totals.unreadable > 0)
        .map(|s| s.consumer)
        .collect())
}

/// The stored event id of a listed row, readable or not: where the next page starts.
fn stored_id(row: &Result<DeadLetter, CorruptRow>) -> String {
    match row {
        Ok(letter) => letter.event_id.as_str().to_owned(),
        Err(corrupt) => output::key_part(corrupt, "event_id"),
    }
}

/// Prints a page of the consumer's dead letters (of every consumer's, with --all-consumers).
fn list<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    args: &ListArgs,
    global: &Global,
) -> Outcome {
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    let mut pages = Vec::new();
    for inbox in consumers::chosen(inbox, args.all_consumers, || with_dead_letters(conn))? {
        let rows = inbox
            .dead_letters()
            .list(conn, args.after.as_deref(), limit)?;
        let more = rows.len() >= limit;
        pages.push((inbox.consumer().to_owned(), rows, more));
    }
    let shown: usize = pages.iter().map(|(_, rows, _)| rows.len()).sum();
    let empty_note = (shown == 0).then(|| {
        with_dead_letters(conn)
            .map(|others| consumers::nothing_for("dead letters", inbox.consumer(), &others))
    });
    let empty_note = empty_note.transpose()?;
    match global.format {
        Format::Json => {
            output::print_json(&Value::Array(
                pages
                    .iter()
                    .flat_map(|(consumer, rows, _)| {
                        rows.iter().map(move |row| listed(consumer, row))
                    })
                    .collect(),
            ));
            if let Some(note) = empty_note {
                eprintln!("{note}");
            }
            for (consumer, rows, more) in &pages {
                if let (true, Some(last)) = (*more, rows.last()) {
                    eprintln!(
                        "{}",
                        consumers::more_line(
                            "dead letters",
                            consumer,
                            &format!("{:?}", stored_id(last)),
                            args.all_consumers,
                        )
                    );
                }
            }
        }
        Format::Table => {
            let mut headers = vec!["event id", "attempts", "last failed", "last error"];
            if args.all_consumers {
                headers.insert(0, "consumer");
            }
            let table: Vec<Vec<String>> = pages
                .iter()
                .flat_map(|(consumer, rows, _)| {
                    rows.iter().map(move |row| {
                        let mut cells = match row {
                            Ok(d) => vec![
                                d.event_id.as_str().to_owned(),
                                d.attempts.to_string(),
                                output::time(d.last_failed_at),
                                output::cell(&d.last_error, 60),
                            ],
                            Err(corrupt) => output::unreadable_cells(corrupt, "event_id", 4),
                        };
                        if args.all_consumers {
                            cells.insert(0, consumer.clone());
                        }
                        cells
                    })
                })
                .collect();
            print!("{}", output::table(&headers, &table));
            if let Some(note) = empty_note {
                println!("{note}");
            } else {
                println!(
                    "{shown} dead letter{} shown",
                    if shown == 1 { "" } else { "s" }
                );
            }
            for (consumer, rows, more) in &pages {
                if let (true, Some(last)) = (*more, rows.last()) {
                    println!(
                        "{}",
                        consumers::more_line(
                            "dead letters",
                            consumer,
                            &format!("{:?}", stored_id(last)),
                            args.all_consumers,
                        )
                    );
                }
            }
        }
    }
    Ok(())
}

/// What an export wrote.
#[derive(Debug, Default)]
struct Exported {
    rows: u64,
    unreadable: u64,
}

/// Writes the consumer's dead letters after `after` (at most `limit`) as JSON lines, a page
/// at a time: each page lists the keys without payloads, then each row is read with its
/// payload, written and dropped before the next.
fn export<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    after: Option<&str>,
    limit: Option<u64>,
    out: &mut dyn Write,
) -> Result<Exported, Failure> {
    let dead = inbox.dead_letters();
    let consumer = inbox.consumer();
    let mut done = Exported::default();
    let mut after = after.map(str::to_owned);
    loop {
        let page = match limit.map(|l| l.saturating_sub(done.rows)) {
            Some(0) => break,
            Some(left) => usize::try_from(left).map_or(EXPORT_PAGE, |l| l.min(EXPORT_PAGE)),
            None => EXPORT_PAGE,
        };
        let rows = dead.list(conn, after.as_deref(), page)?;
        let full = rows.len() >= page;
        for row in &rows {
            let line = match row {
                Ok(listed) => match dead.show(conn, listed.event_id.as_str()) {
                    // Decided on since it was listed: no longer awaiting a decision.
                    Ok(letter) if letter.state != DeadLetterState::DeadLettered => continue,
                    Ok(letter) => {
                        let mut line = summary(consumer, &letter);
                        line["payload"] = payload_value(letter.payload.as_ref());
                        line
                    }
                    Err(diesel_inbox::AdminError::Inbox(diesel_inbox::Error::CorruptRow(
                        corrupt,
                    ))) => {
                        done.unreadable += 1;
                        output::unreadable(&corrupt)
                    }
                    Err(diesel_inbox::AdminError::DeadLetterNotFound { .. }) => continue,
                    Err(other) => return Err(other.into()),
                },
                Err(corrupt) => {
                    done.unreadable += 1;
                    output::unreadable(corrupt)
                }
            };
            writeln!(out, "{line}")?;
            done.rows += 1;
        }
        match rows.last() {
            Some(last) if full => after = Some(stored_id(last)),
            _ => break,
        }
    }
    Ok(done)
}

/// A listed row as JSON: the dead letter, or what makes it unreadable.
fn listed(consumer: &str, row: &Result<DeadLetter, CorruptRow>) -> Value {
    match row {
        Ok(letter) => summary(consumer, letter),
        Err(corrupt) => output::unreadable(corrupt),
    }
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
        "payload_kind": letter.payload_kind.as_deref(),
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
