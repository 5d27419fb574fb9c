//! Batches on async connections: [`Inbox::process_batch`] and [`Inbox::process_bulk`], the
//! sync API's batch transaction, with async closures for effects.

use std::future::Future;
use std::marker::PhantomData;

use crate::batch::{self, BatchEffect, Mode};
use crate::cursor::SequenceEffect;
use crate::sql::Async;
use crate::{Delivery, HandlerError, IntoDelivery, Outcome};

use super::{AsyncInboxConnection, Inbox};

/// An async handler of two arguments whose future can be named, as [`AsyncHandler`] is for
/// one: implemented for every `async |tx, delivery| ...` closure.
///
/// [`AsyncHandler`]: super::AsyncHandler
pub trait AsyncHandler2<A, B, R>:
    AsyncFnMut(A, B) -> R + FnMut(A, B) -> <Self as AsyncHandler2<A, B, R>>::Fut
{
    /// The future one call returns.
    type Fut: Future<Output = R>;
}

impl<H, A, B, Fut, R> AsyncHandler2<A, B, R> for H
where
    H: AsyncFnMut(A, B) -> R + FnMut(A, B) -> Fut,
    Fut: Future<Output = R>,
{
    type Fut = Fut;
}

/// An async handler of three arguments whose future can be named, as [`AsyncHandler`] is for
/// one: implemented for every `async |tx, sequence, message| ...` closure.
///
/// [`AsyncHandler`]: super::AsyncHandler
pub trait AsyncHandler3<A, B, D, R>:
    AsyncFnMut(A, B, D) -> R + FnMut(A, B, D) -> <Self as AsyncHandler3<A, B, D, R>>::Fut
{
    /// The future one call returns.
    type Fut: Future<Output = R>;
}

impl<H, A, B, D, Fut, R> AsyncHandler3<A, B, D, R> for H
where
    H: AsyncFnMut(A, B, D) -> R + FnMut(A, B, D) -> Fut,
    Fut: Future<Output = R>,
{
    type Fut = Fut;
}

/// An effect [`Cursor::process_batch`](super::Cursor::process_batch) takes for connections
/// `C` and messages `M`: an async closure over `&mut C`, the sequence (`u64`) and its `&M`,
/// returning `Result<T, E>` in a `Send` future.
pub trait SequenceHandler<C, M, T, E>:
    for<'c, 'm> AsyncHandler3<&'c mut C, u64, &'m M, Result<T, E>, Fut: Send> + Send
{
}

impl<C, M, T, E, H> SequenceHandler<C, M, T, E> for H where
    H: for<'c, 'm> AsyncHandler3<&'c mut C, u64, &'m M, Result<T, E>, Fut: Send> + Send
{
}

/// An effect [`Inbox::process_batch`] takes for connections `C`: an async closure over
/// `&mut C` and one new `&Delivery`, returning `Result<T, E>` in a `Send` future.
pub trait BatchHandler<C, T, E>:
    for<'c, 'd> AsyncHandler2<&'c mut C, &'d Delivery, Result<T, E>, Fut: Send> + Send
{
}

impl<C, T, E, H> BatchHandler<C, T, E> for H where
    H: for<'c, 'd> AsyncHandler2<&'c mut C, &'d Delivery, Result<T, E>, Fut: Send> + Send
{
}

/// An effect [`Inbox::process_bulk`] takes for connections `C`: an async closure over
/// `&mut C` and the batch's new deliveries, `&[&Delivery]`, returning `Result<(), E>` in a
/// `Send` future.
pub trait BulkHandler<C, E>:
    for<'c, 'd, 'e> AsyncHandler2<&'c mut C, &'d [&'e Delivery], Result<(), E>, Fut: Send> + Send
{
}

impl<C, E, H> BulkHandler<C, E> for H where
    H: for<'c, 'd, 'e> AsyncHandler2<&'c mut C, &'d [&'e Delivery], Result<(), E>, Fut: Send>
        + Send
{
}

