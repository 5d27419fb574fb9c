//! Dead letters: events the failure policy gave up on, and the audited transitions out of that
//! state (redrive, discard, release).
//!
//! Recording a failed attempt, and dead-lettering its event, is `failure.rs`; the failures
//! area's statements and rows for every backend are `sql.rs`, its stored states `state.rs`,
//! and the async front `asynch.rs`.

#[cfg(feature = "async")]
pub(crate) mod asynch;
pub(crate) mod failure;
pub(crate) mod sql;
pub(crate) mod state;

use std::future::Future;

use chrono::{DateTime, Utc};
use tracing::Instrument;

use crate::audit::Audit;
use crate::backend::Key;
use crate::decide::{Failure, Then};
use crate::engine::{self, run_ready, Body, Effect};
use crate::rows::Recorded;
use crate::sql::{Blocking, Db, InboxSql, Sql};
use crate::state::{CorruptRow, Counter, InboxState};
use crate::{
    AdminError, Error, EventId, HandlerError, Inbox, InboxConnection, IntoEventId, Outcome, Payload,
};
use sql::{FailureRow, FailureSql, HistoryRow};

pub use state::{DeadLetterState, HistoryKind};

impl Inbox {
    /// Operations on this consumer's dead letters.
    pub fn dead_letters(&self) -> DeadLetters {
        DeadLetters {
            inbox: self.clone(),
        }
    }
}

/// A failed event as the inbox recorded it, with its history.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The event.
    pub event_id: EventId,
    /// Where it stands.
    pub state: DeadLetterState,
    /// Failed attempts.
    pub attempts: u64,
    /// The last failure's error text.
    pub last_error: String,
    /// The first failure.
    pub first_failed_at: DateTime<Utc>,
    /// The last failure.
    pub last_failed_at: DateTime<Utc>,
    /// The last state change.
    pub updated_at: DateTime<Utc>,
    /// The payload as last delivered, if the delivery carried one (only from
    /// [`DeadLetters::show`]: a listing leaves payloads out).
    pub payload: Option<Payload>,
    /// What the stored payload is, `"json"` or `"bytes"`; `None` when the delivery carried
    /// none. Listings fill it too.
    pub payload_kind: Option<String>,
    /// Every failed attempt and transition, oldest first (only from [`DeadLetters::show`]).
    pub history: Vec<HistoryEntry>,
}

/// One line of a dead letter's history.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryEntry {
    /// What happened.
    pub kind: HistoryKind,
    /// The attempt number, for failures and for dead-lettering.
    pub attempt: Option<u64>,
    /// The error text, for failures.
    pub error: Option<String>,
    /// Who made the transition, for redrive and discard.
    pub actor: Option<String>,
    /// Why.
    pub reason: Option<String>,
    /// When.
    pub at: DateTime<Utc>,
}

/// A consumer's dead letters: list, show, redrive, discard, release. Get one from
/// [`Inbox::dead_letters`].
///
/// Transitions are explicit and audited (who, why, when), never edits in place: a dead letter
/// is redriven (run again through the normal inbox path, so it still takes effect at most
/// once), discarded (kept, marked, never run) or released (its next delivery runs it as new). A transition from the wrong state is
/// [`AdminError::InvalidTransition`].
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::{Audit, Delivery, Inbox, Payload};
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let inbox = Inbox::new("orders")?.max_attempts(1);
///
/// let delivery = Delivery::new("order-9")?.json(serde_json::json!({"qty": -1}));
/// let outcome = inbox.process(&mut conn, &delivery, |_tx| Err::<(), _>(diesel_inbox::Error::permanent("qty below zero")))?;
/// assert!(outcome.is_dead_lettered());
///
/// let dead = inbox.dead_letters();
/// assert_eq!(dead.list(&mut conn, None, 100)?.len(), 1);
/// let audit = Audit::new("ops@example.com", "qty fixed upstream")?;
/// let redriven = dead.redrive(&mut conn, "order-9", &audit, |_tx, payload| {
///     assert!(matches!(payload, Some(Payload::Json(_))));
///     Ok::<_, diesel_inbox::AdminError>(())
/// })?;
/// assert!(redriven.is_processed());
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct DeadLetters {
    inbox: Inbox,
}

