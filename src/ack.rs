//! What a broker loop does with a message once the inbox has seen it.

use crate::chain::error as chain;
use crate::claim::error as claim;
use crate::claim::outcome::ClaimOutcome;
use crate::cursor::error as cursor;
use crate::outbox::error as outbox;
use crate::replay::error as replay;
use crate::{Error, FailureKind, HandlerError, Outcome};

/// What to tell the broker about the message a delivery came from.
///
/// Every [`Outcome`] and every [`Error`] maps to one, and [`Ack::of`] reads the whole result of
/// [`Inbox::process`](crate::Inbox::process), so a consumer loop needs no match of its own:
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::{Ack, Delivery, Inbox};
///
/// /// A message as a broker client hands it over (JetStream, RabbitMQ, SQS, Kafka...).
/// struct Message { id: String, body: serde_json::Value }
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let inbox = Inbox::new("orders")?.max_attempts(5);
///
/// let messages = [
///     Message { id: "m-1".into(), body: serde_json::json!({"qty": 1}) },
///     Message { id: "m-1".into(), body: serde_json::json!({"qty": 1}) }, // redelivered
///     Message { id: "m-1".into(), body: serde_json::json!({"qty": 9}) }, // id reused
/// ];
/// for message in &messages {
///     let delivery = Delivery::new(message.id.as_str())?.json(message.body.clone());
///     let result = inbox.process(&mut conn, &delivery, |_tx| Ok::<_, diesel::result::Error>(()));
///     match Ack::of(&result) {
///         Ack::Ack => { /* message.ack() */ }
///         Ack::Redeliver => { /* message.nack(): the broker delivers it again */ }
///         Ack::Reject => { /* message.term(): the broker's own dead-letter path */ }
///         _ => {}
///     }
///     assert_eq!(Ack::of(&result), Ack::Ack); // processed, duplicate, payload conflict
/// }
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "an Ack says whether to ack, redeliver or reject the message"]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Ack {
    /// Done with the message: it was processed, was a duplicate, was dead-lettered (ops take
    /// it from the inbox's dead letters), or reused an id with another payload (recorded on
    /// the inbox row and logged; redelivering would conflict again).
    Ack,
    /// Let the broker deliver it again: nothing was committed (transient database trouble,
    /// contention that outlasted the retries, a lost connection, a handler failure below the
    /// dead-letter limit or marked transient), or the commit's outcome is unknown (a
    /// redelivery then answers `Duplicate` if it applied).
    Redeliver,
    /// The message can never be processed as it is: its id is not a valid event id, or the
    /// handler marked its failure permanent and the inbox could not dead-letter it (inside a
    /// transaction of the caller's, where nothing is recorded). Hand it to the broker's own
    /// dead-letter path (nack without requeue, `Term` on `JetStream`) rather
    /// than redeliver it forever.
    Reject,
}

impl Ack {
    /// What to do with the message whose delivery came to `result`: the outcome's ack, or
    /// the error's, with the inbox's error found inside the handler's own error type through
    /// [`HandlerError::inbox_error`]. A handler error marked permanent is
    /// [`Reject`](Ack::Reject) (one the inbox recorded comes back as `Ok(DeadLettered)`
    /// instead); any other that carries no inbox error is [`Redeliver`](Ack::Redeliver): it
    /// was recorded as a failed attempt, or not counted at all, and runs again on redelivery.
    ///
    /// It reads the result of a [claim](crate::claim::Claims::run) the same way ([`ClaimOutcome::ack`]).
    pub fn of<O: AckOutcome, E: HandlerError>(result: &Result<O, E>) -> Ack {
        match result {
            Ok(outcome) => outcome.ack(),
            Err(error) if error.failure_kind() == FailureKind::Permanent => Ack::Reject,
            Err(error) => error.inbox_error().map_or(Ack::Redeliver, Error::ack),
        }
    }
}

