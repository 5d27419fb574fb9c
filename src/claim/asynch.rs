//! Claims on async connections: [`Claims`], a [`crate::claim::Claims`] whose claims, side effects
//! and completions are awaited, and [`Claim`], a held claim finished on an async connection.
//! The same transaction bodies and statements as the sync API.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::claim::{Record, SideEffect};
use crate::sql::Async;
use crate::{
    claim::{ClaimOutcome, ClaimRecord, ClaimState, InDoubtPolicy, Resolution},
    AdminError, Audit, CorruptRow, Error, EventId, HandlerError, IntoDelivery, IntoEventId,
};

use crate::asynch::{AsyncInboxConnection, Called, Handler, Inbox};

/// What [`Claims::claim`] found: [`crate::claim::Claimed`], holding an async [`Claim`].
pub type Claimed = crate::claim::Claimed<Claim>;

impl Inbox {
    /// Claims on side effects outside the database, for this consumer:
    /// [`crate::Inbox::claims`].
    pub fn claims(&self) -> Claims {
        Claims(self.blocking().claims())
    }
}

/// Claims on side effects outside the database, on async connections: [`crate::claim::Claims`],
/// awaited. An async side effect (an HTTP call, a payment API) is the natural case.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_inbox::{claim::ClaimOutcome, asynch, Error};
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let mut setup = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut setup)?;
/// let mut conn: SyncConnectionWrapper<SqliteConnection> = SyncConnectionWrapper::new(setup);
/// let mailer = asynch::Inbox::new("mailer")?.claims();
///
/// let send = async |claim: &diesel_inbox::claim::Claim| {
///     // mail.send(&to, claim.idempotency_key()).await?
///     Ok::<_, Error>(format!("sent under {}", claim.idempotency_key()))
/// };
/// let first = mailer.run(&mut conn, "welcome:42", send).await?;
/// let again = mailer.run(&mut conn, "welcome:42", send).await?;
/// assert!(matches!(first, ClaimOutcome::Ran(_)));
/// assert!(matches!(again, ClaimOutcome::Completed(_)), "sent once");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Claims(crate::claim::Claims);

impl From<crate::claim::Claims> for Claims {
    fn from(claims: crate::claim::Claims) -> Self {
        Self(claims)
    }
}

impl Claims {
    /// The claims these await.
    #[cfg(feature = "async")]
    pub(crate) fn inner(&self) -> &crate::claim::Claims {
        &self.0
    }
}

impl Claims {
    /// [`crate::claim::Claims::lease`].
    ///
    /// # Panics
    ///
    /// When `lease` is zero.
    pub fn lease(self, lease: Duration) -> Self {
        Self(self.0.lease(lease))
    }

    /// [`crate::claim::Claims::policy`].
    pub fn policy(self, policy: InDoubtPolicy) -> Self {
        Self(self.0.policy(policy))
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        self.0.consumer()
    }

