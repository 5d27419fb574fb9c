//! What every async front shares: the connections it runs on, the [`Handler`] family of
//! async closures, and the adapter the engine calls them through. Below the fronts: it names
//! none of them.

use std::future::Future;
use std::marker::PhantomData;

use diesel_async::AsyncConnection;

use crate::engine::Effect;
use crate::sql::Sql;

/// A connection the async inbox runs on: every diesel-async connection to PostgreSQL,
/// MySQL/MariaDB or SQLite (through `SyncConnectionWrapper`), and the pooled connections of
/// diesel-async's pools. Sealed: its backend holds the inbox's statements.
pub trait AsyncInboxConnection: AsyncConnection<Backend: Sql> + 'static {}

impl<C: AsyncConnection<Backend: Sql> + 'static> AsyncInboxConnection for C {}

/// The async closures the async front takes, of every shape: `async |tx| ...`,
/// `async |tx, delivery| ...`, `async |tx, sequence, message| ...`, `async |claim| ...`.
///
/// `Args` is the tuple of the arguments one call takes, so `Handler<(&mut C,), T, E>` is a
/// handler over the transaction's connection and `Handler<(&mut C, &Delivery), T, E>` one
/// of a batch's deliveries. It is implemented, for each arity, for every closure
/// `AsyncFnMut(A, ..) -> Result<T, E>` that is `Send` and whose future is `Send`: the
/// future's type, which `AsyncFnMut` leaves unnamed, is [`Handler::Future`] here, so that the
/// future of a delivery running the handler can promise `Send` in turn. A method that takes
/// a handler states the same shape as an `AsyncFnMut` bound too, from which the compiler
/// learns the closure's argument types: `async |tx| ...` needs no annotation.
///
/// A handler is called again when contention rolls its transaction back, and it may borrow
/// from its surroundings; it cannot take its captures by `move` or mutate them (each call's
/// future must stand on its own), as [the module docs](crate::asynch#handlers) say.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_inbox::{asynch::{self, Handler}, Delivery, Error};
///
/// type Conn = SyncConnectionWrapper<SqliteConnection>;
///
/// // One argument, as `Inbox::process` takes it; two, as `Inbox::process_batch` does.
/// fn apply() -> impl for<'c> Handler<(&'c mut Conn,), u32, Error> {
///     async |_tx: &mut Conn| Ok(1)
/// }
/// fn apply_each() -> impl for<'c, 'd> Handler<(&'c mut Conn, &'d Delivery), usize, Error> {
///     async |_tx: &mut Conn, delivery: &Delivery| Ok(delivery.id().as_str().len())
/// }
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let mut conn = Conn::new(SqliteConnection::establish(":memory:")?);
/// asynch::run_pending_migrations(&mut conn).await?;
/// let mut handler = apply();
/// assert_eq!(handler.call((&mut conn,)).await?, 1);
/// assert!(apply_each().call((&mut conn, &Delivery::new("evt-1")?)).await? > 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Handler<Args, T, E>: Send {
    /// The future one call returns.
    type Future: Future<Output = Result<T, E>> + Send;

    /// Calls the handler with `args`.
    fn call(&mut self, args: Args) -> Self::Future;
}

/// Implements [`Handler`] for the async closures of the arguments named.
macro_rules! handler {
    ($($arg:ident),+) => {
        impl<H, Fut, T, E, $($arg),+> Handler<($($arg,)+), T, E> for H
        where
            H: AsyncFnMut($($arg),+) -> Result<T, E> + FnMut($($arg),+) -> Fut + Send,
            Fut: Future<Output = Result<T, E>> + Send,
        {
            type Future = Fut;

            #[allow(non_snake_case, reason = "the arguments are named by their types")]
            fn call(&mut self, ($($arg,)+): ($($arg,)+)) -> Fut {
                self($($arg),+)
            }
        }
    };
}

handler!(A);
handler!(A, B);
handler!(A, B, D);

/// A [`Handler`] as the engine calls it, whatever its shape: through the future type it
/// names, which is `Send` (an async closure called as `AsyncFnMut` is not provably so,
/// rust-lang/rust#134997), and boxed, so that rustc lays the handler's future out apart from
/// the delivery's: the engine's own nesting and a handler's (one that enqueues or claims,
/// say) together would pass its layout depth limit. One allocation per call.
///
/// One adapter for every engine trait a shape of handler serves: a delivery's effect, a
/// batch's effect for each delivery, a cursor batch's for each sequence, a redrive's, a
/// claim's side effect and its record writes.
pub(crate) struct Called<H, T, E>(pub(crate) H, PhantomData<fn() -> (T, E)>);

impl<H, T, E> Called<H, T, E> {
    /// `handler`, to be called by the engine.
    pub(crate) fn new(handler: H) -> Self {
        Self(handler, PhantomData)
    }
}

impl<C, T, E, H> Effect<C> for Called<H, T, E>
where
    H: for<'c> Handler<(&'c mut C,), T, E>,
{
    type Output = T;
    type Error = E;

    fn call(&mut self, conn: &mut C) -> impl Future<Output = Result<T, E>> {
        Box::pin(self.0.call((conn,)))
    }
}