/// An outcome a broker loop acks: [`Outcome`] and [`ClaimOutcome`], read by [`Ack::of`].
/// Sealed: the crate's outcomes are the ones it knows how to ack.
pub trait AckOutcome: sealed::Sealed {
    /// What to do with the message this outcome came from.
    fn ack(&self) -> Ack;
}

pub(crate) mod sealed {
    /// Keeps [`AckOutcome`](super::AckOutcome) to the crate's outcomes.
    pub trait Sealed {}
    impl<T> Sealed for crate::Outcome<T> {}
    impl<T> Sealed for crate::claim::outcome::ClaimOutcome<T> {}
}

impl<T> AckOutcome for Outcome<T> {
    fn ack(&self) -> Ack {
        Outcome::ack(self)
    }
}

impl<T> AckOutcome for ClaimOutcome<T> {
    fn ack(&self) -> Ack {
        ClaimOutcome::ack(self)
    }
}

impl<T> ClaimOutcome<T> {
    /// What to do with the message: [`Ack::Redeliver`] while another worker holds the claim
    /// (it may yet release it), [`Ack::Ack`] otherwise. A claim in doubt is acked too: it
    /// waits for ops, not for the broker, and keeps the payload; after ops resolve it with
    /// a retry, publish the message again.
    pub fn ack(&self) -> Ack {
        match self {
            ClaimOutcome::InProgress(_) => Ack::Redeliver,
            _ => Ack::Ack,
        }
    }
}

impl<T> Outcome<T> {
    /// What to do with the message: every outcome is [`Ack::Ack`], since each one settled the
    /// event (processed now, processed before, or dead-lettered), a gap found on the way
    /// included: the gap is in the ledger, and redelivering would not fill it.
    pub fn ack(&self) -> Ack {
        Ack::Ack
    }
}

impl Error {
    /// What to do with the message a delivery that failed with this error came from.
    ///
    /// ```
    /// use diesel_inbox::{Ack, Error, EventId};
    ///
    /// let lost = Error::ConnectionLost { source: diesel::result::Error::BrokenTransactionManager };
    /// assert_eq!(lost.ack(), Ack::Redeliver);
    /// let reused = Error::PayloadMismatch { event_id: EventId::new("evt-1")? };
    /// assert_eq!(reused.ack(), Ack::Ack);
    /// assert_eq!(Error::from(EventId::new("").unwrap_err()).ack(), Ack::Reject);
    /// # Ok::<(), diesel_inbox::InvalidEventId>(())
    /// ```
    pub fn ack(&self) -> Ack {
        match self {
            Error::PayloadMismatch { .. } => Ack::Ack,
            // A message that can never be processed as it is; and a permanent failure, which
            // comes back as an error rather than as `DeadLettered` only when recording it
            // failed, or inside a caller's transaction.
            Error::InvalidEventId(_)
            | Error::Permanent(_)
            // A stored row this version cannot read: redelivering reads it again, forever.
            | Error::CorruptRow(_) => Ack::Reject,
            // Nothing was committed, or the commit's outcome is unknown: the inbox answers a
            // redelivery correctly either way.
            Error::Database(_)
            | Error::RetriesExhausted { .. }
            | Error::TransactionAborted { .. }
            | Error::ConnectionLost { .. }
            | Error::CommitUnknown { .. }
            | Error::Transient(_)
            // A result that does not serialize: nothing committed; a fixed handler takes it.
            | Error::StoredResult(_)
            // The caller's own `?` on building an inbox, or on taking a connection from a pool.
            | Error::InvalidConsumerName(_)
            | Error::Pool(_)
            // Nothing was done: a claim not taken, on the next delivery.
            | Error::InsideTransaction { .. } => Ack::Redeliver,
            Error::Cursor(refused) => refused.ack(),
            Error::Chain(refused) => refused.ack(),
            Error::Claim(refused) => refused.ack(),
            Error::Outbox(refused) => refused.ack(),
            Error::Replay(refused) => refused.ack(),
        }
    }
}

