//! `diesel-inbox replays plan|list|show|run|reconcile|accept|reject|abort|prune`: governed
//! replays of the outbox, planned, probed, reconciled and decided from the command line.
//!
//! The tool has no app handler: `run` runs the library's probe, which proves what a replay into
//! the live consumer would run again without running it. An isolated replay runs the app's
//! handler, so the service runs it; the tool plans, reconciles and decides it all the same.

use std::io::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use diesel_inbox::replay::{
    self, Enqueues, Evidence, Expectation, Interpretation, OutboxSource, Plan, Preview, Probe,
    Range, ReplayCounts, ReplayNote, ReplayRecord, ReplayState, Replays, RunReport, Target,
    Transition,
};
use diesel_inbox::{
    envelope::SchemaVersions, AdminError, CorruptRow, Error, EventId, InboxConnection,
};
use serde_json::{json, Value};

use crate::errors;
use crate::output::{self, cell, or_dash};
use crate::{AuditArgs, Failure, Format, Global, Outcome};

/// How many replays, or notes of one, a page holds unless `--limit` says otherwise.
const PAGE: u64 = 100;

/// How many characters of an id range a table cell shows; JSON has it whole.
const RANGE_CHARS: usize = 40;

/// The `replays` subcommands.
#[derive(Debug, Subcommand)]
#[allow(
    clippy::doc_markdown,
    reason = "the doc comments are the --help text, read as plain text"
)]
pub(crate) enum Command {
    /// Record a replay of the outbox into a target consumer, planned (or preview it with
    /// --dry-run).
    ///
    /// The target consumer is --consumer, which plan needs given: with --isolated DESTINATION,
    /// a consumer name of the replay's own whose handler writes into DESTINATION (the shadow
    /// tables or schema the app names); with --live, the live consumer itself, where the
    /// replay proves what would run twice. The range always ends: outbox positions
    /// --first..--last, the events --ids, or those enqueued from --from to --to (excluded).
    /// Prints the record and the next step. With --dry-run records nothing and prints what
    /// the range holds: its events, how many the schema interpretation (--accept) skips, how
    /// many the target consumer has already (duplicates, were it to run now), and the first
    /// and last positions.
    Plan(Box<PlanArgs>),
    /// The replays, in id order, a page at a time.
    ///
    /// Each with its state, target consumer, whether it is live or isolated (and where it
    /// writes), source, range, counts, whether its evidence matches its expectation (yes, no,
    /// or - before its reconciliation) and when it last changed. When the page is full, says
    /// where the next one starts: rerun with --after <last id shown>. As JSON, an object with
    /// replays and more_after (the id to pass to --after, or null). A replay this version
    /// cannot read is listed in its place as unreadable, with the repair.
    List {
        /// Only replays after this id: the next page starts after the last one shown.
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// At most this many replays.
        #[arg(long, default_value_t = PAGE, value_parser = clap::value_parser!(u64).range(1..))]
        limit: u64,
    },
    /// One replay in full: its plan, counts, digest, checkpoint, lease, evidence, its
    /// transitions (who and why) and its notes.
    ///
    /// Notes are the events that did not simply take effect or come back as duplicates:
    /// skipped, failed, dead-lettered, run (or, under a probe, that would have run), or whose
    /// side effects were suppressed. They come in position order, --limit at a time (default
    /// 100); when the page is full it says where the next one starts: rerun with
    /// --after <position>.
    Show {
        /// The replay's id.
        id: i64,
        /// Only notes after this source position.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// At most this many notes.
        #[arg(long, default_value_t = PAGE, value_parser = clap::value_parser!(u64).range(1..))]
        limit: u64,
    },
    /// Run a replay into the live consumer as a probe: no effect runs.
    ///
    /// Each event of the range goes through the live consumer's inbox: one it processed
    /// already counts as a duplicate (and, as any redelivery does, in the consumer's duplicate
    /// deliveries); one that would take effect is rolled back, counted as failed and noted,
    /// with nothing recorded for the consumer. Prints a line of counts per batch, then how the run ended. A run
    /// stopped by an error resumes from its checkpoint when run again (after its lease runs
    /// out). An isolated replay runs the app's handler: the service runs it, not this tool.
    /// As JSON, the final report: id, finished, read_now (events this run read) and counts;
    /// the progress lines go to stderr.
    Run {
        /// The replay's id.
        id: i64,
        /// Events read per batch (default 100).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        batch_size: Option<u64>,
    },
    /// Reconcile a finished replay: re-read its range, check every event has its row in the
    /// target consumer's inbox, the counts and the input digest; store and print the evidence.
    ///
    /// Exits 0 when the evidence matches the plan's expectation, and 3 when it differs (each
    /// difference printed): reject the replay, or accept it with --override and a reason.
    Reconcile {
        /// The replay's id.
        id: i64,
    },
    /// Accept a finished, reconciled replay whose evidence matches its plan (needs --yes).
    ///
    /// Evidence that differs is refused (exit 1) unless --override is given: its reason is
    /// recorded with the differences it overrode.
    Accept {
        /// The replay's id.
        id: i64,
        /// Accept it whatever its evidence says.
        #[arg(long = "override")]
        overriding: bool,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Reject a finished replay (needs --yes).
    Reject {
        /// The replay's id.
        id: i64,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Abort a planned or running replay: it never runs again, and a runner holding it stops
    /// at its next event (needs --yes).
    Abort {
        /// The replay's id.
        id: i64,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Delete the decided replays (accepted, rejected, aborted) last changed longer ago than
    /// --older-than, with their transitions and notes (needs --yes).
    ///
    /// Open replays (planned, running, finished) are never deleted. Without --yes, says how
    /// many replays would go and deletes nothing. As JSON, an object with deleted,
    /// older_than_seconds and cutoff.
    Prune {
        /// Delete decided replays last changed more than this long ago (e.g. 90d; 0s: all).
        #[arg(long, value_parser = crate::parse_duration)]
        older_than: Duration,
    },
}

/// The `replays plan` options.
#[derive(Debug, Args)]
#[allow(
    clippy::doc_markdown,
    reason = "the doc comments are the --help text, read as plain text"
)]
pub(crate) struct PlanArgs {
    /// An isolated target: the replay's own consumer (--consumer) writes into DESTINATION.
    #[arg(
        long,
        value_name = "DESTINATION",
        required_unless_present = "live",
        conflicts_with = "live"
    )]
    isolated: Option<String>,
    /// The live consumer (--consumer) as the target: expects only duplicates by default.
    #[arg(long)]
    live: bool,
    // Every flag of one kind of range conflicts with every flag of the others: clap lets a
    // flag go without the one it `requires` when that one conflicts with a flag given.
    /// The first outbox position of the range (with --last).
    #[arg(
        long,
        requires = "last",
        required_unless_present_any = ["ids", "from"],
        conflicts_with_all = ["ids", "from", "to"]
    )]
    first: Option<u64>,
    /// The last outbox position of the range (with --first): later rows are never read.
    #[arg(long, requires = "first", conflicts_with_all = ["ids", "from", "to"])]
    last: Option<u64>,
    /// The events of the range, by event id, in this order: id,id,...
    #[arg(
        long,
        value_name = "ID,...",
        value_delimiter = ',',
        conflicts_with_all = ["from", "to"]
    )]
    ids: Vec<String>,
    /// The range's start, RFC 3339 (with --to): events enqueued at or after it.
    #[arg(long, value_name = "RFC3339", requires = "to", value_parser = parse_time)]
    from: Option<DateTime<Utc>>,
    /// The range's end, RFC 3339 (with --from): events enqueued before it.
    #[arg(long, value_name = "RFC3339", requires = "from", value_parser = parse_time)]
    to: Option<DateTime<Utc>>,
    #[command(flatten)]
    source: SourceArgs,
    /// Read only these schema versions of this event type (repeat for more types); others
    /// are skipped, counted and noted. Default: every version of every type.
    #[arg(long = "accept", value_name = "TYPE:V1,V2", value_parser = parse_accepted)]
    accepted: Vec<Accepted>,
    /// What the evidence must show: all-processed (the default for --isolated),
    /// all-duplicates (the default for --live) or any.
    #[arg(long, value_name = "EXPECTATION", value_parser = parse_expectation)]
    expect: Option<Expectation>,
    /// The replayed handler's outbox enqueues go to this topic of the replay's own (default:
    /// dropped).
    #[arg(long, value_name = "TOPIC")]
    redirect_enqueues: Option<String>,
    /// Let claims under the replay call out (default: suppressed, and noted).
    #[arg(long)]
    allow_calls: bool,
    /// Record nothing: print what the range holds and what the target has of it.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    audit: AuditArgs,
}

