//! Governed replay: a bounded, recorded re-run of past events into a named target consumer,
//! reconciled before it is accepted.
//!
//! A replay is a fact with a record (`diesel_inbox_replays`): its source and bounded range,
//! the reason and who asked, the schema interpretation, the target, the expected outcome, its
//! progress and counts, a digest of its input, and the evidence that decided it. Its states
//! ([`ReplayState`]) move planned → running → finished → accepted or rejected, or to aborted;
//! every transition is audited ([`Replays::history`]).
//!
//! 1. [`Replays::plan`] records the [`Plan`]: a [`Range`] that always ends, a [`Target`]
//!    (isolated, a consumer name of the replay's own writing where the app names; or the live
//!    consumer), an [`Interpretation`] of schemas, an [`Expectation`].
//!    [`Replays::preview`] is its dry run: what the range holds, and what the target has.
//! 2. [`Replays::run`] reads the range from a [`ReplaySource`] ([`OutboxSource`], a JetStream
//!    stream, or the app's own) in bounded batches, and delivers each event through the
//!    target's inbox: its effect and the replay's progress commit together, so a crashed run
//!    resumes from its checkpoint and never processes an event twice. A fenced lease lets one
//!    runner at a time make progress. Side effects are suppressed unless the plan allows
//!    them: [`Replayed::topic`] and [`Replayed::claims`].
//! 3. [`Replays::reconcile`] computes the evidence ([`Evidence`]): every input id has its row
//!    in the target's inbox, the counts add up, the input digest matches a re-read of the
//!    source; the app's callback adds its own [`Report`]s.
//! 4. [`Replays::accept`] checks the evidence against the expectation; accepting a replay whose
//!    evidence differs needs [`Replays::accept_overriding`], with a reason.
//!    [`Replays::reject`] and [`Replays::abort`] end it otherwise.
//!
//! A replay re-runs a bounded range of past events through one consumer's inbox, instead of
//! publishing them again, which would reach every consumer and run every side effect again.
//! The example on [`Replays`] plans, runs, reconciles and accepts one on SQLite;
//! `examples/replay_projection.rs` rebuilds a projection that dropped each award's bonus into a
//! shadow table, skips and names an event in a schema version no consumer reads, suppresses
//! the announcement the fixed handler would enqueue, is reconciled against the expected totals,
//! accepted, and swapped in.
//!
//! - **A fact with a record.** [`Replays::plan`] writes a row of `diesel_inbox_replays`: the
//!   source and its bounded range ([`Range::positions`], [`Range::times`] or [`Range::ids`]:
//!   each has an end, and what arrives after it is never read), the reason and the actor (an
//!   [`Audit`]), the schema interpretation, the target and the expectation; then, as it runs,
//!   its checkpoint, its counts (read, processed, duplicates, failed, dead-lettered, skipped;
//!   side effects suppressed) and the input digest (SHA-256 chained over each event's id and
//!   payload fingerprint, in order); once reconciled, the evidence that decided it. Every
//!   transition is a row of `diesel_inbox_replay_transitions`, with who made it and why
//!   ([`Replays::history`]). Every event that did not simply take effect or come back a
//!   duplicate is a note in `diesel_inbox_replay_notes` ([`Replays::notes`]).
//! - **Schema interpretation.** [`Interpretation::Versions`] reads the event types and versions
//!   it lists; any other event is skipped, counted and named in the notes, never delivered.
//!   [`Interpretation::Decoder`] hands every event to the app's decoder and records which one.
//!   Without either, every version is read.
//! - **Sources.** [`OutboxSource`] reads the producer's outbox by position, enqueue time or
//!   event id ([`OutboxSource::aggregate`]: one aggregate's events, recorded in the source's
//!   name, `outbox:{type}/{id}`, which [`OutboxSource::from_name`] reads back).
//!   `diesel_inbox_nats::JetStreamSource` reads a JetStream stream's sequences, on the async
//!   flavour. Any other, an archive or a Kafka topic, implements [`ReplaySource`]: a name and
//!   `read(conn, range, after, limit)`. The replay drops what a source returns outside the
//!   range, and runs and reconciles only against a source of the name it recorded.
//! - **Targets.** [`Target::isolated`] runs through a consumer name of the replay's own, and
//!   the handler writes where [`Replayed::destination`] says (shadow tables, a schema: an
//!   identifier, checked when the target is made; the app still checks it is the one it
//!   expects before it puts it in SQL). The live consumer's rows are never touched, and the
//!   plan expects every event to take effect ([`Expectation::AllProcessed`]).
//!   [`Target::live`] runs through the live consumer, whose processed events are duplicates:
//!   the replay proves that nothing would run twice ([`Expectation::AllDuplicates`]). Run it
//!   with [`Probe`], a handler that applies nothing (an event that would take effect is rolled
//!   back, counted as failed and noted): that is what `diesel-inbox replays run` does.
//! - **Side effects suppressed.** A replayed handler enqueues through [`Replayed::topic`]:
//!   `None` by default, so nothing is enqueued; with [`Plan::redirect_enqueues`], a topic of the
//!   replay's own. Claims go through [`Replayed::claims`]: suppressed by default (nothing is
//!   claimed or called, and the outcome is `ClaimOutcome::Suppressed`, with what a live
//!   delivery would have done), run with [`Plan::allow_calls`]. Each one is counted and noted.
//!   A side effect the handler makes on its own (an email sent directly) is not suppressed.
//! - **Running.** [`Replays::run`] reads the range in batches ([`Replays::batch_size`], 100 by
//!   default) and delivers each event through the target's inbox; the checkpoint, counts and
//!   digest commit in the event's own transaction, so a run that stops resumes from its
//!   checkpoint and never applies an event twice. A handler failure the failure policy counts
//!   is recorded for the target, counted and noted, and the run goes on. One runner at a
//!   time: a run holds a fenced lease ([`Replays::lease`], 60 s after each event); while a
//!   runner holds it another gets [`Refused::Held`], and once it runs out another takes
//!   over and the first one's writes are refused ([`Refused::Fenced`]). Each run is a
//!   `tracing` span `replay` with a `replay progress` line per batch
//!   ([`Replays::run_reporting`] calls back there too), and
//!   `diesel_inbox_replay_events_total{consumer,outcome}` counts the events settled.
//! - **Reconciliation and acceptance.** [`Replays::reconcile`] re-reads the range and computes
//!   the crate's [`Evidence`]: every event it reads (and does not skip) has its row in the
//!   target's inbox, the counts add up and meet the expectation, and the digest re-read is the
//!   one recorded while running. The app's callback adds its own [`Report`]s
//!   ([`Report::compare`] names every key that differs). [`Replays::accept`] refuses evidence
//!   that differs ([`Refused::EvidenceMismatch`]); [`Replays::accept_overriding`] accepts
//!   it anyway, with a reason, recorded beside the differences it overrode. Swapping shadow
//!   tables in is the app's step, or ops'.
//! - **Retention.** While a replay of the outbox is open (planned, running or finished),
//!   [`Outbox::prune`](crate::outbox::Outbox::prune) keeps the outbox rows from the first
//!   position of its range on, so that the reconciliation reads what the run read.
//!   [`Replays::prune`] and `diesel-inbox replays prune --older-than 90d` delete decided
//!   replays with their transitions and notes; open ones are never deleted.
//!
//! The async flavour has the same API awaited: `asynch::Replays`, with `asynch::ReplayHandler`
//! and `asynch::ReplaySource` (feature `async`).
//!
//! - `plan.rs`: the plan. `record.rs`: the record as read back.
//! - `progress.rs`: the decisions (how an event is read, what it adds, the digest).
//! - `evidence.rs`: the reconciliation's judgement. `source.rs`: sources.
//! - `run.rs`: the runner. `error.rs`: what a replay refuses.