impl DeadLetters {
    /// Up to `limit` of the consumer's dead letters awaiting a decision, after event id
    /// `after` where given, in event id order: without payload and history (see
    /// [`show`](Self::show)), so a page costs little whatever the payloads weigh. The next
    /// page starts after the last event id of this one; a page shorter than `limit` is the
    /// last.
    ///
    /// A row this version cannot read (a state it does not know, an invalid event id) is
    /// listed in its place as an `Err` naming the table, the key and the text, never left
    /// out; it sorts by its stored event id as the others do.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the query fails.
    pub fn list<C: InboxConnection>(
        &self,
        conn: &mut C,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Result<DeadLetter, CorruptRow>>, Error> {
        run_ready(self.list_in::<Blocking, _>(conn, after, limit))
    }

    /// [`list`](Self::list) in either flavour.
    pub(crate) async fn list_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Result<DeadLetter, CorruptRow>>, Error> {
        let consumer = self.inbox.consumer();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let dead = DeadLetterState::DeadLettered;
        let rows = C::Backend::failures(conn, consumer, dead, after, limit).await?;
        Ok(rows
            .into_iter()
            .map(|row| dead_letter(consumer, row, Vec::new()))
            .collect())
    }

    /// One failed event, in any state, with its payload and history.
    ///
    /// # Errors
    ///
    /// [`AdminError::DeadLetterNotFound`] when the event never failed for this consumer;
    /// [`Error::CorruptRow`] when its row, or a line of its history, cannot be read as it is.
    pub fn show<C: InboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
    ) -> Result<DeadLetter, AdminError> {
        run_ready(self.show_in::<Blocking, _>(conn, event_id.into_event_id()?))
    }

