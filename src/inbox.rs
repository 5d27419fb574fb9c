//! The inbox transaction: record the delivery, run the effect once, commit both together.

use std::panic::{self, AssertUnwindSafe};

use chrono::Utc;
use diesel::connection::TransactionManager;
use diesel::Connection;
use tracing::{debug, info, warn};

use crate::backend::sealed::Recorded;
use crate::consumer::Consumer;
use crate::{
    Error, EventId, InboxConnection, IntoEventId, InvalidConsumerName, Outcome, RetryPolicy,
};

/// Runs `effect` once per `event_id` for the default consumer ([`DEFAULT_CONSUMER`](crate::DEFAULT_CONSUMER)).
///
/// The same as [`Inbox::default().process(..)`](Inbox::process); see there for the guarantees.
///
/// # Errors
///
/// The handler's own error, unchanged, or the inbox's [`Error`] converted into `E`.
pub fn with_inbox<C, T, E, F>(
    conn: &mut C,
    event_id: impl IntoEventId,
    effect: F,
) -> Result<Outcome<T>, E>
where
    C: InboxConnection,
    F: FnMut(&mut C) -> Result<T, E>,
    E: From<Error>,
{
    Inbox::default().process(conn, event_id, effect)
}

/// The inbox for one consumer: a cheap, cloneable configuration.
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
/// let rewards = Inbox::new("rewards")?;
/// let first = rewards.process(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(10))?;
/// let again = rewards.process(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(10))?;
/// assert_eq!(first, Outcome::Processed(10));
/// assert_eq!(again.duplicate().map(|d| d.deliveries()), Some(2));
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Inbox {
    consumer: Consumer,
    retry: RetryPolicy,
}

impl Default for Inbox {
    /// The default consumer with the default [`RetryPolicy`].
    fn default() -> Self {
        Self {
            consumer: Consumer::default_consumer(),
            retry: RetryPolicy::default(),
        }
    }
}

/// Why one attempt at the transaction ended without an outcome.
enum Failure<E> {
    /// The handler's error: no retry, returned as is.
    Handler(E),
    /// The inbox's own statements failed: retried when it is contention.
    Database(diesel::result::Error),
    /// The handler returned `Ok` on a transaction the database had already given up.
    Aborted(Option<diesel::result::Error>),
}

