//! Batches on async connections: [`Inbox::process_batch`] and [`Inbox::process_bulk`], the
//! sync API's batch transaction, with async closures for effects; and the engine's view of
//! a batch's handler and of a cursor batch's.

use std::future::Future;
use std::marker::PhantomData;

use crate::batch::{self, BatchEffect, Mode};
use crate::cursor::SequenceEffect;
use crate::sql::Async;
use crate::{Delivery, HandlerError, IntoDelivery, Outcome};

use super::{AsyncInboxConnection, Called, Handler, Inbox};

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
        H: for<'c, 'd> AsyncFnMut(&'c mut C, &'d Delivery) -> Result<T, E>
            + for<'c, 'd> Handler<(&'c mut C, &'d Delivery), T, E>
            + 'a,
        T: Send + 'a,
        E: HandlerError + Send + 'a,
    {
        let (deliveries, effect) = (batch::batch(deliveries), Called::new(handler));
        self.run_batch::<Async, _, _, _>(conn, deliveries, effect, Mode::Each)
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
        H: for<'c, 'd, 'e> AsyncFnMut(&'c mut C, &'d [&'e Delivery]) -> Result<(), E>
            + for<'c, 'd, 'e> Handler<(&'c mut C, &'d [&'e Delivery]), (), E>
            + 'a,
        E: HandlerError + Send + 'a,
    {
        let effect = All(handler, PhantomData);
        let deliveries = batch::batch(deliveries);
        self.run_batch::<Async, _, _, _>(conn, deliveries, effect, Mode::Together)
    }
}

/// A batch's handler, called once per new delivery.
impl<C, T, E, H> BatchEffect<C> for Called<H, T, E>
where
    H: for<'c, 'd> Handler<(&'c mut C, &'d Delivery), T, E>,
{
    type Output = T;
    type Error = E;

    async fn call(&mut self, conn: &mut C, new: &[&Delivery]) -> Result<Vec<T>, E> {
        let mut values = Vec::with_capacity(new.len());
        for delivery in new {
            values.push(Box::pin(self.0.call((&mut *conn, *delivery))).await?);
        }
        Ok(values)
    }
}

/// A bulk handler, called once with every new delivery; boxed as a handler's future is.
struct All<H, E>(H, PhantomData<fn() -> E>);

impl<C, E, H> BatchEffect<C> for All<H, E>
where
    H: for<'c, 'd, 'e> Handler<(&'c mut C, &'d [&'e Delivery]), (), E>,
{
    type Output = ();
    type Error = E;

    fn call(
        &mut self,
        conn: &mut C,
        new: &[&Delivery],
    ) -> impl Future<Output = Result<Vec<()>, E>> {
        let called = Box::pin(self.0.call((conn, new)));
        async move { called.await.map(|()| vec![(); new.len()]) }
    }
}

/// A cursor batch's handler, called once per new sequence.
impl<C, M, T, E, H> SequenceEffect<C, M> for Called<H, T, E>
where
    H: for<'c, 'm> Handler<(&'c mut C, u64, &'m M), T, E>,
{
    type Output = T;
    type Error = E;

    fn call(
        &mut self,
        conn: &mut C,
        sequence: u64,
        message: &M,
    ) -> impl Future<Output = Result<T, E>> {
        Box::pin(self.0.call((conn, sequence, message)))
    }
}