// Each area's refusals answer here, beside `Error::ack`: an area's `error.rs` is a leaf that
// `error.rs` imports, and stays one.

impl cursor::Refused {
    /// What to do with the message a delivery that a cursor refused came from.
    ///
    /// ```
    /// use diesel_inbox::{cursor, Ack};
    ///
    /// let zombie = cursor::Refused::Fenced { stream: "orders".into(), epoch: Some(1), current: 2 };
    /// assert_eq!(zombie.ack(), Ack::Redeliver);
    /// assert_eq!(cursor::Refused::SequenceOutOfRange(u64::MAX).ack(), Ack::Reject);
    /// ```
    pub fn ack(&self) -> Ack {
        match self {
            // A stream name, or sequence numbers, that can never be processed as they are.
            cursor::Refused::InvalidStreamName(_)
            | cursor::Refused::BeforeFirstAvailable { .. }
            | cursor::Refused::SequenceOutOfRange(_) => Ack::Reject,
            // A zombie leaves the message to the stream's new owner; too many open gaps wait
            // for the missing sequences or for ops.
            cursor::Refused::Fenced { .. } | cursor::Refused::TooManyOpenGaps { .. } => {
                Ack::Redeliver
            }
        }
    }
}

impl chain::Refused {
    /// What to do with the message a block that a chain cursor refused came from.
    pub fn ack(&self) -> Ack {
        match self {
            // A hash that can never be processed as it is.
            chain::Refused::InvalidBlockHash(_) => Ack::Reject,
            // A chain's block waits for the blocks before it, for its branch, for finality,
            // or for ops (a reorg beyond finality).
            chain::Refused::MissingBlocks { .. }
            | chain::Refused::UnknownAncestor { .. }
            | chain::Refused::BlockNotFinal { .. }
            | chain::Refused::ReorgBeyondFinality { .. } => Ack::Redeliver,
        }
    }
}

impl claim::Refused {
    /// What to do with the message whose claim's holder was refused a write:
    /// [`Ack::Redeliver`], since the next delivery reads what the claim says now.
    pub fn ack(&self) -> Ack {
        match self {
            claim::Refused::Fenced { .. } | claim::Refused::Deleted { .. } => Ack::Redeliver,
        }
    }
}

impl outbox::Refused {
    /// What to do with the message whose handling met this refusal of the outbox.
    pub fn ack(&self) -> Ack {
        match self {
            // An envelope that can never be read or built as it is.
            outbox::Refused::InvalidEnvelope(_) => Ack::Reject,
            // An effect that enqueues an id twice fails like any handler error.
            outbox::Refused::AlreadyEnqueued { .. } => Ack::Redeliver,
        }
    }
}