#[cfg(feature = "async")]
pub(crate) mod asynch;
pub(crate) mod error;
mod evidence;
mod plan;
mod progress;
mod record;
mod run;
mod source;
pub(crate) mod sql;
pub(crate) mod state;

use std::time::Duration;

use tracing::{info, warn};

use crate::decide::{Failure, Scope};
use crate::duration::{before, now};
use crate::engine::{self, run_ready, Body, Subject};
use crate::sql::{Blocking, Db, Sql};
use crate::{AdminError, Audit, CorruptRow, Error, InboxConnection, RetryPolicy};

pub use error::Refused;
pub use evidence::{Evidence, ReplayCounts, Report};
pub use plan::{Enqueues, Expectation, Interpretation, Plan, Range, Target};
pub use record::{ReplayNote, ReplayRecord, Transition};
pub use run::{Probe, ReplayHandler, Replayed, RunReport};
pub use source::{OutboxSource, ReplaySource, SourceEvent};
use sql::{NewReplay, ReplaySql};
pub use state::{NoteKind, ReplayState};

#[cfg(feature = "async")]
pub(crate) use run::Handle;
pub(crate) use run::SyncHandler;
pub(crate) use source::Feed;
pub(crate) use source::OUTBOX as OUTBOX_SOURCE;

use plan::Place;

