//! Governed replay on async connections: [`Replays`], a [`crate::replay::Replays`] whose
//! operations are awaited, with an async [`ReplayHandler`] and [`ReplaySource`]. The same
//! runner, transaction bodies and statements as the sync API.

use std::future::Future;
use std::time::Duration;

use crate::replay::{
    self, Evidence, Feed, Handle, OutboxSource, Plan, Preview, ReplayNote, ReplayRecord, Replayed,
    Report, RunReport, SourceEvent, Transition,
};
use crate::sql::Async;
use crate::{envelope::Envelope, AdminError, Audit, CorruptRow, Error, HandlerError, RetryPolicy};

use crate::asynch::{AsyncInboxConnection, Handler};

/// What the app does with a replayed event, on an async connection:
/// [`crate::replay::ReplayHandler`], whose methods return `Send` futures (write them as
/// `async fn`s in the impl).
pub trait ReplayHandler<C>: Send {
    /// The handler's error; the inbox's own converts into it.
    type Error: HandlerError + Send;

    /// [`crate::replay::ReplayHandler::apply`].
    fn apply(
        &mut self,
        tx: &mut C,
        event: &Envelope,
        replay: &Replayed,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// [`crate::replay::ReplayHandler::after`]: nothing by default.
    fn after(
        &mut self,
        conn: &mut C,
        event: &Envelope,
        replay: &Replayed,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let _ = (conn, event, replay);
        std::future::ready(Ok(()))
    }
}

/// Where a replay reads its events, on async connections: [`crate::replay::ReplaySource`],
/// whose read is awaited. [`OutboxSource`] is one, and so is `diesel_inbox_nats::JetStreamSource`.
pub trait ReplaySource<C>: Send {
    /// [`crate::replay::ReplaySource::name`].
    fn name(&self) -> String;

    /// [`crate::replay::ReplaySource::read`].
    fn read(
        &mut self,
        conn: &mut C,
        range: &replay::Range,
        after: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<SourceEvent>, Error>> + Send;
}

impl<C: AsyncInboxConnection> ReplaySource<C> for OutboxSource {
    fn name(&self) -> String {
        OutboxSource::name(self)
    }

    fn read(
        &mut self,
        conn: &mut C,
        range: &replay::Range,
        after: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<SourceEvent>, Error>> + Send {
        self.read_in::<Async, _>(conn, range, after, limit)
    }
}

/// Governed replays on async connections: [`crate::replay::Replays`], awaited.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_inbox::asynch::{self, ReplayHandler};
/// use diesel_inbox::replay::{OutboxSource, Plan, Range, Replayed, Target};
/// use diesel_inbox::{envelope::Envelope, Audit};
///
/// type Conn = SyncConnectionWrapper<SqliteConnection>;
///
/// struct Count(u32);
///
/// impl ReplayHandler<Conn> for Count {
///     type Error = diesel_inbox::Error;
///
///     async fn apply(&mut self, _: &mut Conn, _: &Envelope, _: &Replayed) -> Result<(), Self::Error> {
///         self.0 += 1;
///         Ok(())
///     }
/// }
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let mut conn = Conn::new(SqliteConnection::establish(":memory:")?);
/// asynch::run_pending_migrations(&mut conn).await?;
/// let outbox = asynch::Outbox::new("orders-service")?;
/// outbox.enqueue(&mut conn, "orders", &Envelope::new("order.placed", "order", "42")).await?;
///
/// let replays = asynch::Replays::new();
/// let plan = Plan::new(Target::isolated("orders-rebuild", "orders_shadow")?, Range::positions(1, 1)?);
/// let audit = Audit::new("ops@example.com", "rebuild after fix #42")?;
/// let replay = replays.plan(&mut conn, &OutboxSource::new(), &plan, &audit).await?;
/// let run = replays.run(&mut conn, replay.id, &mut OutboxSource::new(), &mut Count(0)).await?;
/// assert_eq!((run.finished, run.counts.processed), (true, 1));
/// let none = async |_: &mut Conn| Ok::<_, diesel_inbox::AdminError>(Vec::new());
/// let evidence = replays.reconcile(&mut conn, replay.id, &mut OutboxSource::new(), none).await?;
/// assert!(evidence.matches());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct Replays(replay::Replays);

impl From<replay::Replays> for Replays {
    fn from(replays: replay::Replays) -> Self {
        Self(replays)
    }
}

impl Replays {
    /// [`crate::replay::Replays::new`].
    pub fn new() -> Self {
        Self::default()
    }

