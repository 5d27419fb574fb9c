//! The inbox's decisions, apart from any I/O: what a run of user code came to, what to retry,
//! what a row seen before means, when the failure policy gives up. The transaction engine
//! ([`crate::engine`]) observes and acts, for both flavours; these functions only decide.

use std::any::Any;
use std::num::NonZeroU32;
use std::panic;
use std::time::Duration;

use crate::class::{ErrorClass, FailedStatement};
use crate::dead_letter::state::DeadLetterState;
use crate::rows::Existing;
use crate::state::InboxState;
use crate::{AdminError, DeadLettered, Duplicate, Error, FailureKind, HandlerError, RetryPolicy};

/// Where the inbox's transaction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// A transaction of the inbox's own: it commits, contention is retried, and a failed
    /// attempt is recorded after the rollback.
    TopLevel,
    /// A savepoint inside a transaction the caller holds: the caller's commit decides, so
    /// nothing is retried (only the caller can run its transaction again) and nothing is
    /// recorded (it would roll back with the caller).
    Savepoint,
}

impl Scope {
    /// The scope for a connection whose transaction depth is `depth`.
    pub(crate) fn at_depth(depth: u32) -> Self {
        if depth == 0 {
            Self::TopLevel
        } else {
            Self::Savepoint
        }
    }
}

/// Why one run of a transaction ended without a result. It has been rolled back.
#[derive(Debug)]
pub(crate) enum Failure<E> {
    /// The handler's error: returned as is, after the failure is recorded.
    Handler(E),
    /// The handler panicked: the failure is recorded and the panic resumed.
    Panicked(Box<dyn Any + Send>),
    /// One of the inbox's own statements failed; retried when it is contention.
    Database(diesel::result::Error),
    /// The inbox rejects the outcome; not retried.
    Inbox(Error),
}

impl<E> From<diesel::result::Error> for Failure<E> {
    fn from(error: diesel::result::Error) -> Self {
        Failure::Database(error)
    }
}

impl<E> From<Error> for Failure<E> {
    fn from(error: Error) -> Self {
        Failure::Inbox(error)
    }
}

impl<E> Failure<E> {
    /// A statement's error on the inbox row at `key`: when the row holds a state this version
    /// cannot read, [`Error::CorruptRow`], which a delivery rejects rather than redelivers.
    pub(crate) fn reading_events(error: diesel::result::Error, key: crate::rows::Key<'_>) -> Self {
        match crate::state::unreadable(error, &[("consumer", key.0), ("event_id", key.1)]) {
            Ok(corrupt) => Failure::Inbox(corrupt.into()),
            Err(error) => Failure::Database(error),
        }
    }
}

impl<E: From<AdminError>> Failure<E> {
    /// An operation's refusal (the dead letter is not dead-lettered, the gap is not open),
    /// found by a transaction body: the body's own error, returned as it is and not retried.
    pub(crate) fn refused(refusal: AdminError) -> Self {
        Failure::Handler(refusal.into())
    }
}

impl<E: From<Error>> Failure<E> {
    /// The error the caller gets; a panic continues unwinding.
    pub(crate) fn into_error(self) -> E {
        match self {
            Failure::Handler(error) => error,
            Failure::Database(error) => Error::Database(error).into(),
            Failure::Inbox(error) => error.into(),
            Failure::Panicked(panic) => panic::resume_unwind(panic),
        }
    }
}

/// What the engine saw of the transaction after user code returned.
#[derive(Debug)]
pub(crate) enum Observed {
    /// User code committed, rolled back or opened transaction levels of its own.
    DepthChanged,
    /// The check found the transaction alive.
    Alive,
    /// The check found that the database had ended the transaction.
    Ended,
    /// The check itself failed.
    CheckFailed(diesel::result::Error),
    /// No check was needed.
    NotChecked,
}

/// What the inbox sends after user code, before the transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// Only the commit, whose check refuses a transaction that ended under the user code.
    Commit,
    /// Statements of its own, which must not run outside the transaction.
    Statements,
}

