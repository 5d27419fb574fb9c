//! `diesel-inbox claims`, `diesel-inbox claims show` and `diesel-inbox claims resolve`.

use clap::{Args, Subcommand};
use diesel_inbox::{
    claim::{ClaimRecord, ClaimState, Claims, Resolution},
    AdminError, Audit, CorruptRow, Error, EventId, Inbox, InboxConnection,
};
use serde_json::{json, Value};

use crate::consumers;
use crate::output::{self, or_dash};
use crate::{AuditArgs, Failure, Format, Global, Outcome};

/// The `claims` listing options, or a subcommand.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct ClaimsArgs {
    #[command(subcommand)]
    command: Option<Command>,
    /// Every claim (in progress, completed, released, abandoned), not only those in doubt.
    #[arg(long)]
    all: bool,
    /// At most this many claims, in event id order.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    limit: u64,
    /// Only claims after this event id: the next page starts after the last one shown.
    #[arg(long, conflicts_with = "all_consumers")]
    after: Option<String>,
    /// Every consumer's claims (each consumer's page up to --limit), with a consumer column;
    /// as JSON, an array of the per-consumer objects.
    #[arg(long)]
    all_consumers: bool,
}

/// The `claims` subcommands.
#[derive(Debug, Subcommand)]
#[allow(
    clippy::doc_markdown,
    reason = "the doc comments are the --help text, read as plain text"
)]
pub(crate) enum Command {
    /// One claim in full, in any state: its payload (JSON as JSON, bytes as base64), its
    /// result, and who resolved it and why.
    Show {
        /// The claimed event's id.
        id: String,
    },
    /// Resolve a claim in doubt once you know what its side effect did (needs --yes).
    ///
    /// --completed RESULT_JSON: it happened, with this result (JSON: '"ch_81"', '{"id": 7}',
    /// 'null'); later deliveries get the result back. --retry: it did not happen; the next
    /// delivery runs it again (publish the message again if the broker will not). --abandon:
    /// it must not happen; later deliveries are told it was abandoned. Exactly one of the
    /// three. Prints the claim as it now stands. A claim that is not in doubt (in progress,
    /// or settled already), or that the consumer does not have, is an error (exit 1).
    Resolve {
        /// The claimed event's id.
        id: String,
        #[command(flatten)]
        outcome: OutcomeArgs,
        #[command(flatten)]
        audit: AuditArgs,
    },
}

/// What the side effect of a claim in doubt did: exactly one of the three.
#[derive(Debug, Args)]
#[allow(
    clippy::doc_markdown,
    reason = "the doc comments are the --help text, read as plain text"
)]
#[group(id = "resolution", required = true, multiple = false)]
pub(crate) struct OutcomeArgs {
    /// It happened, with this result, as JSON (quote a string: '"ch_81"').
    #[arg(long, value_name = "RESULT_JSON", value_parser = parse_result)]
    completed: Option<Value>,
    /// It did not happen: the next delivery runs it again.
    #[arg(long)]
    retry: bool,
    /// It must not happen: later deliveries are told it was abandoned.
    #[arg(long)]
    abandon: bool,
}

impl OutcomeArgs {
    /// The resolution the options name; the group makes it exactly one.
    fn resolution(&self) -> Resolution {
        match &self.completed {
            Some(result) => Resolution::Completed(result.clone()),
            None if self.retry => Resolution::Retry,
            None => Resolution::Abandon,
        }
    }
}

/// `--completed`'s value: JSON, read before anything touches the database.
fn parse_result(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| {
        format!("the result is not JSON ({e}); quote a string as JSON, e.g. '\"ch_81\"'")
    })
}

pub(crate) fn run<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    args: &ClaimsArgs,
    global: &Global,
) -> Outcome {
    match &args.command {
        None => list(conn, inbox, args, global),
        Some(Command::Show { id }) => show(conn, inbox, id, global),
        Some(Command::Resolve { id, outcome, audit }) => {
            resolve(conn, inbox, id, outcome, audit, global)
        }
    }
}

/// One consumer's part of a listing: a page of its claims, how many of them are in doubt,
/// and the event id the next page starts after when this one is full.
struct Listing {
    consumer: String,
    /// A row this version cannot read stands in its place as its error.
    records: Vec<Result<ClaimRecord, CorruptRow>>,
    in_doubt: usize,
    more_after: Option<String>,
}

