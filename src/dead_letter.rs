//! Dead letters: events the failure policy gave up on, and the audited transitions out of that
//! state (redrive, discard).

use std::fmt;

use chrono::{DateTime, Utc};

use crate::backend::sealed::{FailureRow, InboxBackend, LogRow, Recorded};
use crate::inbox::{row_state, transaction_depth, Failure};
use crate::{Error, EventId, Inbox, InboxConnection, IntoEventId, Outcome, Payload};

/// The states of a row in `diesel_inbox_failures`.
pub(crate) mod state {
    pub(crate) const RETRYING: &str = "retrying";
    pub(crate) const DEAD_LETTERED: &str = "dead_lettered";
    pub(crate) const REDRIVEN: &str = "redriven";
    pub(crate) const DISCARDED: &str = "discarded";
}

/// Where a failed event stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeadLetterState {
    /// It has failed, fewer times than the limit: redeliveries run it again.
    Retrying,
    /// It failed too often: redeliveries skip it until ops redrive or discard it.
    DeadLettered,
    /// Ops redrove it and it was processed.
    Redriven,
    /// Ops discarded it: kept for the record, never run again.
    Discarded,
}

impl DeadLetterState {
    fn parse(state: &str) -> Self {
        match state {
            state::RETRYING => Self::Retrying,
            state::DEAD_LETTERED => Self::DeadLettered,
            state::REDRIVEN => Self::Redriven,
            // Only the library writes this column; anything else would be a newer version's.
            _ => Self::Discarded,
        }
    }
}

impl fmt::Display for DeadLetterState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Retrying => "retrying",
            Self::DeadLettered => "dead-lettered",
            Self::Redriven => "redriven",
            Self::Discarded => "discarded",
        })
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
    /// The payload as last delivered, if the delivery carried one.
    pub payload: Option<Payload>,
    /// Every failed attempt and transition, oldest first (only from [`DeadLetters::show`]).
    pub history: Vec<HistoryEntry>,
}

/// One line of a dead letter's history.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryEntry {
    /// What happened: `failed`, `dead_lettered`, `redriven` or `discarded`.
    pub entry: String,
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

