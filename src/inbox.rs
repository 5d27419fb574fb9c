//! The inbox transaction: record the delivery, run the effect once, commit both together.

use std::any::Any;
use std::fmt::Display;
use std::num::NonZeroU32;
use std::panic::{self, AssertUnwindSafe};

use chrono::Utc;
use diesel::connection::TransactionManager;
use diesel::Connection;
use serde::Serialize;
use tracing::{debug, error, info, warn};

use crate::backend::sealed::{Existing, InboxBackend, LogRow, Recorded};
use crate::backend::Key;
use crate::consumer::Consumer;
use crate::{
    DeadLettered, DeadLetters, Delivery, Duplicate, Error, InboxConnection, IntoDelivery,
    InvalidConsumerName, Outcome, RetryPolicy,
};

/// Runs `effect` once per event for the default consumer ([`DEFAULT_CONSUMER`](crate::DEFAULT_CONSUMER)).
///
/// The same as [`Inbox::default().process(..)`](Inbox::process); see there for the guarantees.
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
    E: From<Error> + Display,
{
    Inbox::default().process(conn, delivery, effect)
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
/// let rewards = Inbox::new("rewards")?.max_attempts(5);
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
    max_attempts: Option<NonZeroU32>,
}

impl Default for Inbox {
    /// The default consumer, the default [`RetryPolicy`], no dead-lettering.
    fn default() -> Self {
        Self {
            consumer: Consumer::default_consumer(),
            retry: RetryPolicy::default(),
            max_attempts: None,
        }
    }
}

/// Why one run of a transaction ended without a result. It has been rolled back.
pub(crate) enum Failure<E> {
    /// The handler's error: returned as is, after the failure is recorded.
    Handler(E),
    /// The handler panicked: the failure is recorded and the panic resumed.
    Panicked(Box<dyn Any + Send>),
    /// The inbox's own statements failed: retried when it is contention.
    Database(diesel::result::Error),
    /// The inbox rejects the outcome; not retried.
    Inbox(Error),
}

impl<E> From<diesel::result::Error> for Failure<E> {
    fn from(error: diesel::result::Error) -> Self {
        Failure::Database(error)
    }
}

impl<E: From<Error>> Failure<E> {
    /// The error the caller gets; a panic continues unwinding.
    pub(crate) fn into_error(self) -> E {
        match self {
            Failure::Handler(error) => error,
            Failure::Database(error) => Error::Database(error).into(),
            Failure::Inbox(error) => error.into(),
            Failure::Panicked(panic) => panic::resume_unwind(panic),
        }
    }
}

/// What a delivery settled as, before the transaction commits.
pub(crate) enum Settled<T> {
    Outcome(Outcome<T>),
    /// The id was reused with another payload: commit the count, then report it.
    PayloadConflict,
}

/// The states of a row in `diesel_inbox`.
pub(crate) mod row_state {
    pub(crate) const PROCESSED: &str = "processed";
    pub(crate) const DEAD_LETTERED: &str = "dead_lettered";
    pub(crate) const DISCARDED: &str = "discarded";
}

