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

/// The connection's transaction depth: 0 outside a transaction (see [`Db::depth`]).
pub(crate) fn depth<C: InboxConnection>(conn: &mut C) -> QueryResult<u32> {
    Db::<Blocking>::depth(conn)
}
