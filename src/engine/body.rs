//! What the engine runs: a transaction's body, and the user code inside it.
//!
//! Both are traits rather than `AsyncFnMut` bounds because an async closure that borrows
//! from its surroundings makes the future that calls it fail rustc's `Send` check
//! (rust-lang/rust#134997, "implementation of `Send` is not general enough"), and an async
//! delivery's future must be `Send`. So the bodies on the async flavour's path are named
//! types implementing [`Body`], and its user code comes through [`Effect`]; sync callers keep
//! passing async closures, which implement both.

use std::future::Future;
use std::time::Duration;

use crate::decide::Failure;
use crate::sql::{Db, TransactionSql};

/// What runs between `BEGIN` and `COMMIT`, once per attempt.
pub(crate) trait Body<F, C> {
    /// What a committed attempt returns.
    type Output;
    /// The user code's error.
    type Error;

    /// Opens the attempt's top-level transaction. A body whose first statement can travel
    /// with the `BEGIN` sends both here and keeps what the statement returned for
    /// [`attempt`](Self::attempt). Either way, a failure leaves no transaction open.
    fn begin(
        &mut self,
        conn: &mut C,
        idle_timeout: Option<Duration>,
    ) -> impl Future<Output = Result<(), Failure<Self::Error>>>
    where
        C: Db<F, Backend: TransactionSql>,
    {
        begin_top(conn, idle_timeout)
    }

    /// One attempt, inside the open transaction.
    fn attempt(
        &mut self,
        conn: &mut C,
    ) -> impl Future<Output = Result<Self::Output, Failure<Self::Error>>>;
}

impl<F, C, R, E, G> Body<F, C> for G
where
    G: AsyncFnMut(&mut C) -> Result<R, Failure<E>>,
{
    type Output = R;
    type Error = E;

    fn attempt(&mut self, conn: &mut C) -> impl Future<Output = Result<R, Failure<E>>> {
        self(conn)
    }
}

/// The top-level `BEGIN` alone: what [`Body::begin`] sends where nothing travels with it.
pub(crate) async fn begin_top<F, C, E>(
    conn: &mut C,
    idle_timeout: Option<Duration>,
) -> Result<(), Failure<E>>
where
    C: Db<F, Backend: TransactionSql>,
{
    C::Backend::begin_top(conn, idle_timeout)
        .await
        .map_err(Failure::Database)
}

/// User code that runs inside an inbox transaction: a handler, once per attempt.
pub(crate) trait Effect<C> {
    /// What the code returns.
    type Output;
    /// Its error.
    type Error;

    /// Runs the code on the transaction's connection.
    fn call(&mut self, conn: &mut C) -> impl Future<Output = Result<Self::Output, Self::Error>>;
}

impl<C, T, E, G> Effect<C> for G
where
    G: AsyncFnMut(&mut C) -> Result<T, E>,
{
    type Output = T;
    type Error = E;

    fn call(&mut self, conn: &mut C) -> impl Future<Output = Result<T, E>> {
        self(conn)
    }
}
