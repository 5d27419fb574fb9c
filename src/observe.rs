//! Metrics through the [`metrics`](https://docs.rs/metrics) facade, with the cargo feature
//! `metrics`: the engine calls these functions where things happen, and whatever recorder the
//! application installed (a Prometheus exporter, say) receives them. Without the feature each
//! one is a no-op. The names and labels are listed on `describe_metrics`.
#![cfg_attr(not(feature = "metrics"), allow(dead_code))]

use std::time::{Duration, Instant};

use crate::Outcome;

/// `diesel_inbox_deliveries_total{consumer, outcome}`.
const DELIVERIES: &str = "diesel_inbox_deliveries_total";
/// `diesel_inbox_delivery_duration_seconds{consumer, outcome}`.
const DELIVERY_DURATION: &str = "diesel_inbox_delivery_duration_seconds";
/// `diesel_inbox_failed_attempts_total{consumer}`.
const FAILED_ATTEMPTS: &str = "diesel_inbox_failed_attempts_total";
/// `diesel_inbox_dead_lettered_total{consumer}`.
const DEAD_LETTERED: &str = "diesel_inbox_dead_lettered_total";
/// `diesel_inbox_contention_retries_total{consumer}`.
const CONTENTION_RETRIES: &str = "diesel_inbox_contention_retries_total";
/// `diesel_inbox_pruned_rows_total{consumer, table}`.
const PRUNED_ROWS: &str = "diesel_inbox_pruned_rows_total";
/// `diesel_inbox_gaps_total{consumer, cause}`.
const GAPS: &str = "diesel_inbox_gaps_total";
/// `diesel_inbox_gap_sequences_total{consumer, cause}`.
const GAP_SEQUENCES: &str = "diesel_inbox_gap_sequences_total";
/// `diesel_inbox_reorgs_total{consumer}`.
const REORGS: &str = "diesel_inbox_reorgs_total";
/// `diesel_inbox_reorg_blocks_total{consumer}`.
const REORG_BLOCKS: &str = "diesel_inbox_reorg_blocks_total";
/// `diesel_inbox_reorg_events_reverted_total{consumer}`.
const REORG_EVENTS_REVERTED: &str = "diesel_inbox_reorg_events_reverted_total";
/// `diesel_inbox_reorgs_refused_total{consumer}`.
const REORGS_REFUSED: &str = "diesel_inbox_reorgs_refused_total";
/// `diesel_inbox_replay_events_total{consumer, outcome}`.
const REPLAY_EVENTS: &str = "diesel_inbox_replay_events_total";

/// `diesel_inbox_claim_transitions_total{consumer, state}`.
const CLAIM_TRANSITIONS: &str = "diesel_inbox_claim_transitions_total";
/// `diesel_inbox_claims_fenced_total{consumer}`.
const CLAIMS_FENCED: &str = "diesel_inbox_claims_fenced_total";
/// `diesel_inbox_claims_in_doubt{consumer}`.
const CLAIMS_IN_DOUBT: &str = "diesel_inbox_claims_in_doubt";

/// `diesel_inbox_outbox_enqueued_total{topic}`.
const OUTBOX_ENQUEUED: &str = "diesel_inbox_outbox_enqueued_total";
/// `diesel_inbox_outbox_published_total{topic}`.
const OUTBOX_PUBLISHED: &str = "diesel_inbox_outbox_published_total";
/// `diesel_inbox_outbox_publish_failures_total{topic, outcome}`.
const OUTBOX_PUBLISH_FAILURES: &str = "diesel_inbox_outbox_publish_failures_total";
/// `diesel_inbox_outbox_fenced_total`.
const OUTBOX_FENCED: &str = "diesel_inbox_outbox_fenced_total";
/// `diesel_inbox_outbox_pending`.
const OUTBOX_PENDING: &str = "diesel_inbox_outbox_pending";