/// How many events a run reads per batch, by default.
pub const DEFAULT_BATCH_SIZE: usize = 100;

/// How long a runner holds a replay between two events, by default: a runner silent for
/// longer can be taken over.
pub const DEFAULT_REPLAY_LEASE: Duration = Duration::from_secs(60);

/// How many of a replay's ids a reconciliation checks per statement.
const IDS_PER_CHECK: usize = 500;

/// Governed replays, run and decided: see the [module documentation](self).
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::replay::{OutboxSource, Plan, Range, ReplayHandler, Replayed, Replays, Target};
/// use diesel_inbox::{envelope::Envelope, outbox::Outbox, Audit};
///
/// /// Counts the events it replays; a real one writes into `replay.destination()`.
/// struct Count(u32);
///
/// impl ReplayHandler<SqliteConnection> for Count {
///     type Error = diesel_inbox::Error;
///
///     fn apply(&mut self, _: &mut SqliteConnection, _: &Envelope, _: &Replayed) -> Result<(), Self::Error> {
///         self.0 += 1;
///         Ok(())
///     }
/// }
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let outbox = Outbox::new("orders-service")?;
/// for n in 0..3 {
///     outbox.enqueue(&mut conn, "orders", &Envelope::new("order.placed", "order", &n.to_string()))?;
/// }
///
/// let replays = Replays::new();
/// let plan = Plan::new(Target::isolated("orders-rebuild", "orders_shadow")?, Range::positions(1, 3)?);
/// let audit = Audit::new("ops@example.com", "rebuild the orders projection after fix #42")?;
/// let replay = replays.plan(&mut conn, &OutboxSource::new(), &plan, &audit)?;
///
/// let mut count = Count(0);
/// let run = replays.run(&mut conn, replay.id, &mut OutboxSource::new(), &mut count)?;
/// assert!(run.finished);
/// assert_eq!((run.counts.read, run.counts.processed, count.0), (3, 3, 3));
///
/// let evidence = replays.reconcile(&mut conn, replay.id, &mut OutboxSource::new(), |_| Ok(vec![]))?;
/// assert!(evidence.matches(), "{:?}", evidence.differences);
/// replays.accept(&mut conn, replay.id, &Audit::new("ops@example.com", "counts and digest match")?)?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Replays {
    // Each field is a setting with a builder on the async `Replays` too: `asynch`'s parity
    // test names every field, so a new one fails to compile there until it is forwarded.
    pub(crate) runner: String,
    pub(crate) batch_size: usize,
    pub(crate) lease: Duration,
    pub(crate) retry: RetryPolicy,
}

impl Default for Replays {
    fn default() -> Self {
        Self {
            runner: "diesel-inbox".to_owned(),
            batch_size: DEFAULT_BATCH_SIZE,
            lease: DEFAULT_REPLAY_LEASE,
            retry: RetryPolicy::default(),
        }
    }
}

/// What a replay's range holds, and what its target has of it: [`Replays::preview`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Preview {
    /// Events in the range.
    pub events: u64,
    /// Of those, how many the plan's schema interpretation skips.
    pub skipped: u64,
    /// Of the others, how many the target consumer's inbox has a row for: duplicates, if
    /// the replay ran now.
    pub in_target: u64,
    /// The first event's position.
    pub first: Option<u64>,
    /// The last event's position.
    pub last: Option<u64>,
}

impl Replays {
    /// Replays run as `diesel-inbox`, in batches of [`DEFAULT_BATCH_SIZE`], leased for
    /// [`DEFAULT_REPLAY_LEASE`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Who runs: the actor of the transitions a run makes (a host and process, a job name).
    pub fn runner(mut self, name: &str) -> Self {
        name.clone_into(&mut self.runner);
        self
    }

