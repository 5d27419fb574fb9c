//! Running a replay: its fenced lease, its bounded batches, and each event through the target
//! consumer's inbox, with the replay's progress committed in the event's own transaction.

use std::future::Future;

use tracing::{info, warn, Instrument};

use super::evidence::ReplayCounts;
use super::plan::{Enqueues, Place, Plan, Target};
use super::progress::{self, Progress, Read, Settled};
use super::record::{ReplayRecord, Transition};
use super::source::{Feed, SourceEvent};
use super::sql::{NoteRow, ReplayProgressRow, ReplaySql};
use super::{Refused, ReplayState, Replays};
use crate::claim::Suppression;
use crate::decide::{self, Failure, Scope};
use crate::duration::{after, now};
use crate::engine::{self, Body, Effect, Subject};
use crate::sql::{Db, Sql, TransactionSql};
use crate::{
    claim::Claims, envelope::Envelope, observe, Delivery, Error, HandlerError, Inbox, Outcome,
};

/// What the app does with a replayed event, on connections `C`.
///
/// [`apply`](Self::apply) runs inside the target consumer's inbox transaction, as a live
/// handler's effect does, and once per event: it writes where the target says
/// ([`Replayed::destination`]). Side effects go through the [`Replayed`] it is given: outbox
/// enqueues through [`Replayed::topic`], claims through [`Replayed::claims`], so that the
/// replay suppresses them unless its plan allows them.
pub trait ReplayHandler<C> {
    /// The handler's error; the inbox's own converts into it.
    type Error: HandlerError;

    /// Applies `event` into the target, on the transaction `tx`.
    ///
    /// # Errors
    ///
    /// Any: the event's transaction rolls back. A failure the failure policy counts is
    /// recorded for the target consumer, counted as failed, noted, and the replay goes on;
    /// any other (transient, contention that outlasted the retries, a lost connection) stops
    /// the run, which resumes from its checkpoint.
    fn apply(&mut self, tx: &mut C, event: &Envelope, replay: &Replayed)
        -> Result<(), Self::Error>;

    /// Runs after the event's transaction committed, outside any transaction, for an event
    /// whose effect ran: where a live handler would run its claims. Nothing by default.
    /// At most once per event: a crash between the commit and this loses it. What it
    /// suppresses is counted and noted with the event, in the one suppressed note the event
    /// has ([`Replays::notes`]), beside what `apply` suppressed.
    ///
    /// # Errors
    ///
    /// Any: the run stops; the event stays processed.
    fn after(
        &mut self,
        conn: &mut C,
        event: &Envelope,
        replay: &Replayed,
    ) -> Result<(), Self::Error> {
        let _ = (conn, event, replay);
        Ok(())
    }
}

/// A handler that applies nothing: every event that would take effect in the target is
/// rolled back, counted as failed and noted ([`NoteKind::Ran`](crate::replay::NoteKind::Ran)),
/// with no failure recorded for the target. A replay into the live consumer with it proves
/// that nothing would run twice without running anything: what `diesel-inbox replays run`
/// does. Its duplicates are deliveries of the live consumer all the same: they count on its
/// rows (deliveries, last seen) and in its duplicate counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct Probe;

impl<C> ReplayHandler<C> for Probe {
    type Error = Error;

    fn apply(&mut self, _: &mut C, _: &Envelope, _: &Replayed) -> Result<(), Error> {
        Err(Refused::WouldRun.into())
    }
}

/// A delivery made by a replay, as its handler sees it: which replay, which target, and the
/// gates its side effects pass through.
#[derive(Debug)]
pub struct Replayed {
    id: i64,
    position: u64,
    target: Target,
    enqueues: Enqueues,
    calls: bool,
    suppression: Suppression,
}

impl Replayed {
    fn new(id: i64, position: u64, plan: &Plan) -> Self {
        Self {
            id,
            position,
            target: plan.target().clone(),
            enqueues: plan.enqueues().clone(),
            calls: plan.calls_allowed(),
            suppression: Suppression::default(),
        }
    }