impl Listing {
    fn read<C: InboxConnection>(
        conn: &mut C,
        inbox: &Inbox,
        args: &ClaimsArgs,
    ) -> Result<Self, Failure> {
        let claims = inbox.claims();
        let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
        let records = if args.all {
            claims.list(conn, args.after.as_deref(), limit)?
        } else {
            // Claims in doubt wait for ops and stay few: read them, then page in id order.
            let mut in_doubt = claims.in_doubt(conn)?;
            in_doubt.sort_by(|a, b| a.event_id.as_str().cmp(b.event_id.as_str()));
            in_doubt.retain(|r| {
                args.after
                    .as_deref()
                    .is_none_or(|after| r.event_id.as_str() > after)
            });
            in_doubt.truncate(limit);
            in_doubt.into_iter().map(Ok).collect()
        };
        // A row this version cannot read pages on its stored event id, as the others do.
        let more_after = (records.len() >= limit)
            .then(|| records.last().map(stored_id))
            .flatten();
        let in_doubt = records
            .iter()
            .filter(|r| r.as_ref().is_ok_and(|r| r.state == ClaimState::InDoubt))
            .count();
        Ok(Self {
            consumer: inbox.consumer().to_owned(),
            records,
            in_doubt,
            more_after,
        })
    }

    fn json(&self) -> Value {
        json!({
            "consumer": self.consumer,
            "in_doubt": self.in_doubt,
            "claims": self.records.iter().map(listed).collect::<Vec<_>>(),
            "more_after": self.more_after,
        })
    }
}

/// Prints the claims in doubt (with `--all`, every claim), then how many there are (of every
/// consumer, with --all-consumers).
fn list<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    args: &ClaimsArgs,
    global: &Global,
) -> Outcome {
    let all = args.all;
    let mut listings = Vec::new();
    for inbox in consumers::chosen(inbox, args.all_consumers, || Ok(Claims::consumers(conn)?))? {
        listings.push(Listing::read(conn, &inbox, args)?);
    }
    // A consumer with claims none of which the page shows needs no hint; one with none at all
    // may be the wrong name.
    let empty_note = if listings.iter().all(|l| l.records.is_empty()) {
        let with_claims = Claims::consumers(conn)?;
        (!with_claims.iter().any(|name| name == inbox.consumer()))
            .then(|| consumers::nothing_for("claims", inbox.consumer(), &with_claims))
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
        Format::Table => {
            let mut headers = vec!["event id", "state", "attempt", "deliveries"];
            if all {
                headers.extend(["updated", "completed", "result", "reason"]);
            } else {
                headers.extend(["since", "idempotency key", "reason"]);
            }
            if args.all_consumers {
                headers.insert(0, "consumer");
            }
            let rows: Vec<Vec<String>> = listings
                .iter()
                .flat_map(|l| l.records.iter().map(move |r| (l, r)))
                .map(|(l, r)| {
                    let width = headers.len() - usize::from(args.all_consumers);
                    let mut row = match r {
                        Ok(r) => claim_cells(r, all),
                        Err(corrupt) => output::unreadable_cells(corrupt, "event_id", width),
                    };
                    if args.all_consumers {
                        row.insert(0, l.consumer.clone());
                    }
                    row
                })
                .collect();
            print!("{}", output::table(&headers, &rows));
            let count = |n: usize| format!("{n} claim{}", if n == 1 { "" } else { "s" });
            let in_doubt: usize = listings.iter().map(|l| l.in_doubt).sum();
            if all {
                println!("{}, {in_doubt} in doubt", count(rows.len()));
            } else {
                println!("{} in doubt", count(in_doubt));
            }
            if let Some(note) = empty_note {
                println!("{note}");
            }
            for l in &listings {
                if let Some(last) = &l.more_after {
                    let line = consumers::more_line(
                        "claims",
                        &l.consumer,
                        &format!("{last:?}"),
                        args.all_consumers,
                    );
                    println!("{line}");
                }
            }
        }
    }
    Ok(())
}

/// A claim's cells in the listing's table: with `all`, when it changed and how it ended;
/// without, since when it is in doubt and its idempotency key.
fn claim_cells(r: &ClaimRecord, all: bool) -> Vec<String> {
    let mut row = vec![
        r.event_id.as_str().to_owned(),
        r.state.to_string(),
        r.attempt.to_string(),
        r.deliveries.to_string(),
    ];
    let reason = output::cell(&r.reason.clone().unwrap_or_else(|| "-".to_owned()), 60);
    if all {
        row.extend([
            output::time(r.updated_at),
            or_dash(r.completed_at.map(output::time)),
            output::cell(r.result.as_deref().unwrap_or("-"), 40),
            reason,
        ]);
    } else {
        row.extend([
            or_dash(r.in_doubt_since.map(output::time)),
            r.idempotency_key.clone(),
            reason,
        ]);
    }
    row
}

/// The stored event id of a listed row, readable or not: where the next page starts.
fn stored_id(row: &Result<ClaimRecord, CorruptRow>) -> String {
    match row {
        Ok(record) => record.event_id.as_str().to_owned(),
        Err(corrupt) => output::key_part(corrupt, "event_id"),
    }
}

/// A listed row as JSON: the claim without its payload, or what makes it unreadable.
fn listed(row: &Result<ClaimRecord, CorruptRow>) -> Value {
    match row {
        Ok(record) => summary(record),
        Err(corrupt) => output::unreadable(corrupt),
    }
}