    /// How many events a run reads at a time (at least 1).
    pub fn batch_size(mut self, events: usize) -> Self {
        self.batch_size = events.max(1);
        self
    }

    /// How long a runner holds a replay after each event; a runner silent for longer (it
    /// crashed, hung or lost its connection) can be taken over, and can no longer write.
    /// Longer than the slowest event's handler.
    ///
    /// # Panics
    ///
    /// When `lease` is zero.
    pub fn lease(mut self, lease: Duration) -> Self {
        assert!(
            !lease.is_zero(),
            "a replay's lease must be longer than zero"
        );
        self.lease = lease;
        self
    }

    /// The retry policy for contention. Defaults to [`RetryPolicy::default`].
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Records `plan` for `source`, planned, with who asked and why.
    ///
    /// # Errors
    ///
    /// [`Refused::InvalidPlan`]; [`Error::Database`].
    pub fn plan<C: InboxConnection, S: ReplaySource<C>>(
        &self,
        conn: &mut C,
        source: &S,
        plan: &Plan,
        audit: &Audit,
    ) -> Result<ReplayRecord, AdminError> {
        run_ready(self.plan_in::<Blocking, _>(conn, &source.name(), plan, audit))
    }

    /// [`plan`](Self::plan) in either flavour.
    pub(crate) async fn plan_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        source: &str,
        plan: &Plan,
        audit: &Audit,
    ) -> Result<ReplayRecord, AdminError> {
        plan.check()?;
        if source.trim().is_empty() {
            return Err(Refused::InvalidPlan("a replay's source has a name".into()).into());
        }
        let body = Record {
            source,
            plan,
            audit,
        };
        let subject = Subject {
            consumer: plan.target().consumer(),
            event_id: None,
        };
        let scope = engine::scope_of(conn)?;
        let id = engine::run(conn, scope, &self.retry, subject, body)
            .await
            .map_err(Failure::into_error)?;
        info!(
            id,
            consumer = plan.target().consumer(),
            source,
            actor = audit.actor(),
            reason = audit.reason(),
            "replay planned"
        );
        Ok(self.get_in(conn, id).await?)
    }

    /// The dry run of `plan` on `source`: what the range holds, and what the target has of
    /// it. Reads, writes nothing.
    ///
    /// # Errors
    ///
    /// What the source returns; [`Error::Database`].
    pub fn preview<C: InboxConnection, S: ReplaySource<C>>(
        &self,
        conn: &mut C,
        source: &mut S,
        plan: &Plan,
    ) -> Result<Preview, AdminError> {
        run_ready(self.preview_in::<Blocking, _, _>(conn, &mut source::Sync(source), plan))
    }

    /// [`preview`](Self::preview) in either flavour.
    pub(crate) async fn preview_in<F, C: Db<F, Backend: Sql>, S: Feed<C>>(
        &self,
        conn: &mut C,
        source: &mut S,
        plan: &Plan,
    ) -> Result<Preview, AdminError> {
        let mut preview = Preview::default();
        let reread = self
            .reread(conn, source, plan, |event, read| {
                preview.events += 1;
                preview.first.get_or_insert(event.position);
                preview.last = Some(event.position);
                if read.envelope.is_err() {
                    preview.skipped += 1;
                }
            })
            .await?;
        preview.in_target = preview.events - preview.skipped - reread.without_row.len() as u64;
        Ok(preview)
    }

    /// The replay `id`.
    ///
    /// # Errors
    ///
    /// [`Refused::NotFound`]; [`Error::CorruptRow`]; [`Error::Database`].
    pub fn get<C: InboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
    ) -> Result<ReplayRecord, AdminError> {
        Ok(run_ready(self.get_in::<Blocking, _>(conn, id))?)
    }

    /// [`get`](Self::get) in either flavour.
    pub(crate) async fn get_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        id: i64,
    ) -> Result<ReplayRecord, Error> {
        let row = C::Backend::replay(conn, id)
            .await?
            .ok_or(Refused::NotFound { id })?;
        ReplayRecord::from_row(row)
    }

    /// Up to `limit` replays after id `after`, in id order; one this version cannot read is
    /// listed in its place as an `Err`.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn list<C: InboxConnection>(
        &self,
        conn: &mut C,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Result<ReplayRecord, CorruptRow>>, Error> {
        run_ready(self.list_in::<Blocking, _>(conn, after, limit))
    }

    /// [`list`](Self::list) in either flavour.
    pub(crate) async fn list_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Result<ReplayRecord, CorruptRow>>, Error> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = C::Backend::replays(conn, after, limit).await?;
        Ok(rows
            .into_iter()
            .map(|row| match ReplayRecord::from_row(row) {
                Ok(record) => Ok(record),
                Err(Error::CorruptRow(corrupt)) => Err(corrupt),
                Err(other) => unreachable!("reading a row back fails only as corrupt: {other}"),
            })
            .collect())
    }

    /// The replay's notes after source position `after`, in position order: the events
    /// skipped, failed, dead-lettered, run where none was expected, or whose side effects were
    /// suppressed. A page holds `limit` notes, or a few more to end at a whole event (one has
    /// a note of each kind at most): the next page starts after the last position it holds.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn notes<C: InboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Result<ReplayNote, CorruptRow>>, Error> {
        run_ready(self.notes_in::<Blocking, _>(conn, id, after, limit))
    }

    /// [`notes`](Self::notes) in either flavour.
    pub(crate) async fn notes_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        id: i64,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Result<ReplayNote, CorruptRow>>, Error> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let page = i64::try_from(limit.saturating_add(NoteKind::TEXTS.len())).unwrap_or(i64::MAX);
        let mut rows = C::Backend::replay_notes(conn, id, after, page).await?;
        let positions: Vec<i64> = rows.iter().map(|row| row.position).collect();
        rows.truncate(record::whole_events(&positions, limit));
        Ok(rows
            .into_iter()
            .map(|row| ReplayNote::from_row(id, row))
            .collect())
    }

    /// The replay's transitions, in order, with who made each and why.
    ///
    /// # Errors
    ///
    /// [`Error::CorruptRow`]; [`Error::Database`].
    pub fn history<C: InboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
    ) -> Result<Vec<Transition>, Error> {
        run_ready(self.history_in::<Blocking, _>(conn, id))
    }

    /// [`history`](Self::history) in either flavour.
    pub(crate) async fn history_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        id: i64,
    ) -> Result<Vec<Transition>, Error> {
        let rows = C::Backend::replay_transitions(conn, id).await?;
        rows.into_iter()
            .map(|row| Transition::from_row(id, row).map_err(Error::from))
            .collect()
    }

    /// Runs the replay `id` to the end of its range, reading `source` and applying each event
    /// with `handler` through the target consumer's inbox; resumes a replay whose runner
    /// stopped, from its checkpoint. See the [module documentation](self).
    ///
    /// # Errors
    ///
    /// The handler's own error, for a failure that is not the event's (transient,
    /// contention that outlasted the retries, a lost connection): the run stops and resumes
    /// when run again. Otherwise the inbox's [`Error`] converted into it:
    /// [`Error::Replay`] with [`Refused::Held`] (another runner's lease lasts),
    /// [`Refused::Fenced`] (taken over or aborted meanwhile), [`Refused::WrongState`],
    /// [`Refused::SourceMismatch`], [`Refused::NotFound`]; [`Error::InsideTransaction`] inside
    /// an open transaction; what the source returns; [`Error::Database`].
    pub fn run<C, S, H>(
        &self,
        conn: &mut C,
        id: i64,
        source: &mut S,
        handler: &mut H,
    ) -> Result<RunReport, H::Error>
    where
        C: InboxConnection,
        S: ReplaySource<C>,
        H: ReplayHandler<C>,
    {
        self.run_reporting(conn, id, source, handler, |_| {})
    }

    /// [`run`](Self::run), calling `progress` after each batch with the counts so far.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    pub fn run_reporting<C, S, H>(
        &self,
        conn: &mut C,
        id: i64,
        source: &mut S,
        handler: &mut H,
        mut progress: impl FnMut(&RunReport) + Send,
    ) -> Result<RunReport, H::Error>
    where
        C: InboxConnection,
        S: ReplaySource<C>,
        H: ReplayHandler<C>,
    {
        let (mut source, mut handler) = (source::Sync(source), SyncHandler(handler));
        run_ready(self.run_in::<Blocking, _, _, _>(
            conn,
            id,
            &mut source,
            &mut handler,
            &mut progress,
        ))
    }

    /// Reconciles the finished replay `id`: re-reads its range from `source`, checks every
    /// input id against the target's inbox, the counts and the input digest, adds the reports
    /// of `check` (the app's comparison: row counts and checksums per key, the isolated
    /// target against the live tables, or against a golden copy), and stores the evidence.
    ///
    /// # Errors
    ///
    /// [`Refused::WrongState`] for a replay that is not finished;
    /// [`Refused::SourceMismatch`]; `check`'s error; what the source returns;
    /// [`Error::Database`].
    pub fn reconcile<C, S, R>(
        &self,
        conn: &mut C,
        id: i64,
        source: &mut S,
        check: R,
    ) -> Result<Evidence, AdminError>
    where
        C: InboxConnection,
        S: ReplaySource<C>,
        R: FnOnce(&mut C) -> Result<Vec<Report>, AdminError>,
    {
        let record = run_ready(self.reconcilable::<Blocking, _>(conn, id, &source.name()))?;
        let reports = check(conn)?;
        run_ready(self.reconcile_in::<Blocking, _, _>(
            conn,
            record,
            &mut source::Sync(source),
            reports,
        ))
    }

    /// The replay `id`, if it can be reconciled against the source `source`: before the app's
    /// check runs.
    pub(crate) async fn reconcilable<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        id: i64,
        source: &str,
    ) -> Result<ReplayRecord, Error> {
        let record = self.get_in(conn, id).await?;
        expect_state(&record, &[ReplayState::Finished], "reconciled", "finished")?;
        if record.source != source {
            return Err(Refused::SourceMismatch {
                id,
                recorded: record.source,
                given: source.to_owned(),
            }
            .into());
        }
        Ok(record)
    }

    /// [`reconcile`](Self::reconcile) in either flavour, with the app's reports, for a
    /// [`reconcilable`](Self::reconcilable) replay.
    pub(crate) async fn reconcile_in<F, C: Db<F, Backend: Sql>, S: Feed<C>>(
        &self,
        conn: &mut C,
        record: ReplayRecord,
        source: &mut S,
        reports: Vec<Report>,
    ) -> Result<Evidence, AdminError> {
        let id = record.id;
        let reread = self.reread(conn, source, &record.plan, |_, _| {}).await?;
        let evidence = evidence::judge(
            record.counts,
            &record.digest,
            record.plan.expectation(),
            reread,
            reports,
            now(),
        );
        if !C::Backend::set_replay_evidence(conn, id, &evidence.to_document(), now())
            .await
            .map_err(Error::from)?
        {
            return Err(Error::from(Refused::Fenced { id }).into());
        }
        if evidence.matches() {
            info!(
                id,
                "replay reconciled: the evidence matches its plan's expectation"
            );
        } else {
            warn!(id, differences = %evidence.differences.join("; "), "replay reconciled: the evidence differs from its plan's expectation");
        }
        Ok(evidence)
    }

    /// Reads the plan's whole range from `source` again: its events, their digest, and which
    /// of the ids the plan reads have no row in the target's inbox; `each` sees every event.
    async fn reread<F, C: Db<F, Backend: Sql>, S: Feed<C>>(
        &self,
        conn: &mut C,
        source: &mut S,
        plan: &Plan,
        mut each: impl FnMut(&SourceEvent, &progress::Read),
    ) -> Result<evidence::Reread, Error> {
        let mut reread = evidence::Reread::default();
        let mut digest = progress::EMPTY_DIGEST;
        let mut after = None;
        let mut pending: Vec<String> = Vec::new();
        let consumer = plan.target().consumer();
        loop {
            let events = source
                .read(conn, plan.range(), after, self.batch_size)
                .await?;
            let mut ended = events.is_empty();
            for event in events {
                match plan.range().place_after(after, event.position, event.at) {
                    Place::Before => continue,
                    Place::Inside => {}
                    Place::Past => {
                        ended = true;
                        break;
                    }
                }
                after = Some(event.position);
                let read = progress::read(plan, &event.message);
                each(&event, &read);
                reread.events += 1;
                digest = progress::chain(&digest, &read.event_id, &read.fingerprint);
                if read.envelope.is_ok() {
                    pending.push(read.event_id);
                }
                if pending.len() >= IDS_PER_CHECK {
                    reread
                        .without_row
                        .extend(without_row(conn, consumer, &std::mem::take(&mut pending)).await?);
                }
            }
            if ended {
                break;
            }
        }
        reread
            .without_row
            .extend(without_row(conn, consumer, &pending).await?);
        reread.digest = progress::digest_text(&digest);
        Ok(reread)
    }

    /// Accepts the finished, reconciled replay `id`, whose evidence matches its plan's
    /// expectation.
    ///
    /// # Errors
    ///
    /// [`Refused::NotReconciled`]; [`Refused::EvidenceMismatch`], naming what
    /// differs; [`Refused::WrongState`]; [`Refused::NotFound`]; [`Error::Database`].
    pub fn accept<C: InboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        run_ready(self.decide_in::<Blocking, _>(conn, id, audit, Decision::Accept))
    }

    /// Accepts the finished, reconciled replay `id` whatever its evidence says: the override,
    /// whose reason is recorded with the differences it overrode.
    ///
    /// # Errors
    ///
    /// As [`accept`](Self::accept), but for [`Refused::EvidenceMismatch`].
    pub fn accept_overriding<C: InboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        run_ready(self.decide_in::<Blocking, _>(conn, id, audit, Decision::Override))
    }

    /// Rejects the finished replay `id`.
    ///
    /// # Errors
    ///
    /// [`Refused::WrongState`]; [`Refused::NotFound`]; [`Error::Database`].
    pub fn reject<C: InboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        run_ready(self.decide_in::<Blocking, _>(conn, id, audit, Decision::Reject))
    }

    /// Aborts the planned or running replay `id`: it never runs again, and a runner that
    /// holds it stops at its next event.
    ///
    /// # Errors
    ///
    /// [`Refused::WrongState`]; [`Refused::NotFound`]; [`Error::Database`].
    pub fn abort<C: InboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        run_ready(self.decide_in::<Blocking, _>(conn, id, audit, Decision::Abort))
    }

    /// A decision in either flavour: check it, then move the replay and record it, in one
    /// transaction.
    pub(crate) async fn decide_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        id: i64,
        audit: &Audit,
        decision: Decision,
    ) -> Result<(), AdminError> {
        let record = self.get_in(conn, id).await?;
        let (from, attempted, allowed): (&[ReplayState], _, _) = match decision {
            Decision::Accept | Decision::Override => {
                (&[ReplayState::Finished], "accepted", "finished")
            }
            Decision::Reject => (&[ReplayState::Finished], "rejected", "finished"),
            Decision::Abort => (
                &[ReplayState::Planned, ReplayState::Running],
                "aborted",
                "planned or running",
            ),
        };
        expect_state(&record, from, attempted, allowed)?;
        let mut reason = audit.reason().to_owned();
        if matches!(decision, Decision::Accept | Decision::Override) {
            let evidence = record
                .evidence
                .as_ref()
                .ok_or(Refused::NotReconciled { id })
                .map_err(Error::from)?;
            if !evidence.matches() {
                if decision == Decision::Accept {
                    return Err(Error::from(Refused::EvidenceMismatch {
                        id,
                        differences: evidence.differences.clone(),
                    })
                    .into());
                }
                reason = format!(
                    "{reason} (override of: {})",
                    evidence.differences.join("; ")
                );
            }
        }
        let to = decision.to();
        let body = Decide {
            id,
            from,
            state: record.state,
            to,
            actor: audit.actor(),
            reason: &reason,
        };
        let subject = Subject {
            consumer: record.plan.target().consumer(),
            event_id: None,
        };
        let moved = engine::run(conn, Scope::TopLevel, &self.retry, subject, body)
            .await
            .map_err(Failure::into_error)?;
        if !moved {
            // It moved meanwhile: say where it is now.
            let now_record = self.get_in(conn, id).await?;
            expect_state(&now_record, from, attempted, allowed)?;
        }
        warn!(id, actor = audit.actor(), reason, %to, "replay transition");
        Ok(())
    }

    /// Deletes decided replays (accepted, rejected, aborted) last changed more than
    /// `older_than` ago, with their transitions and notes; returns how many replays. Open
    /// replays are never deleted.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn prune<C: InboxConnection>(
        &self,
        conn: &mut C,
        older_than: Duration,
    ) -> Result<u64, Error> {
        run_ready(self.prune_in::<Blocking, _>(conn, older_than))
    }

    /// [`prune`](Self::prune) in either flavour.
    pub(crate) async fn prune_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        older_than: Duration,
    ) -> Result<u64, Error> {
        let cutoff = before(now(), older_than);
        let limit = i64::try_from(self.batch_size).unwrap_or(i64::MAX);
        let mut deleted = 0_u64;
        loop {
            let n = C::Backend::delete_decided_replays(conn, cutoff, limit).await?;
            deleted += n as u64;
            if (n as u64) < limit.unsigned_abs() {
                break;
            }
        }
        crate::observe::pruned("replays", "diesel_inbox_replays", deleted);
        Ok(deleted)
    }
}

