//! `diesel-inbox gaps` and `diesel-inbox gaps resolve`.

use clap::{Args, Subcommand};
use diesel_inbox::{
    Audit, CorruptRow, Cursor, Error, Gap, GapState, Inbox, InboxConnection, Position, Resume,
};
use serde_json::{json, Value};

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
    #[arg(long, default_value_t = 0)]
    after: i64,
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
    ledger: &diesel_inbox::Gaps,
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

/// Prints where each stream's cursor stands, then its gaps.
fn list<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    args: &GapsArgs,
    global: &Global,
) -> Outcome {
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
    match global.format {
        Format::Json => output::print_json(&json!({
            "consumer": inbox.consumer(),
            "cursors": positions.iter().map(position_json).collect::<Vec<_>>(),
            "gaps": gaps.iter().map(listed).collect::<Vec<_>>(),
            "more_after": more_after,
        })),
        Format::Table => {
            let rows: Vec<Vec<String>> = positions
                .iter()
                .map(|p| {
                    vec![
                        p.stream().to_owned(),
                        or_dash(p.watermark()),
                        or_dash(p.high()),
                        resume_at(p.resume()).map_or_else(|| "fresh".to_owned(), |n| n.to_string()),
                        p.epoch().to_string(),
                        or_dash(p.owner()),
                        output::time(p.updated_at()),
                    ]
                })
                .collect();
            print!(
                "{}",
                output::table(
                    &[
                        "stream",
                        "watermark",
                        "high",
                        "resume at",
                        "epoch",
                        "owner",
                        "updated"
                    ],
                    &rows
                )
            );
            println!();
            let mut headers = vec![
                "gap",
                "stream",
                "first..last",
                "missing",
                "cause",
                "state",
                "detected",
            ];
            if args.all {
                headers.extend(["closed", "resolved by", "resolution"]);
            }
            let rows: Vec<Vec<String>> = gaps
                .iter()
                .map(|g| {
                    let g = match g {
                        Ok(g) => g,
                        Err(corrupt) => {
                            return output::unreadable_cells(corrupt, "id", headers.len())
                        }
                    };
                    let mut row = vec![
                        g.id().to_string(),
                        g.stream().to_owned(),
                        format!("{}..{}", g.first(), g.last()),
                        g.len().to_string(),
                        g.cause().to_string(),
                        g.state().to_string(),
                        output::time(g.detected_at()),
                    ];
                    if args.all {
                        row.extend([
                            or_dash(g.closed_at().map(output::time)),
                            or_dash(g.resolution().map(Audit::actor)),
                            output::cell(g.resolution().map_or("", |a| a.reason()), 60),
                        ]);
                    }
                    row
                })
                .collect();
            print!("{}", output::table(&headers, &rows));
            let n = gaps.len();
            println!("{n} gap{} shown", if n == 1 { "" } else { "s" });
            if let Some(last) = more_after {
                println!("more gaps may follow: rerun with --after {last}");
            }
        }
    }
    Ok(())
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
    if gap.state() != GapState::Open {
        return Err(Error::GapNotOpen {
            id,
            state: gap.state(),
        }
        .into());
    }
    if !global.yes {
        return Err(Failure::Usage(format!(
            "would resolve gap {id} of consumer {:?} (stream {:?}, sequences {}..{}, {}) as {:?} because {:?}; nothing changed: rerun with --yes to do it",
            inbox.consumer(),
            gap.stream(),
            gap.first(),
            gap.last(),
            gap.cause(),
            audit.actor(),
            audit.reason(),
        )));
    }
    let gap = ledger.resolve(conn, id, &audit)?;
    let position = inbox
        .cursor(gap.stream())
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
                    ("gap", gap.id().to_string()),
                    ("stream", gap.stream().to_owned()),
                    ("first..last", format!("{}..{}", gap.first(), gap.last())),
                    ("missing", gap.len().to_string()),
                    ("cause", gap.cause().to_string()),
                    ("state", gap.state().to_string()),
                    ("detected", output::time(gap.detected_at())),
                    ("closed", or_dash(gap.closed_at().map(output::time))),
                    ("resolved by", or_dash(gap.resolution().map(Audit::actor))),
                    ("resolution", or_dash(gap.resolution().map(Audit::reason))),
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

/// The id of a listed row, readable or not: where the next page starts.
fn gap_id(row: &Listed) -> i64 {
    match row {
        Ok(gap) => gap.id(),
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
        "id": gap.id(),
        "stream": gap.stream(),
        "first": gap.first(),
        "last": gap.last(),
        "missing": gap.len(),
        "cause": gap.cause().to_string(),
        "state": gap.state().to_string(),
        "detected_at": output::time(gap.detected_at()),
        "closed_at": gap.closed_at().map(output::time),
        "resolved_by": gap.resolution().map(Audit::actor),
        "resolution": gap.resolution().map(Audit::reason),
    })
}