    /// [`show`](Self::show) in either flavour.
    pub(crate) async fn show_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        event_id: EventId,
    ) -> Result<DeadLetter, AdminError> {
        let key = (self.inbox.consumer(), event_id.as_str());
        let row = C::Backend::failure(conn, key).await?;
        let row = row.ok_or(AdminError::DeadLetterNotFound {
            event_id: event_id.clone(),
        })?;
        let history = C::Backend::history(conn, key)
            .await?
            .into_iter()
            .map(|line| line.map_err(|bad| bad.in_row(&failure_key(key), "id")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(dead_letter(key.0, row, history)?)
    }

    /// Runs `effect` on the stored payload of a dead-lettered event, through the normal inbox
    /// path, and marks it redriven, with `audit` in its history, all in one transaction. If the
    /// effect fails, everything rolls back and the event stays dead-lettered.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::{AdminError, Audit, Error, Inbox};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let inbox = Inbox::new("shipments")?.max_attempts(1);
    /// let fails = |_tx: &mut SqliteConnection| Err::<(), _>(Error::permanent("unknown SKU"));
    /// assert!(inbox.process(&mut conn, "order-7", fails)?.is_dead_lettered());
    ///
    /// // Fixed upstream: ops redrive it, with who and why in its history.
    /// let audit = Audit::new("ops@example.com", "SKU added to the catalogue")?;
    /// let ship = |_tx: &mut SqliteConnection, _payload: Option<&diesel_inbox::Payload>| Ok::<_, AdminError>(());
    /// assert!(inbox.dead_letters().redrive(&mut conn, "order-7", &audit, ship)?.is_processed());
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The effect's error, unchanged; [`AdminError::InvalidTransition`] unless the event is
    /// dead-lettered (a second redrive is refused); [`AdminError::DeadLetterNotFound`].
    pub fn redrive<C, T, E, F>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
        audit: &Audit,
        effect: F,
    ) -> Result<Outcome<T>, E>
    where
        C: InboxConnection,
        F: FnMut(&mut C, Option<&Payload>) -> Result<T, E>,
        E: HandlerError + From<AdminError>,
    {
        let event_id = event_id.into_event_id().map_err(Error::from)?;
        run_ready(self.redrive_in::<Blocking, _, _, _>(conn, event_id, audit, effect))
    }

    /// [`redrive`](Self::redrive) in either flavour.
    pub(crate) async fn redrive_in<F, C, T, E>(
        &self,
        conn: &mut C,
        event_id: EventId,
        audit: &Audit,
        mut effect: impl RedriveEffect<C, Output = T, Error = E>,
    ) -> Result<Outcome<T>, E>
    where
        C: Db<F, Backend: Sql>,
        E: HandlerError + From<AdminError>,
    {
        let (consumer, actor) = (self.inbox.consumer(), audit.actor());
        let span = tracing::info_span!(
            "inbox_redrive",
            consumer,
            event_id = event_id.as_str(),
            actor
        );
        let key = (consumer, event_id.as_str());
        async {
            let scope = engine::scope_of(conn)?;
            let subject = self.inbox.subject(Some(key.1));
            let body = Redrive {
                key,
                event_id: &event_id,
                audit,
                effect: &mut effect,
            };
            let policy = self.inbox.retry_policy();
            let redriven = engine::run(conn, scope, policy, subject, body)
                .await
                .map_err(Failure::into_error)?;
            let (event_id, reason) = (key.1, audit.reason());
            tracing::warn!(
                consumer,
                event_id,
                actor,
                reason,
                "dead letter redriven and processed"
            );
            Ok(Outcome::Processed(redriven))
        }
        .instrument(span)
        .await
    }

    /// Marks a dead-lettered event discarded, with `audit` in its history: kept for the record,
    /// never run again; later deliveries return [`Outcome::DeadLettered`] with
    /// [`is_discarded`](crate::DeadLettered::is_discarded).
    ///
    /// # Errors
    ///
    /// [`AdminError::InvalidTransition`] unless the event is dead-lettered;
    /// [`AdminError::DeadLetterNotFound`].
    pub fn discard<C: InboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        let event_id = event_id.into_event_id()?;
        run_ready(self.transition::<Blocking, _>(conn, event_id, audit, Transition::Discard))
    }

    /// Releases a dead-lettered event to be published again, with `audit` in its history: the
    /// inbox stops holding it back, so its next delivery (the re-published message) runs the
    /// effect as a new event, once (its own inbox row then makes later copies duplicates).
    /// Its attempts count from zero again, so it gets the full
    /// [`max_attempts`](Inbox::max_attempts) once more; failing that often dead-letters it
    /// again.
    ///
    /// Use it where the message broker, not the inbox, should deliver the event again (the
    /// payload was not stored, or the consumer needs the broker's routing); [`redrive`](Self::redrive)
    /// runs the stored payload in place instead.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::{dead_letter::DeadLetterState, Audit, Inbox};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let inbox = Inbox::new("orders")?.max_attempts(1);
    /// let fail = |_tx: &mut SqliteConnection| Err::<(), _>(diesel_inbox::Error::permanent("qty below zero"));
    /// assert!(inbox.process(&mut conn, "order-9", fail)?.is_dead_lettered());
    ///
    /// let audit = Audit::new("ops@example.com", "re-published after the SKU fix")?;
    /// inbox.dead_letters().release(&mut conn, "order-9", &audit)?;
    /// assert_eq!(inbox.dead_letters().show(&mut conn, "order-9")?.state, DeadLetterState::Released);
    ///
    /// // The re-published message runs as new.
    /// let ok = |_tx: &mut SqliteConnection| Ok::<_, diesel_inbox::Error>(());
    /// assert!(inbox.process(&mut conn, "order-9", ok)?.is_processed());
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`AdminError::InvalidTransition`] unless the event is dead-lettered (a second release is
    /// refused); [`AdminError::DeadLetterNotFound`].
    pub fn release<C: InboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        let event_id = event_id.into_event_id()?;
        run_ready(self.transition::<Blocking, _>(conn, event_id, audit, Transition::Release))
    }

    /// A transition that runs no effect (discard, release), in one transaction: check that
    /// the event is dead-lettered, apply it to the inbox row, record it with `audit`.
    pub(crate) async fn transition<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        event_id: EventId,
        audit: &Audit,
        transition: Transition,
    ) -> Result<(), AdminError> {
        let consumer = self.inbox.consumer();
        let key = (consumer, event_id.as_str());
        let scope = engine::scope_of(conn)?;
        let subject = self.inbox.subject(Some(key.1));
        let body = Transit {
            key,
            transition,
            audit,
        };
        let policy = self.inbox.retry_policy();
        engine::run(conn, scope, policy, subject, body)
            .await
            .map_err(Failure::into_error)?;
        let (event_id, actor, reason) = (key.1, audit.actor(), audit.reason());
        let state = transition.to();
        tracing::warn!(consumer, event_id, actor, reason, %state, "dead letter transition");
        Ok(())
    }
}

/// What a redrive runs on the stored payload: a sync closure, or the async front's adapter
/// of an async one.
pub(crate) trait RedriveEffect<C> {
    /// The effect's value.
    type Output;
    /// Its error.
    type Error;