impl Inbox {
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

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        self.consumer.as_str()
    }

    /// Runs `effect` if and only if this consumer has not processed `event_id` yet, in one
    /// transaction with the record that it did.
    ///
    /// 1. The id is validated; an invalid one is an [`Error::InvalidEventId`] before any SQL.
    /// 2. A transaction opens on `conn` (immediate on SQLite), and `(consumer, event_id)` is
    ///    inserted into the inbox table, whose unique key decides whether the event is new.
    /// 3. New: `effect` runs on the same connection, inside the transaction, and both commit
    ///    together: [`Outcome::Processed`]. Seen before: `effect` does not run, the delivery is
    ///    counted on the existing row: [`Outcome::Duplicate`].
    ///
    /// If `effect` returns an error or panics, the transaction rolls back: no effect, no
    /// inbox row, and the next delivery runs it again. The error is returned unchanged; the
    /// panic continues after the rollback. Contention (serialization failures, deadlocks,
    /// lock timeouts, a busy SQLite) rolls back and retries the whole transaction under the
    /// [`RetryPolicy`], which is why `effect` is `FnMut`.
    ///
    /// Called inside a transaction the caller already holds, it runs as a savepoint and the
    /// caller's commit decides: if the caller rolls back, the event was not processed. Nested
    /// calls do not retry contention, since only the outer transaction can be run again.
    ///
    /// Only what `effect` does through `conn` is exactly-once. An email sent or an HTTP call
    /// made from inside it happens again if the transaction rolls back and is redelivered.
    ///
    /// # Errors
    ///
    /// The effect's own error, unchanged; otherwise the inbox's [`Error`] converted into `E`:
    /// [`Error::InvalidEventId`], [`Error::Database`], [`Error::RetriesExhausted`] or
    /// [`Error::TransactionAborted`].
    pub fn process<C, T, E, F>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
        mut effect: F,
    ) -> Result<Outcome<T>, E>
    where
        C: InboxConnection,
        F: FnMut(&mut C) -> Result<T, E>,
        E: From<Error>,
    {
        let event_id = event_id.into_event_id().map_err(Error::from)?;
        let span = tracing::info_span!(
            "inbox",
            consumer = self.consumer.as_str(),
            event_id = event_id.as_str()
        );
        let _entered = span.enter();

        let nested = transaction_depth(conn).map_err(Error::from)? > 0;
        let mut rng = fastrand::Rng::new();
        let mut attempt = 1;
        loop {
            let error = match self.attempt(conn, &event_id, &mut effect, nested) {
                Ok(outcome) => return Ok(outcome),
                Err(Failure::Handler(error)) => return Err(error),
                Err(Failure::Aborted(source)) => {
                    return Err(Error::TransactionAborted { source }.into())
                }
                Err(Failure::Database(error)) => error,
            };
            if nested || !C::is_contention(&error) {
                return Err(Error::Database(error).into());
            }
            if attempt > self.retry.retries() {
                warn!(attempts = attempt, %error, "contention outlasted the retries");
                return Err(Error::RetriesExhausted {
                    attempts: attempt,
                    source: error,
                }
                .into());
            }
            let delay = self.retry.delay(attempt, &mut rng);
            warn!(attempt, ?delay, %error, "contention, retrying the inbox transaction");
            std::thread::sleep(delay);
            attempt += 1;
        }
    }

    /// One run of the transaction, leaving `conn` at the depth it found it whatever happens.
    fn attempt<C, T, E, F>(
        &self,
        conn: &mut C,
        event_id: &EventId,
        effect: &mut F,
        nested: bool,
    ) -> Result<Outcome<T>, Failure<E>>
    where
        C: InboxConnection,
        F: FnMut(&mut C) -> Result<T, E>,
    {
        let begun = if nested {
            C::TransactionManager::begin_transaction(conn)
        } else {
            conn.begin_top_level()
        };
        begun.map_err(Failure::Database)?;

        let recorded = conn.record_delivery(self.consumer.as_str(), event_id.as_str(), Utc::now());
        let duplicate = match recorded {
            Ok(Recorded::New) => None,
            Ok(Recorded::Seen(duplicate)) => Some(duplicate),
            Err(error) => return Err(rolled_back(conn, Failure::Database(error))),
        };
        if let Some(duplicate) = duplicate {
            commit(conn).map_err(Failure::Database)?;
            info!(
                deliveries = duplicate.deliveries(),
                first_processed_at = %duplicate.processed_at(),
                "duplicate delivery; effect skipped"
            );
            return Ok(Outcome::Duplicate(duplicate));
        }

        let value = match panic::catch_unwind(AssertUnwindSafe(|| effect(conn))) {
            Ok(Ok(value)) => value,
            Ok(Err(error)) => {
                debug!("handler failed; rolled back");
                return Err(rolled_back(conn, Failure::Handler(error)));
            }
            Err(panic) => {
                rollback_quietly(conn);
                panic::resume_unwind(panic);
            }
        };
        match conn.transaction_is_alive() {
            Ok(true) => {}
            Ok(false) => return Err(rolled_back(conn, Failure::Aborted(None))),
            Err(error) => return Err(rolled_back(conn, Failure::Aborted(Some(error)))),
        }
        commit(conn).map_err(Failure::Database)?;
        debug!("processed");
        Ok(Outcome::Processed(value))
    }
}

fn transaction_depth<C: Connection>(conn: &mut C) -> diesel::QueryResult<u32> {
    let depth = C::TransactionManager::transaction_manager_status_mut(conn).transaction_depth()?;
    Ok(depth.map_or(0, std::num::NonZeroU32::get))
}

/// Commits the inbox's transaction or savepoint. If the commit fails and leaves it open (a
/// savepoint release can), it is rolled back, so the caller's depth is restored either way.
fn commit<C: Connection>(conn: &mut C) -> diesel::QueryResult<()> {
    let depth = transaction_depth(conn)?;
    let committed = C::TransactionManager::commit_transaction(conn);
    if committed.is_err() && transaction_depth(conn).is_ok_and(|now| now == depth) {
        rollback_quietly(conn);
    }
    committed
}

/// Rolls back, then hands back `failure`: the reason the attempt failed matters more to the
/// caller than a rollback error, which is only logged (and which marks the connection broken
/// for r2d2 and for Diesel's transaction manager).
fn rolled_back<C: Connection, E>(conn: &mut C, failure: Failure<E>) -> Failure<E> {
    rollback_quietly(conn);
    failure
}

fn rollback_quietly<C: Connection>(conn: &mut C) {
    if let Err(error) = C::TransactionManager::rollback_transaction(conn) {
        warn!(%error, "rolling back the inbox transaction failed");
    }
}