/// A consumer's dead letters: list, show, redrive, discard. Get one from
/// [`Inbox::dead_letters`].
///
/// Transitions are explicit and audited (who, why, when), never edits in place: a dead letter
/// is redriven (run again through the normal inbox path, so it still takes effect at most
/// once) or discarded (kept, marked, never run). A transition from the wrong state is
/// [`Error::InvalidTransition`].
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::{Delivery, Inbox, Payload};
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let inbox = Inbox::new("orders")?.max_attempts(1);
///
/// let delivery = Delivery::new("order-9")?.json(serde_json::json!({"qty": -1}));
/// let outcome = inbox.process(&mut conn, &delivery, |_tx| Err::<(), _>(diesel_inbox::Error::MissingAudit("demo")))?;
/// assert!(outcome.is_dead_lettered());
///
/// let dead = inbox.dead_letters();
/// assert_eq!(dead.list(&mut conn)?.len(), 1);
/// let redriven = dead.redrive(&mut conn, "order-9", "ops@example.com", "qty fixed upstream", |_tx, payload| {
///     assert!(matches!(payload, Some(Payload::Json(_))));
///     Ok::<_, diesel_inbox::Error>(())
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
    pub(crate) fn new(inbox: Inbox) -> Self {
        Self { inbox }
    }

    /// The consumer's dead letters awaiting a decision, oldest first, without history.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the query fails.
    pub fn list<C: InboxConnection>(&self, conn: &mut C) -> Result<Vec<DeadLetter>, Error> {
        conn.backend()
            .failures(self.inbox.consumer(), state::DEAD_LETTERED)?
            .into_iter()
            .map(|row| dead_letter(row, Vec::new()))
            .collect()
    }

    /// One failed event, in any state, with its history.
    ///
    /// # Errors
    ///
    /// [`Error::DeadLetterNotFound`] when the event never failed for this consumer.
    pub fn show<C: InboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
    ) -> Result<DeadLetter, Error> {
        let event_id = event_id.into_event_id()?;
        let key = (self.inbox.consumer(), event_id.as_str());
        let row = conn.backend().failure(key)?;
        let row = row.ok_or(Error::DeadLetterNotFound {
            event_id: event_id.clone(),
        })?;
        let history = conn.backend().failure_log(key)?;
        dead_letter(row, history)
    }

    /// Runs `effect` on the stored payload of a dead-lettered event, through the normal inbox
    /// path, and marks it redriven by `actor` for `reason`, all in one transaction. If the
    /// effect fails, everything rolls back and the event stays dead-lettered.
    ///
    /// # Errors
    ///
    /// The effect's error, unchanged; [`Error::InvalidTransition`] unless the event is
    /// dead-lettered (a second redrive is refused); [`Error::DeadLetterNotFound`];
    /// [`Error::MissingAudit`] for an empty `actor` or `reason`.
    pub fn redrive<C, T, E, F>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
        actor: &str,
        reason: &str,
        mut effect: F,
    ) -> Result<Outcome<T>, E>
    where
        C: InboxConnection,
        F: FnMut(&mut C, Option<&Payload>) -> Result<T, E>,
        E: From<Error>,
    {
        let event_id = event_id.into_event_id().map_err(Error::from)?;
        audit(actor, reason)?;
        let nested = transaction_depth(conn).map_err(Error::from)? > 0;
        let span = tracing::info_span!(
            "inbox_redrive",
            consumer = self.inbox.consumer(),
            event_id = event_id.as_str(),
            actor
        );
        let _entered = span.enter();

        let redriven = self.inbox.transact(conn, nested, |tx| {
            let key = (self.inbox.consumer(), event_id.as_str());
            let row = self.transition_from_dead_lettered(tx, &event_id, "redriven")?;
            let payload = stored_payload(&row);
            // The dead-letter row in the inbox table held the event back; remove it so the
            // event runs as new, under the same key lock as any concurrent delivery.
            tx.backend()
                .set_inbox_state(key, row_state::DEAD_LETTERED, None)?;
            let fingerprint = payload.as_ref().map(Payload::fingerprint);
            let recorded = tx.backend().record_delivery(
                key,
                Utc::now(),
                fingerprint.as_ref().map(|f| &f[..]),
            )?;
            if !matches!(recorded, Recorded::New) {
                // Processed by other means although its failure row says dead-lettered.
                return Err(Failure::Inbox(Error::InvalidTransition {
                    event_id: event_id.clone(),
                    state: DeadLetterState::Redriven,
                    attempted: "redriven",
                }));
            }
            let value = crate::inbox::run_effect(
                tx,
                key,
                &mut |c: &mut C| effect(c, payload.as_ref()),
                &|_| Ok(None),
            )?;
            Self::finish_transition(tx, key, state::REDRIVEN, actor, reason)?;
            Ok(value)
        });
        let value = redriven.map_err(Failure::into_error)?;
        tracing::warn!(actor, reason, "dead letter redriven and processed");
        Ok(Outcome::Processed(value))
    }

    /// Marks a dead-lettered event discarded by `actor` for `reason`: kept for the record,
    /// never run again; later deliveries return [`Outcome::DeadLettered`] with
    /// [`is_discarded`](crate::DeadLettered::is_discarded).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTransition`] unless the event is dead-lettered;
    /// [`Error::DeadLetterNotFound`]; [`Error::MissingAudit`].
    pub fn discard<C: InboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
        actor: &str,
        reason: &str,
    ) -> Result<(), Error> {
        let event_id = event_id.into_event_id()?;
        audit(actor, reason)?;
        let nested = transaction_depth(conn)? > 0;
        self.inbox
            .transact::<_, _, Error>(conn, nested, |tx| {
                let key = (self.inbox.consumer(), event_id.as_str());
                self.transition_from_dead_lettered(tx, &event_id, "discarded")?;
                let sql = tx.backend();
                let marked =
                    sql.set_inbox_state(key, row_state::DEAD_LETTERED, Some(row_state::DISCARDED))?;
                // The row that holds deliveries back may have been deleted (retention, by
                // hand): put it back, or "never run again" would not hold.
                if !marked {
                    sql.settle(key, Utc::now(), row_state::DISCARDED)?;
                }
                Self::finish_transition(tx, key, state::DISCARDED, actor, reason)
            })
            .map_err(Failure::into_error)?;
        tracing::warn!(
            consumer = self.inbox.consumer(),
            event_id = event_id.as_str(),
            actor,
            reason,
            "dead letter discarded"
        );
        Ok(())
    }

    /// Locks the failure row and checks that it is dead-lettered.
    fn transition_from_dead_lettered<C: InboxConnection, E>(
        &self,
        conn: &mut C,
        event_id: &EventId,
        attempted: &'static str,
    ) -> Result<FailureRow, Failure<E>> {
        let key = (self.inbox.consumer(), event_id.as_str());
        let Some(row) = conn.backend().failure(key)? else {
            return Err(Failure::Inbox(Error::DeadLetterNotFound {
                event_id: event_id.clone(),
            }));
        };
        if row.state != state::DEAD_LETTERED {
            return Err(Failure::Inbox(Error::InvalidTransition {
                event_id: event_id.clone(),
                state: DeadLetterState::parse(&row.state),
                attempted,
            }));
        }
        Ok(row)
    }

    fn finish_transition<C: InboxConnection, E>(
        conn: &mut C,
        key: crate::backend::Key<'_>,
        to: &str,
        actor: &str,
        reason: &str,
    ) -> Result<(), Failure<E>> {
        let now = Utc::now();
        conn.backend()
            .set_failure_state(key, state::DEAD_LETTERED, to, now)?;
        conn.backend().log(
            key,
            &LogRow {
                entry: to.to_owned(),
                attempt: None,
                error: None,
                actor: Some(actor.to_owned()),
                reason: Some(reason.to_owned()),
                at: now,
            },
        )?;
        Ok(())
    }
}

fn audit(actor: &str, reason: &str) -> Result<(), Error> {
    if actor.trim().is_empty() {
        return Err(Error::MissingAudit("actor"));
    }
    if reason.trim().is_empty() {
        return Err(Error::MissingAudit("reason"));
    }
    Ok(())
}

fn stored_payload(row: &FailureRow) -> Option<Payload> {
    let (kind, bytes) = (row.payload_kind.as_deref()?, row.payload.clone()?);
    Payload::from_stored(kind, bytes)
}

fn dead_letter(row: FailureRow, history: Vec<LogRow>) -> Result<DeadLetter, Error> {
    Ok(DeadLetter {
        event_id: EventId::new(row.event_id.as_str())?,
        state: DeadLetterState::parse(&row.state),
        attempts: row.attempts.unsigned_abs(),
        payload: stored_payload(&row),
        last_error: row.last_error,
        first_failed_at: row.first_failed_at,
        last_failed_at: row.last_failed_at,
        updated_at: row.updated_at,
        history: history
            .into_iter()
            .map(|log| HistoryEntry {
                entry: log.entry,
                attempt: log.attempt.map(i64::unsigned_abs),
                error: log.error,
                actor: log.actor,
                reason: log.reason,
                at: log.at,
            })
            .collect(),
    })
}