    /// The replay's id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The event's position in the source.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Where an isolated target writes, as the plan names it; `None` in the live consumer.
    pub fn destination(&self) -> Option<&str> {
        self.target.destination()
    }

    /// The topic an outbox enqueue for `topic` goes to under this replay: the replay's own
    /// topic where the plan redirects enqueues, `None` (do not enqueue) where it drops them,
    /// the default. Either is noted as a suppressed side effect, so ask only where the
    /// handler enqueues. An enqueue redirected keeps
    /// its envelope, so give it an event id of its own: the outbox has the original's.
    ///
    /// ```no_run
    /// # fn handle(outbox: &diesel_inbox::outbox::Outbox, tx: &mut diesel::SqliteConnection, replay: &diesel_inbox::replay::Replayed, follow_up: &diesel_inbox::envelope::Envelope) -> Result<(), diesel_inbox::Error> {
    /// if let Some(topic) = replay.topic("points.awarded") {
    ///     outbox.enqueue(tx, topic, follow_up)?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn topic(&self, topic: &str) -> Option<&str> {
        match &self.enqueues {
            Enqueues::Drop => {
                self.suppression
                    .note(format!("enqueue to {topic}: dropped"));
                None
            }
            Enqueues::Redirect(own) => {
                self.suppression
                    .note(format!("enqueue to {topic}: redirected to {own}"));
                Some(own)
            }
        }
    }

    /// `claims` as this replay lets them run: unchanged where the plan allows calls;
    /// otherwise suppressed. A suppressed claim claims nothing and calls nothing, anywhere
    /// (inside the event's transaction too), and returns
    /// [`ClaimOutcome::Suppressed`](crate::claim::ClaimOutcome::Suppressed) with what a live
    /// delivery would have done, which the replay notes.
    pub fn claims(&self, claims: &Claims) -> Claims {
        if self.calls {
            claims.clone()
        } else {
            claims.clone().suppressed(self.suppression.clone())
        }
    }
}

/// What one call of a replay's run came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[must_use]
pub struct RunReport {
    /// The replay.
    pub id: i64,
    /// Whether it reached the end of its range: it is finished, and awaits reconciliation.
    pub finished: bool,
    /// Its counts, all runs together.
    pub counts: ReplayCounts,
    /// Events this call read.
    pub read_now: u64,
}

/// The app's handler as the replay calls it, in either flavour.
pub(crate) trait Handle<C> {
    /// The handler's error.
    type Error: HandlerError;

    /// [`ReplayHandler::apply`].
    fn apply(
        &mut self,
        tx: &mut C,
        event: &Envelope,
        replay: &Replayed,
    ) -> impl Future<Output = Result<(), Self::Error>>;

    /// [`ReplayHandler::after`].
    fn after(
        &mut self,
        conn: &mut C,
        event: &Envelope,
        replay: &Replayed,
    ) -> impl Future<Output = Result<(), Self::Error>>;
}

/// A sync [`ReplayHandler`], whose futures are ready when made.
pub(crate) struct SyncHandler<'a, H>(pub(crate) &'a mut H);

impl<C, H: ReplayHandler<C>> Handle<C> for SyncHandler<'_, H> {
    type Error = H::Error;

    fn apply(
        &mut self,
        tx: &mut C,
        event: &Envelope,
        replay: &Replayed,
    ) -> impl Future<Output = Result<(), H::Error>> {
        std::future::ready(self.0.apply(tx, event, replay))
    }

    fn after(
        &mut self,
        conn: &mut C,
        event: &Envelope,
        replay: &Replayed,
    ) -> impl Future<Output = Result<(), H::Error>> {
        std::future::ready(self.0.after(conn, event, replay))
    }
}

/// A run in progress: the replay, the fence that holds it, where it is.
struct Running {
    record: ReplayRecord,
    fence: i64,
    progress: Progress,
    inbox: Inbox,
}