/// Which outbox rows a replay reads: every aggregate's, or one's.
#[derive(Debug, Args)]
#[allow(
    clippy::doc_markdown,
    reason = "the doc comments are the --help text, read as plain text"
)]
pub(crate) struct SourceArgs {
    /// Only this aggregate's outbox rows. The replay's source records it
    /// (outbox:TYPE/ID), and run and reconcile read the same rows.
    #[arg(long, value_name = "TYPE:ID", value_parser = parse_aggregate)]
    aggregate: Option<Aggregate>,
}

impl SourceArgs {
    /// The outbox as the replay's source.
    fn source(&self) -> OutboxSource {
        match &self.aggregate {
            Some(aggregate) => OutboxSource::new().aggregate(&aggregate.kind, &aggregate.id),
            None => OutboxSource::new(),
        }
    }
}

/// An aggregate, as `--aggregate TYPE:ID` names it.
#[derive(Debug, Clone)]
pub(crate) struct Aggregate {
    kind: String,
    id: String,
}

/// The schema versions of one event type a plan reads, as `--accept TYPE:V1,V2` names them.
#[derive(Debug, Clone)]
pub(crate) struct Accepted {
    event_type: String,
    versions: Vec<u32>,
}

/// `--aggregate`'s value: a type, `:`, an id (which may hold more `:`).
fn parse_aggregate(text: &str) -> Result<Aggregate, String> {
    match text.split_once(':') {
        Some((kind, id)) if !kind.is_empty() && !id.is_empty() => Ok(Aggregate {
            kind: kind.to_owned(),
            id: id.to_owned(),
        }),
        _ => Err(format!(
            "{text:?} is not an aggregate: write its type and id, e.g. order:42"
        )),
    }
}

/// `--accept`'s value: an event type, `:`, and its versions, comma-separated.
fn parse_accepted(text: &str) -> Result<Accepted, String> {
    let wrong = || format!("{text:?}: write an event type and its versions, e.g. order.placed:1,2");
    let (event_type, versions) = text.rsplit_once(':').ok_or_else(wrong)?;
    let versions: Vec<u32> = versions
        .split(',')
        .map(|v| v.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| wrong())?;
    if event_type.is_empty() || versions.is_empty() {
        return Err(wrong());
    }
    Ok(Accepted {
        event_type: event_type.to_owned(),
        versions,
    })
}