    /// Runs it on the transaction's connection, with the payload the failure stored.
    fn call(
        &mut self,
        conn: &mut C,
        payload: Option<&Payload>,
    ) -> impl Future<Output = Result<Self::Output, Self::Error>>;
}

impl<C, T, E, G: FnMut(&mut C, Option<&Payload>) -> Result<T, E>> RedriveEffect<C> for G {
    type Output = T;
    type Error = E;

    fn call(
        &mut self,
        conn: &mut C,
        payload: Option<&Payload>,
    ) -> impl Future<Output = Result<T, E>> {
        std::future::ready(self(conn, payload))
    }
}

/// A redrive's effect with its payload, as user code the engine calls.
struct WithPayload<'a, R> {
    effect: &'a mut R,
    payload: Option<&'a Payload>,
}

impl<C, R: RedriveEffect<C>> Effect<C> for WithPayload<'_, R> {
    type Output = R::Output;
    type Error = R::Error;

    fn call(&mut self, conn: &mut C) -> impl Future<Output = Result<R::Output, R::Error>> {
        self.effect.call(conn, self.payload)
    }
}

/// A redrive's transaction: the dead letter's stored payload through the inbox path, and the
/// transition to redriven.
struct Redrive<'a, R> {
    key: Key<'a>,
    event_id: &'a EventId,
    audit: &'a Audit,
    effect: &'a mut R,
}

impl<F, C, R> Body<F, C> for Redrive<'_, R>
where
    C: Db<F, Backend: Sql>,
    R: RedriveEffect<C, Error: From<AdminError>>,
{
    type Output = R::Output;
    type Error = R::Error;

    async fn attempt(&mut self, tx: &mut C) -> Result<R::Output, Failure<R::Error>> {
        let key = self.key;
        let row = transition_from_dead_lettered(tx, key, Transition::Redrive).await?;
        let payload = stored_payload(&row);
        // The dead-letter row in the inbox table held the event back; remove it so the
        // event runs as new, under the same key lock as any concurrent delivery.
        C::Backend::delete_inbox_row(tx, key, InboxState::DeadLettered).await?;
        let fingerprint = payload.as_ref().map(Payload::fingerprint);
        let hash = fingerprint.as_ref().map(|f| &f[..]);
        let recorded = C::Backend::record_delivery(tx, key, Utc::now(), hash).await?;
        if !matches!(recorded, Recorded::New) {
            // Processed by other means although its failure row says dead-lettered.
            return Err(Failure::refused(AdminError::InvalidTransition {
                event_id: self.event_id.clone(),
                state: DeadLetterState::Redriven,
                attempted: DeadLetterState::Redriven,
            }));
        }
        let mut effect = WithPayload {
            effect: &mut *self.effect,
            payload: payload.as_ref(),
        };
        let value =
            crate::inbox::run_effect(tx, key, &mut effect, &|_| Ok(None), Then::Statements).await?;
        finish_transition(tx, key, Transition::Redrive, self.audit).await?;
        Ok(value)
    }
}

/// A discard's or release's transaction.
struct Transit<'a> {
    key: Key<'a>,
    transition: Transition,
    audit: &'a Audit,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Transit<'_> {
    type Output = ();
    type Error = AdminError;

    async fn attempt(&mut self, tx: &mut C) -> Result<(), Failure<AdminError>> {
        let Self {
            key,
            transition,
            audit,
        } = *self;
        transition_from_dead_lettered(tx, key, transition).await?;
        match transition {
            Transition::Discard => {
                let (from, to) = (InboxState::DeadLettered, InboxState::Discarded);
                let marked = C::Backend::set_inbox_state(tx, key, from, to).await?;
                // The row that holds deliveries back may have been deleted (by hand): put it
                // back, or "never run again" would not hold.
                if !marked {
                    C::Backend::insert_held_row(tx, key, Utc::now(), to).await?;
                }
            }
            Transition::Release => {
                // The row that held deliveries back goes (it may be gone already, by hand);
                // the next delivery inserts its own and runs the effect.
                C::Backend::delete_inbox_row(tx, key, InboxState::DeadLettered).await?;
                C::Backend::reset_attempts(tx, key, Utc::now()).await?;
            }
            Transition::Redrive => unreachable!("a redrive runs its effect: `Redrive`"),
        }
        finish_transition(tx, key, transition, audit).await
    }
}