impl replay::Refused {
    /// What to do with the message: a replay is not a broker's delivery, and nothing of its
    /// last event committed, so [`Ack::Redeliver`].
    pub fn ack(&self) -> Ack {
        match self {
            replay::Refused::InvalidPlan(_)
            | replay::Refused::NotFound { .. }
            | replay::Refused::WrongState { .. }
            | replay::Refused::Held { .. }
            | replay::Refused::Fenced { .. }
            | replay::Refused::SourceMismatch { .. }
            | replay::Refused::UnsupportedRange { .. }
            | replay::Refused::Source { .. }
            | replay::Refused::WouldRun
            | replay::Refused::NotReconciled { .. }
            | replay::Refused::EvidenceMismatch { .. } => Ack::Redeliver,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventId;

    fn lost() -> diesel::result::Error {
        diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::ClosedConnection,
            Box::new("gone".to_owned()),
        )
    }

    #[test]
    fn inbox_errors_inside_a_query_result_ack_as_themselves() {
        let conflict: Result<Outcome<()>, diesel::result::Error> = Err(Error::PayloadMismatch {
            event_id: EventId::new("evt-1").unwrap(),
        }
        .into());
        assert_eq!(Ack::of(&conflict), Ack::Ack);

        let unknown: Result<Outcome<()>, diesel::result::Error> =
            Err(Error::CommitUnknown { source: lost() }.into());
        assert_eq!(Ack::of(&unknown), Ack::Redeliver);

        let handlers_own: Result<Outcome<()>, diesel::result::Error> =
            Err(diesel::result::Error::NotFound);
        assert_eq!(Ack::of(&handlers_own), Ack::Redeliver);
    }

    /// The answers each area's refusals had as flat variants of `Error`, before they moved
    /// into the areas' own enums: the cursors' and the chains'.
    #[test]
    fn cursor_and_chain_refusals_ack_as_they_did_inside_error() {
        let stream = || "s".to_owned();
        let answers: Vec<(Error, Ack)> = vec![
            (
                cursor::Refused::Fenced {
                    stream: stream(),
                    epoch: None,
                    current: 1,
                }
                .into(),
                Ack::Redeliver,
            ),
            (
                cursor::Refused::TooManyOpenGaps {
                    stream: stream(),
                    open: 3,
                }
                .into(),
                Ack::Redeliver,
            ),
            (
                cursor::Refused::BeforeFirstAvailable {
                    stream: stream(),
                    sequence: 1,
                    first_available: 2,
                }
                .into(),
                Ack::Reject,
            ),
            (crate::names::InvalidStreamName::Empty.into(), Ack::Reject),
            (
                cursor::Refused::SequenceOutOfRange(u64::MAX).into(),
                Ack::Reject,
            ),
            (
                chain::Refused::ReorgBeyondFinality {
                    stream: stream(),
                    height: 3,
                    finalized: 4,
                }
                .into(),
                Ack::Redeliver,
            ),
            (
                chain::Refused::MissingBlocks {
                    stream: stream(),
                    head: 1,
                    height: 3,
                }
                .into(),
                Ack::Redeliver,
            ),
            (
                chain::Refused::UnknownAncestor {
                    stream: stream(),
                    height: 3,
                }
                .into(),
                Ack::Redeliver,
            ),
            (
                chain::Refused::BlockNotFinal {
                    stream: stream(),
                    height: 3,
                    tip: None,
                    depth: 2,
                    final_at: 5,
                }
                .into(),
                Ack::Redeliver,
            ),
            (crate::chain::InvalidBlockHash::Empty.into(), Ack::Reject),
        ];
        for (error, ack) in answers {
            assert_eq!(error.ack(), ack, "{error:?}");
        }
    }

    /// As above, for the claims', the outbox's and the replays' refusals.
    #[test]
    fn claim_outbox_and_replay_refusals_ack_as_they_did_inside_error() {
        let id = || EventId::new("evt-1").unwrap();
        let answers: Vec<(Error, Ack)> = vec![
            (
                claim::Refused::Fenced {
                    event_id: id(),
                    attempt: 1,
                    current: 2,
                    state: crate::claim::ClaimState::InProgress,
                }
                .into(),
                Ack::Redeliver,
            ),
            (
                claim::Refused::Deleted { event_id: id() }.into(),
                Ack::Redeliver,
            ),
            (
                outbox::Refused::InvalidEnvelope("no Event-Id header".into()).into(),
                Ack::Reject,
            ),
            (
                outbox::Refused::AlreadyEnqueued { event_id: id() }.into(),
                Ack::Redeliver,
            ),
            (replay::Refused::Fenced { id: 1 }.into(), Ack::Redeliver),
            (replay::Refused::WouldRun.into(), Ack::Redeliver),
            (
                Error::InsideTransaction {
                    operation: "Claims::claim or Claims::run",
                },
                Ack::Redeliver,
            ),
        ];
        for (error, ack) in answers {
            assert_eq!(error.ack(), ack, "{error:?}");
        }
    }

    #[test]
    fn every_outcome_is_acked() {
        let processed: Result<Outcome<u8>, Error> = Ok(Outcome::Processed(1));
        assert_eq!(Ack::of(&processed), Ack::Ack);
    }
}
