//! The transaction engine ([`crate::engine`]) for sync closures on sync Diesel connections,
//! the bodies not yet written over `Db`: each call runs the engine's future to the end on the
//! calling thread ([`run_ready`]).

use diesel::QueryResult;

pub(crate) use crate::decide::{Failure, Scope};
pub(crate) use crate::engine::Subject;
use crate::engine::{self, run_ready};
use crate::sql::{Blocking, Db};
use crate::{HandlerError, InboxConnection, RetryPolicy};

/// [`engine::scope_of`].
pub(crate) fn scope_of<C: InboxConnection>(conn: &mut C) -> QueryResult<Scope> {
    engine::scope_of::<Blocking, _>(conn)
}

/// [`engine::run`], for a sync body.
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
    let body = async |tx: &mut C| body(tx);
    run_ready(engine::run::<Blocking, _, _, _>(
        conn, scope, policy, subject, body,
    ))
}

/// [`engine::call_user`].
pub(crate) fn call_user<C, T, E>(
    conn: &mut C,
    mut user: impl FnMut(&mut C) -> Result<T, E>,
) -> Result<T, Failure<E>>
where
    C: InboxConnection,
{
    run_ready(engine::call_user::<Blocking, _, _, _>(
        conn,
        &mut async |tx: &mut C| user(tx),
    ))
}

/// Opens a savepoint inside the inbox's own transaction (a batch isolating one event).
pub(crate) fn begin_savepoint<C: InboxConnection>(conn: &mut C) -> QueryResult<()> {
    run_ready(Db::<Blocking>::begin_level(conn))
}

/// Releases the innermost savepoint.
pub(crate) fn release_savepoint<C: InboxConnection>(conn: &mut C) -> QueryResult<()> {
    run_ready(Db::<Blocking>::commit_level(conn))
}

/// The connection's transaction depth: 0 outside a transaction (see [`Db::depth`]).
pub(crate) fn depth<C: InboxConnection>(conn: &mut C) -> QueryResult<u32> {
    Db::<Blocking>::depth(conn)
}

/// [`engine::rollback_to`].
pub(crate) fn rollback_to<C: InboxConnection>(conn: &mut C, depth_to_keep: u32) {
    run_ready(engine::rollback_to::<Blocking, _>(conn, depth_to_keep));
}
