//! The inbox transaction: record the delivery, run the effect once, commit both together.
//!
//! `sql.rs` holds the inbox table's statements for every backend (with PostgreSQL's and
//! MySQL's own pieces in `postgres.rs` and `mysql.rs`), `record.rs` the row as an app reads
//! it back.

#[cfg(feature = "async")]
pub(crate) mod asynch;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
mod record;
pub(crate) mod sql;

use std::marker::PhantomData;
use std::num::NonZeroU32;
use std::panic;
use std::time::Duration;

use chrono::Utc;
use serde::Serialize;
use tracing::{debug, info, warn, Instrument};

use crate::dead_letter::failure::{self, Policy};
use crate::decide::{self, Failure, Scope, Seen, Then};
use crate::engine::{self, run_ready, Body, Effect, Subject};
use crate::names::Consumer;
use crate::observe::{self, DeliveryOutcome};
use crate::outcome::DuplicateOf;
use crate::rows::Key;
use crate::rows::Recorded;
use crate::sql::{Began, Blocking, Db, InboxSql, Sql};
use crate::state::Counter;
use crate::{
    Delivery, Error, HandlerError, InboxConnection, IntoDelivery, IntoEventId, InvalidConsumerName,
    Outcome, RetryPolicy,
};
use diesel::QueryResult;

pub use record::InboxRecord;

/// Runs `effect` once per event for the default consumer ([`DEFAULT_CONSUMER`](crate::DEFAULT_CONSUMER)).
///
/// The same as [`Inbox::default().process(..)`](Inbox::process); see there for the guarantees.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::{with_inbox, Outcome};
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// diesel::sql_query("CREATE TABLE points (n INTEGER NOT NULL)").execute(&mut conn)?;
///
/// let award = |tx: &mut SqliteConnection| diesel::sql_query("INSERT INTO points VALUES (10)").execute(tx);
/// assert_eq!(with_inbox(&mut conn, "evt-1", award)?, Outcome::Processed(1));
/// assert!(with_inbox(&mut conn, "evt-1", award)?.is_duplicate()); // no second row
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// The handler's own error, unchanged, or the inbox's [`Error`] converted into `E`.
pub fn with_inbox<C, T, E, F>(
    conn: &mut C,
    delivery: impl IntoDelivery,
    effect: F,
) -> Result<Outcome<T>, E>
where
    C: InboxConnection,
    F: FnMut(&mut C) -> Result<T, E>,
    E: HandlerError,
{
    Inbox::<Blocking>::default().process(conn, delivery, effect)
}

/// The redelivery window of an inbox that declares none: 7 days.
const DEFAULT_REDELIVERY_WINDOW: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The inbox for one consumer: a cheap, cloneable configuration, in either flavour.
///
/// One type holds the settings of both flavours, so a setting is written once and exists in
/// both: [`crate::Inbox`] is this type for sync Diesel ([`Blocking`]), whose deliveries run
/// on the calling thread, and `asynch::Inbox` the same for diesel-async (`Async`), whose
/// deliveries are awaited. The builders are the same; the operations take the flavour's
/// connections.
///
/// Each consumer (a handler, a projection, a subscriber) keeps its own record of what it
/// processed, so two consumers in one database each process the same event once.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::{Inbox, Outcome};
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
///
/// let rewards = Inbox::new("rewards")?.max_attempts(5);
/// let first = rewards.process(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(10))?;
/// let again = rewards.process(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(10))?;
/// assert_eq!(first, Outcome::Processed(10));
/// assert_eq!(again.duplicate().and_then(|d| d.deliveries()), Some(2));
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Inbox<F = Blocking> {
    // Every field but the consumer and the flavour is a setting, with its builder in the
    // impl for every flavour.
    pub(crate) consumer: Consumer,
    pub(crate) retry: RetryPolicy,
    pub(crate) max_attempts: Option<NonZeroU32>,
    /// How late a redelivery may come; see [`Inbox::redelivery_window`].
    pub(crate) redelivery_window: Duration,
    /// See [`Inbox::expect_duplicates`].
    pub(crate) expect_duplicates: bool,
    /// Which connections the operations take.
    flavour: PhantomData<fn() -> F>,
}