/// The longest error text kept per failure, in bytes.
const MAX_ERROR_BYTES: usize = 8 * 1024;

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

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        self.consumer.as_str()
    }

    /// Operations on this consumer's dead letters.
    pub fn dead_letters(&self) -> DeadLetters {
        DeadLetters::new(self.clone())
    }

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
    /// `FnMut`. That covers the inbox's own statements and the commit, and the effect's
    /// statements where the database ends the transaction for contention (a MySQL deadlock);
    /// elsewhere contention inside the effect comes back as the effect's own error.
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
    /// # Errors
    ///
    /// The effect's own error, unchanged; otherwise the inbox's [`Error`] converted into `E`:
    /// [`Error::InvalidEventId`], [`Error::PayloadMismatch`], [`Error::Database`],
    /// [`Error::RetriesExhausted`] or [`Error::TransactionAborted`].
    pub fn process<C, T, E, F>(
        &self,
        conn: &mut C,
        delivery: impl IntoDelivery,
        effect: F,
    ) -> Result<Outcome<T>, E>
    where
        C: InboxConnection,
        F: FnMut(&mut C) -> Result<T, E>,
        E: From<Error> + Display,
    {
        self.run(conn, delivery, effect, |_| Ok(None))
    }

    /// [`process`](Self::process), keeping the effect's return value (as JSON, in the inbox
    /// row) so that a duplicate delivery gets the first answer back from
    /// [`Duplicate::stored_result`]: a retried request receives the original response.
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
        E: From<Error> + Display,
    {
        self.run(conn, delivery, effect, |value| {
            serde_json::to_string(value).map(Some)
        })
    }

    fn run<C, T, E, F>(
        &self,
        conn: &mut C,
        delivery: impl IntoDelivery,
        mut effect: F,
        encode: impl Fn(&T) -> Result<Option<String>, serde_json::Error>,
    ) -> Result<Outcome<T>, E>
    where
        C: InboxConnection,
        F: FnMut(&mut C) -> Result<T, E>,
        E: From<Error> + Display,
    {
        let delivery = delivery.into_delivery().map_err(Error::from)?;
        let span = tracing::info_span!(
            "inbox",
            consumer = self.consumer.as_str(),
            event_id = delivery.id.as_str()
        );
        let _entered = span.enter();

        let nested = transaction_depth(conn).map_err(Error::from)? > 0;
        let settled = self.transact(conn, nested, |tx| {
            self.deliver(tx, &delivery, &mut effect, &encode, nested)
        });
        match settled {
            Ok(Settled::Outcome(outcome)) => Ok(outcome),
            Ok(Settled::PayloadConflict) => Err(Error::PayloadMismatch {
                event_id: delivery.id,
            }
            .into()),
            Err(Failure::Handler(error)) => self.settle_failure(conn, &delivery, error, nested),
            Err(Failure::Panicked(panic)) => {
                self.settle_panic(conn, Some(&delivery), panic, nested)
            }
            Err(failure) => Err(failure.into_error()),
        }
    }

    /// The body of the inbox transaction.
    fn deliver<C, T, E, F>(
        &self,
        conn: &mut C,
        delivery: &Delivery,
        effect: &mut F,
        encode: &impl Fn(&T) -> Result<Option<String>, serde_json::Error>,
        nested: bool,
    ) -> Result<Settled<T>, Failure<E>>
    where
        C: InboxConnection,
        F: FnMut(&mut C) -> Result<T, E>,
    {
        let key = self.key(delivery);
        let fingerprint = delivery.payload.as_ref().map(crate::Payload::fingerprint);
        let recorded = conn.backend().record_delivery(
            key,
            Utc::now(),
            fingerprint.as_ref().map(|f| &f[..]),
        )?;
        match recorded {
            Recorded::New => run_effect(conn, key, effect, encode)
                .map(|value| Settled::Outcome(Outcome::Processed(value))),
            Recorded::Seen(existing) => {
                // The effect will not run: what commits now is the delivery count alone.
                // Inside a caller's transaction, the caller's writes decide durability.
                if !nested {
                    conn.backend().commit_without_waiting_for_disk()?;
                }
                seen(conn, key, fingerprint.as_ref(), existing)
            }
        }
    }

    /// After a handler error: records the failure (at the top level only: a nested record
    /// would roll back with the caller) and, when that dead-letters the event, reports
    /// [`Outcome::DeadLettered`] instead of the error.
    pub(crate) fn settle_failure<C: InboxConnection, T, E: Display>(
        &self,
        conn: &mut C,
        delivery: &Delivery,
        error: E,
        nested: bool,
    ) -> Result<Outcome<T>, E> {
        if !nested {
            if let Some(dead) = self.record_failure(conn, delivery, &error.to_string()) {
                return Ok(Outcome::DeadLettered(dead));
            }
        }
        Err(error)
    }

    /// After a handler panic: records the failure like an error, then goes on unwinding.
    pub(crate) fn settle_panic<C: InboxConnection>(
        &self,
        conn: &mut C,
        delivery: Option<&Delivery>,
        panic: Box<dyn Any + Send>,
        nested: bool,
    ) -> ! {
        if let (false, Some(delivery)) = (nested, delivery) {
            let _ = self.record_failure(conn, delivery, &panic_message(&*panic));
        }
        panic::resume_unwind(panic)
    }

    /// Records a failed attempt in a transaction of its own and dead-letters the event when
    /// it has reached `max_attempts`. A failure to record is logged, not returned: the
    /// handler's error is what the caller needs.
    fn record_failure<C: InboxConnection>(
        &self,
        conn: &mut C,
        delivery: &Delivery,
        error: &str,
    ) -> Option<DeadLettered> {
        let error = truncate(error, MAX_ERROR_BYTES);
        let key = self.key(delivery);
        let recorded = self.transact::<_, _, Error>(conn, false, |tx| {
            let now = Utc::now();
            let sql = tx.backend();
            let (attempts, state) =
                sql.record_failure(key, now, error, delivery.payload.as_ref())?;
            let limit = self
                .max_attempts
                .map_or(i64::MAX, |max| i64::from(max.get()));
            if attempts < limit || state != crate::dead_letter::state::RETRYING {
                return Ok((attempts, None));
            }
            if !sql.settle(key, now, row_state::DEAD_LETTERED)? {
                // Another delivery processed it meanwhile; there is nothing to give up on.
                return Ok((attempts, None));
            }
            sql.set_failure_state(
                key,
                crate::dead_letter::state::RETRYING,
                crate::dead_letter::state::DEAD_LETTERED,
                now,
            )?;
            sql.log(
                key,
                &LogRow {
                    entry: crate::dead_letter::state::DEAD_LETTERED.to_owned(),
                    attempt: Some(attempts),
                    error: Some(error.to_owned()),
                    actor: None,
                    reason: Some(format!("failed {attempts} times, the limit")),
                    at: now,
                },
            )?;
            Ok((
                attempts,
                Some(DeadLettered {
                    since: now,
                    deliveries: 1,
                    discarded: false,
                }),
            ))
        });
        match recorded {
            Ok((attempts, None)) => {
                warn!(
                    attempts,
                    error, "handler failed; rolled back, the event will run again on redelivery"
                );
                None
            }
            Ok((attempts, Some(dead))) => {
                error!(
                    attempts,
                    error, "handler failed too often; event dead-lettered"
                );
                Some(dead)
            }
            Err(failure) => {
                warn!(handler_error = error, record_error = %failure.into_error(), "handler failed, and recording the failure failed too");
                None
            }
        }
    }

    /// Runs `body` in a transaction, or a savepoint when `nested`, and commits what it
    /// returns. Anything else rolls back; contention at the top level is retried.
    pub(crate) fn transact<C, R, E>(
        &self,
        conn: &mut C,
        nested: bool,
        mut body: impl FnMut(&mut C) -> Result<R, Failure<E>>,
    ) -> Result<R, Failure<E>>
    where
        C: InboxConnection,
    {
        let mut rng = fastrand::Rng::new();
        let mut attempt = 1;
        loop {
            let depth = transaction_depth(conn)?;
            let begun = if nested {
                C::TransactionManager::begin_transaction(conn)
            } else {
                conn.backend().begin_top_level()
            };
            let failure = match begun {
                Err(error) => Failure::Database(error),
                // A panic the body did not catch itself (a `Serialize` impl, say) must not
                // leave the connection inside the transaction either.
                Ok(()) => match panic::catch_unwind(AssertUnwindSafe(|| body(conn))) {
                    Ok(Ok(value)) => match commit(conn) {
                        Ok(()) => return Ok(value),
                        Err(error) => Failure::Database(error),
                    },
                    Ok(Err(failure)) => {
                        rollback_to(conn, depth);
                        failure
                    }
                    Err(panic) => {
                        rollback_to(conn, depth);
                        panic::resume_unwind(panic)
                    }
                },
            };
            let error = match failure {
                Failure::Database(error) if !nested && C::Sql::is_contention(&error) => error,
                other => return Err(other),
            };
            if attempt > self.retry.retries() {
                warn!(attempts = attempt, %error, "contention outlasted the retries");
                return Err(Failure::Inbox(Error::RetriesExhausted {
                    attempts: attempt,
                    source: error,
                }));
            }
            let delay = self.retry.delay(attempt, &mut rng);
            warn!(attempt, ?delay, %error, "contention, retrying the inbox transaction");
            std::thread::sleep(delay);
            attempt += 1;
        }
    }

    pub(crate) fn key<'a>(&'a self, delivery: &'a Delivery) -> Key<'a> {
        (self.consumer.as_str(), delivery.id.as_str())
    }
}