    /// Claims `delivery`'s event in a transaction of its own: [`crate::claim::Claims::claim`],
    /// awaited. Finish a [`Claimed::Acquired`] claim on an async connection.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
    /// use diesel_inbox::asynch;
    ///
    /// type Conn = SyncConnectionWrapper<SqliteConnection>;
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let mut conn = Conn::new(SqliteConnection::establish(":memory:")?);
    /// asynch::run_pending_migrations(&mut conn).await?;
    /// let mailer = asynch::Inbox::new("mailer")?.claims();
    /// let asynch::Claimed::Acquired(claim) = mailer.claim(&mut conn, "evt-1").await? else {
    ///     unreachable!("the first delivery acquires the claim");
    /// };
    /// // ... the side effect, with `claim.idempotency_key()` ...
    /// claim.complete(&mut conn, &"sent").await?;
    /// assert!(!matches!(mailer.claim(&mut conn, "evt-1").await?, asynch::Claimed::Acquired(_)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`crate::claim::Claims::claim`].
    pub async fn claim<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        delivery: impl IntoDelivery,
    ) -> Result<Claimed, Error> {
        let delivery = delivery.into_delivery()?;
        let claimed = self.0.claim_on::<Async, _>(conn, delivery).await?;
        Ok(claimed.map_held(Claim))
    }

    /// The consumer's claims in doubt, oldest first: [`crate::claim::Claims::in_doubt`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::claim::Claims::in_doubt`].
    pub async fn in_doubt<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
    ) -> Result<Vec<ClaimRecord>, Error> {
        self.0.in_doubt_in::<Async, _>(conn).await
    }

    /// Every consumer with a claim: [`crate::claim::Claims::consumers`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn consumers<C: AsyncInboxConnection>(conn: &mut C) -> Result<Vec<String>, Error> {
        crate::claim::Claims::consumers_in::<Async, _>(conn).await
    }

    /// Up to `limit` of the consumer's claims after event id `after`:
    /// [`crate::claim::Claims::list`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn list<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Result<ClaimRecord, CorruptRow>>, Error> {
        self.0.list_in::<Async, _>(conn, after, limit).await
    }

    /// The claim of `event_id`, if there is one, with its payload: [`crate::claim::Claims::show`],
    /// awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::claim::Claims::show`].
    pub async fn show<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
    ) -> Result<Option<ClaimRecord>, Error> {
        let event_id = event_id.into_event_id()?;
        self.0.show_in::<Async, _>(conn, &event_id).await
    }

    /// Resolves the claim of `event_id`, in doubt, as `resolution` says:
    /// [`crate::claim::Claims::resolve`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::claim::Claims::resolve`].
    pub async fn resolve<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
        resolution: Resolution,
        audit: &Audit,
    ) -> Result<ClaimRecord, AdminError> {
        let event_id = event_id.into_event_id()?;
        (self.0)
            .resolve_in::<Async, _>(conn, &event_id, resolution, audit)
            .await
    }

    /// Runs the async side effect `effect` once per event, outside any transaction, given the
    /// claim for its idempotency key: [`crate::claim::Claims::run`], awaited. Its result is stored
    /// and returned to later deliveries; its error or panic decides the claim as there.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
    /// use diesel_inbox::{claim::ClaimOutcome, asynch};
    ///
    /// type Conn = SyncConnectionWrapper<SqliteConnection>;
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let mut conn = Conn::new(SqliteConnection::establish(":memory:")?);
    /// asynch::run_pending_migrations(&mut conn).await?;
    /// let mailer = asynch::Inbox::new("mailer")?.claims();
    /// let send = async |claim: &diesel_inbox::claim::Claim| Ok::<_, diesel_inbox::Error>(claim.idempotency_key());
    ///
    /// assert!(matches!(mailer.run(&mut conn, "evt-1", send).await?, ClaimOutcome::Ran(_)));
    /// assert!(matches!(mailer.run(&mut conn, "evt-1", send).await?, ClaimOutcome::Completed(_)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`crate::claim::Claims::run`].
    pub fn run<'a, C, T, E, H>(
        &'a self,
        conn: &'a mut C,
        delivery: impl IntoDelivery + Send + 'a,
        effect: H,
    ) -> impl Future<Output = Result<ClaimOutcome<T>, E>> + Send + 'a
    where
        C: AsyncInboxConnection,
        H: for<'c> AsyncFnMut(&'c crate::claim::Claim) -> Result<T, E>
            + for<'c> Handler<(&'c crate::claim::Claim,), T, E>
            + 'a,
        T: Serialize + DeserializeOwned + Send + Sync + 'a,
        E: HandlerError + Send + 'a,
    {
        let nothing = async |_: &mut C, _: &T| Ok(());
        self.run_and_record(conn, delivery, effect, nothing)
    }

    /// [`run`](Self::run), committing `record`'s database writes (the charge id on the order,
    /// say) in the completion's transaction: [`crate::claim::Claims::run_and_record`], awaited.
    /// `record` is an async closure over the transaction's connection and the side effect's
    /// value.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
    /// use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
    /// use diesel_inbox::{claim::ClaimOutcome, asynch};
    ///
    /// type Conn = SyncConnectionWrapper<SqliteConnection>;
    ///
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let mut conn = Conn::new(SqliteConnection::establish(":memory:")?);
    /// asynch::run_pending_migrations(&mut conn).await?;
    /// conn.batch_execute("CREATE TABLE charges (id TEXT NOT NULL)").await?;
    /// let payments = asynch::Inbox::new("payments")?.claims();
    ///
    /// let charge = async |_claim: &diesel_inbox::claim::Claim| Ok::<_, diesel_inbox::Error>("ch_1".to_owned());
    /// let record = async |tx: &mut Conn, id: &String| {
    ///     diesel::sql_query(format!("INSERT INTO charges VALUES ('{id}')")).execute(tx).await?;
    ///     Ok(())
    /// };
    /// let charged = payments.run_and_record(&mut conn, "order-42", charge, record).await?;
    /// assert!(matches!(charged, ClaimOutcome::Ran(_)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`crate::claim::Claims::run_and_record`].
    #[allow(
        clippy::manual_async_fn,
        reason = "the signature promises a `Send` future, which an `async fn` would only leak"
    )]
    pub fn run_and_record<'a, C, T, E, H, R>(
        &'a self,
        conn: &'a mut C,
        delivery: impl IntoDelivery + Send + 'a,
        effect: H,
        record: R,
    ) -> impl Future<Output = Result<ClaimOutcome<T>, E>> + Send + 'a
    where
        C: AsyncInboxConnection,
        H: for<'c> AsyncFnMut(&'c crate::claim::Claim) -> Result<T, E>
            + for<'c> Handler<(&'c crate::claim::Claim,), T, E>
            + 'a,
        R: for<'c, 'v> AsyncFnMut(&'c mut C, &'v T) -> Result<(), E>
            + for<'c, 'v> Handler<(&'c mut C, &'v T), (), E>
            + 'a,
        T: Serialize + DeserializeOwned + Send + Sync + 'a,
        E: HandlerError + Send + 'a,
    {
        async move {
            let delivery = delivery.into_delivery().map_err(Error::from)?;
            let (effect, record) = (Called::new(effect), Called::new(record));
            let run = self
                .0
                .run_in::<Async, _, _, _>(conn, delivery, effect, record);
            run.await
        }
    }
}

