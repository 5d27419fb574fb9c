//! The transaction engine: every inbox operation runs here, as "begin, run user code, commit
//! or roll back, retry contention", written once as `async` code over a [`Db`] connection
//! so that it serves either flavour. A sync caller polls it to the end with [`run_ready`];
//! an async one awaits it.
//!
//! [`run`] opens a transaction (or a savepoint, by [`Scope`]), runs a body, and commits what it
//! returns; anything else rolls back to where the connection was, panics included. Bodies call
//! user code through [`call_user`], which catches panics and checks that the transaction
//! survived; the commit refuses a transaction the database aborted. What each observation
//! means, and whether to retry, is decided in [`crate::decide`]; this module only does the I/O.
//! What it runs are [`Body`] and [`Effect`] values (`body.rs`); an attempt whose future is
//! dropped before its level closes marks the connection broken (`guard.rs`).
//!
//! The engine drives the connection's transaction manager itself rather than through
//! `Connection::transaction`, because it needs what that closure API hides: the depth before
//! and after user code (to see a handler that committed or rolled back on its own), a rollback
//! to an exact depth that survives a failed level, and a retry loop around all of it. The top
//! level's `BEGIN` and `COMMIT` are the backend's own ([`TransactionSql`]: an immediate
//! `BEGIN` on SQLite, a commit that checks on PostgreSQL, prepared statements on MySQL), and
//! the engine counts the level in the transaction manager as Diesel would; so Diesel's
//! instrumentation sees them as queries, not as transaction events.

mod body;
mod guard;
mod ready;
mod unwind;

use std::any::Any;
use std::panic;
use std::time::Duration;

use diesel::connection::TransactionDepthChange;
use tracing::{debug, warn};

pub(crate) use self::body::{begin_top, Body, Effect};
pub(crate) use self::guard::Open;
pub(crate) use self::ready::run_ready;
pub(crate) use self::unwind::catch_unwind;
use crate::decide::{self, Failure, Next, Observed, Scope, Then};
use crate::sql::{Db, TransactionSql};
use crate::{Error, HandlerError, RetryPolicy};

/// What a transaction is about, for its log lines: the consumer, and the event where there
/// is one (a batch has many).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject<'a> {
    pub(crate) consumer: &'a str,
    pub(crate) event_id: Option<&'a str>,
}

/// The scope a new inbox transaction on `conn` takes: a savepoint inside the caller's open
/// transaction, or a transaction of its own. A connection whose transaction manager broke (its
/// connection died, or a delivery was dropped half-way) is a lost connection: reconnect.
pub(crate) fn scope_of<F, C: Db<F>>(conn: &mut C) -> Result<Scope, Error> {
    conn.depth()
        .map(Scope::at_depth)
        .map_err(|source| match source {
            diesel::result::Error::BrokenTransactionManager => Error::ConnectionLost { source },
            source => Error::from(source),
        })
}

/// Runs `body` in a transaction (or savepoint) and commits what it returns. Anything else
/// rolls back; contention at the top level is retried under `policy`, `body` included. The
/// body is what runs between `BEGIN` and `COMMIT`, once per attempt.
pub(crate) async fn run<F, C, R, E>(
    conn: &mut C,
    scope: Scope,
    policy: &RetryPolicy,
    subject: Subject<'_>,
    mut body: impl Body<F, C, Output = R, Error = E>,
) -> Result<R, Failure<E>>
where
    C: Db<F, Backend: TransactionSql>,
    E: HandlerError,
{
    let mut rng = fastrand::Rng::new();
    let mut attempt = 1;
    loop {
        let failure = match run_once(conn, scope, policy.idle_limit(), &mut body).await {
            Ok(value) => return Ok(value),
            Err(failure) => failure,
        };
        let Subject { consumer, event_id } = subject;
        let classify = <C::Backend as TransactionSql>::classify;
        match decide::after_failure(failure, scope, attempt, policy, classify, &mut rng) {
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
                C::Backend::before_contention_retry(conn).await;
                C::sleep(delay).await;
                attempt += 1;
            }
        }
    }
}

/// One attempt: begin, body, commit; or roll back to where the connection was. Dropped
/// half-way (an async delivery cancelled), it leaves the connection broken rather than
/// inside a transaction (see [`Open`]).
async fn run_once<F, C, R, E>(
    conn: &mut C,
    scope: Scope,
    idle_timeout: Option<Duration>,
    body: &mut impl Body<F, C, Output = R, Error = E>,
) -> Result<R, Failure<E>>
where
    C: Db<F, Backend: TransactionSql>,
{
    let mut open = Open::arm(conn);
    let attempted = attempt(open.conn(), scope, idle_timeout, body).await;
    open.close();
    match attempted {
        Attempted::Finished(result) => result,
        // After the rollback, outside the guard: the connection is fine.
        Attempted::Panicked(panic) => panic::resume_unwind(panic),
    }
}

/// How an attempt ended: with the body's result, or with a panic the body did not catch,
/// rolled back and to be resumed.
enum Attempted<R, E> {
    Finished(Result<R, Failure<E>>),
    Panicked(Box<dyn Any + Send>),
}

