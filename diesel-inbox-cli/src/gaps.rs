//! `diesel-inbox gaps` and `diesel-inbox gaps resolve`.

use clap::{Args, Subcommand};
use diesel_inbox::{
    cursor::{Cursor, Gap, GapState, Position, Resume},
    AdminError, Audit, CorruptRow, Error, Inbox, InboxConnection,
};
use serde_json::{json, Value};

use crate::consumers;
use crate::output::{self, or_dash};
use crate::{AuditArgs, Failure, Format, Global, Outcome};

/// The `gaps` listing options, or the `resolve` subcommand.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct GapsArgs {
    #[command(subcommand)]
    command: Option<Command>,
    /// Only this stream.
    #[arg(long)]
    stream: Option<String>,
    /// Closed gaps too (filled by late arrivals, or resolved), not only the open ones.
    #[arg(long)]
    all: bool,
    /// At most this many gaps, in gap id order.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    limit: u64,
    /// Only gaps after this gap id: the next page starts after the last id shown.
    #[arg(long, default_value_t = 0, conflicts_with = "all_consumers")]
    after: i64,
    /// Every consumer's cursors and gaps (each consumer's page up to --limit), with a
    /// consumer column; as JSON, an array of the per-consumer objects.
    #[arg(long)]
    all_consumers: bool,
}

/// The `gaps` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Give up an open gap's sequences (needs --yes): the ledger keeps who and why, and the
    /// stream's watermark moves past them, so their late arrivals are duplicates.
    ///
    /// Prints the gap as it now stands and where its stream resumes; as JSON, an object with
    /// consumer, gap and cursor, shaped as in the listing. A gap that is filled or resolved
    /// already, or that the consumer does not have, is an error (exit 1).
    Resolve {
        /// The gap's id, from the listing.
        id: i64,
        #[command(flatten)]
        audit: AuditArgs,
    },
}

pub(crate) fn run<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    args: &GapsArgs,
    global: &Global,
) -> Outcome {
    match &args.command {
        None => list(conn, inbox, args, global),
        Some(Command::Resolve { id, audit }) => resolve(conn, inbox, *id, audit, global),
    }
}

/// A listed gap, or the row this version cannot read in its place.
type Listed = Result<Gap, CorruptRow>;

/// A page of gaps in id order, and the id the next page starts after when this one is full.
fn page<C: InboxConnection>(
    conn: &mut C,
    ledger: &diesel_inbox::cursor::Gaps,
    args: &GapsArgs,
) -> Result<(Vec<Listed>, Option<i64>), Failure> {
    let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
    let gaps = if args.all {
        ledger.list(conn, args.after, limit)?
    } else {
        // Open gaps are few (a cursor allows so many): read them, then page in id order.
        let mut open = ledger.open(conn)?;
        open.retain(|g| gap_id(g) > args.after);
        open.sort_by_key(gap_id);
        open.truncate(limit);
        open
    };
    let more_after = (gaps.len() >= limit)
        .then(|| gaps.last().map(gap_id))
        .flatten();
    Ok((gaps, more_after))
}

/// One consumer's part of a listing: its cursors, a page of its gaps, and the id the next
/// page starts after when this one is full.
struct Listing {
    consumer: String,
    positions: Vec<Position>,
    gaps: Vec<Listed>,
    more_after: Option<i64>,
}

impl Listing {
    fn read<C: InboxConnection>(
        conn: &mut C,
        inbox: &Inbox,
        args: &GapsArgs,
    ) -> Result<Self, Failure> {
        let (ledger, positions) = match &args.stream {
            Some(stream) => {
                let cursor = inbox
                    .cursor(stream)
                    .map_err(|e| Failure::Usage(format!("error: --stream: {e}")))?;
                (cursor.gaps(), cursor.position(conn)?.into_iter().collect())
            }
            None => (inbox.gaps(), Cursor::all(conn, inbox)?),
        };
        let (gaps, more_after) = page(conn, &ledger, args)?;
        Ok(Self {
            consumer: inbox.consumer().to_owned(),
            positions,
            gaps,
            more_after,
        })
    }

    fn json(&self) -> Value {
        json!({
            "consumer": self.consumer,
            "cursors": self.positions.iter().map(position_json).collect::<Vec<_>>(),
            "gaps": self.gaps.iter().map(listed).collect::<Vec<_>>(),
            "more_after": self.more_after,
        })
    }
}