/// Which of `ids` have no row in `consumer`'s inbox.
async fn without_row<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    consumer: &str,
    ids: &[String],
) -> Result<Vec<String>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let present: std::collections::HashSet<String> =
        C::Backend::inbox_rows_of(conn, consumer, &refs)
            .await?
            .into_iter()
            .collect();
    Ok(ids
        .iter()
        .filter(|id| !present.contains(*id))
        .cloned()
        .collect())
}

/// Refuses an operation on a replay in another state.
fn expect_state(
    record: &ReplayRecord,
    from: &[ReplayState],
    attempted: &'static str,
    allowed: &'static str,
) -> Result<(), Error> {
    if from.contains(&record.state) {
        Ok(())
    } else {
        Err(Refused::WrongState {
            id: record.id,
            state: record.state,
            attempted,
            allowed,
        }
        .into())
    }
}

/// Where the outbox's retention stops while open replays read the outbox: the first position
/// of their ranges (`0`, all of it, for one whose range is not of positions), or `i64::MAX`
/// when none does.
pub(crate) fn outbox_kept_from(ranges: &[Option<i64>]) -> i64 {
    ranges
        .iter()
        .map(|first| first.unwrap_or(0))
        .min()
        .unwrap_or(i64::MAX)
}

/// An ops decision on a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    Accept,
    Override,
    Reject,
    Abort,
}