/// Runs the effect of a new event, catching a panic so the transaction can roll back.
pub(crate) fn run_effect<C, T, E, F>(
    conn: &mut C,
    key: Key<'_>,
    effect: &mut F,
    encode: &impl Fn(&T) -> Result<Option<String>, serde_json::Error>,
) -> Result<T, Failure<E>>
where
    C: InboxConnection,
    F: FnMut(&mut C) -> Result<T, E>,
{
    let value = call_effect(conn, effect)?;
    ensure_alive(conn)?;
    let encoded = encode(&value).map_err(|e| Failure::Inbox(Error::StoredResult(e)))?;
    if let Some(json) = encoded {
        conn.backend().store_result(key, &json)?;
    }
    debug!("processed");
    Ok(value)
}

/// Calls the effect, catching a panic so the transaction can roll back before it goes on.
///
/// Where one failed statement can end the whole transaction (MySQL, SQLite), it then checks
/// that the transaction is still there, so nothing runs on in autocommit mode. One ended by
/// contention (a MySQL deadlock) is reported as contention, whatever the handler made of it:
/// the attempt is retried, and not counted as the event's failure.
pub(crate) fn call_effect<C, T, E, F>(conn: &mut C, effect: &mut F) -> Result<T, Failure<E>>
where
    C: InboxConnection,
    F: FnMut(&mut C) -> Result<T, E>,
{
    let depth = transaction_depth(conn)?;
    let result = match panic::catch_unwind(AssertUnwindSafe(|| effect(conn))) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(Failure::Handler(error)),
        Err(panic) => return Err(Failure::Panicked(panic)),
    };
    // A handler that ran COMMIT or ROLLBACK itself: Diesel noticed (PostgreSQL reports the
    // transaction status with every reply), and nothing more may run here.
    if transaction_depth(conn)? != depth {
        return Err(Failure::Inbox(Error::TransactionAborted { source: None }));
    }
    if !C::Sql::STATEMENT_ERRORS_CAN_END_TRANSACTION {
        return result;
    }
    match conn.backend().transaction_is_alive() {
        Ok(true) => result,
        ended if C::Sql::CONTENTION_ENDS_TRANSACTION => {
            let message = "the database rolled back the transaction under the handler (deadlock)";
            let source = ended.err().unwrap_or_else(|| {
                diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::SerializationFailure,
                    Box::new(message.to_owned()),
                )
            });
            Err(Failure::Database(source))
        }
        ended => Err(Failure::Inbox(Error::TransactionAborted {
            source: ended.err(),
        })),
    }
}