impl<F> Default for Inbox<F> {
    /// The default consumer, the default [`RetryPolicy`], no dead-lettering, a redelivery
    /// window of 7 days.
    fn default() -> Self {
        Self {
            consumer: Consumer::default_consumer(),
            retry: RetryPolicy::default(),
            max_attempts: None,
            redelivery_window: DEFAULT_REDELIVERY_WINDOW,
            expect_duplicates: false,
            flavour: PhantomData,
        }
    }
}

/// What a delivery came to, before the transaction commits.
pub(crate) enum Delivered<T> {
    Outcome(Outcome<T>),
    /// The id was reused with another payload: commit the count, then report it.
    PayloadConflict,
}

impl<F> Inbox<F> {
    /// An inbox for the consumer called `name`: 1 to 128 bytes of ASCII letters, digits and
    /// `- _ . : /`.
    ///
    /// # Errors
    ///
    /// [`InvalidConsumerName`] for any other name.
    pub fn new(name: &str) -> Result<Self, InvalidConsumerName> {
        Ok(Self {
            consumer: Consumer::new(name)?,
            ..Self::default()
        })
    }

    /// The retry policy for contention. Defaults to [`RetryPolicy::default`].
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Dead-letter an event once its effect has failed `attempts` times. Defaults to never:
    /// failures are still recorded, and every redelivery runs the effect again.
    ///
    /// # Panics
    ///
    /// When `attempts` is 0.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts =
            Some(NonZeroU32::new(attempts).expect("max_attempts must be at least 1"));
        self
    }

    /// Tells the inbox that many of this consumer's deliveries are duplicates: a source that
    /// replays, a hot set of ids redelivered together. On PostgreSQL each delivery then
    /// begins with the upsert that records it, one message more for a new event, rather than
    /// with the insert in the `BEGIN`'s message, which the unique key refuses for a duplicate:
    /// a refused insert costs a duplicate a rolled-back transaction, a wait on a row another
    /// delivery of the same id holds, and a line in the server's log. Other backends send the
    /// same either way. Defaults to `false`.
    pub fn expect_duplicates(mut self, expect: bool) -> Self {
        self.expect_duplicates = expect;
        self
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        self.consumer.as_str()
    }

    /// The same inbox in flavour `G`. Every field is named, so that a new one is carried over.
    #[cfg(feature = "async")]
    pub(crate) fn flavoured<G>(&self) -> Inbox<G> {
        let Self {
            consumer,
            retry,
            max_attempts,
            redelivery_window,
            expect_duplicates,
            flavour: _,
        } = self;
        Inbox {
            consumer: consumer.clone(),
            retry: *retry,
            max_attempts: *max_attempts,
            redelivery_window: *redelivery_window,
            expect_duplicates: *expect_duplicates,
            flavour: PhantomData,
        }
    }
}

