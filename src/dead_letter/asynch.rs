//! Dead letters on async connections: [`DeadLetters`], a [`crate::dead_letter::DeadLetters`] whose
//! listings, redrives and audited transitions are awaited. The same transaction bodies and
//! statements as the sync API.

use std::future::Future;

use crate::dead_letter::{RedriveEffect, Transition};
use crate::sql::Async;
use crate::{
    dead_letter::DeadLetter, AdminError, Audit, CorruptRow, Error, HandlerError, IntoEventId,
    Outcome, Payload,
};

use crate::asynch::{AsyncInboxConnection, Called, Handler, Inbox};

impl Inbox {
    /// Operations on this consumer's dead letters: [`crate::Inbox::dead_letters`].
    pub fn dead_letters(&self) -> DeadLetters {
        DeadLetters(self.blocking().dead_letters())
    }
}

/// A consumer's dead letters on async connections: [`crate::dead_letter::DeadLetters`], awaited.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_inbox::{asynch, AdminError, Audit, Error, Payload};
///
/// type Conn = SyncConnectionWrapper<SqliteConnection>;
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let mut setup = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut setup)?;
/// let mut conn = Conn::new(setup);
/// let inbox = asynch::Inbox::new("orders")?.max_attempts(1);
/// let fail = async |_: &mut Conn| Err::<(), _>(Error::permanent("unknown SKU"));
/// assert!(inbox.process(&mut conn, "order-9", fail).await?.is_dead_lettered());
///
/// let dead = inbox.dead_letters();
/// assert_eq!(dead.list(&mut conn, None, 10).await?.len(), 1);
/// let audit = Audit::new("ops@example.com", "the SKU exists now")?;
/// let rerun = async |_: &mut Conn, _: Option<&Payload>| Ok::<_, AdminError>("shipped");
/// let redriven = dead.redrive(&mut conn, "order-9", &audit, rerun).await?;
/// assert!(redriven.is_processed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct DeadLetters(crate::dead_letter::DeadLetters);

impl DeadLetters {
    /// Up to `limit` dead-lettered events after `after`: [`crate::dead_letter::DeadLetters::list`],
    /// awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::dead_letter::DeadLetters::list`].
    pub async fn list<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Result<DeadLetter, CorruptRow>>, Error> {
        self.0.list_in::<Async, _>(conn, after, limit).await
    }

    /// One failed event with its payload and history: [`crate::dead_letter::DeadLetters::show`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::dead_letter::DeadLetters::show`].
    pub async fn show<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
    ) -> Result<DeadLetter, AdminError> {
        let event_id = event_id.into_event_id()?;
        self.0.show_in::<Async, _>(conn, event_id).await
    }

    /// Runs `effect`, an async closure over the transaction's connection and the stored
    /// payload, on a dead-lettered event through the inbox path, and marks it redriven:
    /// [`crate::dead_letter::DeadLetters::redrive`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::dead_letter::DeadLetters::redrive`].
    #[allow(
        clippy::manual_async_fn,
        reason = "the signature promises a `Send` future, which an `async fn` would only leak"
    )]
    pub fn redrive<'a, C, T, E, H>(
        &'a self,
        conn: &'a mut C,
        event_id: impl IntoEventId + Send + 'a,
        audit: &'a Audit,
        effect: H,
    ) -> impl Future<Output = Result<Outcome<T>, E>> + Send + 'a
    where
        C: AsyncInboxConnection,
        H: for<'c, 'p> AsyncFnMut(&'c mut C, Option<&'p Payload>) -> Result<T, E>
            + for<'c, 'p> Handler<(&'c mut C, Option<&'p Payload>), T, E>
            + 'a,
        T: Send + 'a,
        E: HandlerError + From<AdminError> + Send + 'a,
    {
        async move {
            let event_id = event_id.into_event_id().map_err(Error::from)?;
            let effect = Called::new(effect);
            let redriven = self
                .0
                .redrive_in::<Async, _, _, _>(conn, event_id, audit, effect);
            redriven.await
        }
    }

    /// Marks a dead-lettered event discarded: [`crate::dead_letter::DeadLetters::discard`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::dead_letter::DeadLetters::discard`].
    pub async fn discard<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        let event_id = event_id.into_event_id()?;
        (self.0)
            .transition::<Async, _>(conn, event_id, audit, Transition::Discard)
            .await
    }

    /// Releases a dead-lettered event to be published again: [`crate::dead_letter::DeadLetters::release`],
    /// awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::dead_letter::DeadLetters::release`].
    pub async fn release<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        let event_id = event_id.into_event_id()?;
        (self.0)
            .transition::<Async, _>(conn, event_id, audit, Transition::Release)
            .await
    }
}

/// A redrive's handler, with the payload the failure stored.
impl<C, T, E, H> RedriveEffect<C> for Called<H, T, E>
where
    H: for<'c, 'p> Handler<(&'c mut C, Option<&'p Payload>), T, E>,
{
    type Output = T;
    type Error = E;

    fn call(
        &mut self,
        conn: &mut C,
        payload: Option<&Payload>,
    ) -> impl Future<Output = Result<T, E>> {
        Box::pin(self.0.call((conn, payload)))
    }
}
