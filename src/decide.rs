//! The inbox's decisions, apart from any I/O: what a run of user code came to, what to retry,
//! what a row seen before means, when the failure policy gives up. The transaction engine
//! ([`crate::transaction`]) observes and acts; these functions only decide, so that another
//! engine (an async one) can make the same decisions from its own observations.

use std::any::Any;
use std::num::NonZeroU32;
use std::panic;
use std::time::Duration;

use crate::backend::sealed::{ErrorClass, Existing, FailedStatement};
use crate::state::{DeadLetterState, InboxState};
use crate::{DeadLettered, Duplicate, Error, RetryPolicy};

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

/// Whether the transaction must be checked right after user code that returned `ok` or not:
/// where one failed statement can end the transaction, so that nothing runs on in autocommit
/// mode after it; and after a handler error where a deadlock ends the transaction, to tell
/// contention (retried, not counted) from the handler's own failure.
pub(crate) fn must_check_after_user_code(ok: bool, failed_statement: FailedStatement) -> bool {
    match failed_statement {
        FailedStatement::AbortsTransaction => false,
        FailedStatement::MayEndTransaction => ok,
        FailedStatement::DeadlockEndsTransaction => true,
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

/// What the check before commit (where a failed statement aborts the transaction) comes to.
pub(crate) fn before_commit<E>(
    alive: diesel::QueryResult<bool>,
    classify: fn(&diesel::result::Error) -> ErrorClass,
) -> Result<(), Failure<E>> {
    match alive {
        Ok(true) => Ok(()),
        Ok(false) => Err(Failure::Inbox(Error::TransactionAborted { source: None })),
        Err(error) => Err(check_failed(error, classify)),
    }
}

fn check_failed<E>(
    error: diesel::result::Error,
    classify: fn(&diesel::result::Error) -> ErrorClass,
) -> Failure<E> {
    match classify(&error) {
        ErrorClass::Other => Failure::Inbox(Error::TransactionAborted {
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
        /// The contention error.
        error: diesel::result::Error,
    },
    /// Give the caller this.
    Return(Failure<E>),
}

/// Retries contention at the top level, under `policy`; `attempt` is the one that failed
/// (1-based). A lost connection becomes [`Error::ConnectionLost`].
pub(crate) fn after_failure<E>(
    failure: Failure<E>,
    scope: Scope,
    attempt: u32,
    policy: &RetryPolicy,
    classify: fn(&diesel::result::Error) -> ErrorClass,
    rng: &mut fastrand::Rng,
) -> Next<E> {
    let Failure::Database(error) = failure else {
        return Next::Return(failure);
    };
    match (classify(&error), scope) {
        (ErrorClass::ConnectionLost, _) => {
            Next::Return(Failure::Inbox(Error::ConnectionLost { source: error }))
        }
        (ErrorClass::Contention, Scope::TopLevel) if attempt <= policy.retries() => Next::Retry {
            delay: policy.delay(attempt, rng),
            error,
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
        InboxState::Processed => Seen::Duplicate(Duplicate {
            processed_at: existing.processed_at,
            deliveries,
            result: existing.result,
        }),
        InboxState::DeadLettered | InboxState::Discarded => Seen::DeadLettered(DeadLettered {
            since: existing.processed_at,
            deliveries,
            discarded: existing.state == InboxState::Discarded,
        }),
    }
}

/// Whether a failed attempt, the `attempts`-th, dead-letters its event: at the limit, and only
/// while the event is still retrying, or released by ops and failing again (a concurrent
/// failure may have dead-lettered it already).
pub(crate) fn dead_letters_now(
    attempts: i64,
    state: DeadLetterState,
    max_attempts: Option<NonZeroU32>,
) -> bool {
    let limit = max_attempts.map_or(i64::MAX, |max| i64::from(max.get()));
    attempts >= limit && matches!(state, DeadLetterState::Retrying | DeadLetterState::Released)
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
            _ => ErrorClass::Other,
        }
    }

    fn lost() -> diesel::result::Error {
        diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::ClosedConnection,
            Box::new("server closed the connection".to_owned()),
        )
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
    fn a_lost_connection_before_commit_is_connection_lost_not_an_aborted_transaction() {
        let policy = RetryPolicy::default();
        let mut rng = fastrand::Rng::with_seed(1);
        let failures = [
            after_user_code::<(), &str>(
                Ok(()),
                Observed::CheckFailed(lost()),
                FailedStatement::DeadlockEndsTransaction,
                classify,
            ),
            before_commit::<&str>(Err(lost()), classify),
        ];
        for failure in failures {
            let failure = failure.expect_err("the connection is gone");
            assert!(matches!(
                after_failure(failure, Scope::TopLevel, 1, &policy, classify, &mut rng),
                Next::Return(Failure::Inbox(Error::ConnectionLost { .. }))
            ));
        }
        assert!(matches!(
            before_commit::<&str>(Ok(false), classify),
            Err(Failure::Inbox(Error::TransactionAborted { source: None }))
        ));
    }

    #[test]
    fn a_lost_connection_at_commit_leaves_the_outcome_unknown() {
        assert!(matches!(
            after_commit_error::<&str>(lost(), classify),
            Failure::Inbox(Error::CommitUnknown { .. })
        ));
    }

    #[test]
    fn contention_is_retried_at_the_top_level_only_and_until_the_policy_runs_out() {
        let policy = RetryPolicy::default().max_retries(2);
        let mut rng = fastrand::Rng::with_seed(1);
        let contention = || Failure::<&str>::Database(rolled_back_by_deadlock());
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
            after_failure::<&str>(
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
            Seen::Duplicate(d) if d.deliveries() == 3
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
        assert!(!dead_letters_now(2, DeadLetterState::Retrying, three));
        assert!(dead_letters_now(3, DeadLetterState::Retrying, three));
        assert!(!dead_letters_now(3, DeadLetterState::DeadLettered, three));
        assert!(!dead_letters_now(1_000, DeadLetterState::Retrying, None));
        assert!(dead_letters_now(3, DeadLetterState::Released, three));
        assert!(!dead_letters_now(2, DeadLetterState::Released, three));
        assert!(!dead_letters_now(3, DeadLetterState::Discarded, three));
    }
}