    /// [`crate::replay::Replays::runner`].
    pub fn runner(self, name: &str) -> Self {
        Self(self.0.runner(name))
    }

    /// [`crate::replay::Replays::batch_size`].
    pub fn batch_size(self, events: usize) -> Self {
        Self(self.0.batch_size(events))
    }

    /// [`crate::replay::Replays::lease`].
    ///
    /// # Panics
    ///
    /// When `lease` is zero.
    pub fn lease(self, lease: Duration) -> Self {
        Self(self.0.lease(lease))
    }

    /// [`crate::replay::Replays::retry`].
    pub fn retry(self, policy: RetryPolicy) -> Self {
        Self(self.0.retry(policy))
    }

    /// The sync configuration this one wraps, for the parity test.
    #[cfg(test)]
    pub(crate) fn into_sync(self) -> replay::Replays {
        self.0
    }

    /// [`crate::replay::Replays::plan`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::replay::Replays::plan`].
    pub async fn plan<C: AsyncInboxConnection, S: ReplaySource<C>>(
        &self,
        conn: &mut C,
        source: &S,
        plan: &Plan,
        audit: &Audit,
    ) -> Result<ReplayRecord, AdminError> {
        self.0
            .plan_in::<Async, _>(conn, &source.name(), plan, audit)
            .await
    }

    /// [`crate::replay::Replays::preview`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::replay::Replays::preview`].
    pub async fn preview<C: AsyncInboxConnection, S: ReplaySource<C>>(
        &self,
        conn: &mut C,
        source: &mut S,
        plan: &Plan,
    ) -> Result<Preview, AdminError> {
        self.0
            .preview_in::<Async, _, _>(conn, &mut Awaited(source), plan)
            .await
    }

    /// [`crate::replay::Replays::get`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::replay::Replays::get`].
    pub async fn get<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
    ) -> Result<ReplayRecord, AdminError> {
        Ok(self.0.get_in::<Async, _>(conn, id).await?)
    }

    /// [`crate::replay::Replays::list`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn list<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Result<ReplayRecord, CorruptRow>>, Error> {
        self.0.list_in::<Async, _>(conn, after, limit).await
    }

    /// [`crate::replay::Replays::notes`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn notes<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Result<ReplayNote, CorruptRow>>, Error> {
        self.0.notes_in::<Async, _>(conn, id, after, limit).await
    }