/// [`run_once`]'s steps.
async fn attempt<F, C, R, E>(
    conn: &mut C,
    scope: Scope,
    idle_timeout: Option<Duration>,
    body: &mut impl Body<F, C, Output = R, Error = E>,
) -> Attempted<R, E>
where
    C: Db<F, Backend: TransactionSql>,
{
    let opened = async {
        let before = conn.depth()?;
        match scope {
            Scope::TopLevel => {
                body.begin(conn, idle_timeout).await?;
                conn.count_level(TransactionDepthChange::IncreaseDepth)?;
            }
            // Inside the caller's transaction: a savepoint, counted like any other level.
            Scope::Savepoint => conn.begin_level().await?,
        }
        Ok(before)
    };
    let before = match opened.await {
        Ok(before) => before,
        Err(failure) => return Attempted::Finished(Err(failure)),
    };
    // A panic the body did not catch itself (a `Serialize` impl, say) must not leave the
    // connection inside the transaction either.
    match catch_unwind(body.attempt(conn)).await {
        Ok(Ok(value)) => Attempted::Finished(commit(conn, scope).await.map(|()| value)),
        Ok(Err(failure)) => {
            rollback_to(conn, before).await;
            Attempted::Finished(Err(failure))
        }
        Err(panic) => {
            rollback_to(conn, before).await;
            Attempted::Panicked(panic)
        }
    }
}

/// Runs user code inside the open transaction, catching a panic so that the transaction can
/// roll back before it goes on, and checks what the code left of the transaction (see
/// [`decide::after_user_code`]), as `then` requires.
pub(crate) async fn call_user<F, C, T, E>(
    conn: &mut C,
    user: &mut impl Effect<C, Output = T, Error = E>,
    then: Then,
) -> Result<T, Failure<E>>
where
    C: Db<F, Backend: TransactionSql>,
{
    let before = conn.depth()?;
    let in_transaction = &mut *conn;
    // Called inside the guarded poll, so that a panic in making the future is caught too.
    let result = match catch_unwind(async move { user.call(in_transaction).await }).await {
        Ok(result) => result,
        Err(panic) => return Err(Failure::Panicked(panic)),
    };
    let failed_statement = C::Backend::FAILED_STATEMENT;
    // A handler that ran COMMIT or ROLLBACK itself: Diesel noticed (PostgreSQL reports the
    // transaction status with every reply), and nothing more may run here.
    let observed = match conn.depth() {
        Ok(after) if after != before => Observed::DepthChanged,
        Err(error) => Observed::CheckFailed(error),
        Ok(_)
            if !decide::must_check_after_user_code(
                result.is_ok(),
                failed_statement,
                C::SEES_TRANSACTION_END,
                then,
            ) =>
        {
            Observed::NotChecked
        }
        Ok(_) => match C::Backend::transaction_is_alive(conn).await {
            Ok(true) => Observed::Alive,
            Ok(false) => Observed::Ended,
            Err(error) => Observed::CheckFailed(error),
        },
    };
    decide::after_user_code(result, observed, failed_statement, C::Backend::classify)
}

/// Commits the inbox's transaction or savepoint. If the commit fails and leaves it open (a
/// savepoint release can), it is rolled back, so the caller's depth is restored either way.
async fn commit<F, C, E>(conn: &mut C, scope: Scope) -> Result<(), Failure<E>>
where
    C: Db<F, Backend: TransactionSql>,
{
    let depth = conn.depth()?;
    let committed = match scope {
        Scope::TopLevel => match C::Backend::commit_top(conn).await {
            Ok(()) => conn.count_level(TransactionDepthChange::DecreaseDepth),
            Err(error) => Err(error),
        },
        // PostgreSQL refuses to release a savepoint in an aborted transaction: the release is
        // its own check.
        Scope::Savepoint => conn.commit_level().await,
    };
    let Err(error) = committed else {
        return Ok(());
    };
    rollback_to(conn, depth.saturating_sub(1)).await;
    Err(match scope {
        Scope::TopLevel => decide::after_commit_error(error, C::Backend::classify),
        Scope::Savepoint => Failure::Database(error),
    })
}

/// Rolls back every transaction level above `depth_to_keep`, so a failure anywhere inside
/// leaves the connection as the inbox found it: the top level through the backend's own
/// rollback, which undoes what its `BEGIN` set on the session. A level that fails to roll
/// back (a savepoint the server already dropped with the whole transaction) is logged and the
/// next level is tried: Diesel counts it as gone, and the outer `ROLLBACK` ends whatever is
/// left. When the connection is lost, the transaction manager is marked broken and the loop
/// stops; a pool then discards the connection. Rollback errors are not returned: the reason
/// the attempt failed matters more to the caller.
pub(crate) async fn rollback_to<F, C>(conn: &mut C, depth_to_keep: u32)
where
    C: Db<F, Backend: TransactionSql>,
{
    while let Ok(before) = conn.depth() {
        if before <= depth_to_keep {
            return;
        }
        let rolled_back = if before == 1 {
            C::Backend::rollback_top(conn).await
        } else {
            conn.rollback_level().await
        };
        if let Err(error) = rolled_back {
            warn!(%error, "rolling back the inbox transaction failed");
            if before == 1 && conn.depth() == Ok(before) {
                // Diesel's own rollback marks the manager broken when the top level fails to
                // roll back; the backend's must leave the connection no better off.
                conn.poison();
            }
        }
        if conn.depth().map_or(true, |after| after >= before) {
            return;
        }
    }
}
