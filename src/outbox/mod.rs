//! The transactional outbox: an event is enqueued in the business transaction, with one
//! INSERT that commits or rolls back with the business writes, and a [`Relay`] publishes it
//! after the commit.
//!
//! A consumer that emits follow-up events enqueues them inside its inbox effect: the inbox row,
//! the effect and the follow-up events commit together or not at all.
//!
//! - `mod.rs`: [`Outbox`] and [`Outbox::enqueue`].
//! - `relay.rs`: [`Relay`], a pass that takes due rows, publishes them, and marks them.
//! - `plan.rs`: the relay's decisions (order, backoff, failure), apart from its I/O.
//! - `publish.rs`: the [`Publisher`] and [`AsyncPublisher`] traits.
//! - `ledger.rs`: what ops read and do: [`OutboxRecord`], retrying failed rows, retention.
//! - `sql.rs`: its statements for every backend and the rows they read and write;
//!   `state.rs`: [`OutboxState`]; `asynch.rs`: the async front (feature `async`).

use std::collections::BTreeMap;

use crate::decide::{Failure, Scope};
use crate::duration::now;
use crate::engine::{self, run_ready, Body, Subject};
use crate::sql::{Blocking, Db, Sql};
use crate::{envelope::Envelope, observe, Error, InboxConnection, RetryPolicy};
use sql::{NewOutboxRow, OutboxSql};

#[cfg(feature = "async")]
pub(crate) mod asynch;
pub(crate) mod error;
mod ledger;
mod plan;
mod publish;
mod relay;
pub(crate) mod sql;
pub(crate) mod state;

#[cfg(feature = "async")]
pub(crate) use relay::Awaits;

pub use error::Refused;
pub use ledger::{OutboxRecord, OutboxStats};
#[cfg(feature = "tokio")]
pub use publish::BlockingPublisher;
pub use publish::{AsyncPublisher, OutboxMessage, PublishError, Publisher};
pub use relay::{Relay, RelayPass};
pub use state::OutboxState;

/// The longest topic the outbox takes, in bytes.
pub const MAX_TOPIC_BYTES: usize = 255;

/// A producer's outbox: enqueues events in the caller's transaction.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::{envelope::Envelope, outbox::Outbox};
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let outbox = Outbox::new("orders-service")?;
///
/// conn.transaction(|tx| {
///     // ... the business writes, then the event, in the same transaction:
///     let placed = Envelope::new("order.placed", "order", "42").json(&serde_json::json!({"total": 1250}))?;
///     outbox.enqueue(tx, "orders.placed", &placed)
/// })?;
/// assert_eq!(Outbox::stats(&mut conn)?.pending, 1);
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Outbox {
    producer: String,
    /// Whether an enqueue takes its aggregate's order lock; always, but for
    /// [`Outbox::without_order_lock`].
    order_lock: bool,
}

impl Outbox {
    /// The outbox of the service `producer`, the name its envelopes carry unless they name
    /// one themselves.
    ///
    /// # Errors
    ///
    /// [`outbox::Refused::InvalidEnvelope`](Refused::InvalidEnvelope) when `producer` is empty.
    pub fn new(producer: &str) -> Result<Self, Error> {
        if producer.trim().is_empty() {
            return Err(Error::invalid_envelope(
                "the outbox needs a producer name: the service that emits the events".into(),
            ));
        }
        Ok(Self {
            producer: producer.to_owned(),
            order_lock: true,
        })
    }

    /// This outbox with enqueues that take no order lock, so that concurrent producers of one
    /// aggregate may publish out of enqueue order. For measuring what the lock costs (the
    /// benchmark's `enqueue, no order lock` row) and for showing that order needs it; a service
    /// that needs per-aggregate order keeps the lock.
    #[doc(hidden)]
    #[must_use]
    pub fn without_order_lock(mut self) -> Self {
        self.order_lock = false;
        self
    }

    /// The producer name.
    pub fn producer(&self) -> &str {
        &self.producer
    }

