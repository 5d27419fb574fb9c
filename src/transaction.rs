//! The transaction engine: every inbox operation runs here, as "begin, run user code, commit
//! or roll back, retry contention".
//!
//! [`run`] opens a transaction (or a savepoint, by [`Scope`]), runs a body, and commits what it
//! returns; anything else rolls back to where the connection was, panics included. Bodies call
//! user code through [`call_user`], which catches panics and checks that the transaction
//! survived; the commit refuses a transaction the database aborted. What each observation
//! means, and whether to retry, is decided in [`crate::decide`]; this module only does the I/O.
//!
//! Every use of Diesel's transaction manager is here, always on the concrete connection
//! (`InboxConnection::sql`), whose `AnsiTransactionManager` an r2d2 pooled connection shares.
//! The inbox drives
//! `AnsiTransactionManager` itself rather than through `Connection::transaction`, because it
//! needs what that closure API hides: the depth before and after user code (to see a handler
//! that committed or rolled back on its own), a rollback to an exact depth that survives a
//! failed level, and a retry loop around all of it. The top level's `BEGIN` and `COMMIT` are
//! the backend's own ([`InboxSql::begin_top_level`], [`InboxSql::commit_top_level`]: an
//! immediate `BEGIN` on SQLite, a commit that checks on PostgreSQL, prepared statements on
//! MySQL), and this module counts the level in the transaction manager as Diesel would; so
//! Diesel's instrumentation sees them as queries, not as transaction events.

use std::panic::{self, AssertUnwindSafe};

use diesel::connection::{
    AnsiTransactionManager, TransactionDepthChange, TransactionManager, TransactionManagerStatus,
};
use diesel::QueryResult;
use tracing::{debug, warn};

use crate::backend::sealed::InboxSql;
use crate::decide::{self, Next, Observed};
pub(crate) use crate::decide::{Failure, Scope};
use crate::{Error, HandlerError, InboxConnection, RetryPolicy};

/// The scope a new inbox transaction on `conn` takes: a savepoint inside the caller's open
/// transaction, or a transaction of its own.
pub(crate) fn scope_of<C: InboxConnection>(conn: &mut C) -> QueryResult<Scope> {
    depth(conn).map(Scope::at_depth)
}

/// What a transaction is about, for its log lines: the consumer, and the event where there
/// is one (a batch has many).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject<'a> {
    pub(crate) consumer: &'a str,
    pub(crate) event_id: Option<&'a str>,
}

/// Runs `body` in a transaction (or savepoint) and commits what it returns. Anything else
/// rolls back; contention at the top level is retried under `policy`, `body` included.
pub(crate) fn run<C, R, E>(
    conn: &mut C,
    scope: Scope,
    policy: &RetryPolicy,
    subject: Subject<'_>,
    mut body: impl FnMut(&mut C) -> Result<R, Failure<E>>,
) -> Result<R, Failure<E>>
where
    C: InboxConnection,
    E: HandlerError,
{
    let mut rng = fastrand::Rng::new();
    let mut attempt = 1;
    loop {
        let failure = match run_once(conn, scope, &mut body) {
            Ok(value) => return Ok(value),
            Err(failure) => failure,
        };
        let Subject { consumer, event_id } = subject;
        match decide::after_failure(failure, scope, attempt, policy, C::Sql::classify, &mut rng) {
            Next::Return(Failure::Inbox(error @ Error::RetriesExhausted { .. })) => {
                warn!(consumer, event_id, %error, "contention outlasted the retries");
                return Err(Failure::Inbox(error));
            }
            Next::Return(Failure::Inbox(
                error @ (Error::ConnectionLost { .. } | Error::CommitUnknown { .. }),
            )) => {
                warn!(consumer, event_id, %error, "the database connection was lost");
                return Err(Failure::Inbox(error));
            }
            Next::Return(failure) => return Err(failure),
            Next::Retry { delay, reason } => {
                debug!(
                    consumer,
                    event_id,
                    attempt,
                    ?delay,
                    error = reason,
                    "contention; retrying the inbox transaction"
                );
                crate::observe::contention_retry(consumer);
                conn.sql().before_contention_retry();
                std::thread::sleep(delay);
                attempt += 1;
            }
        }
    }
}

/// One attempt: begin, body, commit; or roll back to where the connection was.
fn run_once<C, R, E>(
    conn: &mut C,
    scope: Scope,
    body: &mut impl FnMut(&mut C) -> Result<R, Failure<E>>,
) -> Result<R, Failure<E>>
where
    C: InboxConnection,
{
    let before = depth(conn)?;
    match scope {
        Scope::TopLevel => {
            conn.sql().begin_top_level()?;
            count_level(conn, TransactionDepthChange::IncreaseDepth)?;
        }
        // Inside the caller's transaction: a savepoint, counted like any other level.
        Scope::Savepoint => AnsiTransactionManager::begin_transaction(conn.sql())?,
    }
    // A panic the body did not catch itself (a `Serialize` impl, say) must not leave the
    // connection inside the transaction either.
    match panic::catch_unwind(AssertUnwindSafe(|| body(conn))) {
        Ok(Ok(value)) => commit(conn, scope).map(|()| value),
        Ok(Err(failure)) => {
            rollback_to(conn, before);
            Err(failure)
        }
        Err(panic) => {
            rollback_to(conn, before);
            panic::resume_unwind(panic)
        }
    }
}