/// The database writes [`Claims::run_and_record`] commits with a claim's completion.
impl<C, T, E, R> Record<C, T> for Called<R, (), E>
where
    R: for<'c, 'v> Handler<(&'c mut C, &'v T), (), E>,
{
    type Error = E;

    fn record(&mut self, tx: &mut C, value: &T) -> impl Future<Output = Result<(), E>> {
        Box::pin(self.0.call((tx, value)))
    }
}

/// The side effect a claim guards.
impl<T, E, H> SideEffect<T, E> for Called<H, T, E>
where
    H: for<'c> Handler<(&'c crate::claim::Claim,), T, E>,
{
    fn run(mut self, claim: &crate::claim::Claim) -> impl Future<Output = Result<T, E>> {
        Box::pin(self.0.call((claim,)))
    }
}

/// A claim held by this worker, finished on an async connection: [`crate::claim::Claim`], whose
/// writes are awaited. Dropped unfinished, it stays in progress until its lease runs out.
#[must_use = "finish a claim with complete, release, abandon or outcome_unknown; dropped, it stays in progress until its lease runs out, then it is in doubt"]
#[derive(Debug)]
pub struct Claim(crate::claim::Claim);

impl Claim {
    /// The event id claimed.
    pub fn event_id(&self) -> &EventId {
        self.0.event_id()
    }

    /// This holder's attempt: [`crate::claim::Claim::attempt`].
    pub fn attempt(&self) -> u64 {
        self.0.attempt()
    }

    /// When this holder's lease runs out.
    pub fn lease_until(&self) -> DateTime<Utc> {
        self.0.lease_until()
    }

    /// The key to pass downstream: [`crate::claim::Claim::idempotency_key`].
    pub fn idempotency_key(&self) -> String {
        self.0.idempotency_key()
    }

    /// Keeps the claim for `by` from now: [`crate::claim::Claim::extend`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::claim::Claim::extend`].
    pub async fn extend<C: AsyncInboxConnection>(
        &mut self,
        conn: &mut C,
        by: Duration,
    ) -> Result<(), Error> {
        self.0.extend_in::<Async, _>(conn, by).await
    }

    /// The side effect happened: stores `result` and completes the claim:
    /// [`crate::claim::Claim::complete`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::claim::Claim::complete_with`].
    pub async fn complete<C: AsyncInboxConnection, T: Serialize + Sync>(
        self,
        conn: &mut C,
        result: &T,
    ) -> Result<(), Error> {
        let nothing = |_: &mut C| Ok::<_, Error>(());
        let nothing = async |tx: &mut C| nothing(tx);
        self.complete_with(conn, result, nothing).await
    }

    /// The side effect happened: runs `record`, an async closure of database writes that
    /// record it, and completes the claim with `result`, in one transaction:
    /// [`crate::claim::Claim::complete_with`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::claim::Claim::complete_with`].
    pub fn complete_with<'a, C, T, E, H>(
        self,
        conn: &'a mut C,
        result: &'a T,
        record: H,
    ) -> impl Future<Output = Result<(), E>> + Send + 'a
    where
        C: AsyncInboxConnection,
        T: Serialize + Sync,
        H: for<'c> AsyncFnMut(&'c mut C) -> Result<(), E>
            + for<'c> Handler<(&'c mut C,), (), E>
            + 'a,
        E: HandlerError + Send + 'a,
    {
        let record = Called::new(record);
        self.0.complete_in::<Async, _, _, _>(conn, result, record)
    }

    /// The side effect did not happen, and may run again: [`crate::claim::Claim::release`], awaited.
    ///
    /// # Errors
    ///
    /// [`claim::Refused::Fenced`](super::Refused::Fenced); [`Error::Database`].
    pub async fn release<C: AsyncInboxConnection>(
        mut self,
        conn: &mut C,
        reason: &str,
    ) -> Result<(), Error> {
        (self
            .0
            .finish::<Async, _>(conn, ClaimState::Released, reason))
        .await
    }

    /// The side effect did not happen, and must never run: [`crate::claim::Claim::abandon`],
    /// awaited.
    ///
    /// # Errors
    ///
    /// [`claim::Refused::Fenced`](super::Refused::Fenced); [`Error::Database`].
    pub async fn abandon<C: AsyncInboxConnection>(
        mut self,
        conn: &mut C,
        reason: &str,
    ) -> Result<(), Error> {
        (self
            .0
            .finish::<Async, _>(conn, ClaimState::Abandoned, reason))
        .await
    }

    /// Whether the side effect happened is unknown: [`crate::claim::Claim::outcome_unknown`],
    /// awaited. Returns the state the claim took.
    ///
    /// # Errors
    ///
    /// [`claim::Refused::Fenced`](super::Refused::Fenced); [`Error::Database`].
    pub async fn outcome_unknown<C: AsyncInboxConnection>(
        self,
        conn: &mut C,
        reason: &str,
    ) -> Result<ClaimState, Error> {
        self.0.outcome_unknown_in::<Async, _>(conn, reason).await
    }
}