    /// Enqueues `envelope` for `topic` (a subject, topic, queue or routing key: the relay's
    /// publisher reads it) on `conn`.
    ///
    /// Inside a transaction, including an inbox effect's, the row commits or rolls back with
    /// everything else the transaction wrote; the relay publishes it once it has committed.
    /// Outside one, the enqueue commits in a transaction of its own.
    ///
    /// The rows of one aggregate are published in the order they were enqueued, even when
    /// producers in several processes enqueue for it at once: the enqueue holds a lock on its
    /// aggregate until its transaction ends (a transaction-scoped advisory lock on PostgreSQL,
    /// a row of `diesel_inbox_outbox_aggregates` on MySQL/MariaDB; SQLite runs one writer at a
    /// time anyway), so a second producer of the same aggregate waits for the first to commit
    /// or roll back before its row takes a position. That costs one statement more per
    /// enqueue on the servers. Producers of different aggregates never wait for each other
    /// (on PostgreSQL, but for the rare aggregates whose 32-bit hashes collide). Keep
    /// transactions that enqueue short: a producer of the same aggregate waits for them.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::{envelope::Envelope, outbox::Outbox, Inbox};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let outbox = Outbox::new("orders-service")?;
    ///
    /// // In the handler's transaction: the follow-up event commits with the effect, or neither does.
    /// let _ = Inbox::new("orders")?.process(&mut conn, "evt-1", |tx| {
    ///     let placed = Envelope::new("order.placed", "order", "42").json(&serde_json::json!({"qty": 1}))?;
    ///     outbox.enqueue(tx, "orders.placed", &placed)
    /// })?;
    /// assert_eq!(Outbox::stats(&mut conn)?.pending, 1);
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`outbox::Refused::InvalidEnvelope`](Refused::InvalidEnvelope) for an empty or overlong
    /// topic, or aggregate type or id ([`MAX_TOPIC_BYTES`], and 255 bytes);
    /// [`outbox::Refused::AlreadyEnqueued`](Refused::AlreadyEnqueued) when an event with this id is
    /// in the outbox already (nothing is written, and the transaction stays usable on every
    /// backend); [`Error::Database`] otherwise.
    pub fn enqueue<C: InboxConnection>(
        &self,
        conn: &mut C,
        topic: &str,
        envelope: &Envelope,
    ) -> Result<(), Error> {
        run_ready(self.enqueue_in::<Blocking, _>(conn, topic, envelope))
    }

    /// An enqueue in either flavour.
    pub(crate) async fn enqueue_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        topic: &str,
        envelope: &Envelope,
    ) -> Result<(), Error> {
        check_text("topic", topic, MAX_TOPIC_BYTES)?;
        check_text("aggregate type", &envelope.aggregate_type, 255)?;
        check_text("aggregate id", &envelope.aggregate_id, 255)?;
        envelope.validate()?;
        let message = if envelope.producer.is_empty() {
            let mut stamped = envelope.clone();
            stamped.producer.clone_from(&self.producer);
            stamped.to_message()
        } else {
            envelope.to_message()
        };
        let headers: BTreeMap<&str, &str> = message
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        let headers = serde_json::to_string(&headers)
            .map_err(|error| Error::invalid_envelope(error.to_string()))?;
        let event_id = envelope.id.as_str();
        let mut insert = Insert {
            order_lock: self.order_lock,
            row: NewOutboxRow {
                event_id,
                topic,
                aggregate_type: &envelope.aggregate_type,
                aggregate_id: &envelope.aggregate_id,
                event_type: &envelope.event_type,
                headers: &headers,
                body: &message.body,
                now: now(),
            },
        };
        // The aggregate's order lock is held until the transaction ends; outside one, a
        // transaction of its own holds it for the INSERT.
        let inserted = if conn.depth()? == 0 {
            let subject = Subject {
                consumer: "outbox",
                event_id: Some(event_id),
            };
            engine::run(
                conn,
                Scope::TopLevel,
                &RetryPolicy::default(),
                subject,
                insert,
            )
            .await
            .map_err(Failure::into_error)?
        } else {
            insert.attempt(conn).await.map_err(Failure::into_error)?
        };
        if !inserted {
            return Err(Refused::AlreadyEnqueued {
                event_id: envelope.id.clone(),
            }
            .into());
        }
        observe::outbox_enqueued(topic);
        tracing::debug!(event_id, topic, "event enqueued in the outbox");
        Ok(())
    }
}

/// An enqueue's statements: the aggregate's order lock, then the row; `false` when the
/// event is in the outbox already.
struct Insert<'a> {
    order_lock: bool,
    row: NewOutboxRow<'a>,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Insert<'_> {
    type Output = bool;
    type Error = Error;

    async fn attempt(&mut self, conn: &mut C) -> Result<bool, Failure<Error>> {
        let row = &self.row;
        if self.order_lock {
            let (kind, id) = (row.aggregate_type, row.aggregate_id);
            C::Backend::lock_outbox_aggregate(conn, kind, id, row.now).await?;
        }
        Ok(C::Backend::insert_outbox(conn, row).await?)
    }
}

/// Refuses an empty or overlong routing field before any SQL runs.
fn check_text(what: &str, value: &str, max: usize) -> Result<(), Error> {
    if value.is_empty() || value.len() > max {
        return Err(Error::invalid_envelope(format!(
            "the {what} must be 1 to {max} bytes, not {}",
            value.len()
        )));
    }
    Ok(())
}