    /// [`crate::replay::Replays::history`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::replay::Replays::history`].
    pub async fn history<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
    ) -> Result<Vec<Transition>, Error> {
        self.0.history_in::<Async, _>(conn, id).await
    }

    /// [`crate::replay::Replays::run`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::replay::Replays::run`].
    pub fn run<'a, C, S, H>(
        &'a self,
        conn: &'a mut C,
        id: i64,
        source: &'a mut S,
        handler: &'a mut H,
    ) -> impl Future<Output = Result<RunReport, H::Error>> + Send + 'a
    where
        C: AsyncInboxConnection,
        S: ReplaySource<C>,
        H: ReplayHandler<C>,
    {
        self.run_reporting(conn, id, source, handler, |_| {})
    }

    /// [`crate::replay::Replays::run_reporting`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::replay::Replays::run`].
    #[allow(
        clippy::manual_async_fn,
        reason = "the signature promises a `Send` future, which an `async fn` would only leak"
    )]
    pub fn run_reporting<'a, C, S, H>(
        &'a self,
        conn: &'a mut C,
        id: i64,
        source: &'a mut S,
        handler: &'a mut H,
        mut progress: impl FnMut(&RunReport) + Send + 'a,
    ) -> impl Future<Output = Result<RunReport, H::Error>> + Send + 'a
    where
        C: AsyncInboxConnection,
        S: ReplaySource<C>,
        H: ReplayHandler<C>,
    {
        async move {
            let (mut source, mut handler) = (Awaited(source), Awaited(handler));
            self.0
                .run_in::<Async, _, _, _>(conn, id, &mut source, &mut handler, &mut progress)
                .await
        }
    }

    /// [`crate::replay::Replays::reconcile`], awaited, with `check` an async closure over
    /// the connection returning the app's reports.
    ///
    /// # Errors
    ///
    /// As [`crate::replay::Replays::reconcile`].
    pub async fn reconcile<C, S, R>(
        &self,
        conn: &mut C,
        id: i64,
        source: &mut S,
        mut check: R,
    ) -> Result<Evidence, AdminError>
    where
        C: AsyncInboxConnection,
        S: ReplaySource<C>,
        R: for<'c> AsyncFnMut(&'c mut C) -> Result<Vec<Report>, AdminError>
            + for<'c> Handler<(&'c mut C,), Vec<Report>, AdminError>,
    {
        let record = self
            .0
            .reconcilable::<Async, _>(conn, id, &source.name())
            .await?;
        let reports = check(conn).await?;
        self.0
            .reconcile_in::<Async, _, _>(conn, record, &mut Awaited(source), reports)
            .await
    }

    /// [`crate::replay::Replays::accept`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::replay::Replays::accept`].
    pub async fn accept<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        self.0
            .decide_in::<Async, _>(conn, id, audit, replay::Decision::Accept)
            .await
    }

    /// [`crate::replay::Replays::accept_overriding`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::replay::Replays::accept_overriding`].
    pub async fn accept_overriding<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        self.0
            .decide_in::<Async, _>(conn, id, audit, replay::Decision::Override)
            .await
    }

    /// [`crate::replay::Replays::reject`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::replay::Replays::reject`].
    pub async fn reject<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        self.0
            .decide_in::<Async, _>(conn, id, audit, replay::Decision::Reject)
            .await
    }

    /// [`crate::replay::Replays::abort`], awaited.
    ///
    /// # Errors
    ///
    /// As [`crate::replay::Replays::abort`].
    pub async fn abort<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        self.0
            .decide_in::<Async, _>(conn, id, audit, replay::Decision::Abort)
            .await
    }

    /// [`crate::replay::Replays::prune`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn prune<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        older_than: Duration,
    ) -> Result<u64, Error> {
        self.0.prune_in::<Async, _>(conn, older_than).await
    }
}

/// An async source or handler as the replay calls it.
struct Awaited<'a, T>(&'a mut T);

impl<C, S: ReplaySource<C>> Feed<C> for Awaited<'_, S> {
    fn name(&self) -> String {
        self.0.name()
    }

    fn read(
        &mut self,
        conn: &mut C,
        range: &replay::Range,
        after: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<SourceEvent>, Error>> {
        self.0.read(conn, range, after, limit)
    }
}

impl<C, H: ReplayHandler<C>> Handle<C> for Awaited<'_, H> {
    type Error = H::Error;

    fn apply(
        &mut self,
        tx: &mut C,
        event: &Envelope,
        replay: &Replayed,
    ) -> impl Future<Output = Result<(), H::Error>> {
        self.0.apply(tx, event, replay)
    }

    fn after(
        &mut self,
        conn: &mut C,
        event: &Envelope,
        replay: &Replayed,
    ) -> impl Future<Output = Result<(), H::Error>> {
        self.0.after(conn, event, replay)
    }
}

/// The probe answers as the sync one does: the event would run a side effect.
impl<C> ReplayHandler<C> for super::run::Probe {
    type Error = Error;

    fn apply(
        &mut self,
        _: &mut C,
        _: &Envelope,
        _: &Replayed,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        std::future::ready(Err(crate::replay::Refused::WouldRun.into()))
    }
}

impl Replayed {
    /// The async flavour's claims, as [`claims`](Self::claims) lets them run.
    pub fn async_claims(&self, claims: &crate::asynch::Claims) -> crate::asynch::Claims {
        crate::asynch::Claims::from(self.claims(claims.inner()))
    }
}
