//! `diesel-inbox prune`.

use std::io::Write as _;
use std::time::Duration;

use clap::Args;
use diesel_inbox::{
    retention::{Pruned, Retention},
    Inbox, InboxConnection,
};
use serde_json::json;

use crate::output;
use crate::{Failure, Format, Global, Outcome};

/// The `prune` options.
#[derive(Debug, Args)]
pub(crate) struct PruneArgs {
    /// Prune processed events whose first and latest delivery are older than this (e.g. 30d).
    #[arg(long, value_parser = crate::parse_duration)]
    older_than: Duration,
    /// The consumer's redelivery window, as the application declares it
    /// (`Inbox::redelivery_window`): the longest a redelivery can take. Required, so that a
    /// prune is never sized by a default; --older-than below it is refused.
    #[arg(long, value_parser = crate::parse_duration)]
    redelivery_window: Duration,
    /// Rows per batch: each batch is one short transaction.
    #[arg(long, default_value_t = 1000)]
    batch_size: u32,
    /// Only count what would be pruned.
    #[arg(long)]
    dry_run: bool,
    /// Allow an --older-than below one hour (the floor against a typo such as 0s, which
    /// prunes every settled event, minutes old ones included).
    #[arg(long)]
    force: bool,
}

/// The shortest --older-than taken without --force.
const FLOOR: Duration = Duration::from_secs(3_600);

/// Prunes, or counts what a prune would remove; without `--yes`, a real prune only counts
/// and exits with 2. A real prune first says on stderr what it is about to delete. An
/// --older-than below [`FLOOR`] is refused without --force.
pub(crate) fn run<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    args: &PruneArgs,
    global: &Global,
) -> Outcome {
    if args.batch_size == 0 {
        return Err(Failure::Usage(
            "error: --batch-size must be at least 1".to_owned(),
        ));
    }
    if args.older_than < FLOOR && !args.force {
        return Err(Failure::Usage(format!(
            "error: --older-than {}s is below the floor of 1h: it would prune every event settled since then, minutes-old ones included; pass --force if that is meant",
            args.older_than.as_secs()
        )));
    }
    let inbox = inbox.clone().redelivery_window(args.redelivery_window);
    let retention = Retention::older_than(args.older_than).batch_size(args.batch_size);
    let dry_run = args.dry_run || !global.yes;
    if !dry_run {
        let would = inbox.prune(conn, &retention.dry_run(true))?;
        let _ = writeln!(
            std::io::stderr(),
            "about to prune from consumer {}: {} events, {} failures, {} history rows, {} counter rows, {} claims",
            inbox.consumer(),
            would.events,
            would.failures,
            would.history,
            would.counters,
            would.claims
        );
    }
    let pruned = inbox.prune(conn, &retention.dry_run(dry_run))?;
    print(&pruned, inbox.consumer(), global);
    if dry_run && !args.dry_run {
        return Err(Failure::Usage(format!(
            "would prune {} events of {}; nothing changed: rerun with --yes",
            pruned.events,
            inbox.consumer()
        )));
    }
    Ok(())
}

fn print(pruned: &Pruned, consumer: &str, global: &Global) {
    match global.format {
        Format::Json => output::print_json(&json!({
            "consumer": consumer,
            "dry_run": pruned.dry_run,
            "events": pruned.events,
            "failures": pruned.failures,
            "history": pruned.history,
            "counters": pruned.counters,
            "claims": pruned.claims,
            "batches": pruned.batches,
            "longest_batch_seconds": pruned.longest_batch.as_secs_f64(),
            "elapsed_seconds": pruned.elapsed.as_secs_f64(),
        })),
        Format::Table => print!(
            "{}",
            output::fields(&[
                ("consumer", consumer.to_owned()),
                ("dry run", pruned.dry_run.to_string()),
                ("events", pruned.events.to_string()),
                ("failures", pruned.failures.to_string()),
                ("history", pruned.history.to_string()),
                ("counters", pruned.counters.to_string()),
                ("claims", pruned.claims.to_string()),
                ("batches", pruned.batches.to_string()),
                ("longest batch", format!("{:?}", pruned.longest_batch)),
                ("elapsed", format!("{:?}", pruned.elapsed)),
            ])
        ),
    }
}