/// Whether the transaction must be checked right after user code that returned `ok` or not:
/// where one failed statement can end the transaction, so that nothing runs on in autocommit
/// mode after it; and after a handler error where a deadlock ends the transaction, to tell
/// contention (retried, not counted) from the handler's own failure. Where the commit checks
/// (PostgreSQL, MariaDB), a successful user code needs it only if statements of the inbox's
/// own follow (`then`) before the commit; on PostgreSQL, whose failed statements abort the
/// transaction rather than end it, only for user code that ended the transaction itself, and
/// only where the connection does not see that end (`sees_end`).
pub(crate) fn must_check_after_user_code(
    ok: bool,
    failed_statement: FailedStatement,
    sees_end: bool,
    then: Then,
) -> bool {
    match failed_statement {
        FailedStatement::AbortsTransaction => ok && !sees_end && then == Then::Statements,
        FailedStatement::MayEndTransaction => ok,
        FailedStatement::DeadlockEndsTransaction => !ok || then == Then::Statements,
    }
}

/// What user code's result comes to, given what the engine observed after it. The handler's
/// own error always comes back as it is, unless a deadlock ended the transaction under it, which
/// is contention.
pub(crate) fn after_user_code<T, E>(
    result: Result<T, E>,
    observed: Observed,
    failed_statement: FailedStatement,
    classify: fn(&diesel::result::Error) -> ErrorClass,
) -> Result<T, Failure<E>> {
    let deadlock_ends = failed_statement == FailedStatement::DeadlockEndsTransaction;
    match (result, observed) {
        (_, Observed::Ended) if deadlock_ends => Err(Failure::Database(rolled_back_by_deadlock())),
        (Err(error), _) => Err(Failure::Handler(error)),
        (Ok(value), Observed::Alive | Observed::NotChecked) => Ok(value),
        (Ok(_), Observed::DepthChanged | Observed::Ended) => {
            Err(Failure::Inbox(Error::TransactionAborted { source: None }))
        }
        (Ok(_), Observed::CheckFailed(error)) => Err(check_failed(error, classify)),
    }
}

fn check_failed<E>(
    error: diesel::result::Error,
    classify: fn(&diesel::result::Error) -> ErrorClass,
) -> Failure<E> {
    match classify(&error) {
        ErrorClass::Aborted | ErrorClass::Other => Failure::Inbox(Error::TransactionAborted {
            source: Some(error),
        }),
        // Retried, or reported as a lost connection, by `after_failure`.
        ErrorClass::Contention | ErrorClass::ConnectionLost => Failure::Database(error),
    }
}

/// A deadlock ended the transaction under user code; Diesel saw no error of its own.
fn rolled_back_by_deadlock() -> diesel::result::Error {
    diesel::result::Error::DatabaseError(
        diesel::result::DatabaseErrorKind::SerializationFailure,
        Box::new(
            "the database rolled back the transaction under the handler (deadlock)".to_owned(),
        ),
    )
}

/// What a failed top-level COMMIT means. A lost connection leaves it unknown whether the
/// commit applied: the caller must hear that, not "failed".
pub(crate) fn after_commit_error<E>(
    error: diesel::result::Error,
    classify: fn(&diesel::result::Error) -> ErrorClass,
) -> Failure<E> {
    match classify(&error) {
        ErrorClass::ConnectionLost => Failure::Inbox(Error::CommitUnknown { source: error }),
        // The commit's own check refused a transaction an earlier statement aborted.
        ErrorClass::Aborted => Failure::Inbox(Error::TransactionAborted {
            source: Some(error),
        }),
        ErrorClass::Contention | ErrorClass::Other => Failure::Database(error),
    }
}

/// What to do after a failed attempt of the transaction.
#[derive(Debug)]
pub(crate) enum Next<E> {
    /// The attempt lost a race: wait `delay` and run the whole transaction again.
    Retry {
        /// How long to wait.
        delay: Duration,
        /// The contention error, for the log.
        reason: String,
    },
    /// Give the caller this.
    Return(Failure<E>),
}