/// Prints where each stream's cursor stands, then its gaps (of every consumer's, with
/// --all-consumers).
fn list<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    args: &GapsArgs,
    global: &Global,
) -> Outcome {
    let mut listings = Vec::new();
    for inbox in consumers::chosen(inbox, args.all_consumers, || Ok(Cursor::consumers(conn)?))? {
        listings.push(Listing::read(conn, &inbox, args)?);
    }
    let empty = listings
        .iter()
        .all(|l| l.positions.is_empty() && l.gaps.is_empty());
    let empty_note = if empty {
        let others = Cursor::consumers(conn)?;
        Some(consumers::nothing_for(
            "cursors or gaps",
            inbox.consumer(),
            &others,
        ))
    } else {
        None
    };
    match global.format {
        Format::Json => {
            if args.all_consumers {
                output::print_json(&Value::Array(listings.iter().map(Listing::json).collect()));
            } else {
                output::print_json(&listings[0].json());
            }
            if let Some(note) = empty_note {
                eprintln!("{note}");
            }
        }
        Format::Table => print_table(&listings, args, empty_note),
    }
    Ok(())
}

/// The listing as tables: the cursors, then the gaps, then a count and where pages go on.
fn print_table(listings: &[Listing], args: &GapsArgs, empty_note: Option<String>) {
    let with_consumer = |consumer: &str, mut row: Vec<String>| {
        if args.all_consumers {
            row.insert(0, consumer.to_owned());
        }
        row
    };
    let headers = |names: &[&'static str]| {
        let mut headers = names.to_vec();
        if args.all_consumers {
            headers.insert(0, "consumer");
        }
        headers
    };
    let rows: Vec<Vec<String>> = listings
        .iter()
        .flat_map(|l| {
            l.positions.iter().map(|p| {
                with_consumer(
                    &l.consumer,
                    vec![
                        p.stream().to_owned(),
                        or_dash(p.watermark()),
                        or_dash(p.high()),
                        resume_at(p.resume()).map_or_else(|| "fresh".to_owned(), |n| n.to_string()),
                        p.epoch().to_string(),
                        or_dash(p.owner()),
                        output::time(p.updated_at()),
                    ],
                )
            })
        })
        .collect();
    print!(
        "{}",
        output::table(
            &headers(&[
                "stream",
                "watermark",
                "high",
                "resume at",
                "epoch",
                "owner",
                "updated"
            ]),
            &rows
        )
    );
    println!();
    let mut columns = vec![
        "gap",
        "stream",
        "first..last",
        "missing",
        "cause",
        "state",
        "detected",
    ];
    if args.all {
        columns.extend(["closed", "resolved by", "resolution"]);
    }
    let rows: Vec<Vec<String>> = listings
        .iter()
        .flat_map(|l| {
            l.gaps.iter().map(|g| {
                let g = match g {
                    Ok(g) => g,
                    Err(corrupt) => {
                        let row = output::unreadable_cells(corrupt, "id", columns.len());
                        return with_consumer(&l.consumer, row);
                    }
                };
                with_consumer(&l.consumer, gap_cells(g, args.all))
            })
        })
        .collect();
    print!("{}", output::table(&headers(&columns), &rows));
    let n = rows.len();
    println!("{n} gap{} shown", if n == 1 { "" } else { "s" });
    if let Some(note) = empty_note {
        println!("{note}");
    }
    for l in listings {
        if let Some(last) = l.more_after {
            let line =
                consumers::more_line("gaps", &l.consumer, &last.to_string(), args.all_consumers);
            println!("{line}");
        }
    }
}