impl Replays {
    /// A run in either flavour: take the replay, work through its range in batches, finish
    /// it at the end; `observe` sees each batch's progress.
    pub(crate) async fn run_in<F, C, S, H>(
        &self,
        conn: &mut C,
        id: i64,
        source: &mut S,
        handler: &mut H,
        observe: &mut (impl FnMut(&RunReport) + Send),
    ) -> Result<RunReport, H::Error>
    where
        C: Db<F, Backend: Sql>,
        S: Feed<C>,
        H: Handle<C>,
    {
        if conn.depth().map_err(Error::from)? > 0 {
            return Err(Error::InsideTransaction {
                operation: "Replays::run",
            }
            .into());
        }
        let mut run = self.take(conn, id, &source.name()).await?;
        let span = tracing::info_span!(
            "replay",
            id,
            consumer = run.record.plan.target().consumer(),
            source = run.record.source.as_str(),
        );
        let result = self
            .work(conn, &mut run, source, handler, observe)
            .instrument(span)
            .await;
        if let Err(error) = &result {
            if !is_fenced(error) {
                self.release(conn, &run).await;
            }
        }
        result
    }

    /// The batches of a run, until the end of its range.
    async fn work<F, C, S, H>(
        &self,
        conn: &mut C,
        run: &mut Running,
        source: &mut S,
        handler: &mut H,
        observe: &mut (impl FnMut(&RunReport) + Send),
    ) -> Result<RunReport, H::Error>
    where
        C: Db<F, Backend: Sql>,
        S: Feed<C>,
        H: Handle<C>,
    {
        let range = run.record.plan.range().clone();
        let mut report = RunReport {
            id: run.record.id,
            finished: false,
            counts: run.progress.counts,
            read_now: 0,
        };
        loop {
            let events = source
                .read(conn, &range, run.progress.checkpoint, self.batch_size)
                .await?;
            let mut ended = events.is_empty();
            for event in events {
                match range.place_after(run.progress.checkpoint, event.position, event.at) {
                    Place::Before => continue,
                    Place::Inside => {}
                    Place::Past => {
                        ended = true;
                        break;
                    }
                }
                self.settle(conn, run, event, handler).await?;
                report.read_now += 1;
            }
            report.counts = run.progress.counts;
            if ended {
                self.finish(conn, run).await?;
                report.finished = true;
            }
            let counts = &report.counts;
            info!(
                read = counts.read,
                processed = counts.processed,
                duplicates = counts.duplicates,
                failed = counts.failed,
                dead_lettered = counts.dead_lettered,
                skipped = counts.skipped,
                suppressed = counts.suppressed,
                checkpoint = run.progress.checkpoint,
                finished = report.finished,
                "replay progress"
            );
            observe(&report);
            if report.finished {
                return Ok(report);
            }
        }
    }

    /// Ends this runner's lease early, after a run stopped on an error, so that running it
    /// again resumes at once; best effort (the lease runs out anyway).
    async fn release<F, C: Db<F, Backend: Sql>>(&self, conn: &mut C, run: &Running) {
        let body = SaveProgress {
            id: run.record.id,
            fence: run.fence,
            progress: &run.progress,
            notes: &[],
            lease: std::time::Duration::ZERO,
        };
        let released = engine::run(
            conn,
            Scope::TopLevel,
            &self.retry,
            subject(&run.record),
            body,
        )
        .await;
        if let Err(failure) = released {
            let error = failure.into_error();
            warn!(id = run.record.id, %error, "could not end the stopped run's lease; it runs out on its own");
        }
    }

