//! `diesel-inbox stats`.

use std::time::Duration;

use clap::Args;
use diesel_inbox::{
    retention::{Counts, Stats},
    Inbox, InboxConnection,
};
use serde_json::{json, Value};

use crate::output;
use crate::{Format, Global, Outcome};

/// The `stats` options.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// The recent window, e.g. 24h, 7d, 90m (counted in whole hours).
    #[arg(long, default_value = "24h", value_parser = crate::parse_duration)]
    recent: Duration,
    /// Every consumer in the database, not only --consumer.
    #[arg(long, visible_alias = "all-consumers")]
    all: bool,
}

/// Prints what the consumer (or every consumer) has done, in total and recently.
pub(crate) fn run<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    args: &StatsArgs,
    global: &Global,
) -> Outcome {
    let stats = if args.all {
        Stats::all(conn, args.recent)?
    } else {
        vec![inbox.stats(conn, args.recent)?]
    };
    match global.format {
        Format::Json => {
            let consumers: Vec<Value> = stats.iter().map(as_json).collect();
            output::print_json(&if args.all {
                json!(consumers)
            } else {
                consumers.into_iter().next().unwrap_or(Value::Null)
            });
        }
        Format::Table => {
            let headers = [
                "consumer",
                "over",
                "processed",
                "duplicates",
                "failed attempts",
                "dead-lettered",
                "discarded",
                "payload conflicts",
                "redriven",
                "released",
                "unreadable",
                "oldest unresolved failure",
            ];
            let recent = format!("since {}", output::time(stats_since(&stats)));
            let rows: Vec<Vec<String>> = stats
                .iter()
                .flat_map(|s| {
                    let oldest = s
                        .oldest_unresolved_failure
                        .map_or_else(|| "-".to_owned(), output::time);
                    [
                        row(&s.consumer, "all kept rows", &s.totals, oldest),
                        row(&s.consumer, &recent, &s.recent, String::new()),
                    ]
                })
                .collect();
            print!("{}", output::table(&headers, &rows));
        }
    }
    Ok(())
}

fn stats_since(stats: &[Stats]) -> chrono::DateTime<chrono::Utc> {
    stats
        .first()
        .map_or_else(chrono::Utc::now, |s| s.recent_since)
}

fn row(consumer: &str, over: &str, counts: &Counts, oldest: String) -> Vec<String> {
    vec![
        consumer.to_owned(),
        over.to_owned(),
        counts.processed.to_string(),
        counts.duplicates.to_string(),
        counts.failed_attempts.to_string(),
        counts.dead_lettered.to_string(),
        counts.discarded.to_string(),
        counts.payload_conflicts.to_string(),
        counts.redriven.to_string(),
        counts.released.to_string(),
        counts.unreadable.to_string(),
        oldest,
    ]
}

fn counts_json(counts: &Counts) -> Value {
    json!({
        "processed": counts.processed,
        "duplicates": counts.duplicates,
        "failed_attempts": counts.failed_attempts,
        "dead_lettered": counts.dead_lettered,
        "discarded": counts.discarded,
        "payload_conflicts": counts.payload_conflicts,
        "redriven": counts.redriven,
        "released": counts.released,
        "unreadable": counts.unreadable,
    })
}

fn as_json(stats: &Stats) -> Value {
    json!({
        "consumer": stats.consumer,
        "totals": counts_json(&stats.totals),
        "recent": counts_json(&stats.recent),
        "recent_since": output::time(stats.recent_since),
        "oldest_unresolved_failure": stats.oldest_unresolved_failure.map(output::time),
    })
}
