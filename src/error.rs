//! The errors the library itself raises. The handler's own errors pass through untouched.

// The areas' leaves only (their refusals and states), never their bodies, which use `Error`.
use crate::chain::block::InvalidBlockHash;
use crate::chain::error as chain;
use crate::claim::error as claim;
use crate::claim::state::ClaimState;
use crate::cursor::error as cursor;
use crate::cursor::state::GapState;
use crate::dead_letter::state::DeadLetterState;
use crate::id::{EventId, InvalidEventId};
use crate::names::{InvalidConsumerName, InvalidStreamName};
use crate::outbox::error as outbox;
use crate::outbox::state::OutboxState;
use crate::replay::error as replay;

/// Boxed error from the migration harness.
pub(crate) type MigrationError = Box<dyn std::error::Error + Send + Sync>;

/// A handler's reason for a permanent or transient failure.
type Reason = Box<dyn std::error::Error + Send + Sync>;

/// What the inbox rejected or met on the database.
///
/// What a plain delivery can meet is a variant of its own; each area's refusals come inside
/// one variant, as that area's own enum ([`Error::Cursor`] holds a [`cursor::Refused`], and so
/// on), with its own [`ack`](cursor::Refused::ack) answer that [`Error::ack`] hands on.
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
    /// Its message names the schema's remedy only when the error is a missing table.
    #[error("database error in the inbox transaction: {}{}", crate::redact::redact(&.0.to_string()), if crate::class::is_missing_table(.0) { " (a table is missing: apply the inbox schema with diesel_inbox::run_pending_migrations)" } else { "" })]
    Database(#[from] diesel::result::Error),
    /// Contention (serialization failure, deadlock, lock timeout, busy database) outlasted the
    /// retry policy. Nothing was committed; redeliver later or raise
    /// [`RetryPolicy::max_retries`](crate::RetryPolicy::max_retries).
    #[error("the inbox gave up after {attempts} {} under contention; nothing was committed, so the delivery can be retried: {source}", if *attempts == 1 { "attempt" } else { "attempts" })]
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
    /// The connection to the database was lost before the inbox's transaction committed
    /// (the server restarted, the session was killed, the network failed). Nothing was
    /// committed: redeliver the event, on a new connection.
    #[error("the database connection was lost before the inbox transaction committed; nothing was committed, so redeliver the event on a new connection: {source}")]
    ConnectionLost {
        /// The error that showed the connection gone.
        #[source]
        source: diesel::result::Error,
    },
    /// The connection was lost while the transaction was committing, so whether it committed
    /// is unknown: the effect may have taken effect. On PostgreSQL and MariaDB the inbox's last
    /// check travels with the `COMMIT`, so a connection lost after user code returned is this
    /// too.
    /// Redelivering is safe: if the commit applied, the inbox answers
    /// [`Outcome::Duplicate`](crate::Outcome::Duplicate) and the effect does not run again.
    #[error("the database connection was lost during COMMIT, so whether the event took effect is unknown; redeliver it: if the commit applied, the inbox answers Duplicate and the effect does not run again: {source}")]
    CommitUnknown {
        /// The error COMMIT returned.
        #[source]
        source: diesel::result::Error,
    },
    /// A delivery reused an event id that was first delivered with a different payload: the
    /// producer reused an identity. The effect did not run; the conflict is counted on the
    /// inbox row. Fix the producer, or give the second event its own id.
    #[error("event {event_id:?} was already delivered with a different payload: the producer reused an event id; the effect did not run")]
    PayloadMismatch {
        /// The reused id.
        event_id: EventId,
    },
    /// The effect's result could not be stored or read back as JSON.
    #[error("the effect's result could not be stored or read back as JSON: {0}")]
    StoredResult(#[source] serde_json::Error),
    /// No connection could be taken from the pool. The text is the pool's error with any
    /// password redacted ([`redact`](crate::redact::redact)) when the crate builds it.
    #[error("no database connection from the pool: {}", crate::redact::redact(.0))]
    Pool(String),
    /// The handler marked its failure permanent ([`Error::permanent`]): it will fail the same
    /// way every time, so the event is dead-lettered on this first attempt.
    #[error("permanent failure, dead-lettered without retrying: {0}")]
    Permanent(#[source] Reason),
    /// The handler marked its failure transient ([`Error::transient`]): nothing is recorded or
    /// counted, and the message should be redelivered later.
    #[error("transient failure, not counted; redeliver the message later: {0}")]
    Transient(#[source] Reason),
    /// A stored row cannot be read as it is (a state this version does not know, an invalid
    /// event id): the error names the table, the key and the text, and the UPDATE that
    /// repairs the row. A delivery of its event is rejected, never redelivered in a loop.
    #[error(transparent)]
    CorruptRow(#[from] crate::state::CorruptRow),
    /// A cursor refused the sequence, or the stream's name: see [`cursor::Refused`].
    #[error(transparent)]
    Cursor(#[from] cursor::Refused),
    /// A chain cursor refused the block: see [`chain::Refused`].
    #[error(transparent)]
    Chain(#[from] chain::Refused),
    /// A write of a claim's holder was refused: see [`claim::Refused`].
    #[error(transparent)]
    Claim(#[from] claim::Refused),
    /// An envelope was not built or read, or an event not enqueued: see [`outbox::Refused`].
    #[error(transparent)]
    Outbox(#[from] outbox::Refused),
    /// A replay refused: see [`replay::Refused`].
    #[error(transparent)]
    Replay(#[from] replay::Refused),
    /// An operation that runs transactions of its own was called inside an open transaction:
    /// a claim ([`Claims::claim`](crate::claim::Claims::claim), which must commit before the
    /// side effect runs), a relay pass ([`Relay::run_once`](crate::outbox::Relay::run_once)),
    /// a prune ([`Inbox::prune`](crate::Inbox::prune),
    /// [`Cursor::prune_events`](crate::cursor::Cursor::prune_events)), a replay's run
    /// ([`Replays::run`](crate::replay::Replays::run)). Nothing was done. An operation around
    /// the deliveries returns it inside [`AdminError::Inbox`].
    #[error("{operation} was called inside an open transaction, but it runs transactions of its own: call it outside any transaction, on a connection of its own; nothing was done")]
    InsideTransaction {
        /// The operation called, as `Type::method` (a claim names both of its calls).
        operation: &'static str,
    },
}

/// [`Error::Cursor`] holding [`cursor::Refused::InvalidStreamName`], so that `?` takes a stream
/// name's rejection.
impl From<InvalidStreamName> for Error {
    fn from(error: InvalidStreamName) -> Self {
        Error::Cursor(error.into())
    }
}

/// [`Error::Chain`] holding [`chain::Refused::InvalidBlockHash`], so that `?` takes a block
/// hash's rejection.
impl From<InvalidBlockHash> for Error {
    fn from(error: InvalidBlockHash) -> Self {
        Error::Chain(error.into())
    }
}

/// What an operation around the deliveries refused or met on the database: the dead letters'
/// and the claims' ledgers, the gaps, the outbox's rows and its relay, retention, the
/// migrations.
///
/// A delivery never returns it: [`Ack`](crate::Ack) judges only [`Error`]. The database's and
/// the inbox's own errors that such an operation meets come inside, as
/// [`AdminError::Inbox`], so that `?` carries an [`Error`] into it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// What a delivery can meet as well: the database's errors (a lost connection, contention
    /// that outlasted the retries), a row this version cannot read, an invalid id or name.
    #[error(transparent)]
    Inbox(#[from] Error),
    /// A dead-letter operation found the dead letter in a state it cannot leave that way
    /// (redriving one that was already redriven or discarded, for instance).
    #[error("dead letter {event_id:?} is {state}; only a dead-lettered event can be {attempted}")]
    InvalidTransition {
        /// The event.
        event_id: EventId,
        /// Its current state.
        state: DeadLetterState,
        /// The state it was to move to: redriven, discarded or released.
        attempted: DeadLetterState,
    },
    /// No dead letter (nor failure record) exists for the event.
    #[error(
        "no dead letter for event {event_id:?} of this consumer; list them with DeadLetters::list"
    )]
    DeadLetterNotFound {
        /// The event.
        event_id: EventId,
    },
    /// An audit field (who or why) was empty.
    #[error("an audited transition (of a dead letter, a gap or a claim) needs a non-empty {0}: say who does it and why")]
    MissingAudit(&'static str),
    /// No outbox row has this position.
    #[error("no outbox row at position {position}: list them with `diesel-inbox outbox`")]
    OutboxRowNotFound {
        /// The position asked for.
        position: i64,
    },
    /// Only a failed outbox row can be retried.
    #[error("outbox row {position} is {state}; only a failed row can be retried")]
    OutboxRowNotFailed {
        /// The row's position.
        position: i64,
        /// Its state.
        state: OutboxState,
    },
    /// Applying the inbox migrations failed.
    #[error("applying the inbox migrations failed: {}", crate::redact::redact(&.0.to_string()))]
    Migration(#[source] MigrationError),
    /// Another process is applying the inbox migrations (it holds the migration lock: a
    /// PostgreSQL advisory lock, a MySQL/MariaDB `GET_LOCK`, SQLite's write lock), and did not
    /// finish within [`MigrationOptions::lock_timeout`](crate::migrations::MigrationOptions::lock_timeout).
    /// This call applied nothing; retry, and once the other process is done there is nothing
    /// left to apply.
    #[error("another process is applying the inbox migrations (it holds the migration lock); waited {} for it, and this call applied nothing: retry, or allow a longer wait with MigrationOptions::lock_timeout", crate::duration::human(*.waited))]
    MigrationLocked {
        /// How long this call waited for the lock.
        waited: std::time::Duration,
    },
    /// [`migrations::install`](crate::migrations::install) could not write the inbox
    /// migrations: the folder is missing, is not a directory, or cannot be written. What that
    /// call had created was removed again.
    #[error("cannot install the inbox migrations at {}: {source}; pass the application's Diesel migrations folder, an existing directory you can write to", .path.display())]
    MigrationInstall {
        /// The folder or file that could not be read or written.
        path: std::path::PathBuf,
        /// What the file system reported.
        #[source]
        source: std::io::Error,
    },
    /// [`Inbox::prune`](crate::Inbox::prune) was asked to remove rows younger than the
    /// consumer's declared [`redelivery_window`](crate::Inbox::redelivery_window). Nothing was
    /// deleted.
    #[error("refusing to prune inbox rows younger than the redelivery window: the consumer declared a redelivery window of {}, and pruning rows only {} old would let a late redelivery run the effect again; prune older rows, or declare a shorter window with Inbox::redelivery_window if redeliveries really stop sooner", crate::duration::human(*.window), crate::duration::human(*.older_than))]
    RetentionBelowWindow {
        /// The age asked for.
        older_than: std::time::Duration,
        /// The consumer's redelivery window.
        window: std::time::Duration,
    },
    /// Another [`Inbox::prune`](crate::Inbox::prune) holds the prune lock (in this process or
    /// another), or on a Galera cluster the prune lease; or took the lease over from this
    /// prune, after it ran past [`PRUNE_LEASE_TERM`](crate::retention::PRUNE_LEASE_TERM) between two
    /// batches. Nothing more was deleted; try again later.
    #[error("another prune of the inbox is running (it holds the prune lock, or on a Galera cluster the prune lease); nothing more was deleted, try again later")]
    PruneRunning,
    /// No gap of this consumer (and stream) has that id; list them with
    /// [`Gaps::list`](crate::cursor::Gaps::list) or `diesel-inbox gaps`.
    #[error("no gap {id} for this consumer; list the gaps with Gaps::list or diesel-inbox gaps")]
    GapNotFound {
        /// The id asked for.
        id: i64,
    },
    /// The gap is already closed: only an open gap can be resolved.
    #[error("gap {id} is {state}; only an open gap can be resolved")]
    GapNotOpen {
        /// The gap.
        id: i64,
        /// Its state.
        state: GapState,
    },
    /// No claim of this consumer has that id; list them with
    /// [`Claims::list`](crate::claim::Claims::list) or `diesel-inbox claims --all`.
    #[error("no claim {event_id:?} for this consumer; list the claims with Claims::list or diesel-inbox claims --all")]
    ClaimNotFound {
        /// The id asked for.
        event_id: EventId,
    },
    /// Only a claim in doubt can be resolved: one in progress still has a holder whose lease
    /// runs, and a completed, released or abandoned one is settled already.
    #[error("claim {event_id:?} is {state}; only a claim in doubt can be resolved (wait for an in-progress claim's lease to run out)")]
    ClaimNotInDoubt {
        /// The claim.
        event_id: EventId,
        /// Its state.
        state: ClaimState,
    },
}

impl AdminError {
    /// The inbox's error inside, when this is one: [`AdminError::Inbox`].
    pub fn inbox_error(&self) -> Option<&Error> {
        match self {
            AdminError::Inbox(error) => Some(error),
            _ => None,
        }
    }
}

/// `From<$error> for AdminError`, as [`AdminError::Inbox`] holding the [`Error`] it converts
/// into, so that `?` takes the same errors in admin code as in a delivery's.
macro_rules! admin_from_inbox {
    ($($(#[$cfg:meta])* $error:ty),+ $(,)?) => {$(
        $(#[$cfg])*
        impl From<$error> for AdminError {
            fn from(error: $error) -> Self {
                AdminError::Inbox(error.into())
            }
        }
    )+};
}

admin_from_inbox!(
    diesel::result::Error,
    InvalidEventId,
    InvalidConsumerName,
    InvalidStreamName,
    InvalidBlockHash,
    cursor::Refused,
    chain::Refused,
    claim::Refused,
    outbox::Refused,
    replay::Refused,
    crate::state::CorruptRow,
    diesel::r2d2::PoolError,
    #[cfg(feature = "deadpool")]
    deadpool_diesel::PoolError,
);

/// Lets a redrive's effect return plain [`diesel::QueryResult`](https://docs.rs/diesel/2/diesel/result/type.QueryResult.html): the database's errors come
/// back as themselves, the rest inside [`diesel::result::Error::QueryBuilderError`](https://docs.rs/diesel/2/diesel/result/enum.Error.html#variant.QueryBuilderError).
impl From<AdminError> for diesel::result::Error {
    fn from(error: AdminError) -> Self {
        match error {
            AdminError::Inbox(error) => error.into(),
            other => diesel::result::Error::QueryBuilderError(Box::new(other)),
        }
    }
}

/// [`Error::Pool`], so that `pool.get()?` works in a function returning the inbox's error.
/// The text is redacted: a driver's connection error may echo the URL, password included.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::r2d2::{ConnectionManager, Pool};
/// use diesel::SqliteConnection;
///
/// fn deliver(pool: &Pool<ConnectionManager<SqliteConnection>>) -> Result<(), diesel_inbox::Error> {
///     let mut conn = pool.get()?;
///     let _outcome = diesel_inbox::with_inbox(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(()))?;
///     Ok(())
/// }
/// let pool = Pool::builder().max_size(1).build(ConnectionManager::new(":memory:"))?;
/// diesel_inbox::run_pending_migrations(&mut pool.get()?)?;
/// deliver(&pool)?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl From<diesel::r2d2::PoolError> for Error {
    fn from(error: diesel::r2d2::PoolError) -> Self {
        Error::pool(&error)
    }
}

/// [`Error::Pool`] from deadpool-diesel's pool error (no connection in time, or none could be
/// made), its text redacted as r2d2's is.
#[cfg(feature = "deadpool")]
impl From<deadpool_diesel::PoolError> for Error {
    fn from(error: deadpool_diesel::PoolError) -> Self {
        Error::pool(&error)
    }
}

impl Error {
    /// [`Error::Pool`] from the pool's error, its text redacted: a driver's connection error
    /// may echo the URL, password included.
    pub(crate) fn pool(error: &impl std::fmt::Display) -> Self {
        Error::Pool(crate::redact::redact(&error.to_string()))
    }

    /// [`outbox::Refused::InvalidEnvelope`], saying what is wrong with the envelope.
    pub(crate) fn invalid_envelope(what: String) -> Self {
        Error::Outbox(outbox::Refused::InvalidEnvelope(what))
    }

    /// Whether this is a database error saying a table does not exist (PostgreSQL's
    /// `relation ... does not exist`, MySQL's 1146, SQLite's `no such table`): the schema is
    /// not applied, and [`run_pending_migrations`](crate::run_pending_migrations) is the
    /// remedy. Only such errors name that remedy in their message.
    ///
    /// ```
    /// use diesel_inbox::Error;
    ///
    /// assert!(!Error::Database(diesel::result::Error::NotFound).is_missing_table());
    /// ```
    pub fn is_missing_table(&self) -> bool {
        matches!(self, Error::Database(source) if crate::class::is_missing_table(source))
    }

    /// A failure that will recur on every attempt (an unknown order, a payload the handler
    /// cannot read): returned from a handler, it dead-letters the event on this first attempt
    /// ([`FailureKind::Permanent`](crate::FailureKind::Permanent)).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::{Ack, Error, Inbox, Outcome};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let orders = Inbox::new("orders")?; // no max_attempts: counted failures retry forever
    /// let result = orders.process(&mut conn, "order-404", |_tx| {
    ///     Err::<(), _>(Error::permanent("order 404 does not exist"))
    /// });
    /// assert!(matches!(result, Ok(Outcome::DeadLettered(_))));
    /// assert_eq!(Ack::of(&result), Ack::Ack);
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn permanent(reason: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Error::Permanent(reason.into())
    }

    /// A failure that will likely pass later (a downstream service is down): returned from a
    /// handler, it is neither recorded nor counted toward `max_attempts`, and comes back to
    /// the caller, who redelivers ([`FailureKind::Transient`](crate::FailureKind::Transient)).
    pub fn transient(reason: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Error::Transient(reason.into())
    }

    /// The inbox's own error inside a [`diesel::result::Error`](https://docs.rs/diesel/2/diesel/result/enum.Error.html), for handlers that return
    /// [`diesel::QueryResult`](https://docs.rs/diesel/2/diesel/result/type.QueryResult.html): the inbox hands its errors to them converted (see the `From`
    /// impl below), and this gets them back out. `None` for the database's own errors.
    ///
    /// ```
    /// use diesel_inbox::Error;
    ///
    /// let lost = Error::ConnectionLost { source: diesel::result::Error::BrokenTransactionManager };
    /// let as_diesel = diesel::result::Error::from(lost);
    /// assert!(matches!(Error::from_diesel(&as_diesel), Some(Error::ConnectionLost { .. })));
    /// assert!(Error::from_diesel(&diesel::result::Error::NotFound).is_none());
    /// ```
    pub fn from_diesel(error: &diesel::result::Error) -> Option<&Error> {
        match error {
            diesel::result::Error::QueryBuilderError(inner) => inner.downcast_ref(),
            _ => None,
        }
    }
}

/// Lets handlers that return plain [`diesel::QueryResult`](https://docs.rs/diesel/2/diesel/result/type.QueryResult.html) use the inbox.
///
/// Database errors come back as themselves (the last contention error, for exhausted retries);
/// the rest, a lost connection and an unknown commit outcome among them, as
/// [`diesel::result::Error::QueryBuilderError`](https://docs.rs/diesel/2/diesel/result/enum.Error.html#variant.QueryBuilderError) wrapping this [`Error`], which
/// [`Error::from_diesel`] gets back out.
impl From<Error> for diesel::result::Error {
    fn from(error: Error) -> Self {
        match error {
            Error::Database(source) | Error::RetriesExhausted { source, .. } => source,
            other => diesel::result::Error::QueryBuilderError(Box::new(other)),
        }
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::Error;

    /// libpq echoes a malformed URL whole in its error, and r2d2 passes it on.
    #[test]
    fn a_connection_failure_shows_no_password_in_display_or_debug() {
        let url = "postgres://app:S3cret@[127.0.0.1:5432/db";
        let manager = diesel::r2d2::ConnectionManager::<diesel::PgConnection>::new(url);
        let pool = diesel::r2d2::Pool::builder().build_unchecked(manager);
        let Err(failure) = pool.get_timeout(std::time::Duration::from_millis(300)) else {
            panic!("a malformed URL connects");
        };
        assert!(
            failure.to_string().contains("S3cret"),
            "the driver echoes it: {failure}"
        );
        let error = Error::pool(&failure);
        for shown in [error.to_string(), format!("{error:?}")] {
            assert!(!shown.contains("S3cret"), "{shown}");
            assert!(shown.contains("app:***@"), "{shown}");
        }
        let database = Error::Database(diesel::result::Error::QueryBuilderError(
            failure.to_string().into(),
        ));
        let shown = database.to_string();
        assert!(!shown.contains("S3cret"), "{shown}");
    }
}