/// The audited ways out of the dead-lettered state.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Transition {
    Redrive,
    Discard,
    Release,
}

impl Transition {
    fn to(self) -> DeadLetterState {
        match self {
            Self::Redrive => DeadLetterState::Redriven,
            Self::Discard => DeadLetterState::Discarded,
            Self::Release => DeadLetterState::Released,
        }
    }

    fn counter(self) -> Counter {
        match self {
            Self::Redrive => Counter::Redriven,
            Self::Discard => Counter::Discarded,
            Self::Release => Counter::Released,
        }
    }

    fn history_kind(self) -> HistoryKind {
        match self {
            Self::Redrive => HistoryKind::Redriven,
            Self::Discard => HistoryKind::Discarded,
            Self::Release => HistoryKind::Released,
        }
    }
}

/// Locks the failure row and checks that it is dead-lettered, the one state a transition
/// leaves; a refusal is the body's own error.
async fn transition_from_dead_lettered<F, C: Db<F, Backend: Sql>, E: From<AdminError>>(
    conn: &mut C,
    key: Key<'_>,
    transition: Transition,
) -> Result<FailureRow, Failure<E>> {
    let event_id = || EventId::new(key.1).expect("the key holds a validated id");
    let Some(row) = C::Backend::failure(conn, key).await? else {
        return Err(Failure::refused(AdminError::DeadLetterNotFound {
            event_id: event_id(),
        }));
    };
    let state = row
        .state
        .clone()
        .map_err(|unknown| Failure::Inbox(unknown.in_row(&failure_key(key)).into()))?;
    if state != DeadLetterState::DeadLettered {
        return Err(Failure::refused(AdminError::InvalidTransition {
            event_id: event_id(),
            state,
            attempted: transition.to(),
        }));
    }
    Ok(row)
}

/// Moves the failure row out of dead-lettered, writes the transition into the history and
/// counts it in the hourly counters.
async fn finish_transition<F, C: Db<F, Backend: Sql>, E>(
    conn: &mut C,
    key: Key<'_>,
    transition: Transition,
    audit: &Audit,
) -> Result<(), Failure<E>> {
    let now = Utc::now();
    C::Backend::set_failure_state(
        conn,
        key,
        DeadLetterState::DeadLettered,
        transition.to(),
        now,
    )
    .await?;
    C::Backend::append_history(
        conn,
        key,
        &HistoryRow {
            kind: transition.history_kind(),
            attempt: None,
            error: None,
            actor: Some(audit.actor().to_owned()),
            reason: Some(audit.reason().to_owned()),
            at: now,
        },
    )
    .await?;
    C::Backend::bump_counter(conn, key, transition.counter(), 1, now).await?;
    Ok(())
}

fn stored_payload(row: &FailureRow) -> Option<Payload> {
    let (kind, bytes) = (row.payload_kind.as_deref()?, row.payload.clone()?);
    Payload::from_stored(kind, bytes)
}

/// The failure table's key columns, as a [`CorruptRow`] names them.
fn failure_key(key: Key<'_>) -> [(&'static str, &str); 2] {
    [("consumer", key.0), ("event_id", key.1)]
}

fn dead_letter(
    consumer: &str,
    row: FailureRow,
    history: Vec<HistoryRow>,
) -> Result<DeadLetter, CorruptRow> {
    let key = failure_key((consumer, &row.event_id));
    let event_id = EventId::new(row.event_id.as_str()).map_err(|_| {
        CorruptRow::invalid_id("diesel_inbox_failures", &key, "event_id", &row.event_id)
    })?;
    let state = row.state.clone().map_err(|unknown| unknown.in_row(&key))?;
    Ok(DeadLetter {
        event_id,
        state,
        attempts: row.attempts.unsigned_abs(),
        payload: stored_payload(&row),
        payload_kind: row.payload_kind,
        last_error: row.last_error,
        first_failed_at: row.first_failed_at,
        last_failed_at: row.last_failed_at,
        updated_at: row.updated_at,
        history: history
            .into_iter()
            .map(|log| HistoryEntry {
                kind: log.kind,
                attempt: log.attempt.map(i64::unsigned_abs),
                error: log.error,
                actor: log.actor,
                reason: log.reason,
                at: log.at,
            })
            .collect(),
    })
}