impl Inbox {
    /// Offers a batch of deliveries in one transaction, `handler` running for each new one:
    /// [`crate::Inbox::process_batch`], awaited, with the same failure isolation.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
    /// use diesel_inbox::{asynch, Delivery};
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let mut setup = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut setup)?;
    /// let mut conn: SyncConnectionWrapper<SqliteConnection> = SyncConnectionWrapper::new(setup);
    /// let inbox = asynch::Inbox::new("ledger")?;
    ///
    /// let apply = async |_tx: &mut SyncConnectionWrapper<SqliteConnection>, d: &Delivery| {
    ///     Ok::<_, diesel_inbox::Error>(d.id().to_string())
    /// };
    /// let results = inbox.process_batch(&mut conn, ["a", "b", "a", ""], apply).await?;
    /// assert!(results[0].as_ref().is_ok_and(|o| o.is_processed()));
    /// assert!(results[2].as_ref().is_ok_and(|o| o.is_duplicate()));
    /// assert!(results[3].is_err()); // the empty id, rejected alone
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`crate::Inbox::process_batch`].
    #[allow(clippy::type_complexity)]
    pub fn process_batch<'a, C, T, E, H, I>(
        &'a self,
        conn: &'a mut C,
        deliveries: I,
        handler: H,
    ) -> impl Future<Output = Result<Vec<Result<Outcome<T>, E>>, E>> + Send + 'a
    where
        C: AsyncInboxConnection,
        I: IntoIterator,
        I::Item: IntoDelivery,
        H: BatchHandler<C, T, E> + 'a,
        T: Send + 'a,
        E: HandlerError + Send + 'a,
    {
        let effect = Each(handler, PhantomData);
        self.0
            .run_batch::<Async, _, _, _>(conn, batch::batch(deliveries), effect, Mode::Each)
    }

    /// [`process_batch`](Self::process_batch) with one call of `handler` for all the batch's
    /// new deliveries: [`crate::Inbox::process_bulk`], awaited.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
    /// use diesel_inbox::{asynch, Delivery};
    ///
    /// type Conn = SyncConnectionWrapper<SqliteConnection>;
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let mut conn = Conn::new(SqliteConnection::establish(":memory:")?);
    /// asynch::run_pending_migrations(&mut conn).await?;
    /// let inbox = asynch::Inbox::new("ledger")?;
    /// // One call for all the new deliveries of the batch: a multi-row insert, say.
    /// let write_all = async |_tx: &mut Conn, new: &[&Delivery]| {
    ///     assert_eq!(new.len(), 2);
    ///     Ok::<_, diesel_inbox::Error>(())
    /// };
    /// let outcomes = inbox.process_bulk(&mut conn, ["evt-1", "evt-2"], write_all).await?;
    /// assert!(outcomes.iter().all(|outcome| matches!(outcome, Ok(o) if o.is_processed())));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`crate::Inbox::process_bulk`].
    #[allow(clippy::type_complexity)]
    pub fn process_bulk<'a, C, E, H, I>(
        &'a self,
        conn: &'a mut C,
        deliveries: I,
        handler: H,
    ) -> impl Future<Output = Result<Vec<Result<Outcome<()>, E>>, E>> + Send + 'a
    where
        C: AsyncInboxConnection,
        I: IntoIterator,
        I::Item: IntoDelivery,
        H: BulkHandler<C, E> + 'a,
        E: HandlerError + Send + 'a,
    {
        let effect = All(handler, PhantomData);
        let deliveries = batch::batch(deliveries);
        self.0
            .run_batch::<Async, _, _, _>(conn, deliveries, effect, Mode::Together)
    }
}

/// A batch handler called once per new delivery, each future boxed as a handler's is.
struct Each<H, T, E>(H, PhantomData<fn() -> (T, E)>);

impl<C, T, E, H> BatchEffect<C> for Each<H, T, E>
where
    H: for<'c, 'd> AsyncHandler2<&'c mut C, &'d Delivery, Result<T, E>>,
{
    type Output = T;
    type Error = E;

    async fn call(&mut self, conn: &mut C, new: &[&Delivery]) -> Result<Vec<T>, E> {
        let mut values = Vec::with_capacity(new.len());
        for delivery in new {
            values.push(Box::pin(call(&mut self.0, &mut *conn, delivery)).await?);
        }
        Ok(values)
    }
}

/// A bulk handler, called once with every new delivery; boxed as a handler's future is.
struct All<H, E>(H, PhantomData<fn() -> E>);

impl<C, E, H> BatchEffect<C> for All<H, E>
where
    H: for<'c, 'd, 'e> AsyncHandler2<&'c mut C, &'d [&'e Delivery], Result<(), E>>,
{
    type Output = ();
    type Error = E;

    fn call(
        &mut self,
        conn: &mut C,
        new: &[&Delivery],
    ) -> impl Future<Output = Result<Vec<()>, E>> {
        let called = Box::pin(call(&mut self.0, conn, new));
        async move { called.await.map(|()| vec![(); new.len()]) }
    }
}

/// Calls `handler` for the future it names.
pub(crate) fn call<A, B, R, H: AsyncHandler2<A, B, R>>(handler: &mut H, a: A, b: B) -> H::Fut {
    handler(a, b)
}

/// A cursor batch's handler, called once per new sequence, each future boxed as a handler's
/// is.
pub(crate) struct Sequences<H, T, E>(pub(crate) H, pub(crate) PhantomData<fn() -> (T, E)>);

impl<C, M, T, E, H> SequenceEffect<C, M> for Sequences<H, T, E>
where
    H: for<'c, 'm> AsyncHandler3<&'c mut C, u64, &'m M, Result<T, E>>,
{
    type Output = T;
    type Error = E;

    fn call(
        &mut self,
        conn: &mut C,
        sequence: u64,
        message: &M,
    ) -> impl Future<Output = Result<T, E>> {
        Box::pin(call3(&mut self.0, conn, sequence, message))
    }
}

/// Calls `handler` for the future it names.
fn call3<A, B, D, R, H: AsyncHandler3<A, B, D, R>>(handler: &mut H, a: A, b: B, d: D) -> H::Fut {
    handler(a, b, d)
}