/// Retries contention at the top level, under `policy`, whether the inbox's statements or the
/// handler's met it; `attempt` is the one that failed (1-based). A lost connection in the
/// inbox's statements becomes [`Error::ConnectionLost`]; a handler's error comes back as it is
/// once the retries run out.
pub(crate) fn after_failure<E: HandlerError>(
    failure: Failure<E>,
    scope: Scope,
    attempt: u32,
    policy: &RetryPolicy,
    classify: fn(&diesel::result::Error) -> ErrorClass,
    rng: &mut fastrand::Rng,
) -> Next<E> {
    let retry_left = scope == Scope::TopLevel && attempt <= policy.retries();
    let error = match failure {
        Failure::Database(error) => error,
        Failure::Handler(error)
            if retry_left && handler_failure(&error, classify) == HandlerFailure::Contention =>
        {
            return Next::Retry {
                delay: policy.delay(attempt, rng),
                reason: error.to_string(),
            };
        }
        other => return Next::Return(other),
    };
    match (classify(&error), scope) {
        (ErrorClass::ConnectionLost, _) => {
            Next::Return(Failure::Inbox(Error::ConnectionLost { source: error }))
        }
        // One of the inbox's statements after user code, or the commit, found the transaction
        // aborted by a statement whose error the user code swallowed.
        (ErrorClass::Aborted, _) => Next::Return(Failure::Inbox(Error::TransactionAborted {
            source: Some(error),
        })),
        (ErrorClass::Contention, Scope::TopLevel) if retry_left => Next::Retry {
            delay: policy.delay(attempt, rng),
            reason: error.to_string(),
        },
        (ErrorClass::Contention, Scope::TopLevel) => {
            Next::Return(Failure::Inbox(Error::RetriesExhausted {
                attempts: attempt,
                source: error,
            }))
        }
        _ => Next::Return(Failure::Database(error)),
    }
}

/// What the failure policy does with a handler's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandlerFailure {
    /// Record it as a failed attempt; dead-letter the event at `max_attempts`.
    Counted,
    /// Record it and dead-letter the event now: the handler said it will never pass.
    Permanent,
    /// Neither record nor count it: the handler said it will pass later.
    Transient,
    /// Contention in the handler's own statements: retried like the inbox's, never counted.
    Contention,
    /// The connection died under the handler: nothing committed, and nothing can be recorded
    /// on it; not counted.
    ConnectionLost,
}

impl HandlerFailure {
    /// Whether the failure is recorded as a failed attempt.
    pub(crate) fn is_recorded(self) -> bool {
        matches!(self, Self::Counted | Self::Permanent)
    }
}

/// Classifies a handler's error: the handler's own mark first, then the database error inside.
pub(crate) fn handler_failure<E: HandlerError>(
    error: &E,
    classify: fn(&diesel::result::Error) -> ErrorClass,
) -> HandlerFailure {
    match error.failure_kind() {
        FailureKind::Permanent => HandlerFailure::Permanent,
        FailureKind::Transient => HandlerFailure::Transient,
        FailureKind::Counted => match error.diesel_error().map(classify) {
            Some(ErrorClass::Contention) => HandlerFailure::Contention,
            Some(ErrorClass::ConnectionLost) => HandlerFailure::ConnectionLost,
            Some(ErrorClass::Aborted | ErrorClass::Other) | None => HandlerFailure::Counted,
        },
    }
}

/// What a delivery of an event seen before comes to. The effect does not run.
#[derive(Debug)]
pub(crate) enum Seen {
    /// The id was reused with another payload: count it, then refuse the delivery.
    PayloadConflict,
    /// Processed before.
    Duplicate(Duplicate),
    /// Held back by the failure policy (or discarded by ops).
    DeadLettered(DeadLettered),
}