/// Checks the gap is open, then with `--yes` resolves it; without, says what it would do.
fn resolve<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    id: i64,
    audit: &AuditArgs,
    global: &Global,
) -> Outcome {
    let audit = audit.audit()?;
    let ledger = inbox.gaps();
    let gap = ledger
        .list(conn, id.saturating_sub(1), 1)?
        .into_iter()
        .find(|g| gap_id(g) == id)
        .ok_or_else(|| {
            Failure::Error(format!(
                "no gap {id} for consumer {:?}; list them with `diesel-inbox --consumer {} gaps --all`",
                inbox.consumer(),
                inbox.consumer()
            ))
        })?
        .map_err(Error::from)?;
    if gap.state != GapState::Open {
        return Err(AdminError::GapNotOpen {
            id,
            state: gap.state,
        }
        .into());
    }
    if !global.yes {
        return Err(Failure::Usage(format!(
            "would resolve gap {id} of consumer {:?} (stream {:?}, sequences {}..{}, {}) as {:?} because {:?}; nothing changed: rerun with --yes to do it",
            inbox.consumer(),
            gap.stream,
            gap.first,
            gap.last,
            gap.cause,
            audit.actor(),
            audit.reason(),
        )));
    }
    let gap = ledger.resolve(conn, id, &audit)?;
    let position = inbox
        .cursor(&gap.stream)
        .map_err(Error::from)?
        .position(conn)?;
    match global.format {
        Format::Json => output::print_json(&json!({
            "consumer": inbox.consumer(),
            "gap": gap_json(&gap),
            "cursor": position.as_ref().map(position_json),
        })),
        Format::Table => {
            let resume = position
                .as_ref()
                .and_then(|p| resume_at(p.resume()))
                .map_or_else(|| "fresh".to_owned(), |n| n.to_string());
            print!(
                "{}",
                output::fields(&[
                    ("consumer", inbox.consumer().to_owned()),
                    ("gap", gap.id.to_string()),
                    ("stream", gap.stream.clone()),
                    ("first..last", format!("{}..{}", gap.first, gap.last)),
                    ("missing", gap.len().to_string()),
                    ("cause", gap.cause.to_string()),
                    ("state", gap.state.to_string()),
                    ("detected", output::time(gap.detected_at)),
                    ("closed", or_dash(gap.closed_at.map(output::time))),
                    (
                        "resolved by",
                        or_dash(gap.resolution.as_ref().map(Audit::actor))
                    ),
                    (
                        "resolution",
                        or_dash(gap.resolution.as_ref().map(Audit::reason))
                    ),
                    ("resume at", resume),
                ])
            );
        }
    }
    Ok(())
}

/// The sequence to seek the broker to; `None` for a fresh start.
fn resume_at(resume: Resume) -> Option<u64> {
    match resume {
        Resume::At(sequence) => Some(sequence),
        _ => None,
    }
}

fn position_json(position: &Position) -> Value {
    json!({
        "stream": position.stream(),
        "watermark": position.watermark(),
        "high": position.high(),
        "resume_at": resume_at(position.resume()),
        "epoch": position.epoch(),
        "owner": position.owner(),
        "updated_at": output::time(position.updated_at()),
    })
}

/// A gap's cells in the listing's table; with `all`, when it closed and who resolved it.
fn gap_cells(g: &Gap, all: bool) -> Vec<String> {
    let mut row = vec![
        g.id.to_string(),
        g.stream.clone(),
        format!("{}..{}", g.first, g.last),
        g.len().to_string(),
        g.cause.to_string(),
        g.state.to_string(),
        output::time(g.detected_at),
    ];
    if all {
        row.extend([
            or_dash(g.closed_at.map(output::time)),
            or_dash(g.resolution.as_ref().map(Audit::actor)),
            output::cell(g.resolution.as_ref().map_or("", |a| a.reason()), 60),
        ]);
    }
    row
}

/// The id of a listed row, readable or not: where the next page starts.
fn gap_id(row: &Listed) -> i64 {
    match row {
        Ok(gap) => gap.id,
        Err(corrupt) => output::key_part(corrupt, "id").parse().unwrap_or_default(),
    }
}

/// A listed row as JSON: the gap, or what makes it unreadable.
fn listed(row: &Listed) -> Value {
    match row {
        Ok(gap) => gap_json(gap),
        Err(corrupt) => output::unreadable(corrupt),
    }
}

fn gap_json(gap: &Gap) -> Value {
    json!({
        "id": gap.id,
        "stream": gap.stream,
        "first": gap.first,
        "last": gap.last,
        "missing": gap.len(),
        "cause": gap.cause.to_string(),
        "state": gap.state.to_string(),
        "detected_at": output::time(gap.detected_at),
        "closed_at": gap.closed_at.map(output::time),
        "resolved_by": gap.resolution.as_ref().map(Audit::actor),
        "resolution": gap.resolution.as_ref().map(Audit::reason),
    })
}