impl Inbox<Blocking> {
    /// Runs `effect` if and only if this consumer has not processed the event yet, in one
    /// transaction with the record that it did.
    ///
    /// 1. The id is validated; an invalid one is an [`Error::InvalidEventId`] before any SQL.
    /// 2. A transaction opens on `conn` (immediate on SQLite), and `(consumer, event_id)` is
    ///    inserted into the inbox table, whose unique key decides whether the event is new.
    /// 3. New: `effect` runs on the same connection, inside the transaction, and both commit
    ///    together: [`Outcome::Processed`]. Seen before: `effect` does not run, the delivery is
    ///    counted on the existing row: [`Outcome::Duplicate`], or [`Outcome::DeadLettered`]
    ///    for an event the failure policy gave up on.
    ///
    /// If `effect` returns an error or panics, the transaction rolls back: no effect, no
    /// inbox row, and the next delivery runs it again. The failure (attempt count, error text,
    /// payload) is then recorded in a short transaction of its own. Once an event has failed
    /// [`max_attempts`](Self::max_attempts) times it is dead-lettered and this call returns
    /// [`Outcome::DeadLettered`]; before that, the error comes back unchanged. A panic
    /// continues after the rollback and the record.
    ///
    /// Contention (serialization failures, deadlocks, lock timeouts, a busy SQLite) rolls back
    /// and retries the whole transaction under the [`RetryPolicy`], which is why `effect` is
    /// `FnMut`. That covers the inbox's own statements, the commit and the effect's statements,
    /// whose Diesel error the inbox finds through [`HandlerError::diesel_error`]; contention is
    /// never counted as a failed attempt. When the retries run out, the effect's own error
    /// comes back, unrecorded. So does an error the effect marks transient
    /// ([`FailureKind::Transient`](crate::FailureKind)), while one it marks permanent
    /// dead-letters the event at once. [`Ack::of`](crate::Ack::of) says what to do with the
    /// message, whatever the result.
    ///
    /// Given a [`Delivery`] with a payload, the payload's fingerprint is kept with the inbox
    /// row; a later delivery of the same id with another payload is refused with
    /// [`Error::PayloadMismatch`] and counted.
    ///
    /// Called inside a transaction the caller already holds, it runs as a savepoint and the
    /// caller's commit decides: if the caller rolls back, the event was not processed. Nested
    /// calls neither retry contention nor record failures, since only the outer transaction
    /// can be run again and anything they wrote would roll back with it.
    ///
    /// Only what `effect` does through `conn` is exactly-once. An email sent or an HTTP call
    /// made from inside it happens again if the transaction rolls back and is redelivered.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::{Inbox, Outcome};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// diesel::sql_query("CREATE TABLE invoices (n INTEGER NOT NULL)").execute(&mut conn)?;
    ///
    /// let billing = Inbox::new("billing")?.max_attempts(5);
    /// let issue = |tx: &mut SqliteConnection| diesel::sql_query("INSERT INTO invoices VALUES (1)").execute(tx);
    /// assert_eq!(billing.process(&mut conn, "evt-1", issue)?, Outcome::Processed(1));
    /// assert!(billing.process(&mut conn, "evt-1", issue)?.is_duplicate());
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The effect's own error, unchanged (also when the connection died under the effect);
    /// otherwise the inbox's [`Error`] converted into `E`: [`Error::InvalidEventId`],
    /// [`Error::PayloadMismatch`], [`Error::Database`], [`Error::RetriesExhausted`],
    /// [`Error::TransactionAborted`], [`Error::ConnectionLost`] (nothing committed) or
    /// [`Error::CommitUnknown`] (the commit may have applied; redeliver, and a duplicate will
    /// say so).
    pub fn process<C, T, E, F>(
        &self,
        conn: &mut C,
        delivery: impl IntoDelivery,
        effect: F,
    ) -> Result<Outcome<T>, E>
    where
        C: InboxConnection,
        F: FnMut(&mut C) -> Result<T, E>,
        E: HandlerError,
    {
        self.run(conn, delivery, effect, |_| Ok(None))
    }