/// `--expect`'s value.
fn parse_expectation(text: &str) -> Result<Expectation, String> {
    text.parse::<Expectation>().map_err(|e| e.to_string())
}

/// `--from` and `--to`: RFC 3339, in any offset.
fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|e| format!("{text:?} is not an RFC 3339 time ({e}), e.g. 2024-05-01T00:00:00Z"))
}

/// Runs a `replays` subcommand. `consumer` is `--consumer`: the target of a plan, which
/// needs it given (its default names no one's target); the other subcommands take replays by
/// id, whatever their target.
pub(crate) fn run<C: InboxConnection>(
    conn: &mut C,
    consumer: &str,
    command: &Command,
    global: &Global,
) -> Outcome {
    match command {
        Command::Plan(args) => plan(conn, consumer, args, global),
        Command::List { after, limit } => list(conn, *after, *limit, global),
        Command::Show { id, after, limit } => show(conn, *id, *after, *limit, global),
        Command::Run { id, batch_size } => run_probe(conn, *id, *batch_size, global),
        Command::Reconcile { id } => reconcile(conn, *id, global),
        Command::Accept {
            id,
            overriding,
            audit,
        } => {
            let decision = if *overriding {
                Decision::Override
            } else {
                Decision::Accept
            };
            decide(conn, *id, audit, decision, global)
        }
        Command::Reject { id, audit } => decide(conn, *id, audit, Decision::Reject, global),
        Command::Abort { id, audit } => decide(conn, *id, audit, Decision::Abort, global),
        Command::Prune { older_than } => prune(conn, *older_than, global),
    }
}

/// Bad usage, for an invalid plan: what the library said, after the flags it came from.
fn invalid(flags: &str, error: &impl std::fmt::Display) -> Failure {
    Failure::Usage(format!("error: {flags}: {error}"))
}

/// An error of `Replays::plan` or `Replays::preview`: bad usage for an invalid plan, the
/// operation's failure otherwise.
fn plan_failure(error: AdminError) -> Failure {
    match error.inbox_error() {
        Some(Error::Replay(replay::Refused::InvalidPlan(_))) => {
            Failure::Usage(format!("error: {}", errors::message(&error)))
        }
        _ => error.into(),
    }
}