    /// Takes the replay over for this runner: running, fenced, leased; the transition
    /// recorded with it.
    async fn take<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        id: i64,
        source: &str,
    ) -> Result<Running, Error> {
        let record = self.get_in(conn, id).await?;
        if record.source != source {
            return Err(Refused::SourceMismatch {
                id,
                recorded: record.source,
                given: source.to_owned(),
            }
            .into());
        }
        let body = Take {
            replays: self,
            id,
            from: record.state,
            checkpoint: record.checkpoint,
        };
        let subject = subject(&record);
        let fence = engine::run(conn, Scope::TopLevel, &self.retry, subject, body)
            .await
            .map_err(Failure::into_error)?;
        let Some(fence) = fence else {
            let now_record = self.get_in(conn, id).await?;
            return Err(match (now_record.state, now_record.lease_until) {
                (ReplayState::Running, Some(until)) => Refused::Held { id, until },
                (state, _) => Refused::WrongState {
                    id,
                    state,
                    attempted: "run",
                    allowed: "planned or running",
                },
            }
            .into());
        };
        let digest = progress::digest_from_text(&record.digest).ok_or_else(|| {
            Error::CorruptRow(crate::CorruptRow::new(
                "diesel_inbox_replays",
                &[("id", &id.to_string())],
                "digest",
                record.digest.clone(),
                "a replay's digest is 64 hex digits: repair the row, or abort the replay".into(),
            ))
        })?;
        let inbox = Inbox::new(record.plan.target().consumer())?.retry(self.retry);
        Ok(Running {
            progress: Progress {
                checkpoint: record.checkpoint,
                counts: record.counts,
                digest,
            },
            record,
            fence,
            inbox,
        })
    }

    /// One event: read under the plan, through the target's inbox, its progress committed
    /// with its effect (or, when no effect ran, in a transaction of its own).
    async fn settle<F, C, H>(
        &self,
        conn: &mut C,
        run: &mut Running,
        event: SourceEvent,
        handler: &mut H,
    ) -> Result<(), H::Error>
    where
        C: Db<F, Backend: Sql>,
        H: Handle<C>,
    {
        let read = progress::read(&run.record.plan, &event.message);
        let consumer = run.record.plan.target().consumer().to_owned();
        let envelope = match &read.envelope {
            Ok(envelope) => envelope.clone(),
            Err(why) => {
                let skipped = Settled::Skipped(why.clone());
                observe::replayed(&consumer, "skipped");
                return Ok(self
                    .save(conn, run, event.position, &read, &skipped, &[])
                    .await?);
            }
        };
        let replayed = Replayed::new(run.record.id, event.position, &run.record.plan);
        let delivery = Delivery::new(envelope.id().clone())
            .map_err(Error::from)?
            .with_payload(envelope.payload().clone());
        let effect = ApplyEvent {
            flavour: std::marker::PhantomData,
            handler: &mut *handler,
            envelope: &envelope,
            replayed: &replayed,
            run: &*run,
            read: &read,
            position: event.position,
            lease: self.lease,
        };
        let inbox = run.inbox.clone();
        let settled = match inbox.run_in(conn, delivery, effect, |_| Ok(None)).await {
            Ok(Outcome::Processed(next) | Outcome::ProcessedAfterGap { value: next, .. }) => {
                run.progress = next;
                observe::replayed(&consumer, "processed");
                handler.after(conn, &envelope, &replayed).await?;
                let late = replayed.suppression.take();
                if !late.is_empty() {
                    self.save_late(conn, run, event.position, &read, &late)
                        .await?;
                }
                return Ok(());
            }
            Ok(Outcome::Duplicate(_)) => Settled::Duplicate,
            Ok(Outcome::DeadLettered(_)) => Settled::DeadLettered,
            Err(error) if would_run(&error) => Settled::WouldRun,
            Err(error) => {
                if is_fenced(&error) {
                    return Err(error);
                }
                let classify = <C::Backend as TransactionSql>::classify;
                if !decide::handler_failure(&error, classify).is_recorded() {
                    warn!(consumer, event_id = envelope.id().as_str(), %error, "replay stopped: a failure that is not the event's own (transient, contention or a lost connection); run it again to resume");
                    return Err(error);
                }
                Settled::Failed(error.to_string())
            }
        };
        observe::replayed(&consumer, settled.label());
        let suppressed = replayed.suppression.take();
        Ok(self
            .save(conn, run, event.position, &read, &settled, &suppressed)
            .await?)
    }

    /// Commits the progress of an event whose effect did not run.
    async fn save<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        run: &mut Running,
        position: u64,
        read: &Read,
        settled: &Settled,
        suppressed: &[String],
    ) -> Result<(), Error> {
        let live = run.record.plan.target().is_live();
        let (next, notes) = run
            .progress
            .after(position, read, settled, suppressed, live);
        self.commit_progress(conn, run, next, notes).await
    }

    /// Commits side effects an [`after`](ReplayHandler::after) suppressed, with the event's
    /// progress as it stands: each counted, and merged into the event's suppressed note
    /// where its [`apply`](ReplayHandler::apply) suppressed some too.
    async fn save_late<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        run: &mut Running,
        position: u64,
        read: &Read,
        suppressed: &[String],
    ) -> Result<(), Error> {
        let mut next = run.progress.clone();
        next.counts.suppressed += suppressed.len() as u64;
        let note = NoteRow {
            position: i64::try_from(position).unwrap_or(i64::MAX),
            kind: super::NoteKind::Suppressed.as_str().to_owned(),
            event_id: read.event_id.clone(),
            detail: suppressed.join("; "),
        };
        self.commit_progress(conn, run, next, vec![note]).await
    }

    async fn commit_progress<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        run: &mut Running,
        next: Progress,
        notes: Vec<NoteRow>,
    ) -> Result<(), Error> {
        let body = SaveProgress {
            id: run.record.id,
            fence: run.fence,
            progress: &next,
            notes: &notes,
            lease: self.lease,
        };
        engine::run(
            conn,
            Scope::TopLevel,
            &self.retry,
            subject(&run.record),
            body,
        )
        .await
        .map_err(Failure::into_error)?;
        run.progress = next;
        Ok(())
    }

    /// The end of the range: finished, fenced, recorded.
    async fn finish<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        run: &Running,
    ) -> Result<(), Error> {
        let reason = match run.progress.checkpoint {
            Some(at) => format!("end of the range reached after position {at}"),
            None => "end of the range reached: it holds no event".to_owned(),
        };
        let body = Finish {
            id: run.record.id,
            fence: run.fence,
            actor: &self.runner,
            reason: &reason,
        };
        engine::run(
            conn,
            Scope::TopLevel,
            &self.retry,
            subject(&run.record),
            body,
        )
        .await
        .map_err(Failure::into_error)?;
        info!(id = run.record.id, "replay finished: reconcile it");
        Ok(())
    }
}