/// What a delivery came to, as the `outcome` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeliveryOutcome {
    /// The effect ran and committed.
    Processed,
    /// Already processed: skipped.
    Duplicate,
    /// Dead-lettered: by this delivery's failure, or before it.
    DeadLettered,
    /// The id came with another payload: refused.
    PayloadConflict,
    /// The handler returned an error or panicked.
    Failed,
    /// The inbox's own error: an invalid id, the database, exhausted retries.
    Error,
}

impl DeliveryOutcome {
    /// The `outcome` label.
    fn as_str(self) -> &'static str {
        match self {
            Self::Processed => "processed",
            Self::Duplicate => "duplicate",
            Self::DeadLettered => "dead_lettered",
            Self::PayloadConflict => "payload_conflict",
            Self::Failed => "failed",
            Self::Error => "error",
        }
    }

    /// The outcome of a delivery that returned `result`; `if_err` says what an error was.
    pub(crate) fn of<T, E>(result: &Result<Outcome<T>, E>, if_err: Self) -> Self {
        match result {
            Ok(Outcome::Processed(_) | Outcome::ProcessedAfterGap { .. }) => Self::Processed,
            Ok(Outcome::Duplicate(_)) => Self::Duplicate,
            Ok(Outcome::DeadLettered(_)) => Self::DeadLettered,
            Err(_) => if_err,
        }
    }
}

/// Times one delivery (or a batch of them) from its start, and records it when finished. One
/// dropped unfinished records itself too: as [`Failed`](DeliveryOutcome::Failed) while a
/// handler's panic unwinds, as [`Error`](DeliveryOutcome::Error) on an early return.
#[derive(Debug)]
pub(crate) struct DeliveryTimer<'a> {
    consumer: &'a str,
    started: Instant,
    finished: bool,
}

impl<'a> DeliveryTimer<'a> {
    /// Starts timing a delivery of `consumer`.
    pub(crate) fn start(consumer: &'a str) -> Self {
        Self {
            consumer,
            started: Instant::now(),
            finished: false,
        }
    }

    /// Records the delivery as `outcome`.
    pub(crate) fn finish(self, outcome: DeliveryOutcome) {
        self.finish_each([outcome]);
    }

    /// Records one delivery per outcome, each with the time since the start (a batch).
    pub(crate) fn finish_each(mut self, outcomes: impl IntoIterator<Item = DeliveryOutcome>) {
        self.finished = true;
        let elapsed = self.started.elapsed();
        for outcome in outcomes {
            delivery(self.consumer, outcome, elapsed);
        }
    }
}

impl Drop for DeliveryTimer<'_> {
    fn drop(&mut self) {
        if !self.finished {
            let outcome = if std::thread::panicking() {
                DeliveryOutcome::Failed
            } else {
                DeliveryOutcome::Error
            };
            delivery(self.consumer, outcome, self.started.elapsed());
        }
    }
}

