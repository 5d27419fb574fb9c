//! The relay: a pass takes the outbox rows due now, publishes them in order, and marks them.
//!
//! A pass is three steps, each short:
//! 1. **Take** (one transaction): the due rows that come first in their aggregate, and the
//!    pending rows of those aggregates after them, locked (`FOR UPDATE SKIP LOCKED` on
//!    PostgreSQL and MariaDB; SQLite's writer lock) and leased to this pass.
//! 2. **Publish**, outside any transaction, in position order. A row that does not publish
//!    holds back the later rows of its aggregate.
//! 3. **Mark** (one transaction): published, due again after a backoff, or failed; each write
//!    fenced by the pass's lease token, so a pass whose lease ran out and was taken over
//!    changes nothing.
//!
//! On a Galera cluster the row locks are local to a node, but the leases are writes: two
//! relays on two nodes taking the same rows conflict at certification, and the one that
//! retries finds them leased. Relays on several nodes take disjoint rows.
//!
//! A relay that dies between 1 and 3 leaves its rows leased; once the lease runs out another
//! pass publishes them again. Delivery is at least once: the broker's dedup window (JetStream's
//! `Nats-Msg-Id`) and the consumer's inbox absorb the repeats.

use std::future::Future;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::plan::{self, Backoff, Blocked, Settle};
use super::sql::{OutboxChange, OutboxRow, OutboxSql};
use crate::decide::{Failure, Scope};
use crate::duration::{after, now};
use crate::engine::{self, run_ready, Body, Subject};
use crate::sql::{Blocking, Db, Sql, TransactionSql};
use crate::{
    envelope::Envelope,
    observe,
    outbox::{OutboxMessage, PublishError, Publisher},
    AdminError, Error, InboxConnection, RetryPolicy,
};

/// What a relay pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
#[must_use]
pub struct RelayPass {
    /// Rows the broker accepted.
    pub published: usize,
    /// Rows whose publish failed and that are due again after a backoff.
    pub retried: usize,
    /// Rows failed for good: permanent errors, unreadable rows, or out of attempts.
    pub failed: usize,
    /// Rows left untried because an earlier row of their aggregate did not publish.
    pub held_back: usize,
    /// Rows another relay had taken over when this pass came to mark them (its lease had run
    /// out): they were published, and will be again.
    pub fenced: usize,
}

impl RelayPass {
    /// Whether the pass found nothing to publish: the outbox has nothing due.
    pub fn is_idle(&self) -> bool {
        self.taken() == 0
    }

    /// Rows the pass took.
    pub fn taken(&self) -> usize {
        self.published + self.retried + self.failed + self.held_back
    }
}

/// Publishes outbox rows through a [`Publisher`] (or an [`AsyncPublisher`](crate::outbox::AsyncPublisher)).
///
/// Several relays may run at once against one database: they take disjoint rows, and never
/// two rows of one aggregate at a time from two relays. Run one per process, in a loop that
/// sleeps a little when a pass [`is_idle`](RelayPass::is_idle).
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::{envelope::Envelope, outbox::{Outbox, OutboxMessage, PublishError, Publisher, Relay}};
///
/// /// Prints what it publishes; a real one sends to a broker and waits for its ack.
/// struct Stdout;
///
/// impl Publisher for Stdout {
///     fn publish(&mut self, message: &OutboxMessage) -> Result<(), PublishError> {
///         println!("{} -> {}", message.envelope.id(), message.topic);
///         Ok(())
///     }
/// }
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let outbox = Outbox::new("orders-service")?;
/// outbox.enqueue(&mut conn, "orders.placed", &Envelope::new("order.placed", "order", "42"))?;
///
/// let relay = Relay::new();
/// let pass = relay.run_once(&mut conn, &mut Stdout)?;
/// assert_eq!(pass.published, 1);
/// assert!(relay.run_once(&mut conn, &mut Stdout)?.is_idle());
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Relay {
    batch_size: usize,
    max_attempts: u32,
    backoff: Backoff,
    lease: Duration,
    retry: RetryPolicy,
}

impl Default for Relay {
    fn default() -> Self {
        Self::new()
    }
}