impl Settled {
    /// The metric's label.
    fn label(&self) -> &'static str {
        match self {
            Self::Processed => "processed",
            Self::Duplicate => "duplicate",
            Self::DeadLettered => "dead_lettered",
            Self::Failed(_) => "failed",
            Self::Skipped(_) => "skipped",
            Self::WouldRun => "would_run",
        }
    }
}

/// What the replay's transactions are about, for their log lines.
fn subject(record: &ReplayRecord) -> Subject<'_> {
    Subject {
        consumer: record.plan.target().consumer(),
        event_id: None,
    }
}

/// Whether `error` is a probe's refusal of an event that would take effect.
fn would_run<E: HandlerError>(error: &E) -> bool {
    matches!(error.inbox_error(), Some(Error::Replay(Refused::WouldRun)))
}

/// Whether `error` is this runner's lease lost.
fn is_fenced<E: HandlerError>(error: &E) -> bool {
    matches!(
        error.inbox_error(),
        Some(Error::Replay(Refused::Fenced { .. }))
    )
}

/// A replayed event's effect: the handler, then the replay's progress, in the target's inbox
/// transaction.
struct ApplyEvent<'a, F, H> {
    flavour: std::marker::PhantomData<fn() -> F>,
    handler: &'a mut H,
    envelope: &'a Envelope,
    replayed: &'a Replayed,
    run: &'a Running,
    read: &'a Read,
    position: u64,
    lease: std::time::Duration,
}

impl<F, C, H> Effect<C> for ApplyEvent<'_, F, H>
where
    C: Db<F, Backend: Sql>,
    H: Handle<C>,
{
    type Output = Progress;
    type Error = H::Error;

    async fn call(&mut self, tx: &mut C) -> Result<Progress, H::Error> {
        // A retried attempt starts over: what an earlier one noted rolled back with it.
        self.replayed.suppression.take();
        self.handler.apply(tx, self.envelope, self.replayed).await?;
        let suppressed = self.replayed.suppression.take();
        let live = self.run.record.plan.target().is_live();
        let (next, notes) = self.run.progress.after(
            self.position,
            self.read,
            &Settled::Processed,
            &suppressed,
            live,
        );
        let saved = write_progress(
            tx,
            self.run.record.id,
            self.run.fence,
            &next,
            &notes,
            self.lease,
        )
        .await
        .map_err(Error::from)?;
        if !saved {
            return Err(Error::from(Refused::Fenced {
                id: self.run.record.id,
            })
            .into());
        }
        Ok(next)
    }
}