impl Decision {
    fn to(self) -> ReplayState {
        match self {
            Self::Accept | Self::Override => ReplayState::Accepted,
            Self::Reject => ReplayState::Rejected,
            Self::Abort => ReplayState::Aborted,
        }
    }
}

/// A plan's record and its first transition, in one transaction.
struct Record<'a> {
    source: &'a str,
    plan: &'a Plan,
    audit: &'a Audit,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Record<'_> {
    type Output = i64;
    type Error = Error;

    async fn attempt(&mut self, conn: &mut C) -> Result<i64, Failure<Error>> {
        let at = now();
        let document = self.plan.to_document();
        let counts = ReplayCounts::default().to_document();
        let digest = progress::digest_text(&progress::EMPTY_DIGEST);
        let row = NewReplay {
            consumer: self.plan.target().consumer(),
            source: self.source,
            range: self.plan.range().bounds(),
            plan: &document,
            reason: self.audit.reason(),
            requested_by: self.audit.actor(),
            counts: &counts,
            digest: &digest,
            now: at,
        };
        let id = C::Backend::insert_replay(conn, &row).await?;
        let (actor, reason) = (self.audit.actor(), self.audit.reason());
        let planned = Transition::row(None, ReplayState::Planned, actor, reason, at);
        C::Backend::insert_replay_transition(conn, id, &planned).await?;
        Ok(id)
    }
}

/// A decision's move and its record; `false` when the replay was no longer in `from`.
struct Decide<'a> {
    id: i64,
    from: &'a [ReplayState],
    state: ReplayState,
    to: ReplayState,
    actor: &'a str,
    reason: &'a str,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Decide<'_> {
    type Output = bool;
    type Error = Error;

    async fn attempt(&mut self, conn: &mut C) -> Result<bool, Failure<Error>> {
        let at = now();
        if !C::Backend::set_replay_state(conn, self.id, self.from, self.to, None, at).await? {
            return Ok(false);
        }
        let moved = Transition::row(Some(self.state), self.to, self.actor, self.reason, at);
        C::Backend::insert_replay_transition(conn, self.id, &moved).await?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_keeps_the_outbox_from_the_first_position_an_open_replay_reads() {
        assert_eq!(outbox_kept_from(&[]), i64::MAX);
        assert_eq!(outbox_kept_from(&[Some(40), Some(7)]), 7);
        assert_eq!(outbox_kept_from(&[Some(40), None]), 0);
    }
}