/// Refuses to commit a transaction the database has already aborted: PostgreSQL keeps an
/// aborted transaction open and turns its COMMIT into a silent rollback. (Where an error can
/// end the transaction instead, [`call_effect`] has checked already.)
pub(crate) fn ensure_alive<C: InboxConnection, E>(conn: &mut C) -> Result<(), Failure<E>> {
    if C::Sql::STATEMENT_ERRORS_CAN_END_TRANSACTION {
        return Ok(());
    }
    match conn.backend().transaction_is_alive() {
        Ok(true) => Ok(()),
        Ok(false) => Err(Failure::Inbox(Error::TransactionAborted { source: None })),
        Err(source) => Err(Failure::Inbox(Error::TransactionAborted {
            source: Some(source),
        })),
    }
}

/// What a delivery of an event seen before comes to: a payload conflict, a duplicate, or a
/// dead-lettered event. The effect does not run.
pub(crate) fn seen<C: InboxConnection, T, E>(
    conn: &mut C,
    key: Key<'_>,
    fingerprint: Option<&[u8; 32]>,
    existing: Existing,
) -> Result<Settled<T>, Failure<E>> {
    if let (Some(given), Some(stored)) = (fingerprint, &existing.payload_hash) {
        if given[..] != stored[..] {
            conn.backend().note_payload_conflict(key)?;
            warn!(event_id = key.1, "payload conflict: this event id was first delivered with another payload; effect skipped");
            return Ok(Settled::PayloadConflict);
        }
    }
    let deliveries = existing.deliveries.unsigned_abs();
    if existing.state == row_state::PROCESSED {
        info!(
            event_id = key.1,
            deliveries,
            first_processed_at = %existing.processed_at,
            "duplicate delivery; effect skipped"
        );
        return Ok(Settled::Outcome(Outcome::Duplicate(Duplicate {
            processed_at: existing.processed_at,
            deliveries,
            result: existing.result,
        })));
    }
    info!(event_id = key.1, deliveries, state = %existing.state, "delivery of a dead-lettered event; effect skipped");
    Ok(Settled::Outcome(Outcome::DeadLettered(DeadLettered {
        since: existing.processed_at,
        deliveries,
        discarded: existing.state == row_state::DISCARDED,
    })))
}

