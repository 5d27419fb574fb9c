//! The errors the library itself raises. The handler's own errors pass through untouched.

use crate::{DeadLetterState, EventId, InvalidConsumerName, InvalidEventId};

/// Boxed error from the migration harness.
pub(crate) type MigrationError = Box<dyn std::error::Error + Send + Sync>;

/// What the inbox rejected or met on the database.
///
/// Handlers return their own error type `E`; the inbox needs only `E: From<Error>` to hand its
/// own failures back through the same channel, so `?` works for both.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The event id was rejected before any SQL ran.
    #[error(transparent)]
    InvalidEventId(#[from] InvalidEventId),
    /// The consumer name was rejected.
    #[error(transparent)]
    InvalidConsumerName(#[from] InvalidConsumerName),
    /// A database error that is not contention: connection lost, schema missing, permissions.
    #[error("database error in the inbox transaction: {0} (if the diesel_inbox table is missing, apply the schema with diesel_inbox::run_pending_migrations)")]
    Database(#[from] diesel::result::Error),
    /// Contention (serialization failure, deadlock, lock timeout, busy database) outlasted the
    /// retry policy. Nothing was committed; redeliver later or raise
    /// [`RetryPolicy::max_retries`](crate::RetryPolicy::max_retries).
    #[error("the inbox gave up after {attempts} attempts under contention; nothing was committed, so the delivery can be retried: {source}")]
    RetriesExhausted {
        /// Attempts made, the first included.
        attempts: u32,
        /// The last contention error.
        #[source]
        source: diesel::result::Error,
    },
    /// The handler returned `Ok`, but the transaction had already been aborted or rolled back
    /// by the database, typically because the handler swallowed a failed statement. Nothing
    /// of the inbox row was committed; propagate database errors from the handler with `?`.
    #[error("the handler returned Ok but its transaction was aborted by the database (did it swallow a failed statement?); the event was not recorded and will run again on redelivery")]
    TransactionAborted {
        /// The error the database gave when the inbox checked the transaction, if any.
        #[source]
        source: Option<diesel::result::Error>,
    },
    /// A delivery reused an event id that was first delivered with a different payload: the
    /// producer reused an identity. The effect did not run; the conflict is counted on the
    /// inbox row. Fix the producer, or give the second event its own id.
    #[error("event {event_id:?} was already delivered with a different payload: the producer reused an event id; the effect did not run")]
    PayloadMismatch {
        /// The reused id.
        event_id: EventId,
    },
    /// A dead-letter operation found the dead letter in a state it cannot leave that way
    /// (redriving one that was already redriven or discarded, for instance).
    #[error("dead letter {event_id:?} is {state}; only a dead-lettered event can be {attempted}")]
    InvalidTransition {
        /// The event.
        event_id: EventId,
        /// Its current state.
        state: DeadLetterState,
        /// What was attempted: "redriven" or "discarded".
        attempted: &'static str,
    },
    /// No dead letter (nor failure record) exists for the event.
    #[error(
        "no dead letter for event {event_id:?} of this consumer; list them with DeadLetters::list"
    )]
    DeadLetterNotFound {
        /// The event.
        event_id: EventId,
    },
    /// The effect's result could not be stored or read back as JSON.
    #[error("the effect's result could not be stored or read back as JSON: {0}")]
    StoredResult(#[source] serde_json::Error),
    /// An audit field (who or why) was empty.
    #[error("a dead-letter transition needs a non-empty {0}: say who does it and why")]
    MissingAudit(&'static str),
    /// Applying the inbox migrations failed.
    #[error("applying the inbox migrations failed: {0}")]
    Migration(#[source] MigrationError),
}

/// Lets handlers that return plain [`diesel::QueryResult`] use the inbox.
///
/// Database errors come back as themselves (the last contention error, for exhausted retries);
/// the rest as [`diesel::result::Error::QueryBuilderError`] wrapping this [`Error`], which
/// [`downcast_ref`](std::error::Error) recovers.
impl From<Error> for diesel::result::Error {
    fn from(error: Error) -> Self {
        match error {
            Error::Database(source) | Error::RetriesExhausted { source, .. } => source,
            other => diesel::result::Error::QueryBuilderError(Box::new(other)),
        }
    }
}