/// Prints one claim in full; an error when the consumer has none of that id.
fn show<C: InboxConnection>(conn: &mut C, inbox: &Inbox, id: &str, global: &Global) -> Outcome {
    let record = find(conn, inbox, id)?;
    print_claim(inbox, &record, global);
    Ok(())
}

/// Checks the claim is in doubt, then with `--yes` resolves it; without, says what it would do.
fn resolve<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    id: &str,
    outcome: &OutcomeArgs,
    audit: &AuditArgs,
    global: &Global,
) -> Outcome {
    let audit = audit.audit()?;
    let resolution = outcome.resolution();
    let record = find(conn, inbox, id)?;
    if record.state != ClaimState::InDoubt {
        return Err(AdminError::ClaimNotInDoubt {
            event_id: record.event_id,
            state: record.state,
        }
        .into());
    }
    if !global.yes {
        let change = match &outcome.completed {
            Some(result) => format!("as completed with result {result}"),
            None if outcome.retry => {
                "for a retry (its next delivery runs the side effect)".to_owned()
            }
            None => "as abandoned (the side effect never runs)".to_owned(),
        };
        return Err(Failure::Usage(format!(
            "would resolve claim {id:?} of consumer {:?} (attempt {}, in doubt since {}: {}) {change} as {:?} because {:?}; nothing changed: rerun with --yes to do it",
            inbox.consumer(),
            record.attempt,
            or_dash(record.in_doubt_since.map(output::time)),
            output::cell(&record.reason.clone().unwrap_or_default(), 80),
            audit.actor(),
            audit.reason(),
        )));
    }
    let record = inbox
        .claims()
        .resolve(conn, &record.event_id, resolution, &audit)?;
    print_claim(inbox, &record, global);
    Ok(())
}

/// The consumer's claim of `id`, or [`AdminError::ClaimNotFound`].
fn find<C: InboxConnection>(conn: &mut C, inbox: &Inbox, id: &str) -> Result<ClaimRecord, Failure> {
    let event_id = EventId::new(id).map_err(Error::from)?;
    inbox
        .claims()
        .show(conn, &event_id)?
        .ok_or_else(|| AdminError::ClaimNotFound { event_id }.into())
}

/// The result as JSON: the stored value, or its text should it not parse.
fn result_value(record: &ClaimRecord) -> Value {
    record.result.as_deref().map_or(Value::Null, |text| {
        serde_json::from_str(text).unwrap_or_else(|_| Value::from(text))
    })
}

/// A claim without its payload.
fn summary(record: &ClaimRecord) -> Value {
    json!({
        "event_id": record.event_id.as_str(),
        "state": record.state.to_string(),
        "attempt": record.attempt,
        "deliveries": record.deliveries,
        "since": record.in_doubt_since.map(output::time),
        "lease_until": output::time(record.lease_until),
        "claimed_at": output::time(record.claimed_at),
        "updated_at": output::time(record.updated_at),
        "completed_at": record.completed_at.map(output::time),
        "result": result_value(record),
        "reason": record.reason.clone(),
        "idempotency_key": record.idempotency_key,
        "resolved_by": record.resolution.as_ref().map(Audit::actor),
        "resolution": record.resolution.as_ref().map(Audit::reason),
        "payload_kind": record.payload_kind,
    })
}

/// Prints a claim in full: as JSON, the summary with the consumer and the payload.
fn print_claim(inbox: &Inbox, record: &ClaimRecord, global: &Global) {
    match global.format {
        Format::Json => {
            let mut value = summary(record);
            value["consumer"] = Value::from(inbox.consumer());
            value["payload"] = output::payload_value(record.payload.as_ref());
            output::print_json(&value);
        }
        Format::Table => print!(
            "{}",
            output::fields(&[
                ("consumer", inbox.consumer().to_owned()),
                ("event id", record.event_id.as_str().to_owned()),
                ("state", record.state.to_string()),
                ("attempt", record.attempt.to_string()),
                ("deliveries", record.deliveries.to_string()),
                ("claimed", output::time(record.claimed_at)),
                ("lease until", output::time(record.lease_until)),
                (
                    "in doubt since",
                    or_dash(record.in_doubt_since.map(output::time))
                ),
                ("updated", output::time(record.updated_at)),
                ("completed", or_dash(record.completed_at.map(output::time))),
                ("result", or_dash(record.result.as_deref())),
                ("reason", or_dash(record.reason.clone())),
                ("idempotency key", record.idempotency_key.clone()),
                (
                    "resolved by",
                    or_dash(record.resolution.as_ref().map(Audit::actor)),
                ),
                (
                    "resolution",
                    or_dash(record.resolution.as_ref().map(Audit::reason)),
                ),
                (
                    "payload",
                    output::cell(&output::payload_text(record.payload.as_ref()), 200),
                ),
            ])
        ),
    }
}