/// The plan the options describe, for the target consumer `consumer`.
fn plan_of(consumer: &str, args: &PlanArgs) -> Result<Plan, Failure> {
    let target = match &args.isolated {
        Some(destination) => Target::isolated(consumer, destination)
            .map_err(|e| invalid("--consumer/--isolated", &e))?,
        None => Target::live(consumer).map_err(|e| invalid("--consumer", &e))?,
    };
    let range = if let (Some(first), Some(last)) = (args.first, args.last) {
        Range::positions(first, last).map_err(|e| invalid("--first/--last", &e))?
    } else if let (Some(from), Some(to)) = (args.from, args.to) {
        Range::times(from, to).map_err(|e| invalid("--from/--to", &e))?
    } else {
        let ids = args
            .ids
            .iter()
            .map(|id| EventId::new(id.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("--ids", &e))?;
        Range::ids(ids).map_err(|e| invalid("--ids", &e))?
    };
    let mut plan = Plan::new(target, range);
    if !args.accepted.is_empty() {
        let versions = args
            .accepted
            .iter()
            .fold(SchemaVersions::new(), |all, accepted| {
                all.accept(&accepted.event_type, accepted.versions.iter().copied())
            });
        plan = plan.interpretation(Interpretation::Versions(versions));
    }
    if let Some(expectation) = args.expect {
        plan = plan.expect(expectation);
    }
    if let Some(topic) = &args.redirect_enqueues {
        plan = plan.redirect_enqueues(topic);
    }
    if args.allow_calls {
        plan = plan.allow_calls();
    }
    Ok(plan)
}

/// Records the plan, or with `--dry-run` previews it.
fn plan<C: InboxConnection>(
    conn: &mut C,
    consumer: &str,
    args: &PlanArgs,
    global: &Global,
) -> Outcome {
    if !global.consumer_given {
        return Err(Failure::Usage(
            "error: a replay's plan names its target consumer: pass --consumer NAME (the replay's own name with --isolated, the live consumer's with --live)".to_owned(),
        ));
    }
    let plan = plan_of(consumer, args)?;
    let replays = Replays::new();
    let mut source = args.source.source();
    if args.dry_run {
        let preview = replays
            .preview(conn, &mut source, &plan)
            .map_err(plan_failure)?;
        print_preview(&plan, &preview, global);
        return Ok(());
    }
    let audit = args.audit.audit()?;
    let record = replays
        .plan(conn, &source, &plan, &audit)
        .map_err(plan_failure)?;
    match global.format {
        Format::Json => output::print_json(&record_json(&record)),
        Format::Table => {
            print!("{}", output::fields(&record_fields(&record)));
            println!();
            println!("{}", next_step(&record));
        }
    }
    Ok(())
}

/// What to do next with a replay just planned.
fn next_step(record: &ReplayRecord) -> String {
    let id = record.id;
    if record.plan.target().is_live() {
        format!("replay {id} planned: probe the live consumer with `diesel-inbox replays run {id}`, then reconcile it")
    } else {
        format!("replay {id} planned: an isolated replay runs the app's handler, so the service runs it (Replays::run); then reconcile it with `diesel-inbox replays reconcile {id}`")
    }
}

/// Prints a plan's dry run.
fn print_preview(plan: &Plan, preview: &Preview, global: &Global) {
    match global.format {
        Format::Json => output::print_json(&json!({
            "dry_run": true,
            "plan": plan_json(plan),
            "events": preview.events,
            "skipped": preview.skipped,
            "in_target": preview.in_target,
            "first": preview.first,
            "last": preview.last,
        })),
        Format::Table => {
            let mut pairs = plan_fields(plan);
            pairs.extend([
                ("events", preview.events.to_string()),
                ("skipped", preview.skipped.to_string()),
                (
                    "in target",
                    format!("{} (duplicates, were it to run now)", preview.in_target),
                ),
                ("first position", or_dash(preview.first)),
                ("last position", or_dash(preview.last)),
            ]);
            print!("{}", output::fields(&pairs));
            println!();
            println!("dry run: nothing recorded");
        }
    }
}

/// The id of a listed replay, readable or not: where the next page starts.
fn listed_id(row: &Result<ReplayRecord, CorruptRow>) -> i64 {
    match row {
        Ok(record) => record.id,
        Err(corrupt) => output::key_part(corrupt, "id").parse().unwrap_or_default(),
    }
}

/// Prints a page of replays.
fn list<C: InboxConnection>(conn: &mut C, after: i64, limit: u64, global: &Global) -> Outcome {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let rows = Replays::new().list(conn, after, limit)?;
    let more_after = (rows.len() >= limit)
        .then(|| rows.last().map(listed_id))
        .flatten();
    match global.format {
        Format::Json => output::print_json(&json!({
            "replays": rows
                .iter()
                .map(|row| match row {
                    Ok(record) => summary_json(record),
                    Err(corrupt) => output::unreadable(corrupt),
                })
                .collect::<Vec<_>>(),
            "more_after": more_after,
        })),
        Format::Table => {
            let headers = [
                "id",
                "state",
                "consumer",
                "target",
                "source",
                "range",
                "read",
                "processed",
                "duplicates",
                "failed",
                "dead-lettered",
                "skipped",
                "suppressed",
                "evidence",
                "updated",
            ];
            let table: Vec<Vec<String>> = rows
                .iter()
                .map(|row| match row {
                    Ok(record) => list_cells(record),
                    Err(corrupt) => output::unreadable_cells(corrupt, "id", headers.len()),
                })
                .collect();
            print!("{}", output::table(&headers, &table));
            let n = rows.len();
            println!("{n} replay{} shown", if n == 1 { "" } else { "s" });
            if let Some(last) = more_after {
                println!("more replays may follow: rerun with --after {last}");
            }
        }
    }
    Ok(())
}

/// A replay's cells in the listing's table.
fn list_cells(record: &ReplayRecord) -> Vec<String> {
    let counts = &record.counts;
    let evidence = record
        .evidence
        .as_ref()
        .map(|e| if e.matches() { "yes" } else { "no" });
    vec![
        record.id.to_string(),
        record.state.to_string(),
        record.plan.target().consumer().to_owned(),
        target_text(&record.plan),
        record.source.clone(),
        cell(&range_text(record.plan.range()), RANGE_CHARS),
        counts.read.to_string(),
        counts.processed.to_string(),
        counts.duplicates.to_string(),
        counts.failed.to_string(),
        counts.dead_lettered.to_string(),
        counts.skipped.to_string(),
        counts.suppressed.to_string(),
        or_dash(evidence),
        output::time(record.updated_at),
    ]
}

/// The source position of a listed note, readable or not.
fn note_position(row: &Result<ReplayNote, CorruptRow>) -> u64 {
    match row {
        Ok(note) => note.position,
        Err(corrupt) => output::key_part(corrupt, "position")
            .parse()
            .unwrap_or_default(),
    }
}

/// A page of notes, and the position the next page starts after when it is full (the
/// library ends a page at a whole event).
fn notes_page(
    notes: Vec<Result<ReplayNote, CorruptRow>>,
    limit: usize,
) -> (Vec<Result<ReplayNote, CorruptRow>>, Option<u64>) {
    let more_after = if notes.len() >= limit {
        notes.last().map(note_position)
    } else {
        None
    };
    (notes, more_after)
}

/// Prints one replay in full, with its history and a page of its notes.
fn show<C: InboxConnection>(
    conn: &mut C,
    id: i64,
    after: u64,
    limit: u64,
    global: &Global,
) -> Outcome {
    let replays = Replays::new();
    let record = replays.get(conn, id)?;
    let history = replays.history(conn, id)?;
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let (notes, more_after) = notes_page(replays.notes(conn, id, after, limit)?, limit);
    match global.format {
        Format::Json => {
            let mut value = record_json(&record);
            value["history"] = history.iter().map(transition_json).collect();
            value["notes"] = notes
                .iter()
                .map(|row| match row {
                    Ok(note) => note_json(note),
                    Err(corrupt) => output::unreadable(corrupt),
                })
                .collect();
            value["notes_more_after"] = json!(more_after);
            output::print_json(&value);
        }
        Format::Table => {
            print!("{}", output::fields(&record_fields(&record)));
            if let Some(evidence) = &record.evidence {
                println!();
                print_evidence(evidence);
            }
            println!();
            print_history(&history);
            println!();
            print_notes(&notes, more_after);
        }
    }
    Ok(())
}

/// The history as a table.
fn print_history(history: &[Transition]) {
    println!("history:");
    let rows: Vec<Vec<String>> = history
        .iter()
        .map(|t| {
            vec![
                output::time(t.at),
                or_dash(t.from),
                t.to.to_string(),
                t.actor.clone(),
                cell(&t.reason, 100),
            ]
        })
        .collect();
    print!(
        "{}",
        output::table(&["at", "from", "to", "actor", "reason"], &rows)
    );
}

/// A page of notes as a table, with where the next page starts.
fn print_notes(notes: &[Result<ReplayNote, CorruptRow>], more_after: Option<u64>) {
    println!("notes:");
    let headers = ["position", "kind", "event id", "detail"];
    let rows: Vec<Vec<String>> = notes
        .iter()
        .map(|row| match row {
            Ok(note) => vec![
                note.position.to_string(),
                note.kind.to_string(),
                format!("{:?}", note.event_id),
                cell(&note.detail, 100),
            ],
            Err(corrupt) => output::unreadable_cells(corrupt, "position", headers.len()),
        })
        .collect();
    print!("{}", output::table(&headers, &rows));
    let n = notes.len();
    println!("{n} note{} shown", if n == 1 { "" } else { "s" });
    if let Some(last) = more_after {
        println!("more notes may follow: rerun with --after {last}");
    }
}

/// The counts in words: what a progress line and a table show.
fn counts_text(counts: &ReplayCounts) -> String {
    format!(
        "read {}, processed {}, duplicates {}, failed {}, dead-lettered {}, skipped {}, suppressed {}",
        counts.read,
        counts.processed,
        counts.duplicates,
        counts.failed,
        counts.dead_lettered,
        counts.skipped,
        counts.suppressed
    )
}

/// Runs the live replay `id` with the probe, a line of counts per batch.
fn run_probe<C: InboxConnection>(
    conn: &mut C,
    id: i64,
    batch_size: Option<u64>,
    global: &Global,
) -> Outcome {
    let mut replays = Replays::new();
    if let Some((actor, _)) = crate::default_actor() {
        replays = replays.runner(&format!("diesel-inbox replays run ({actor})"));
    }
    if let Some(events) = batch_size {
        replays = replays.batch_size(usize::try_from(events).unwrap_or(usize::MAX));
    }
    let record = replays.get(conn, id)?;
    if let Some(destination) = record.plan.target().destination() {
        return Err(Failure::Error(format!(
            "replay {id} is isolated (its consumer {} writes into {destination}): an isolated replay runs the app's handler: run it from the service with Replays::run; this tool runs only replays into the live consumer, as a probe",
            record.plan.target().consumer()
        )));
    }
    let mut source = outbox_of(&record)?;
    let json = global.format == Format::Json;
    let mut shown = None;
    let report =
        replays.run_reporting(conn, id, &mut source, &mut Probe, |report: &RunReport| {
            // The batch that finds the range's end reads nothing new: no line of its own,
            // unless the range is empty.
            if shown == Some(report.read_now) {
                return;
            }
            shown = Some(report.read_now);
            let line = format!("replay {}: {}", report.id, counts_text(&report.counts));
            if json {
                let _ = writeln!(std::io::stderr(), "{line}");
            } else {
                println!("{line}");
            }
        })?;
    let counts = &report.counts;
    if json {
        output::print_json(&json!({
            "id": report.id,
            "finished": report.finished,
            "read_now": report.read_now,
            "counts": counts_json(counts),
        }));
        return Ok(());
    }
    println!(
        "replay {id} finished: {} event{} read by this run; reconcile it with `diesel-inbox replays reconcile {id}`",
        report.read_now,
        if report.read_now == 1 { "" } else { "s" }
    );
    if counts.failed > 0 {
        println!(
            "{} event{} would take effect in the live consumer (or failed): see the notes with `diesel-inbox replays show {id}`",
            counts.failed,
            if counts.failed == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

/// The outbox rows the replay reads, as its record names them; this tool reads no other
/// source.
fn outbox_of(record: &ReplayRecord) -> Result<OutboxSource, Failure> {
    OutboxSource::from_name(&record.source).ok_or_else(|| {
        Failure::Error(format!(
            "replay {} reads the source {:?}: this tool reads the outbox only; run and reconcile it from the service",
            record.id, record.source
        ))
    })
}

/// Reconciles the finished replay `id` with no reports of the app's own; prints the evidence,
/// and fails with exit 3 when it differs from the plan's expectation.
fn reconcile<C: InboxConnection>(conn: &mut C, id: i64, global: &Global) -> Outcome {
    let replays = Replays::new();
    let mut source = outbox_of(&replays.get(conn, id)?)?;
    let evidence = replays.reconcile(conn, id, &mut source, |_| Ok(vec![]))?;
    match global.format {
        Format::Json => {
            let mut value = evidence_json(&evidence);
            value["id"] = json!(id);
            output::print_json(&value);
        }
        Format::Table => print_evidence(&evidence),
    }
    if evidence.matches() {
        if global.format == Format::Table {
            println!();
            println!("replay {id} matches its plan's expectation: accept it with `diesel-inbox replays accept {id} --reason R --yes`");
        }
        return Ok(());
    }
    let _ = writeln!(
        std::io::stderr(),
        "replay {id}'s evidence differs from its plan's expectation: reject it, or accept it with --override and a reason"
    );
    Err(Failure::CheckFailed)
}

/// The evidence: whether it matches, what differs, the checks and the reports.
fn print_evidence(evidence: &Evidence) {
    let verdict = if evidence.matches() {
        "matches its plan's expectation"
    } else {
        "differs from its plan's expectation"
    };
    println!("evidence ({}): {verdict}", output::time(evidence.at));
    print!(
        "{}",
        output::fields(&[
            ("expectation", evidence.expectation.as_str().to_owned()),
            ("counts", counts_text(&evidence.counts)),
            ("re-read", format!("{} events", evidence.reread)),
            ("re-read digest", evidence.reread_digest.clone()),
            ("recorded digest", evidence.recorded_digest.clone()),
            (
                "without inbox row",
                if evidence.without_inbox_row_ids.is_empty() {
                    evidence.without_inbox_row.to_string()
                } else {
                    format!(
                        "{} ({})",
                        evidence.without_inbox_row,
                        evidence.without_inbox_row_ids.join(", ")
                    )
                },
            ),
        ])
    );
    for report in &evidence.reports {
        let verdict = if report.matches { "matches" } else { "differs" };
        println!("report {:?}: {verdict}", report.name);
        for detail in &report.details {
            println!("  {detail}");
        }
    }
    for difference in &evidence.differences {
        println!("differs: {difference}");
    }
}

/// An ops decision on a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Accept,
    Override,
    Reject,
    Abort,
}

impl Decision {
    /// What it does, as the refusal without `--yes` says it.
    fn verb(self) -> &'static str {
        match self {
            Self::Accept => "accept",
            Self::Override => "accept, overriding its evidence,",
            Self::Reject => "reject",
            Self::Abort => "abort",
        }
    }

    /// The states it moves a replay from, as the library's refusal words them: the state it
    /// leaves, what it is called, and the states allowed, in words.
    fn from(self) -> (&'static [ReplayState], &'static str, &'static str) {
        match self {
            Self::Accept | Self::Override => (&[ReplayState::Finished], "accepted", "finished"),
            Self::Reject => (&[ReplayState::Finished], "rejected", "finished"),
            Self::Abort => (
                &[ReplayState::Planned, ReplayState::Running],
                "aborted",
                "planned or running",
            ),
        }
    }
}

/// The refusal the library makes of `decision` on `record`, if any: checked before `--yes`,
/// so that a decision refused says so (exit 1) rather than what it would do.
fn refusal(record: &ReplayRecord, decision: Decision) -> Option<replay::Refused> {
    let (from, attempted, allowed) = decision.from();
    if !from.contains(&record.state) {
        return Some(replay::Refused::WrongState {
            id: record.id,
            state: record.state,
            attempted,
            allowed,
        });
    }
    if decision == Decision::Accept {
        let Some(evidence) = &record.evidence else {
            return Some(replay::Refused::NotReconciled { id: record.id });
        };
        if !evidence.matches() {
            return Some(replay::Refused::EvidenceMismatch {
                id: record.id,
                differences: evidence.differences.clone(),
            });
        }
    }
    if decision == Decision::Override && record.evidence.is_none() {
        return Some(replay::Refused::NotReconciled { id: record.id });
    }
    None
}

/// Checks the decision, then with `--yes` makes it; without, says what it would do.
fn decide<C: InboxConnection>(
    conn: &mut C,
    id: i64,
    audit: &AuditArgs,
    decision: Decision,
    global: &Global,
) -> Outcome {
    let audit = audit.audit()?;
    let replays = Replays::new();
    let record = replays.get(conn, id)?;
    if let Some(refused) = refusal(&record, decision) {
        return Err(AdminError::from(refused).into());
    }
    if !global.yes {
        let evidence = match &record.evidence {
            None => "not reconciled".to_owned(),
            Some(e) if e.matches() => "its evidence matches".to_owned(),
            Some(e) => format!(
                "its evidence differs: {}",
                cell(&e.differences.join("; "), 200)
            ),
        };
        return Err(Failure::Usage(format!(
            "would {} replay {id} ({}, into consumer {:?}, {}; {evidence}) as {:?} because {:?}; nothing changed: rerun with --yes to do it",
            decision.verb(),
            record.state,
            record.plan.target().consumer(),
            counts_text(&record.counts),
            audit.actor(),
            audit.reason(),
        )));
    }
    match decision {
        Decision::Accept => replays.accept(conn, id, &audit)?,
        Decision::Override => replays.accept_overriding(conn, id, &audit)?,
        Decision::Reject => replays.reject(conn, id, &audit)?,
        Decision::Abort => replays.abort(conn, id, &audit)?,
    }
    let record = replays.get(conn, id)?;
    match global.format {
        Format::Json => output::print_json(&record_json(&record)),
        Format::Table => println!("replay {id}: {}", record.state),
    }
    Ok(())
}

/// Deletes the decided replays past the cutoff; without `--yes`, counts them and exits with 2.
fn prune<C: InboxConnection>(conn: &mut C, older_than: Duration, global: &Global) -> Outcome {
    let cutoff = chrono::Duration::from_std(older_than)
        .ok()
        .and_then(|d| Utc::now().checked_sub_signed(d));
    let cutoff_text = cutoff.map_or_else(|| "the beginning".to_owned(), output::time);
    if !global.yes {
        let replays = Replays::new();
        let (mut after, mut decided) = (0, 0_u64);
        loop {
            let page = replays.list(conn, after, 500)?;
            for record in page.iter().flatten() {
                let old = cutoff.is_some_and(|cutoff| record.updated_at < cutoff);
                if old && !is_open(record.state) {
                    decided += 1;
                }
            }
            match page.last() {
                Some(last) if page.len() >= 500 => after = listed_id(last),
                _ => break,
            }
        }
        return Err(Failure::Usage(format!(
            "would delete {decided} decided replay{} (accepted, rejected or aborted) last changed before {cutoff_text}, with their transitions and notes; open replays stay; nothing changed: rerun with --yes",
            if decided == 1 { "" } else { "s" }
        )));
    }
    let deleted = Replays::new().prune(conn, older_than)?;
    match global.format {
        Format::Json => output::print_json(&json!({
            "deleted": deleted,
            "older_than_seconds": older_than.as_secs(),
            "cutoff": cutoff_text,
        })),
        Format::Table => print!(
            "{}",
            output::fields(&[
                ("deleted", deleted.to_string()),
                ("last changed before", cutoff_text),
            ])
        ),
    }
    Ok(())
}

/// Whether a replay in `state` may still change: planned, running or finished.
fn is_open(state: ReplayState) -> bool {
    matches!(
        state,
        ReplayState::Planned | ReplayState::Running | ReplayState::Finished
    )
}

/// The target in words: live, or isolated and where it writes.
fn target_text(plan: &Plan) -> String {
    match plan.target().destination() {
        Some(destination) => format!("isolated: {destination}"),
        None => "live".to_owned(),
    }
}

/// The range in words.
fn range_text(range: &Range) -> String {
    match range {
        Range::Positions { first, last } => format!("positions {first}..={last}"),
        Range::Times { from, to } => {
            format!("enqueued {}..{}", output::time(*from), output::time(*to))
        }
        Range::Ids(ids) => format!(
            "ids {}",
            ids.iter()
                .map(EventId::as_str)
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => other.kind().to_owned(),
    }
}

/// The schema interpretation in words.
fn schema_text(schema: Option<&Interpretation>) -> String {
    match schema {
        None => "every version of every event type".to_owned(),
        Some(Interpretation::Versions(versions)) => {
            let mut by_type: Vec<(&str, Vec<String>)> = Vec::new();
            for (event_type, version) in versions.accepted() {
                match by_type.last_mut() {
                    Some((seen, listed)) if *seen == event_type => listed.push(version.to_string()),
                    _ => by_type.push((event_type, vec![version.to_string()])),
                }
            }
            let listed: Vec<String> = by_type
                .iter()
                .map(|(event_type, list)| format!("{event_type}:{}", list.join(",")))
                .collect();
            format!("only {}", listed.join(" "))
        }
        Some(Interpretation::Decoder { name, version }) => format!("decoder {name} {version}"),
        Some(_) => "an interpretation this version cannot show".to_owned(),
    }
}

/// Where a replay's outbox enqueues go: `None` when dropped.
fn redirected(plan: &Plan) -> Option<&str> {
    match plan.enqueues() {
        Enqueues::Redirect(topic) => Some(topic),
        _ => None,
    }
}

/// The plan as `key: value` pairs.
fn plan_fields(plan: &Plan) -> Vec<(&'static str, String)> {
    vec![
        ("consumer", plan.target().consumer().to_owned()),
        ("target", target_text(plan)),
        ("range", range_text(plan.range())),
        ("schema", schema_text(plan.schema())),
        ("expectation", plan.expectation().as_str().to_owned()),
        (
            "enqueues",
            redirected(plan).map_or_else(|| "dropped".to_owned(), |t| format!("redirected to {t}")),
        ),
        (
            "calls",
            if plan.calls_allowed() {
                "allowed"
            } else {
                "suppressed"
            }
            .to_owned(),
        ),
    ]
}

/// The record as `key: value` pairs.
fn record_fields(record: &ReplayRecord) -> Vec<(&'static str, String)> {
    let mut pairs = vec![
        ("id", record.id.to_string()),
        ("state", record.state.to_string()),
        ("source", record.source.clone()),
    ];
    pairs.extend(plan_fields(&record.plan));
    let evidence = record.evidence.as_ref().map_or("not reconciled", |e| {
        if e.matches() {
            "matches"
        } else {
            "differs"
        }
    });
    pairs.extend([
        ("requested by", record.requested_by.clone()),
        ("reason", record.reason.clone()),
        ("counts", counts_text(&record.counts)),
        ("checkpoint", or_dash(record.checkpoint)),
        ("digest", record.digest.clone()),
        ("lease until", or_dash(record.lease_until.map(output::time))),
        ("evidence", evidence.to_owned()),
        ("updated", output::time(record.updated_at)),
    ]);
    pairs
}

fn counts_json(counts: &ReplayCounts) -> Value {
    json!({
        "read": counts.read,
        "processed": counts.processed,
        "duplicates": counts.duplicates,
        "failed": counts.failed,
        "dead_lettered": counts.dead_lettered,
        "skipped": counts.skipped,
        "suppressed": counts.suppressed,
    })
}

fn range_json(range: &Range) -> Value {
    match range {
        Range::Positions { first, last } => {
            json!({ "kind": "positions", "first": first, "last": last })
        }
        Range::Times { from, to } => {
            json!({ "kind": "times", "from": output::time(*from), "to": output::time(*to) })
        }
        Range::Ids(ids) => json!({
            "kind": "ids",
            "ids": ids.iter().map(EventId::as_str).collect::<Vec<_>>(),
        }),
        other => json!({ "kind": other.kind() }),
    }
}

fn schema_json(schema: Option<&Interpretation>) -> Value {
    match schema {
        None => Value::Null,
        Some(Interpretation::Versions(versions)) => {
            let mut accepted = serde_json::Map::new();
            for (event_type, version) in versions.accepted() {
                let entry = accepted
                    .entry(event_type.to_owned())
                    .or_insert_with(|| json!([]));
                if let Value::Array(list) = entry {
                    list.push(json!(version));
                }
            }
            json!({ "kind": "versions", "accepted": accepted })
        }
        Some(Interpretation::Decoder { name, version }) => {
            json!({ "kind": "decoder", "name": name, "version": version })
        }
        Some(_) => json!({ "kind": "unknown" }),
    }
}

fn plan_json(plan: &Plan) -> Value {
    json!({
        "consumer": plan.target().consumer(),
        "live": plan.target().is_live(),
        "destination": plan.target().destination(),
        "range": range_json(plan.range()),
        "schema": schema_json(plan.schema()),
        "expectation": plan.expectation().as_str(),
        "redirect_enqueues_to": redirected(plan),
        "calls_allowed": plan.calls_allowed(),
    })
}

fn evidence_json(evidence: &Evidence) -> Value {
    json!({
        "matches": evidence.matches(),
        "differences": evidence.differences,
        "expectation": evidence.expectation.as_str(),
        "counts": counts_json(&evidence.counts),
        "reread": evidence.reread,
        "reread_digest": evidence.reread_digest,
        "recorded_digest": evidence.recorded_digest,
        "without_inbox_row": evidence.without_inbox_row,
        "without_inbox_row_ids": evidence.without_inbox_row_ids,
        "reports": evidence
            .reports
            .iter()
            .map(|r| json!({ "name": r.name, "matches": r.matches, "details": r.details }))
            .collect::<Vec<_>>(),
        "at": output::time(evidence.at),
    })
}

/// A replay as listed: the record without its evidence's detail.
fn summary_json(record: &ReplayRecord) -> Value {
    json!({
        "id": record.id,
        "state": record.state.to_string(),
        "source": record.source,
        "consumer": record.plan.target().consumer(),
        "live": record.plan.target().is_live(),
        "plan": plan_json(&record.plan),
        "reason": record.reason,
        "requested_by": record.requested_by,
        "counts": counts_json(&record.counts),
        "checkpoint": record.checkpoint,
        "digest": record.digest,
        "lease_until": record.lease_until.map(output::time),
        "evidence_matches": record.evidence.as_ref().map(Evidence::matches),
        "updated_at": output::time(record.updated_at),
    })
}

/// A replay in full.
fn record_json(record: &ReplayRecord) -> Value {
    let mut value = summary_json(record);
    value["evidence"] = record.evidence.as_ref().map_or(Value::Null, evidence_json);
    value
}

fn transition_json(transition: &Transition) -> Value {
    json!({
        "from": transition.from.map(|s| s.to_string()),
        "to": transition.to.to_string(),
        "actor": transition.actor,
        "reason": transition.reason,
        "at": output::time(transition.at),
    })
}

fn note_json(note: &ReplayNote) -> Value {
    json!({
        "position": note.position,
        "kind": note.kind.to_string(),
        "event_id": note.event_id,
        "detail": note.detail,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn a_plan_takes_one_target_and_one_kind_of_range() {
        let plan = |args: &[&str]| {
            let line = [
                &["diesel-inbox", "replays", "plan", "--reason", "r"][..],
                args,
            ]
            .concat();
            crate::Cli::try_parse_from(line).map(|_| ())
        };
        let t1 = ["--from", "2024-01-01T00:00:00Z"];
        let t2 = ["--to", "2024-02-01T00:00:00Z"];
        let times = [&t1[..], &t2[..]].concat();
        for good in [
            &["--live", "--first", "1", "--last", "2"][..],
            &["--isolated", "shadow", "--ids", "a,b"],
            &[&["--live"][..], &times].concat(),
        ] {
            assert!(plan(good).is_ok(), "{good:?}");
        }
        for bad in [
            &["--first", "1", "--last", "2"][..],
            &["--live", "--isolated", "shadow", "--ids", "a"],
            &["--live"],
            &["--live", "--first", "1"],
            &["--live", "--last", "2"],
            &["--live", "--ids", "a", "--last", "2"],
            &["--live", "--ids", "a", "--first", "1", "--last", "2"],
            &[&["--live", "--ids", "a"][..], &t2].concat(),
            &[&["--live", "--first", "1", "--last", "2"][..], &t2].concat(),
            &[&["--live", "--last", "2"][..], &times].concat(),
            &[&["--live"][..], &t1].concat(),
            &["--live", "--first", "1", "--last", "2", "--expect", "some"],
            &["--live", "--first", "1", "--last", "2", "--accept", "v1"],
        ] {
            assert!(plan(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn accepted_versions_and_aggregates_read_as_typed() {
        let accepted = parse_accepted("order.placed:1,2").unwrap();
        assert_eq!(
            (accepted.event_type.as_str(), accepted.versions),
            ("order.placed", vec![1, 2])
        );
        for bad in ["order.placed", "order.placed:", ":1", "order.placed:one"] {
            assert!(parse_accepted(bad).is_err(), "{bad:?}");
        }
        let aggregate = parse_aggregate("order:urn:42").unwrap();
        assert_eq!(
            (aggregate.kind.as_str(), aggregate.id.as_str()),
            ("order", "urn:42")
        );
        assert!(parse_aggregate("order").is_err());
    }
}
