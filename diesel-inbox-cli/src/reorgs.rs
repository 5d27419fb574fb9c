//! `diesel-inbox reorgs`: the fork ledger of the consumer's chain streams, and the side
//! effects reorgs orphaned.

use clap::Args;
use diesel_inbox::chain::{BlockId, OrphanedEffect, Reorg};
use diesel_inbox::{Inbox, InboxConnection};
use serde_json::{json, Value};

use crate::consumers;
use crate::output::{self, cell};
use crate::{Failure, Format, Global, Outcome};

/// How many characters of a block hash a table shows; JSON has them whole.
const HASH_CHARS: usize = 18;

/// The `reorgs` listing options.
#[derive(Debug, Args)]
pub(crate) struct ReorgsArgs {
    /// Only this chain stream.
    #[arg(long)]
    stream: Option<String>,
    /// At most this many reorgs, oldest first.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,
    /// Only reorgs after this ledger id: the next page starts after the last id shown.
    #[arg(long, default_value_t = 0)]
    after: i64,
}

/// Prints a page of the consumer's reorgs, then every orphaned side effect.
pub(crate) fn run<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    args: &ReorgsArgs,
    global: &Global,
) -> Outcome {
    let mut ledger = inbox.reorgs();
    if let Some(stream) = &args.stream {
        ledger = ledger
            .of_stream(stream)
            .map_err(|e| Failure::Usage(format!("error: --stream: {e}")))?;
    }
    let reorgs = ledger.list(conn, args.after, args.limit)?;
    let orphaned = ledger.orphaned_effects(conn)?;
    let more_after = (reorgs.len() >= usize::try_from(args.limit).unwrap_or(usize::MAX))
        .then(|| reorgs.last().map(|r| r.id))
        .flatten();
    match global.format {
        Format::Json => output::print_json(&json!({
            "consumer": inbox.consumer(),
            "reorgs": reorgs.iter().map(reorg_json).collect::<Vec<_>>(),
            "more_after": more_after,
            "orphaned_effects": orphaned.iter().map(orphaned_json).collect::<Vec<_>>(),
        })),
        Format::Table => print_table(inbox, &reorgs, &orphaned, more_after),
    }
    Ok(())
}

/// The reorgs, a count and where the next page starts; then the orphaned side effects,
/// when there are any.
fn print_table(inbox: &Inbox, reorgs: &[Reorg], orphaned: &[OrphanedEffect], more: Option<i64>) {
    let rows: Vec<Vec<String>> = reorgs
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                r.stream.clone(),
                r.ancestor.to_string(),
                block_cell(&r.old_head),
                block_cell(&r.new_head),
                r.depth().to_string(),
                r.events_reverted.to_string(),
                r.events_reapplied.to_string(),
                output::time(r.happened_at),
            ]
        })
        .collect();
    let headers = [
        "reorg",
        "stream",
        "ancestor",
        "old head",
        "new head",
        "depth",
        "reverted",
        "re-applied",
        "happened",
    ];
    print!("{}", output::table(&headers, &rows));
    let n = rows.len();
    println!("{n} reorg{} shown", if n == 1 { "" } else { "s" });
    if n == 0 {
        println!(
            "{}",
            consumers::nothing_for("reorgs", inbox.consumer(), &[])
        );
    }
    if let Some(last) = more {
        println!(
            "{}",
            consumers::more_line("reorgs", inbox.consumer(), &last.to_string(), false)
        );
    }
    if orphaned.is_empty() {
        return;
    }
    println!();
    println!("side effects orphaned by reorgs (made outside the database, not undone: ops decide; see `diesel-inbox claims show <EVENT ID>`):");
    let rows: Vec<Vec<String>> = orphaned
        .iter()
        .map(|o| {
            vec![
                o.reorg.to_string(),
                format!("{:?}", o.event_id),
                o.stream.clone(),
                block_cell(&o.block),
                o.claim_state.to_string(),
                output::time(o.found_at),
            ]
        })
        .collect();
    let headers = ["reorg", "event id", "stream", "block", "claim", "found"];
    print!("{}", output::table(&headers, &rows));
}

/// A block as `height hash`, the hash cut for a table cell.
fn block_cell(block: &BlockId) -> String {
    format!("{} {}", block.height(), cell(block.hash(), HASH_CHARS))
}

fn block_json(block: &BlockId) -> Value {
    json!({ "height": block.height(), "hash": block.hash() })
}

fn reorg_json(r: &Reorg) -> Value {
    json!({
        "id": r.id,
        "stream": r.stream,
        "ancestor": r.ancestor,
        "old_head": block_json(&r.old_head),
        "new_head": block_json(&r.new_head),
        "depth": r.depth(),
        "events_reverted": r.events_reverted,
        "events_reapplied": r.events_reapplied,
        "happened_at": output::time(r.happened_at),
    })
}

fn orphaned_json(o: &OrphanedEffect) -> Value {
    json!({
        "reorg": o.reorg,
        "event_id": o.event_id,
        "stream": o.stream,
        "block": block_json(&o.block),
        "claim_state": o.claim_state.to_string(),
        "found_at": output::time(o.found_at),
    })
}