/// The rows a pass took, with the lease token that fences its marks.
#[derive(Debug)]
pub(crate) struct Taken {
    token: String,
    rows: Vec<OutboxRow>,
}

impl Relay {
    /// A relay with the defaults: batches of 100 rows, 10 attempts, a backoff from 1 second
    /// doubling up to 5 minutes, a 60-second lease, and [`RetryPolicy::default`] for its
    /// transactions.
    pub fn new() -> Self {
        Self {
            batch_size: 100,
            max_attempts: 10,
            backoff: Backoff {
                first: Duration::from_secs(1),
                max: Duration::from_secs(300),
            },
            lease: Duration::from_secs(60),
            retry: RetryPolicy::default(),
        }
    }

    /// How the pass's own transactions (taking the rows, marking them) retry contention, and
    /// how long each may stall ([`RetryPolicy::idle_timeout`]). Defaults to
    /// [`RetryPolicy::default`].
    #[must_use]
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Rows per pass, at least 1. Defaults to 100.
    #[must_use]
    pub fn batch_size(mut self, rows: usize) -> Self {
        self.batch_size = rows.max(1);
        self
    }

    /// Attempts before a row whose publish keeps failing is failed, at least 1. Defaults
    /// to 10.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The delay before the first retry of a row, doubling with each failure up to `max`
    /// (with jitter). Defaults to 1 second and 5 minutes.
    #[must_use]
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = Backoff {
            first,
            max: max.max(first),
        };
        self
    }

    /// How long a pass holds the rows it took. A pass still publishing when it runs out may
    /// see another relay publish the same rows again, so make it longer than a batch's
    /// publishing takes. Defaults to 60 seconds.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// One pass: takes the rows due now, publishes them through `publisher`, marks them.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::{envelope::Envelope, outbox::{Outbox, OutboxMessage, PublishError, Publisher, Relay}};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// Outbox::new("orders")?.enqueue(&mut conn, "orders.placed", &Envelope::new("order.placed", "order", "42"))?;
    ///
    /// /// Keeps the topics it was given; a real one sends and waits for the broker's ack.
    /// struct Topics(Vec<String>);
    ///
    /// impl Publisher for Topics {
    ///     fn publish(&mut self, message: &OutboxMessage) -> Result<(), PublishError> {
    ///         self.0.push(message.topic.clone());
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let (relay, mut sent) = (Relay::new(), Topics(Vec::new()));
    /// assert_eq!(relay.run_once(&mut conn, &mut sent)?.published, 1);
    /// assert!(relay.run_once(&mut conn, &mut sent)?.is_idle());
    /// assert_eq!(sent.0, ["orders.placed"]);
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InsideTransaction`] inside an open transaction, and the database's errors, in
    /// [`AdminError::Inbox`] ([`Error::Database`], [`Error::ConnectionLost`], ...). Rows taken by a
    /// pass that failed after taking them are published by a later pass once their lease runs out.
    pub fn run_once<C: InboxConnection, P: Publisher + ?Sized>(
        &self,
        conn: &mut C,
        publisher: &mut P,
    ) -> Result<RelayPass, AdminError> {
        let _span = tracing::info_span!("relay").entered();
        run_ready(self.pass::<Blocking, _>(conn, &mut Blocks(publisher)))
    }

    /// [`run_once`](Self::run_once) for tokio services on sync Diesel: the database steps
    /// run where blocking is allowed, each with a connection from `pool` (r2d2's or
    /// deadpool-diesel's, see [`BlockingPool`](crate::pool::BlockingPool)), and the
    /// publishes are awaited in order between them.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::r2d2::{ConnectionManager, Pool};
    /// use diesel::SqliteConnection;
    /// use diesel_inbox::pool::BlockingPool;
    /// use diesel_inbox::{outbox::{AsyncPublisher, Outbox, OutboxMessage, PublishError, Relay}, envelope::Envelope};
    ///
    /// /// Accepts everything; a real one awaits its broker's ack.
    /// struct Accepting;
    ///
    /// impl AsyncPublisher for Accepting {
    ///     async fn publish(&self, _message: &OutboxMessage) -> Result<(), PublishError> {
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # let file = tempfile::NamedTempFile::new()?;
    /// # let url = file.path().to_str().unwrap().to_owned();
    /// let pool = Pool::builder().max_size(1).build(ConnectionManager::<SqliteConnection>::new(url))?;
    /// # let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    /// # runtime.block_on(async {
    /// pool.run(|conn| -> Result<(), diesel_inbox::AdminError> {
    ///     diesel_inbox::run_pending_migrations(conn)?;
    ///     let placed = Envelope::new("order.placed", "order", "42");
    ///     Ok(Outbox::new("orders")?.enqueue(conn, "orders.placed", &placed)?)
    /// })
    /// .await?;
    ///
    /// let pass = Relay::new().run_once_async(&pool, &Accepting).await?;
    /// assert_eq!(pass.published, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(()) })?;
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`run_once`](Self::run_once), and [`Error::Pool`] (in [`AdminError::Inbox`]) when the
    /// pool has no connection to give. A panic in a database step is resumed here.
    #[cfg(feature = "tokio")]
    pub async fn run_once_async<B, C, P>(
        &self,
        pool: &B,
        publisher: &P,
    ) -> Result<RelayPass, AdminError>
    where
        B: crate::pool::BlockingPool<Connection = C>,
        C: InboxConnection,
        P: crate::outbox::AsyncPublisher + ?Sized,
    {
        use tracing::Instrument;
        let span = tracing::info_span!("relay");
        let (relay, in_span) = (self.clone(), span.clone());
        let taken = pool
            .run(move |conn| in_span.in_scope(|| run_ready(relay.take::<Blocking, _>(conn))))
            .await?;
        let settles = self
            .publish(&taken, &mut Awaits(publisher))
            .instrument(span.clone())
            .await;
        let policy = self.retry;
        pool.run(move |conn| {
            span.in_scope(|| run_ready(mark::<Blocking, _>(conn, &policy, &taken, &settles)))
        })
        .await
    }

    /// A pass in either flavour: take, publish, mark.
    pub(crate) async fn pass<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        publisher: &mut impl Publish,
    ) -> Result<RelayPass, AdminError> {
        let taken = self.take(conn).await?;
        let settles = self.publish(&taken, publisher).await;
        mark(conn, &self.retry, &taken, &settles).await
    }

    /// Step 1: takes and leases the rows this pass publishes.
    async fn take<F, C: Db<F, Backend: Sql>>(&self, conn: &mut C) -> Result<Taken, AdminError> {
        if engine::scope_of(conn)? == Scope::Savepoint {
            return Err(Error::InsideTransaction {
                operation: "Relay::run_once",
            }
            .into());
        }
        let token = format!("{:032x}", fastrand::u128(..));
        // MariaDB: the locking reads lock only the rows they return. A run again after
        // contention takes the session's own level: as correct, with wider locks.
        C::Backend::next_transaction_read_committed(conn).await?;
        let rows = in_transaction(
            conn,
            &self.retry,
            Take {
                relay: self,
                token: &token,
            },
        )
        .await?;
        if !rows.is_empty() {
            debug!(rows = rows.len(), "relay took outbox rows");
        }
        Ok(Taken { token, rows })
    }

    /// Step 2: publishes the taken rows in order, each judged before the next is tried.
    async fn publish(&self, taken: &Taken, publisher: &mut impl Publish) -> Vec<Settle> {
        let mut settles = Vec::with_capacity(taken.rows.len());
        let mut blocked = Blocked::default();
        for row in &taken.rows {
            let result = if blocked.holds(row) {
                None
            } else {
                Some(match message_of(row) {
                    Ok(message) => publisher.send(&message).await,
                    Err(error) => Err(error),
                })
            };
            settles.push(self.judge(&mut blocked, row, result.as_ref()));
        }
        settles
    }

    /// Step 2's decision for one row: what its publish result (or `None`: held back) writes,
    /// noted in `blocked` for the rows of its aggregate after it.
    fn judge(
        &self,
        blocked: &mut Blocked,
        row: &OutboxRow,
        result: Option<&Result<(), PublishError>>,
    ) -> Settle {
        let settle = self.judge_publish(row, result);
        blocked.note(row, &settle);
        settle
    }

    /// What one publish result (or `None`: held back) writes, counted and logged.
    fn judge_publish(&self, row: &OutboxRow, result: Option<&Result<(), PublishError>>) -> Settle {
        let Some(result) = result else {
            return Settle::Released;
        };
        let settle = plan::after_publish(
            result.as_ref().copied(),
            row.attempts,
            self.max_attempts,
            self.backoff,
            now(),
            &mut fastrand::Rng::new(),
        );
        let (position, event_id, topic) = (row.position, row.event_id.as_str(), &row.topic);
        match &settle {
            Settle::Published => observe::outbox_published(topic),
            Settle::Retry { error, at } => {
                observe::outbox_publish_failed(topic, "retry");
                warn!(position, event_id, topic, %error, %at, "publish failed; the relay tries again after its backoff");
            }
            Settle::Failed { error } => {
                observe::outbox_publish_failed(topic, "failed");
                warn!(position, event_id, topic, %error, "publish failed for good: the outbox row is failed and kept for ops (diesel-inbox outbox retry)");
            }
            Settle::Released => {}
        }
        settle
    }
}

/// Step 3: writes every row's result, fenced by the lease token.
async fn mark<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    policy: &RetryPolicy,
    taken: &Taken,
    settles: &[Settle],
) -> Result<RelayPass, AdminError> {
    let mut pass = RelayPass::default();
    if taken.rows.is_empty() {
        return Ok(pass);
    }
    let marked = in_transaction(conn, policy, Mark { taken, settles }).await?;
    for settle in settles {
        match settle {
            Settle::Published => pass.published += 1,
            Settle::Retry { .. } => pass.retried += 1,
            Settle::Failed { .. } => pass.failed += 1,
            Settle::Released => pass.held_back += 1,
        }
    }
    pass.fenced = taken.rows.len() - marked;
    if pass.fenced > 0 {
        observe::outbox_fenced(pass.fenced);
        warn!(fenced = pass.fenced, "another relay took over rows of this pass after its lease ran out; they were published, and will be again (the broker's dedup window and the consumers' inbox absorb it)");
    }
    info!(
        published = pass.published,
        retried = pass.retried,
        failed = pass.failed,
        held_back = pass.held_back,
        "relay pass"
    );
    Ok(pass)
}

/// The positions of the taken rows whose settle matches.
fn positions(taken: &Taken, settles: &[Settle], keep: impl Fn(&Settle) -> bool) -> Vec<i64> {
    taken
        .rows
        .iter()
        .zip(settles)
        .filter(|(_, settle)| keep(settle))
        .map(|(row, _)| row.position)
        .collect()
}

/// The message an outbox row carries; a row that does not read back as an envelope cannot
/// ever be published, and fails.
fn message_of(row: &OutboxRow) -> Result<OutboxMessage, PublishError> {
    let unreadable = |why: String| {
        PublishError::permanent(format!(
            "outbox row {} does not read back as an envelope: {why}",
            row.position
        ))
    };
    let headers: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&row.headers).map_err(|error| unreadable(error.to_string()))?;
    let envelope = Envelope::from_message(
        headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str())),
        &row.body,
    )
    .map_err(|error| unreadable(error.to_string()))?;
    Ok(OutboxMessage {
        position: row.position,
        topic: row.topic.clone(),
        envelope,
        attempt: u32::try_from(row.attempts + 1).unwrap_or(u32::MAX),
    })
}

/// Step 1's transaction: the due heads, the rows after them, and the lease on all of them.
struct Take<'a> {
    relay: &'a Relay,
    token: &'a str,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Take<'_> {
    type Output = Vec<OutboxRow>;
    type Error = Error;

    async fn attempt(&mut self, tx: &mut C) -> Result<Vec<OutboxRow>, Failure<Error>> {
        let batch_size = self.relay.batch_size;
        let now = now();
        let limit = i64::try_from(batch_size).unwrap_or(i64::MAX);
        let heads = C::Backend::outbox_heads(tx, now, limit).await?;
        let mut room = batch_size.saturating_sub(heads.len());
        let mut groups = Vec::with_capacity(heads.len());
        for (head, more) in heads {
            let followers = if more && room > 0 && C::Backend::OUTBOX_FOLLOWERS {
                let limit = i64::try_from(room).unwrap_or(i64::MAX);
                let found = C::Backend::outbox_followers(tx, &head, limit).await?;
                let found = plan::free_run(found, now);
                room -= found.len();
                found
            } else {
                Vec::new()
            };
            groups.push((head, followers));
        }
        let rows = plan::in_publish_order(groups, batch_size);
        let positions: Vec<i64> = rows.iter().map(|row| row.position).collect();
        let until = after(now, self.relay.lease);
        C::Backend::lease_outbox(tx, &positions, self.token, until).await?;
        Ok(rows)
    }
}

/// Step 3's transaction: every row's result, fenced by the lease token; how many rows it
/// still held.
struct Mark<'a> {
    taken: &'a Taken,
    settles: &'a [Settle],
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Mark<'_> {
    type Output = usize;
    type Error = Error;

    async fn attempt(&mut self, tx: &mut C) -> Result<usize, Failure<Error>> {
        let Self { taken, settles } = *self;
        let lease_token = taken.token.as_str();
        let now = now();
        let mut marked = 0;
        for (change, keep) in [
            (OutboxChange::Published, Settle::Published),
            (OutboxChange::Released, Settle::Released),
        ] {
            let rows = positions(taken, settles, |s| *s == keep);
            marked += C::Backend::settle_outbox(tx, &rows, lease_token, change, now).await?;
        }
        for (row, settle) in taken.rows.iter().zip(settles) {
            let change = match settle {
                Settle::Retry { error, at } => OutboxChange::Retry { error, at: *at },
                Settle::Failed { error } => OutboxChange::Failed { error },
                Settle::Published | Settle::Released => continue,
            };
            let rows = [row.position];
            marked += C::Backend::settle_outbox(tx, &rows, lease_token, change, now).await?;
        }
        Ok(marked)
    }
}

/// Runs `body` in a top-level transaction; contention (a deadlock between two relays, a busy
/// SQLite) is rolled back and run again under `policy`.
async fn in_transaction<F, C, R>(
    conn: &mut C,
    policy: &RetryPolicy,
    body: impl Body<F, C, Output = R, Error = Error>,
) -> Result<R, Error>
where
    C: Db<F, Backend: Sql>,
{
    let subject = Subject {
        consumer: "outbox relay",
        event_id: None,
    };
    engine::run(conn, Scope::TopLevel, policy, subject, body)
        .await
        .map_err(Failure::into_error)
}

/// How a pass sends one message: through a blocking [`Publisher`] or an awaited
/// [`AsyncPublisher`](crate::outbox::AsyncPublisher).
pub(crate) trait Publish {
    /// Sends `message`; resolves once the broker has it or the publish failed.
    fn send(&mut self, message: &OutboxMessage) -> impl Future<Output = Result<(), PublishError>>;
}

/// A blocking [`Publisher`], called in place.
struct Blocks<'a, P: ?Sized>(&'a mut P);

impl<P: Publisher + ?Sized> Publish for Blocks<'_, P> {
    fn send(&mut self, message: &OutboxMessage) -> impl Future<Output = Result<(), PublishError>> {
        std::future::ready(self.0.publish(message))
    }
}

/// An [`AsyncPublisher`](crate::outbox::AsyncPublisher), awaited.
#[cfg(any(feature = "tokio", feature = "async"))]
pub(crate) struct Awaits<'a, P: ?Sized>(pub(crate) &'a P);

#[cfg(any(feature = "tokio", feature = "async"))]
impl<P: crate::outbox::AsyncPublisher + ?Sized> Publish for Awaits<'_, P> {
    fn send(&mut self, message: &OutboxMessage) -> impl Future<Output = Result<(), PublishError>> {
        self.0.publish(message)
    }
}