pub(crate) fn transaction_depth<C: Connection>(conn: &mut C) -> diesel::QueryResult<u32> {
    let depth = C::TransactionManager::transaction_manager_status_mut(conn).transaction_depth()?;
    Ok(depth.map_or(0, std::num::NonZeroU32::get))
}

/// Commits the inbox's transaction or savepoint. If the commit fails and leaves it open (a
/// savepoint release can), it is rolled back, so the caller's depth is restored either way.
fn commit<C: Connection>(conn: &mut C) -> diesel::QueryResult<()> {
    let depth = transaction_depth(conn)?;
    let committed = C::TransactionManager::commit_transaction(conn);
    if committed.is_err() {
        rollback_to(conn, depth.saturating_sub(1));
    }
    committed
}

/// Rolls back every transaction level above `depth`, so a failure anywhere inside leaves the
/// connection as the inbox found it. A level that fails to roll back (a savepoint the server
/// already dropped with the whole transaction) is logged and the next level is tried: Diesel
/// counts it as gone, and the outer `ROLLBACK` ends whatever is left. Rollback errors are
/// not returned: the reason the attempt failed matters more to the caller.
pub(crate) fn rollback_to<C: Connection>(conn: &mut C, depth: u32) {
    while let Ok(before) = transaction_depth(conn) {
        if before <= depth {
            return;
        }
        if let Err(error) = C::TransactionManager::rollback_transaction(conn) {
            warn!(%error, "rolling back the inbox transaction failed");
        }
        if transaction_depth(conn).map_or(true, |after| after >= before) {
            return;
        }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a non-string payload");
    format!("handler panicked: {message}")
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("short", 100), "short");
    }

    #[test]
    fn panic_messages_name_the_payload() {
        assert_eq!(panic_message(&"boom"), "handler panicked: boom");
        assert_eq!(
            panic_message(&String::from("bang")),
            "handler panicked: bang"
        );
        assert_eq!(panic_message(&7), "handler panicked: a non-string payload");
    }
}