/// Runs user code inside the open transaction, catching a panic so that the transaction can
/// roll back before it goes on, and checks what the code left of the transaction (see
/// [`decide::after_user_code`]).
pub(crate) fn call_user<C, T, E>(
    conn: &mut C,
    user: impl FnOnce(&mut C) -> Result<T, E>,
) -> Result<T, Failure<E>>
where
    C: InboxConnection,
{
    let before = depth(conn)?;
    let result = match panic::catch_unwind(AssertUnwindSafe(|| user(conn))) {
        Ok(result) => result,
        Err(panic) => return Err(Failure::Panicked(panic)),
    };
    let failed_statement = C::Sql::FAILED_STATEMENT;
    // A handler that ran COMMIT or ROLLBACK itself: Diesel noticed (PostgreSQL reports the
    // transaction status with every reply), and nothing more may run here.
    let observed = match depth(conn) {
        Ok(after) if after != before => Observed::DepthChanged,
        Err(error) => Observed::CheckFailed(error),
        Ok(_) if !decide::must_check_after_user_code(result.is_ok(), failed_statement) => {
            Observed::NotChecked
        }
        Ok(_) => match conn.sql().transaction_is_alive() {
            Ok(true) => Observed::Alive,
            Ok(false) => Observed::Ended,
            Err(error) => Observed::CheckFailed(error),
        },
    };
    decide::after_user_code(result, observed, failed_statement, C::Sql::classify)
}

/// Opens a savepoint inside the inbox's own transaction (a batch isolating one event).
pub(crate) fn begin_savepoint<C: InboxConnection>(conn: &mut C) -> QueryResult<()> {
    AnsiTransactionManager::begin_transaction(conn.sql())
}

/// Releases the innermost savepoint.
pub(crate) fn release_savepoint<C: InboxConnection>(conn: &mut C) -> QueryResult<()> {
    AnsiTransactionManager::commit_transaction(conn.sql())
}

/// The connection's transaction depth: 0 outside a transaction. Read from the transaction
/// manager's status, the only place Diesel keeps it; an error means the manager is broken (a
/// rollback failed, usually on a lost connection).
pub(crate) fn depth<C: InboxConnection>(conn: &mut C) -> QueryResult<u32> {
    let status = AnsiTransactionManager::transaction_manager_status_mut(conn.sql());
    Ok(status
        .transaction_depth()?
        .map_or(0, std::num::NonZeroU32::get))
}

/// Commits the inbox's transaction or savepoint. If the commit fails and leaves it open (a
/// savepoint release can), it is rolled back, so the caller's depth is restored either way.
fn commit<C: InboxConnection, E>(conn: &mut C, scope: Scope) -> Result<(), Failure<E>> {
    let depth = depth(conn)?;
    let committed = match scope {
        Scope::TopLevel => conn
            .sql()
            .commit_top_level()
            .and_then(|()| count_level(conn, TransactionDepthChange::DecreaseDepth)),
        // PostgreSQL refuses to release a savepoint in an aborted transaction: the release is
        // its own check.
        Scope::Savepoint => AnsiTransactionManager::commit_transaction(conn.sql()),
    };
    let Err(error) = committed else {
        return Ok(());
    };
    rollback_to(conn, depth.saturating_sub(1));
    Err(match scope {
        Scope::TopLevel => decide::after_commit_error(error, C::Sql::classify),
        Scope::Savepoint => Failure::Database(error),
    })
}

/// Counts a top-level `BEGIN` or `COMMIT` the backend sent itself in Diesel's transaction
/// manager, as its own would, and like its own commit finds nothing to count when the
/// connection counted the commit already: PostgreSQL's resets the count whenever the server
/// reports no open transaction.
fn count_level<C: InboxConnection>(
    conn: &mut C,
    change: TransactionDepthChange,
) -> QueryResult<()> {
    match AnsiTransactionManager::transaction_manager_status_mut(conn.sql()) {
        TransactionManagerStatus::Valid(status) => match (change, status.transaction_depth()) {
            (TransactionDepthChange::DecreaseDepth, None) => Ok(()),
            _ => status.change_transaction_depth(change),
        },
        TransactionManagerStatus::InError => Err(diesel::result::Error::BrokenTransactionManager),
    }
}

/// Rolls back every transaction level above `depth`, so a failure anywhere inside leaves the
/// connection as the inbox found it. A level that fails to roll back (a savepoint the server
/// already dropped with the whole transaction) is logged and the next level is tried: Diesel
/// counts it as gone, and the outer `ROLLBACK` ends whatever is left. When the connection is
/// lost, Diesel marks its transaction manager broken and the loop stops; an r2d2 pool then
/// discards the connection. Rollback errors are not returned: the reason the attempt failed
/// matters more to the caller.
pub(crate) fn rollback_to<C: InboxConnection>(conn: &mut C, depth_to_keep: u32) {
    while let Ok(before) = depth(conn) {
        if before <= depth_to_keep {
            return;
        }
        if let Err(error) = AnsiTransactionManager::rollback_transaction(conn.sql()) {
            warn!(%error, "rolling back the inbox transaction failed");
        }
        if depth(conn).map_or(true, |after| after >= before) {
            return;
        }
    }
}