    /// [`process`](Self::process), keeping the effect's return value (as JSON, in the inbox
    /// row) so that a duplicate delivery gets the first answer back from
    /// [`Duplicate::stored_result`](crate::Duplicate::stored_result): a retried request receives the original response.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::Inbox;
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let payments = Inbox::new("payments")?;
    ///
    /// let charge = |_tx: &mut SqliteConnection| Ok::<_, diesel_inbox::Error>("receipt-81".to_owned());
    /// payments.process_storing_result(&mut conn, "req-1", charge)?;
    /// let retried = payments.process_storing_result(&mut conn, "req-1", charge)?;
    /// let receipt: Option<String> = retried.duplicate().unwrap().stored_result()?;
    /// assert_eq!(receipt.as_deref(), Some("receipt-81"));
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`process`](Self::process), and [`Error::StoredResult`] when the value does not
    /// serialize (nothing is committed then).
    pub fn process_storing_result<C, T, E, F>(
        &self,
        conn: &mut C,
        delivery: impl IntoDelivery,
        effect: F,
    ) -> Result<Outcome<T>, E>
    where
        C: InboxConnection,
        T: Serialize,
        F: FnMut(&mut C) -> Result<T, E>,
        E: HandlerError,
    {
        self.run(conn, delivery, effect, |value| {
            serde_json::to_string(value).map(Some)
        })
    }

    /// What the inbox table records of `event_id` for this consumer, or `None` when the
    /// event was never settled (a delivery whose handler failed leaves no row).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::{with_inbox, Inbox};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let inbox = Inbox::default();
    /// assert_eq!(inbox.record(&mut conn, "evt-1")?, None);
    /// for _ in 0..3 {
    ///     let _ = with_inbox(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(()))?;
    /// }
    /// let record = inbox.record(&mut conn, "evt-1")?.expect("processed");
    /// assert!(record.is_processed());
    /// assert_eq!(record.deliveries(), 3);
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidEventId`] for an id the inbox would reject, [`Error::Database`] when the
    /// table cannot be read.
    pub fn record<C: InboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
    ) -> Result<Option<InboxRecord>, Error> {
        let event_id = event_id.into_event_id()?;
        run_ready(self.record_in::<Blocking, _>(conn, &event_id))
    }

    /// Up to `limit` rows of the inbox table, every consumer's, in key order: what a test
    /// shows when an event has no row (recorded under another consumer, perhaps).
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the table cannot be read.
    pub fn records<C: InboxConnection>(
        conn: &mut C,
        limit: usize,
    ) -> Result<Vec<InboxRecord>, Error> {
        run_ready(Self::records_in::<Blocking, _>(conn, limit))
    }

    /// [`process`](Self::process), with `encode` deciding what result to store on the row.
    fn run<C, T, E, H>(
        &self,
        conn: &mut C,
        delivery: impl IntoDelivery,
        mut effect: H,
        encode: impl Fn(&T) -> Result<Option<String>, serde_json::Error>,
    ) -> Result<Outcome<T>, E>
    where
        C: InboxConnection,
        H: FnMut(&mut C) -> Result<T, E>,
        E: HandlerError,
    {
        let effect = async |tx: &mut C| effect(tx);
        run_ready(self.run_in::<Blocking, _, _, _>(conn, delivery, effect, encode))
    }
}

/// What both flavours' operations run: the inbox transaction and what its failure records.
impl<K> Inbox<K> {
    /// A delivery in either flavour: the inbox transaction, then what its failure records.
    pub(crate) async fn run_in<F, C, T, E>(
        &self,
        conn: &mut C,
        delivery: impl IntoDelivery,
        mut effect: impl Effect<C, Output = T, Error = E>,
        encode: impl Fn(&T) -> Result<Option<String>, serde_json::Error>,
    ) -> Result<Outcome<T>, E>
    where
        C: Db<F, Backend: Sql>,
        E: HandlerError,
    {
        let timer = observe::DeliveryTimer::start(self.consumer.as_str());
        let delivery = delivery.into_delivery().map_err(Error::from)?;
        let span = tracing::info_span!(
            "inbox",
            consumer = self.consumer.as_str(),
            event_id = delivery.id.as_str()
        );
        let delivered = async {
            let scope = engine::scope_of(conn)?;
            let subject = self.subject(Some(delivery.id.as_str()));
            let body = Deliver {
                inbox: self,
                delivery: Fingerprinted::of(&delivery),
                effect: &mut effect,
                encode: &encode,
                scope,
                began: None,
            };
            let delivered = engine::run(conn, scope, &self.retry, subject, body).await;
            // What an error will be labelled: a payload conflict, the handler's failure
            // (unless the failure policy turns it into a dead letter), or the inbox's own.
            let if_err = match &delivered {
                Ok(Delivered::PayloadConflict) => DeliveryOutcome::PayloadConflict,
                Err(Failure::Handler(_) | Failure::Panicked(_)) => DeliveryOutcome::Failed,
                Ok(Delivered::Outcome(_)) | Err(_) => DeliveryOutcome::Error,
            };
            let result = match delivered {
                Ok(Delivered::Outcome(outcome)) => Ok(outcome),
                Ok(Delivered::PayloadConflict) => Err(Error::PayloadMismatch {
                    event_id: delivery.id.clone(),
                }
                .into()),
                Err(Failure::Handler(error)) => {
                    self.after_handler_error(conn, &delivery, error, scope)
                        .await
                }
                Err(Failure::Panicked(panic)) => {
                    self.after_handler_panic(conn, Some(&delivery), panic, scope)
                        .await
                }
                Err(failure) => Err(failure.into_error()),
            };
            Ok::<_, E>((result, if_err))
        }
        .instrument(span)
        .await;
        let (result, if_err) = match delivered {
            Ok(labelled) => labelled,
            Err(error) => (Err(error), DeliveryOutcome::Error),
        };
        timer.finish(DeliveryOutcome::of(&result, if_err));
        result
    }

    /// The body of the inbox transaction: record the delivery, then run the effect if the
    /// event is new.
    async fn deliver<F, C, T, E, H>(
        &self,
        conn: &mut C,
        delivery: &Fingerprinted<'_>,
        effect: &mut H,
        encode: &impl Fn(&T) -> Result<Option<String>, serde_json::Error>,
        scope: Scope,
        began: Option<Began>,
    ) -> Result<Delivered<T>, Failure<E>>
    where
        C: Db<F, Backend: Sql>,
        H: Effect<C, Output = T, Error = E>,
    {
        let key = self.key(delivery.delivery);
        let fingerprint = delivery.fingerprint.as_ref();
        let began = match began {
            Some(began) => began,
            None => C::Backend::record_delivery(conn, key, Utc::now(), delivery.hash())
                .await
                .map(Began::recorded)
                .map_err(|error| Failure::reading_events(error, key))?,
        };
        let Began {
            recorded,
            without_waiting_for_disk,
        } = began;
        match recorded {
            // A stored result's update may follow: after user code that ended the transaction
            // itself it changes no row (a rollback took the row with it) or the row that
            // user code committed, which the commit's check then reports.
            Recorded::New => run_effect(conn, key, effect, encode, Then::Commit)
                .await
                .map(|value| Delivered::Outcome(Outcome::Processed(value))),
            Recorded::Seen(existing) => {
                // The effect will not run: what commits now is the delivery count alone.
                // Inside a caller's transaction, the caller's writes decide durability.
                let delivered = seen(conn, key, fingerprint, existing).await?;
                if scope == Scope::TopLevel {
                    if !without_waiting_for_disk {
                        C::Backend::commit_without_waiting_for_disk(conn).await?;
                    }
                    Tally::of(&delivered).count(conn, key).await?;
                }
                Ok(delivered)
            }
        }
    }

    /// After a handler error: records a counted or permanent failure (at the top level only:
    /// a record inside the caller's transaction would roll back with it) and, when that
    /// dead-letters the event, reports [`Outcome::DeadLettered`] instead of the error.
    /// Transient failures, contention that outlasted the retries and a lost connection are
    /// neither recorded nor counted.
    pub(crate) async fn after_handler_error<F, C: Db<F, Backend: Sql>, T, E: HandlerError>(
        &self,
        conn: &mut C,
        delivery: &Delivery,
        error: E,
        scope: Scope,
    ) -> Result<Outcome<T>, E> {
        let kind =
            decide::handler_failure(&error, <C::Backend as crate::sql::TransactionSql>::classify);
        if scope == Scope::TopLevel && kind.is_recorded() {
            let message = error.to_string();
            if let Some(dead) = failure::record(conn, self.policy(), delivery, &message, kind).await
            {
                return Ok(Outcome::DeadLettered(dead));
            }
        } else if scope == Scope::TopLevel {
            let (consumer, event_id) = self.key(delivery);
            if kind == decide::HandlerFailure::Transient {
                info!(consumer, event_id, %error, "handler failed transiently; not counted, redeliver the event");
            } else {
                warn!(consumer, event_id, failure = ?kind, %error, "handler failed on contention or a lost connection; not counted, redeliver the event");
            }
        }
        Err(error)
    }

    /// After a handler panic: records the failure like an error, then goes on unwinding.
    pub(crate) async fn after_handler_panic<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        delivery: Option<&Delivery>,
        panic: Box<dyn std::any::Any + Send>,
        scope: Scope,
    ) -> ! {
        if let (Scope::TopLevel, Some(delivery)) = (scope, delivery) {
            let message = failure::panic_message(&*panic);
            let _ = failure::record(
                conn,
                self.policy(),
                delivery,
                &message,
                decide::HandlerFailure::Counted,
            )
            .await;
        }
        panic::resume_unwind(panic)
    }

    /// This consumer's failure policy, for recording a failed attempt.
    fn policy(&self) -> Policy<'_> {
        Policy {
            consumer: self.consumer.as_str(),
            retry: &self.retry,
            max_attempts: self.max_attempts,
        }
    }

    /// How this consumer retries contention.
    pub(crate) fn retry_policy(&self) -> &RetryPolicy {
        &self.retry
    }

    /// What a transaction of this consumer is about, for its log lines.
    pub(crate) fn subject<'a>(&'a self, event_id: Option<&'a str>) -> Subject<'a> {
        Subject {
            consumer: self.consumer.as_str(),
            event_id,
        }
    }

    /// The inbox key of `delivery` for this consumer.
    pub(crate) fn key<'a>(&'a self, delivery: &'a Delivery) -> Key<'a> {
        (self.consumer.as_str(), delivery.id.as_str())
    }
}

/// The inbox transaction's body: [`Inbox::deliver`], once per attempt.
struct Deliver<'a, K, H, Enc> {
    inbox: &'a Inbox<K>,
    delivery: Fingerprinted<'a>,
    effect: &'a mut H,
    encode: &'a Enc,
    scope: Scope,
    /// The delivery's record, where it travelled with the attempt's `BEGIN`.
    began: Option<Began>,
}

/// A delivery and its payload's fingerprint, taken once for all its attempts and statements.
struct Fingerprinted<'a> {
    delivery: &'a Delivery,
    fingerprint: Option<[u8; 32]>,
}

impl<'a> Fingerprinted<'a> {
    fn of(delivery: &'a Delivery) -> Self {
        Self {
            delivery,
            fingerprint: delivery.payload.as_ref().map(crate::Payload::fingerprint),
        }
    }

    /// The fingerprint as the statements bind it.
    fn hash(&self) -> Option<&[u8]> {
        self.fingerprint.as_ref().map(|f| &f[..])
    }
}

impl<F, C, K, T, E, H, Enc> Body<F, C> for Deliver<'_, K, H, Enc>
where
    C: Db<F, Backend: Sql>,
    H: Effect<C, Output = T, Error = E>,
    Enc: Fn(&T) -> Result<Option<String>, serde_json::Error>,
{
    type Output = Delivered<T>;
    type Error = E;

    async fn begin(
        &mut self,
        conn: &mut C,
        idle_timeout: Option<Duration>,
    ) -> Result<(), Failure<E>> {
        let key = self.inbox.key(self.delivery.delivery);
        let hash = self.delivery.hash();
        // A consumer expecting duplicates sends none an insert the key would refuse.
        let began = if self.inbox.expect_duplicates
            && C::Backend::RECORD_WITH_BEGIN_REFUSES_DUPLICATES
        {
            None
        } else {
            C::Backend::begin_and_record_delivery(conn, idle_timeout, key, Utc::now(), hash).await
        };
        match began {
            Some(began) => {
                self.began = Some(began.map_err(|error| Failure::reading_events(error, key))?);
                Ok(())
            }
            None => engine::begin_top(conn, idle_timeout).await,
        }
    }

    async fn attempt(&mut self, conn: &mut C) -> Result<Delivered<T>, Failure<E>> {
        let Self {
            inbox,
            delivery,
            effect,
            encode,
            scope,
            began,
        } = self;
        inbox
            .deliver(conn, delivery, &mut **effect, *encode, *scope, began.take())
            .await
    }
}

/// Runs the effect of a new event and, where asked, stores its encoded result on the row;
/// `then` is what the caller sends after it.
pub(crate) async fn run_effect<F, C, T, E>(
    conn: &mut C,
    key: Key<'_>,
    effect: &mut impl Effect<C, Output = T, Error = E>,
    encode: &impl Fn(&T) -> Result<Option<String>, serde_json::Error>,
    then: Then,
) -> Result<T, Failure<E>>
where
    C: Db<F, Backend: Sql>,
{
    let value = engine::call_user(conn, effect, then).await?;
    let encoded = encode(&value).map_err(|e| Failure::Inbox(Error::StoredResult(e)))?;
    if let Some(json) = encoded {
        C::Backend::store_result(conn, key, &json).await?;
    }
    debug!("processed");
    Ok(value)
}

/// What deliveries add to the consumer's hourly counters: duplicates and payload conflicts.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    duplicates: i64,
    conflicts: i64,
}

impl Tally {
    /// What one delivery adds.
    pub(crate) fn of<T>(delivered: &Delivered<T>) -> Self {
        match delivered {
            Delivered::Outcome(Outcome::Duplicate(_)) => Self {
                duplicates: 1,
                conflicts: 0,
            },
            Delivered::PayloadConflict => Self {
                duplicates: 0,
                conflicts: 1,
            },
            Delivered::Outcome(_) => Self::default(),
        }
    }

    /// `n` duplicate deliveries.
    pub(crate) fn duplicates(n: usize) -> Self {
        Self {
            duplicates: i64::try_from(n).unwrap_or(i64::MAX),
            conflicts: 0,
        }
    }

    /// Adds another delivery's.
    pub(crate) fn add(&mut self, other: &Self) {
        self.duplicates += other.duplicates;
        self.conflicts += other.conflicts;
    }

    /// Adds to the counters, on the stripe of `key`'s event, as the last statements of an
    /// inbox transaction of its own (never inside a caller's): a counter row is shared by
    /// many deliveries, so whoever holds it must take no other lock after it, or two
    /// deliveries could deadlock on it.
    pub(crate) async fn count<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        key: Key<'_>,
    ) -> QueryResult<()> {
        let now = Utc::now();
        for (counter, by) in [
            (Counter::Duplicate, self.duplicates),
            (Counter::PayloadConflict, self.conflicts),
        ] {
            if by > 0 {
                C::Backend::bump_counter(conn, key, counter, by, now).await?;
            }
        }
        Ok(())
    }
}

/// What a delivery of an event seen before comes to (see [`decide::seen`]), with its log line;
/// a payload conflict is counted on the row.
pub(crate) async fn seen<F, C: Db<F, Backend: Sql>, T, E>(
    conn: &mut C,
    key: Key<'_>,
    fingerprint: Option<&[u8; 32]>,
    existing: crate::rows::Existing,
) -> Result<Delivered<T>, Failure<E>> {
    let (consumer, event_id) = key;
    let outcome = match decide::seen(existing, fingerprint) {
        Seen::PayloadConflict => {
            C::Backend::note_payload_conflict(conn, key).await?;
            warn!(consumer, event_id, "payload conflict: this event id was first delivered with another payload; effect skipped");
            return Ok(Delivered::PayloadConflict);
        }
        Seen::Duplicate(duplicate) => {
            if let DuplicateOf::Event {
                deliveries,
                processed_at,
                ..
            } = &duplicate.of
            {
                info!(consumer, event_id, deliveries, first_processed_at = %processed_at, "duplicate delivery; effect skipped");
            }
            Outcome::Duplicate(duplicate)
        }
        Seen::DeadLettered(dead) => {
            info!(
                consumer,
                event_id,
                deliveries = dead.deliveries,
                discarded = dead.discarded,
                "delivery of a dead-lettered event; effect skipped"
            );
            Outcome::DeadLettered(dead)
        }
    };
    Ok(Delivered::Outcome(outcome))
}