/// One delivery of `consumer`, its outcome and how long it took.
fn delivery(consumer: &str, outcome: DeliveryOutcome, elapsed: Duration) {
    #[cfg(feature = "metrics")]
    {
        let labels = [
            ("consumer", consumer.to_owned()),
            ("outcome", outcome.as_str().to_owned()),
        ];
        metrics::counter!(DELIVERIES, &labels).increment(1);
        metrics::histogram!(DELIVERY_DURATION, &labels).record(elapsed.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (consumer, outcome, elapsed);
}

/// A failed attempt the failure policy recorded (committed).
pub(crate) fn failed_attempt(consumer: &str) {
    count(FAILED_ATTEMPTS, consumer, 1);
}

/// An event the failure policy dead-lettered (committed).
pub(crate) fn dead_lettered(consumer: &str) {
    count(DEAD_LETTERED, consumer, 1);
}

/// A transaction of `consumer` rolled back for contention and about to run again.
pub(crate) fn contention_retry(consumer: &str) {
    count(CONTENTION_RETRIES, consumer, 1);
}

/// `rows` rows of `consumer` pruned from `table` by retention.
pub(crate) fn pruned(consumer: &str, table: &'static str, rows: u64) {
    #[cfg(feature = "metrics")]
    metrics::counter!(PRUNED_ROWS, "consumer" => consumer.to_owned(), "table" => table)
        .increment(rows);
    #[cfg(not(feature = "metrics"))]
    let _ = (consumer, table, rows);
}

/// A gap of `sequences` missing sequences that a cursor of `consumer` found (committed).
pub(crate) fn gap_found(consumer: &str, cause: crate::cursor::state::GapCause, sequences: u64) {
    #[cfg(feature = "metrics")]
    for (name, n) in [(GAPS, 1), (GAP_SEQUENCES, sequences)] {
        metrics::counter!(name, "consumer" => consumer.to_owned(), "cause" => cause.as_str())
            .increment(n);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (consumer, cause, sequences);
}

/// A chain reorg of `consumer` committed: `depth` blocks orphaned, `reverted` events undone.
pub(crate) fn reorg(consumer: &str, depth: u64, reverted: u64) {
    #[cfg(feature = "metrics")]
    for (name, n) in [
        (REORGS, 1),
        (REORG_BLOCKS, depth),
        (REORG_EVENTS_REVERTED, reverted),
    ] {
        metrics::counter!(name, "consumer" => consumer.to_owned()).increment(n);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (consumer, depth, reverted);
}

/// A block of `consumer` forked beyond the finalized height, and was refused.
pub(crate) fn reorg_refused(consumer: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(REORGS_REFUSED, "consumer" => consumer.to_owned()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = consumer;
}

/// A replay into `consumer` settled an event as `outcome`.
pub(crate) fn replayed(consumer: &str, outcome: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(REPLAY_EVENTS, "consumer" => consumer.to_owned(), "outcome" => outcome)
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (consumer, outcome);
}

/// A claim of `consumer` moved to `state` (committed): acquired, completed, released,
/// abandoned or in doubt.
pub(crate) fn claim_transition(consumer: &str, state: crate::claim::state::ClaimState) {
    #[cfg(feature = "metrics")]
    metrics::counter!(CLAIM_TRANSITIONS, "consumer" => consumer.to_owned(), "state" => state.as_str())
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (consumer, state);
}

/// A write of a claim's former holder was refused: another worker had taken the claim over,
/// or ops had completed it.
pub(crate) fn claim_fenced(consumer: &str) {
    count(CLAIMS_FENCED, consumer, 1);
}

/// An event was enqueued for `topic` (the transaction may still roll back).
pub(crate) fn outbox_enqueued(topic: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(OUTBOX_ENQUEUED, "topic" => topic.to_owned()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = topic;
}

/// The broker accepted an outbox row for `topic`.
pub(crate) fn outbox_published(topic: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(OUTBOX_PUBLISHED, "topic" => topic.to_owned()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = topic;
}

/// A publish to `topic` failed; `outcome` is `retry` or `failed`.
pub(crate) fn outbox_publish_failed(topic: &str, outcome: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(OUTBOX_PUBLISH_FAILURES, "topic" => topic.to_owned(), "outcome" => outcome)
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (topic, outcome);
}

/// `rows` of a relay pass had been taken over by another relay when it marked them.
pub(crate) fn outbox_fenced(rows: usize) {
    #[cfg(feature = "metrics")]
    metrics::counter!(OUTBOX_FENCED).increment(rows as u64);
    #[cfg(not(feature = "metrics"))]
    let _ = rows;
}

/// The outbox has `rows` pending, as its stats just read them.
pub(crate) fn outbox_pending(rows: i64) {
    #[cfg(feature = "metrics")]
    #[allow(
        clippy::cast_precision_loss,
        reason = "a count of rows, far below 2^52"
    )]
    metrics::gauge!(OUTBOX_PENDING).set(rows as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = rows;
}

/// `consumer` has `n` claims in doubt, as a listing just read them.
pub(crate) fn claims_in_doubt(consumer: &str, n: usize) {
    #[cfg(feature = "metrics")]
    #[allow(
        clippy::cast_precision_loss,
        reason = "a count of claims, far below 2^52"
    )]
    metrics::gauge!(CLAIMS_IN_DOUBT, "consumer" => consumer.to_owned()).set(n as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = (consumer, n);
}

/// Adds `n` to the counter `name` of `consumer`.
fn count(name: &'static str, consumer: &str, n: u64) {
    #[cfg(feature = "metrics")]
    metrics::counter!(name, "consumer" => consumer.to_owned()).increment(n);
    #[cfg(not(feature = "metrics"))]
    let _ = (name, consumer, n);
}

/// Describes the inbox's metrics to the installed recorder: call it once, after installing
/// the recorder (an exporter shows the descriptions as `# HELP` lines). The metrics are
/// recorded whether or not they were described.
///
/// | metric | type | labels |
/// | --- | --- | --- |
/// | `diesel_inbox_deliveries_total` | counter | `consumer`, `outcome` |
/// | `diesel_inbox_delivery_duration_seconds` | histogram | `consumer`, `outcome` |
/// | `diesel_inbox_failed_attempts_total` | counter | `consumer` |
/// | `diesel_inbox_dead_lettered_total` | counter | `consumer` |
/// | `diesel_inbox_contention_retries_total` | counter | `consumer` |
/// | `diesel_inbox_pruned_rows_total` | counter | `consumer`, `table` |
/// | `diesel_inbox_gaps_total` | counter | `consumer`, `cause` |
/// | `diesel_inbox_gap_sequences_total` | counter | `consumer`, `cause` |
/// | `diesel_inbox_claim_transitions_total` | counter | `consumer`, `state` |
/// | `diesel_inbox_claims_fenced_total` | counter | `consumer` |
/// | `diesel_inbox_claims_in_doubt` | gauge | `consumer` |
///
/// `outcome` is what the delivery came to: `processed`, `duplicate`, `dead_lettered` (by
/// this delivery's failure or before it), `payload_conflict`, `failed` (the handler returned
/// an error or panicked) or `error` (the inbox's own: an invalid id, the database, exhausted
/// retries). Each call of [`Inbox::process`](crate::Inbox::process) and each delivery of
/// [`Inbox::process_batch`](crate::Inbox::process_batch) counts once; the duration runs from
/// the call to its result (for a batch, to the batch's results). Failed attempts and dead
/// letters count once their record commits; contention retries, each time a transaction runs
/// again. `table` names the table retention pruned. A [`Cursor`](crate::cursor::Cursor)'s deliveries
/// count as the inbox's do; the gaps it finds count once they commit, with their `cause`
/// (`skipped` or `evicted`), as gaps and as missing sequences. An alert on
/// `diesel_inbox_gaps_total{cause="evicted"}` pages when an outage outlasted the broker's
/// retention. A [claim](crate::claim::Claims) counts each state it enters once that commits
/// (`state`: `in_progress` when a worker acquires it, `completed`, `released`, `abandoned`,
/// `in_doubt`); an alert on `diesel_inbox_claim_transitions_total{state="in_doubt"}` pages when
/// a side effect's outcome is unknown and waits for ops. A former holder's write refused by
/// the claim's fencing counts in `diesel_inbox_claims_fenced_total`. The gauge
/// `diesel_inbox_claims_in_doubt` is set by each [`Claims::in_doubt`](crate::claim::Claims::in_doubt):
/// call it from a periodic health check to see claims whose lease ran out with no delivery
/// since.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
///
/// // With an exporter installed as the global recorder first, e.g.
/// // metrics_exporter_prometheus::PrometheusBuilder::new().install()?;
/// diesel_inbox::describe_metrics();
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// diesel_inbox::with_inbox(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(()))?;
/// // diesel_inbox_deliveries_total{consumer="default",outcome="processed"} 1
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    const COUNTERS: [(&str, &str); 18] = [
        (
            DELIVERIES,
            "Deliveries offered to the inbox, by consumer and what they came to.",
        ),
        (
            FAILED_ATTEMPTS,
            "Failed attempts recorded by the failure policy.",
        ),
        (
            DEAD_LETTERED,
            "Events dead-lettered by the failure policy.",
        ),
        (
            CONTENTION_RETRIES,
            "Inbox transactions rolled back for contention and run again.",
        ),
        (
            PRUNED_ROWS,
            "Rows removed by retention, by consumer and table.",
        ),
        (
            GAPS,
            "Gaps (ranges of missing sequences) found by cursors, by consumer and cause.",
        ),
        (
            GAP_SEQUENCES,
            "Sequences missing in the gaps cursors found, by consumer and cause.",
        ),
        (
            REORGS,
            "Chain reorgs undone by chain cursors, by consumer (each one is a row of diesel-inbox reorgs).",
        ),
        (
            REORG_BLOCKS,
            "Blocks orphaned by the reorgs chain cursors undid, by consumer.",
        ),
        (
            REORG_EVENTS_REVERTED,
            "Events whose effect chain reorgs reverted, by consumer.",
        ),
        (
            REORGS_REFUSED,
            "Blocks refused for forking below the finalized height, by consumer: ops must act.",
        ),
        (
            REPLAY_EVENTS,
            "Events a replay settled, by target consumer and outcome: processed, duplicate, failed, dead_lettered, skipped, or would_run (a probe rolled it back).",
        ),
        (
            CLAIM_TRANSITIONS,
            "Claims on side effects entering a state, by consumer and state (in_doubt waits for ops).",
        ),
        (
            CLAIMS_FENCED,
            "Writes of a claim's former holder refused because the claim had moved on.",
        ),
        (
            OUTBOX_ENQUEUED,
            "Events enqueued in the outbox, by topic (counted at the INSERT; a rollback undoes the row, not the count).",
        ),
        (
            OUTBOX_PUBLISHED,
            "Outbox rows the broker accepted, by topic.",
        ),
        (
            OUTBOX_PUBLISH_FAILURES,
            "Failed publishes of outbox rows, by topic and outcome (retry, failed).",
        ),
        (
            OUTBOX_FENCED,
            "Outbox rows another relay took over before this one marked them: published twice.",
        ),
    ];
    const GAUGES: [(&str, &str); 2] = [
        (
            CLAIMS_IN_DOUBT,
            "Claims in doubt when Claims::in_doubt last read them, by consumer.",
        ),
        (
            OUTBOX_PENDING,
            "Outbox rows waiting for the relay, when Outbox::stats last read them.",
        ),
    ];
    for (name, description) in COUNTERS {
        describe_counter!(name, Unit::Count, description);
    }
    for (name, description) in GAUGES {
        describe_gauge!(name, Unit::Count, description);
    }
    describe_histogram!(
        DELIVERY_DURATION,
        Unit::Seconds,
        "Time from a delivery's call to its result, by consumer and outcome."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_follow_prometheus_conventions() {
        for name in [
            DELIVERIES,
            FAILED_ATTEMPTS,
            DEAD_LETTERED,
            CONTENTION_RETRIES,
            PRUNED_ROWS,
            GAPS,
            GAP_SEQUENCES,
            REORGS,
            REORG_BLOCKS,
            REORG_EVENTS_REVERTED,
            REORGS_REFUSED,
            REPLAY_EVENTS,
            CLAIM_TRANSITIONS,
            CLAIMS_FENCED,
        ] {
            assert!(name.starts_with("diesel_inbox_") && name.ends_with("_total"));
        }
        assert!(DELIVERY_DURATION.ends_with("_seconds"));
    }

    #[test]
    fn an_error_is_labelled_as_the_caller_says_and_an_outcome_as_itself() {
        let processed: Result<Outcome<()>, ()> = Ok(Outcome::Processed(()));
        let failed: Result<Outcome<()>, ()> = Err(());
        assert_eq!(
            DeliveryOutcome::of(&processed, DeliveryOutcome::Failed),
            DeliveryOutcome::Processed
        );
        assert_eq!(
            DeliveryOutcome::of(&failed, DeliveryOutcome::PayloadConflict).as_str(),
            "payload_conflict"
        );
    }
}