/// Writes a replay's progress and its notes, if `fence` still holds it; `false` otherwise.
async fn write_progress<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    id: i64,
    fence: i64,
    progress: &Progress,
    notes: &[NoteRow],
    lease: std::time::Duration,
) -> diesel::QueryResult<bool> {
    let at = now();
    let counts = progress.counts.to_document();
    let digest = progress::digest_text(&progress.digest);
    let row = ReplayProgressRow {
        checkpoint: progress
            .checkpoint
            .map_or(0, |at| i64::try_from(at).unwrap_or(i64::MAX)),
        counts: &counts,
        digest: &digest,
        lease_until: after(at, lease),
        now: at,
    };
    if !C::Backend::save_replay_progress(conn, id, fence, &row).await? {
        return Ok(false);
    }
    for note in notes {
        C::Backend::merge_replay_note(conn, id, note).await?;
    }
    Ok(true)
}

/// The progress of an event whose effect did not run, in a transaction of its own.
struct SaveProgress<'a> {
    id: i64,
    fence: i64,
    progress: &'a Progress,
    notes: &'a [NoteRow],
    lease: std::time::Duration,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for SaveProgress<'_> {
    type Output = ();
    type Error = Error;

    async fn attempt(&mut self, conn: &mut C) -> Result<(), Failure<Error>> {
        if write_progress(
            conn,
            self.id,
            self.fence,
            self.progress,
            self.notes,
            self.lease,
        )
        .await?
        {
            Ok(())
        } else {
            Err(Failure::Inbox(Refused::Fenced { id: self.id }.into()))
        }
    }
}

/// Takes the replay: `Some(fence)`, or `None` when it cannot be taken.
struct Take<'a> {
    replays: &'a Replays,
    id: i64,
    from: ReplayState,
    checkpoint: Option<u64>,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Take<'_> {
    type Output = Option<i64>;
    type Error = Error;

    async fn attempt(&mut self, conn: &mut C) -> Result<Option<i64>, Failure<Error>> {
        let at = now();
        let until = after(at, self.replays.lease);
        if !C::Backend::take_replay(conn, self.id, at, until).await? {
            return Ok(None);
        }
        let Some(row) = C::Backend::replay(conn, self.id).await? else {
            return Ok(None);
        };
        let reason = match (self.from, self.checkpoint) {
            (ReplayState::Planned, _) => "run started".to_owned(),
            (_, Some(at)) => {
                format!("resumed after position {at}: the previous runner's lease ran out")
            }
            (_, None) => "resumed from the start: the previous runner's lease ran out".to_owned(),
        };
        let runner = &self.replays.runner;
        let taken = Transition::row(Some(self.from), ReplayState::Running, runner, &reason, at);
        C::Backend::insert_replay_transition(conn, self.id, &taken).await?;
        Ok(Some(row.fence))
    }
}

/// Running → finished, if this runner's fence still holds it.
struct Finish<'a> {
    id: i64,
    fence: i64,
    actor: &'a str,
    reason: &'a str,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Finish<'_> {
    type Output = ();
    type Error = Error;

    async fn attempt(&mut self, conn: &mut C) -> Result<(), Failure<Error>> {
        let at = now();
        let (running, finished) = (ReplayState::Running, ReplayState::Finished);
        if !C::Backend::set_replay_state(conn, self.id, &[running], finished, Some(self.fence), at)
            .await?
        {
            return Err(Failure::Inbox(Refused::Fenced { id: self.id }.into()));
        }
        let ended = Transition::row(Some(running), finished, self.actor, self.reason, at);
        C::Backend::insert_replay_transition(conn, self.id, &ended).await?;
        Ok(())
    }
}
