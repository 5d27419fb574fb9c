//! `diesel-inbox outbox`, `diesel-inbox outbox show`, `diesel-inbox outbox retry` and
//! `diesel-inbox outbox prune`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use diesel_inbox::{
    outbox::{Outbox, OutboxRecord, OutboxState, OutboxStats},
    AdminError, CorruptRow, InboxConnection,
};
use serde_json::{json, Value};

use crate::output::{self, or_dash};
use crate::{AuditArgs, Failure, Format, Global, Outcome};

/// The `outbox` listing options, or a subcommand.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct OutboxArgs {
    #[command(subcommand)]
    command: Option<Command>,
    /// The pending rows too, after the failed ones: their attempts, next attempt and last error.
    #[arg(long, conflicts_with = "all")]
    pending: bool,
    /// Every row, published ones included, in one table with its state.
    #[arg(long)]
    all: bool,
    /// At most this many rows of each state listed (of every state with --all).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..))]
    limit: i64,
    /// Only rows after this position: the next page starts after the last position shown.
    #[arg(long, default_value_t = 0)]
    after: i64,
}

/// The `outbox` subcommands.
#[derive(Debug, Subcommand)]
#[allow(
    clippy::doc_markdown,
    reason = "the doc comments are the --help text, read as plain text"
)]
pub(crate) enum Command {
    /// One outbox row in full, in any state: its routing, attempts, last error and times.
    Show {
        /// The row's position, from the listing.
        position: i64,
    },
    /// Make a failed row pending again, once what failed it is fixed (needs --yes).
    ///
    /// Its attempts start again from 0 and the relay takes it on its next pass, after the rows
    /// of its aggregate that were published while it was failed. The row keeps no audit: who
    /// and why are printed here and logged by the library, not stored. Prints the row as it
    /// now stands. A row that is not failed (pending or published), or no row at that
    /// position, is an error (exit 1).
    Retry {
        /// The row's position, from the listing.
        position: i64,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Delete the rows published longer ago than --older-than, in short batches (needs --yes).
    ///
    /// Pending and failed rows are never deleted. Prints how many rows went; as JSON, an
    /// object with deleted, older_than_seconds and cutoff. Without --yes, says how many rows
    /// are published in all and the cutoff, and deletes nothing.
    Prune(PruneArgs),
}

/// The `outbox prune` options.
#[derive(Debug, Args)]
pub(crate) struct PruneArgs {
    /// Delete rows published more than this long ago (e.g. 7d; 0s: every published row).
    #[arg(long, value_parser = crate::parse_duration)]
    older_than: Duration,
    /// Rows per batch: each batch is one short DELETE.
    #[arg(long, alias = "batch", default_value_t = 1000)]
    batch_size: usize,
}

pub(crate) fn run<C: InboxConnection>(conn: &mut C, args: &OutboxArgs, global: &Global) -> Outcome {
    match &args.command {
        None => list(conn, args, global),
        Some(Command::Show { position }) => show(conn, *position, global),
        Some(Command::Retry { position, audit }) => retry(conn, *position, audit, global),
        Some(Command::Prune(prune_args)) => prune(conn, prune_args, global),
    }
}

/// The outbox's totals. `Outbox::stats` takes an outbox for its producer name, which it does
/// not read: any name does.
fn totals<C: InboxConnection>(conn: &mut C) -> Result<OutboxStats, Failure> {
    Ok(Outbox::stats(conn)?)
}

/// One listed section: the rows of a state (of every state for `None`), and whether the limit
/// cut it short.
struct Section {
    state: Option<OutboxState>,
    rows: Vec<Result<OutboxRecord, CorruptRow>>,
    more: bool,
}

/// Prints the totals, then the failed rows (and the pending ones with `--pending`; every row
/// with `--all`).
fn list<C: InboxConnection>(conn: &mut C, args: &OutboxArgs, global: &Global) -> Outcome {
    let stats = totals(conn)?;
    let now = Utc::now();
    let selected: &[Option<OutboxState>] = if args.all {
        &[None]
    } else if args.pending {
        &[Some(OutboxState::Failed), Some(OutboxState::Pending)]
    } else {
        &[Some(OutboxState::Failed)]
    };
    let mut sections = Vec::new();
    for (i, &state) in selected.iter().enumerate() {
        let mut rows = Outbox::list(conn, state, args.after, args.limit)?;
        let more = i64::try_from(rows.len()).is_ok_and(|n| n >= args.limit);
        // Every state's listing holds the rows whose state cannot be read: the first section
        // shows them.
        if i > 0 {
            rows.retain(Result::is_ok);
        }
        sections.push(Section { state, rows, more });
    }
    match global.format {
        Format::Json => {
            let mut rows: Vec<&Result<OutboxRecord, CorruptRow>> =
                sections.iter().flat_map(|s| &s.rows).collect();
            rows.sort_by_key(|r| position(r));
            let more: Value = sections
                .iter()
                .filter(|s| s.more)
                .map(|s| {
                    (
                        s.state
                            .map_or_else(|| "all".to_owned(), |st| st.to_string()),
                        json!(s.rows.last().map(position)),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
                .into();
            output::print_json(&json!({
                "totals": totals_json(&stats, now),
                "rows": rows.into_iter().map(listed).collect::<Vec<_>>(),
                "more_after": more,
            }));
        }
        Format::Table => {
            print!(
                "{}",
                output::fields(&[
                    ("pending", stats.pending.to_string()),
                    ("published", stats.published.to_string()),
                    ("failed", stats.failed.to_string()),
                    ("unreadable", stats.unreadable.to_string()),
                    (
                        "oldest pending",
                        stats.oldest_pending.map_or_else(
                            || "-".to_owned(),
                            |at| format!("{} ({} ago)", output::time(at), age(now, at))
                        )
                    ),
                ])
            );
            for section in &sections {
                println!();
                print_section(section);
            }
        }
    }
    Ok(())
}

/// A column of the outbox tables: its header, and its cell for a row.
type Column = (&'static str, fn(&OutboxRecord) -> String);

const POSITION: Column = ("position", |r| r.position.to_string());
const STATE: Column = ("state", |r| r.state.to_string());
const EVENT_ID: Column = ("event id", |r| r.event_id.clone());
const TOPIC: Column = ("topic", |r| r.topic.clone());
const AGGREGATE: Column = ("aggregate", |r| {
    format!("{}/{}", r.aggregate_type, r.aggregate_id)
});
const EVENT_TYPE: Column = ("event type", |r| r.event_type.clone());
const ATTEMPTS: Column = ("attempts", |r| r.attempts.to_string());
const NEXT_ATTEMPT: Column = ("next attempt", |r| output::time(r.available_at));
const ENQUEUED: Column = ("enqueued", |r| output::time(r.enqueued_at));
const PUBLISHED: Column = ("published", |r| or_dash(r.published_at.map(output::time)));
const LAST_ERROR: Column = ("last error", |r| {
    output::cell(r.last_error.as_deref().unwrap_or("-"), 100)
});

/// One section as a table, with a line saying what it is and where the next page starts.
fn print_section(section: &Section) {
    let columns: &[Column] = match section.state {
        Some(OutboxState::Pending) => &[
            POSITION,
            EVENT_ID,
            TOPIC,
            AGGREGATE,
            EVENT_TYPE,
            ATTEMPTS,
            NEXT_ATTEMPT,
            LAST_ERROR,
        ],
        None => &[
            POSITION, STATE, EVENT_ID, TOPIC, AGGREGATE, EVENT_TYPE, ATTEMPTS, ENQUEUED, PUBLISHED,
            LAST_ERROR,
        ],
        Some(_) => &[
            POSITION, EVENT_ID, TOPIC, AGGREGATE, EVENT_TYPE, ATTEMPTS, LAST_ERROR,
        ],
    };
    let headers: Vec<&str> = columns.iter().map(|(header, _)| *header).collect();
    let rows: Vec<Vec<String>> = section
        .rows
        .iter()
        .map(|r| match r {
            Ok(r) => columns.iter().map(|(_, cell)| cell(r)).collect(),
            Err(corrupt) => output::unreadable_cells(corrupt, "position", columns.len()),
        })
        .collect();
    print!("{}", output::table(&headers, &rows));
    let state = section.state.map_or_else(String::new, |s| format!("{s} "));
    let n = section.rows.len();
    println!("{n} {state}row{} shown", if n == 1 { "" } else { "s" });
    if let (true, Some(last)) = (section.more, section.rows.last()) {
        println!(
            "more {state}rows may follow: rerun with --after {}",
            position(last)
        );
    }
}

/// The position of a listed row, readable or not: where the next page starts.
fn position(row: &Result<OutboxRecord, CorruptRow>) -> i64 {
    match row {
        Ok(record) => record.position,
        Err(corrupt) => output::key_part(corrupt, "position")
            .parse()
            .unwrap_or_default(),
    }
}

/// A listed row as JSON: the record, or what makes it unreadable.
fn listed(row: &Result<OutboxRecord, CorruptRow>) -> Value {
    match row {
        Ok(record) => record_json(record),
        Err(corrupt) => output::unreadable(corrupt),
    }
}

/// Prints one row in full.
fn show<C: InboxConnection>(conn: &mut C, position: i64, global: &Global) -> Outcome {
    let record = Outbox::record(conn, position)?;
    print_record(&record, global);
    Ok(())
}

/// Checks the row is failed, then with `--yes` makes it pending again; without, says what it
/// would do.
fn retry<C: InboxConnection>(
    conn: &mut C,
    position: i64,
    audit: &AuditArgs,
    global: &Global,
) -> Outcome {
    let audit = audit.audit()?;
    let record = Outbox::record(conn, position)?;
    if record.state != OutboxState::Failed {
        return Err(AdminError::OutboxRowNotFailed {
            position,
            state: record.state,
        }
        .into());
    }
    if !global.yes {
        return Err(Failure::Usage(format!(
            "would make outbox row {position} pending again (event {:?}, topic {:?}, {} attempts, failed: {}) as {:?} because {:?}; nothing changed: rerun with --yes to do it",
            record.event_id,
            record.topic,
            record.attempts,
            output::cell(record.last_error.as_deref().unwrap_or("-"), 80),
            audit.actor(),
            audit.reason(),
        )));
    }
    Outbox::retry(conn, position, &audit)?;
    let record = Outbox::record(conn, position)?;
    print_record(&record, global);
    Ok(())
}

/// Deletes published rows past the cutoff; without `--yes`, says how many are published and
/// exits with 2.
fn prune<C: InboxConnection>(conn: &mut C, args: &PruneArgs, global: &Global) -> Outcome {
    if args.batch_size == 0 {
        return Err(Failure::Usage(
            "error: --batch-size must be at least 1".to_owned(),
        ));
    }
    let cutoff = chrono::Duration::from_std(args.older_than)
        .ok()
        .and_then(|d| Utc::now().checked_sub_signed(d))
        .map_or_else(|| "the beginning".to_owned(), output::time);
    if !global.yes {
        let published = totals(conn)?.published;
        return Err(Failure::Usage(format!(
            "would delete the outbox rows published before {cutoff} (of {published} published rows; pending and failed rows stay); nothing changed: rerun with --yes",
        )));
    }
    let deleted = Outbox::prune(conn, args.older_than, args.batch_size)?;
    match global.format {
        Format::Json => output::print_json(&json!({
            "deleted": deleted,
            "older_than_seconds": args.older_than.as_secs(),
            "cutoff": cutoff,
        })),
        Format::Table => print!(
            "{}",
            output::fields(&[
                ("deleted", deleted.to_string()),
                ("published before", cutoff),
            ])
        ),
    }
    Ok(())
}

/// How long ago `at` was, in its largest whole unit: `42s`, `17m`, `5h`, `3d`.
fn age(now: DateTime<Utc>, at: DateTime<Utc>) -> String {
    let seconds = (now - at).num_seconds().max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 120 * 60 => format!("{}m", s / 60),
        s if s < 48 * 3_600 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

fn totals_json(stats: &OutboxStats, now: DateTime<Utc>) -> Value {
    json!({
        "pending": stats.pending,
        "published": stats.published,
        "failed": stats.failed,
        "unreadable": stats.unreadable,
        "oldest_pending": stats.oldest_pending.map(output::time),
        "oldest_pending_age_seconds": stats
            .oldest_pending
            .map(|at| (now - at).to_std().map_or(0.0, |age| age.as_secs_f64())),
    })
}

fn record_json(record: &OutboxRecord) -> Value {
    json!({
        "position": record.position,
        "event_id": record.event_id,
        "state": record.state.to_string(),
        "topic": record.topic,
        "aggregate_type": record.aggregate_type,
        "aggregate_id": record.aggregate_id,
        "event_type": record.event_type,
        "attempts": record.attempts,
        "last_error": record.last_error,
        "enqueued_at": output::time(record.enqueued_at),
        "available_at": output::time(record.available_at),
        "published_at": record.published_at.map(output::time),
    })
}

/// Prints a row in full.
fn print_record(record: &OutboxRecord, global: &Global) {
    match global.format {
        Format::Json => output::print_json(&record_json(record)),
        Format::Table => print!(
            "{}",
            output::fields(&[
                ("position", record.position.to_string()),
                ("event id", record.event_id.clone()),
                ("state", record.state.to_string()),
                ("topic", record.topic.clone()),
                ("aggregate type", record.aggregate_type.clone()),
                ("aggregate id", record.aggregate_id.clone()),
                ("event type", record.event_type.clone()),
                ("attempts", record.attempts.to_string()),
                ("last error", or_dash(record.last_error.as_deref())),
                ("enqueued", output::time(record.enqueued_at)),
                ("next attempt", output::time(record.available_at)),
                ("published", or_dash(record.published_at.map(output::time))),
            ])
        ),
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::age;

    #[test]
    fn ages_read_in_their_largest_whole_unit() {
        let at = Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap();
        let after = |seconds| age(at + chrono::Duration::seconds(seconds), at);
        assert_eq!(after(42), "42s");
        assert_eq!(after(119), "119s");
        assert_eq!(after(17 * 60), "17m");
        assert_eq!(after(5 * 3_600), "5h");
        assert_eq!(after(3 * 86_400), "3d");
        assert_eq!(
            after(-5),
            "0s",
            "a clock behind the database's reads as now"
        );
    }
}