/// Reads the row a delivery found. A fingerprint is compared only when both the delivery and
/// the first delivery carried a payload.
pub(crate) fn seen(existing: Existing, fingerprint: Option<&[u8; 32]>) -> Seen {
    if let (Some(given), Some(stored)) = (fingerprint, &existing.payload_hash) {
        if given[..] != stored[..] {
            return Seen::PayloadConflict;
        }
    }
    let deliveries = existing.deliveries.unsigned_abs();
    match existing.state {
        // A reverted event takes effect again only through its chain cursor, which reads the
        // row itself; any other delivery of it is a duplicate.
        InboxState::Processed | InboxState::Reverted => Seen::Duplicate(Duplicate::event(
            existing.processed_at,
            deliveries,
            existing.result,
        )),
        InboxState::DeadLettered | InboxState::Discarded => Seen::DeadLettered(DeadLettered {
            since: existing.processed_at,
            deliveries,
            discarded: existing.state == InboxState::Discarded,
        }),
    }
}

/// Whether a failed attempt, the `attempts`-th, dead-letters its event: at the limit, or at
/// once for a permanent failure, and only while the event is still retrying (a concurrent
/// failure may have dead-lettered it already; a released one that fails again is retrying).
pub(crate) fn dead_letters_now(
    attempts: i64,
    state: DeadLetterState,
    max_attempts: Option<NonZeroU32>,
    failure: HandlerFailure,
) -> bool {
    let limit = max_attempts.map_or(i64::MAX, |max| i64::from(max.get()));
    let gives_up = failure == HandlerFailure::Permanent || attempts >= limit;
    gives_up && state == DeadLetterState::Retrying
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    fn classify(error: &diesel::result::Error) -> ErrorClass {
        match error {
            diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::SerializationFailure,
                _,
            ) => ErrorClass::Contention,
            diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::ClosedConnection,
                _,
            ) => ErrorClass::ConnectionLost,
            diesel::result::Error::DatabaseError(diesel::result::DatabaseErrorKind::Unknown, _) => {
                ErrorClass::Aborted
            }
            _ => ErrorClass::Other,
        }
    }

    /// A statement PostgreSQL refused because an earlier one aborted the transaction.
    fn aborted() -> diesel::result::Error {
        diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::Unknown,
            Box::new("current transaction is aborted".to_owned()),
        )
    }

    fn lost() -> diesel::result::Error {
        diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::ClosedConnection,
            Box::new("server closed the connection".to_owned()),
        )
    }

    #[test]
    fn the_transaction_is_checked_after_user_code_only_where_an_end_would_go_unnoticed() {
        use FailedStatement::{AbortsTransaction, DeadlockEndsTransaction, MayEndTransaction};
        use Then::{Commit, Statements};
        // PostgreSQL: only an ok result, an end the connection cannot see, and statements to
        // follow call for the check.
        assert!(must_check_after_user_code(
            true,
            AbortsTransaction,
            false,
            Statements
        ));
        assert!(!must_check_after_user_code(
            true,
            AbortsTransaction,
            true,
            Statements
        ));
        assert!(!must_check_after_user_code(
            true,
            AbortsTransaction,
            false,
            Commit
        ));
        assert!(!must_check_after_user_code(
            false,
            AbortsTransaction,
            false,
            Statements
        ));
        // MySQL/MariaDB: always after an error (a deadlock may have ended the transaction under
        // the handler); after success only where statements follow, since the commit checks.
        for sees_end in [true, false] {
            assert!(must_check_after_user_code(
                true,
                DeadlockEndsTransaction,
                sees_end,
                Statements
            ));
            assert!(!must_check_after_user_code(
                true,
                DeadlockEndsTransaction,
                sees_end,
                Commit
            ));
        }
        // The others do not depend on what the connection sees or what follows.
        for (sees_end, then) in [(true, Commit), (false, Statements)] {
            assert!(must_check_after_user_code(
                true,
                MayEndTransaction,
                sees_end,
                then
            ));
            assert!(!must_check_after_user_code(
                false,
                MayEndTransaction,
                sees_end,
                then
            ));
            assert!(must_check_after_user_code(
                false,
                DeadlockEndsTransaction,
                sees_end,
                then
            ));
        }
    }

    #[test]
    fn the_handlers_error_comes_back_whatever_the_check_saw() {
        for (observed, failed_statement) in [
            (
                Observed::CheckFailed(lost()),
                FailedStatement::MayEndTransaction,
            ),
            (Observed::DepthChanged, FailedStatement::AbortsTransaction),
            (Observed::Ended, FailedStatement::MayEndTransaction),
        ] {
            let failure =
                after_user_code::<(), _>(Err("handler's"), observed, failed_statement, classify);
            assert!(matches!(failure, Err(Failure::Handler("handler's"))));
        }
    }

    #[test]
    fn a_transaction_a_deadlock_ended_is_contention_even_under_a_handler_error() {
        let failure = after_user_code::<(), _>(
            Err("handler's"),
            Observed::Ended,
            FailedStatement::DeadlockEndsTransaction,
            classify,
        );
        let Err(Failure::Database(error)) = failure else {
            panic!("expected contention, got {failure:?}");
        };
        assert_eq!(classify(&error), ErrorClass::Contention);
    }

    #[test]
    fn a_lost_connection_after_user_code_is_connection_lost_not_an_aborted_transaction() {
        let policy = RetryPolicy::default();
        let mut rng = fastrand::Rng::with_seed(1);
        let failure = after_user_code::<(), Error>(
            Ok(()),
            Observed::CheckFailed(lost()),
            FailedStatement::DeadlockEndsTransaction,
            classify,
        )
        .expect_err("the connection is gone");
        assert!(matches!(
            after_failure(failure, Scope::TopLevel, 1, &policy, classify, &mut rng),
            Next::Return(Failure::Inbox(Error::ConnectionLost { .. }))
        ));
    }

    #[test]
    fn a_statement_refused_by_an_aborted_transaction_is_an_aborted_transaction_never_retried() {
        let policy = RetryPolicy::default();
        let mut rng = fastrand::Rng::with_seed(1);
        for scope in [Scope::TopLevel, Scope::Savepoint] {
            let failure = Failure::<Error>::Database(aborted());
            assert!(matches!(
                after_failure(failure, scope, 1, &policy, classify, &mut rng),
                Next::Return(Failure::Inbox(Error::TransactionAborted {
                    source: Some(_)
                }))
            ));
        }
        assert!(matches!(
            after_commit_error::<Error>(aborted(), classify),
            Failure::Inbox(Error::TransactionAborted { source: Some(_) })
        ));
    }

    #[test]
    fn a_lost_connection_at_commit_leaves_the_outcome_unknown() {
        assert!(matches!(
            after_commit_error::<Error>(lost(), classify),
            Failure::Inbox(Error::CommitUnknown { .. })
        ));
    }

    #[test]
    fn contention_is_retried_at_the_top_level_only_and_until_the_policy_runs_out() {
        let policy = RetryPolicy::default().max_retries(2);
        let mut rng = fastrand::Rng::with_seed(1);
        let contention = || Failure::<Error>::Database(rolled_back_by_deadlock());
        let at = |attempt, scope, rng: &mut fastrand::Rng| {
            after_failure(contention(), scope, attempt, &policy, classify, rng)
        };
        assert!(matches!(
            at(1, Scope::TopLevel, &mut rng),
            Next::Retry { .. }
        ));
        assert!(matches!(
            at(2, Scope::TopLevel, &mut rng),
            Next::Retry { .. }
        ));
        assert!(matches!(
            at(3, Scope::TopLevel, &mut rng),
            Next::Return(Failure::Inbox(Error::RetriesExhausted { attempts: 3, .. }))
        ));
        assert!(matches!(
            at(1, Scope::Savepoint, &mut rng),
            Next::Return(Failure::Database(_))
        ));
        assert!(matches!(
            after_failure::<Error>(
                Failure::Database(lost()),
                Scope::TopLevel,
                1,
                &policy,
                classify,
                &mut rng
            ),
            Next::Return(Failure::Inbox(Error::ConnectionLost { .. }))
        ));
    }

    fn existing(state: InboxState, hash: Option<[u8; 32]>) -> Existing {
        Existing {
            processed_at: Utc::now(),
            deliveries: 3,
            state,
            payload_hash: hash.map(Vec::from),
            result: None,
        }
    }

    #[test]
    fn a_seen_row_is_a_duplicate_a_dead_letter_or_a_payload_conflict() {
        assert!(matches!(
            seen(existing(InboxState::Processed, None), Some(&[1; 32])),
            Seen::Duplicate(d) if d.deliveries() == Some(3)
        ));
        assert!(matches!(
            seen(
                existing(InboxState::Processed, Some([1; 32])),
                Some(&[2; 32])
            ),
            Seen::PayloadConflict
        ));
        assert!(matches!(
            seen(existing(InboxState::Processed, Some([1; 32])), None),
            Seen::Duplicate(_)
        ));
        assert!(matches!(
            seen(existing(InboxState::Discarded, None), None),
            Seen::DeadLettered(d) if d.is_discarded()
        ));
    }

    #[test]
    fn an_event_is_dead_lettered_at_the_limit_while_retrying() {
        let three = NonZeroU32::new(3);
        let counted = HandlerFailure::Counted;
        assert!(!dead_letters_now(
            2,
            DeadLetterState::Retrying,
            three,
            counted
        ));
        assert!(dead_letters_now(
            3,
            DeadLetterState::Retrying,
            three,
            counted
        ));
        assert!(!dead_letters_now(
            3,
            DeadLetterState::DeadLettered,
            three,
            counted
        ));
        assert!(!dead_letters_now(
            1_000,
            DeadLetterState::Retrying,
            None,
            counted
        ));
        assert!(!dead_letters_now(
            3,
            DeadLetterState::Discarded,
            three,
            counted
        ));
    }

    #[test]
    fn a_permanent_failure_dead_letters_at_the_first_attempt_without_a_limit() {
        let permanent = HandlerFailure::Permanent;
        assert!(dead_letters_now(
            1,
            DeadLetterState::Retrying,
            None,
            permanent
        ));
        assert!(!dead_letters_now(
            1,
            DeadLetterState::DeadLettered,
            None,
            permanent
        ));
    }

    #[test]
    fn the_handlers_mark_wins_then_the_database_error_inside_decides() {
        assert_eq!(
            handler_failure(&Error::permanent("no such order"), classify),
            HandlerFailure::Permanent
        );
        assert_eq!(
            handler_failure(&Error::transient("later"), classify),
            HandlerFailure::Transient
        );
        assert_eq!(
            handler_failure(&rolled_back_by_deadlock(), classify),
            HandlerFailure::Contention
        );
        assert_eq!(
            handler_failure(&lost(), classify),
            HandlerFailure::ConnectionLost
        );
        assert_eq!(
            handler_failure(&diesel::result::Error::NotFound, classify),
            HandlerFailure::Counted
        );
    }

    #[test]
    fn handler_contention_is_retried_then_returned_as_the_handlers_own_error() {
        let policy = RetryPolicy::default().max_retries(1);
        let mut rng = fastrand::Rng::with_seed(1);
        let at = |attempt, scope, rng: &mut fastrand::Rng| {
            after_failure(
                Failure::Handler(rolled_back_by_deadlock()),
                scope,
                attempt,
                &policy,
                classify,
                rng,
            )
        };
        assert!(matches!(
            at(1, Scope::TopLevel, &mut rng),
            Next::Retry { .. }
        ));
        assert!(matches!(
            at(2, Scope::TopLevel, &mut rng),
            Next::Return(Failure::Handler(_))
        ));
        assert!(matches!(
            at(1, Scope::Savepoint, &mut rng),
            Next::Return(Failure::Handler(_))
        ));
    }
}
