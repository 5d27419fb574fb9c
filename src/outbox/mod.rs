//! The transactional outbox: an event is enqueued in the business transaction, with one
//! INSERT that commits or rolls back with the business writes, and a [`Relay`] publishes it
//! after the commit.
//!
//! Publishing after the commit can fail and lose the event; publishing before it can announce
//! an order that then rolls back. [`Outbox::enqueue`] writes the event in the business
//! transaction, and the [`Relay`] publishes it once committed.
//!
//! **Consume, transform, produce.** A consumer that emits follow-up events enqueues them inside
//! its inbox effect: the inbox row, the effect and the follow-up event commit together, so a
//! redelivery is a duplicate and enqueues nothing, and a failure rolls all three back.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_inbox::envelope::{Envelope, SchemaVersions};
//! use diesel_inbox::outbox::{Outbox, OutboxMessage, PublishError, Publisher, Relay};
//! use diesel_inbox::{Ack, Error, Inbox};
//!
//! let mut conn = SqliteConnection::establish(":memory:")?;
//! diesel_inbox::run_pending_migrations(&mut conn)?;
//! let (billing, outbox) = (Inbox::new("billing")?, Outbox::new("billing")?);
//! let versions = SchemaVersions::new().accept("order.placed", [1, 2]);
//!
//! // An event as it came off the broker: `Envelope::from_message` reads one back.
//! let placed = Envelope::new("order.placed", "order", "o-1")
//!     .with_schema_version(2)
//!     .json(&serde_json::json!({"total": 1200}))?;
//! for _delivery in 0..2 {
//!     let result = billing.process(&mut conn, &placed, |tx| {
//!         versions.check(&placed)?; // an unknown schema version: dead-lettered, and acked
//!         // ... the effect's writes through `tx`, then the follow-up event, same transaction:
//!         let issued = Envelope::new("invoice.issued", "order", "o-1").json(&serde_json::json!({"total": 1200}))?;
//!         outbox.enqueue(tx, "invoices.issued", &issued)
//!     });
//!     assert_eq!(Ack::of(&result), Ack::Ack); // the second delivery is a duplicate
//! }
//!
//! /// A broker: here, a list of what was published.
//! struct Sent(Vec<String>);
//! impl Publisher for Sent {
//!     fn publish(&mut self, message: &OutboxMessage) -> Result<(), PublishError> {
//!         self.0.push(format!("{} {}", message.topic, message.envelope.event_type()));
//!         Ok(())
//!     }
//! }
//! let mut broker = Sent(Vec::new());
//! Relay::new().run_once(&mut conn, &mut broker)?; // in a loop beside the service
//! assert_eq!(broker.0, ["invoices.issued invoice.issued"]); // once
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **The envelope** ([`Envelope`]) says what the event means; its
//! fields and their headers on the wire are in [`crate::envelope`].
//!
//! **The relay** runs in a loop beside the service ([`Relay::run_once`], or
//! [`Relay::run_once_async`] through a [`BlockingPool`](crate::pool::BlockingPool), or the
//! async flavour's relay; sleeping a little when a pass is idle). A pass:
//!
//! 1. takes the due rows that come first in their aggregate, and the pending rows of those
//!    aggregates after them, in one short transaction (`FOR UPDATE SKIP LOCKED` on PostgreSQL
//!    and MariaDB; SQLite's single writer), and leases them to itself (60 s by default);
//! 2. publishes them outside any transaction, in position order; a row that does not publish
//!    holds back the later rows of its aggregate;
//! 3. marks them in a second short transaction, each write fenced by the lease: published; due
//!    again after a backoff (from 1 s, doubling to 5 min, with jitter); or failed with its
//!    reason, for a permanent error or after 10 attempts ([`Relay::max_attempts`]).
//!
//! Several relays share the outbox: they take disjoint rows and never two rows of one aggregate
//! at once. On MySQL and MariaDB a pass takes only the first row of each aggregate (a second
//! locking read in the take can lose a deadlock), so one busy aggregate moves one row per pass
//! there. A relay that dies holding rows leaves them leased, and once the lease runs out
//! another publishes them again: delivery is at least once. The broker's dedup window drops
//! most repeats (the `diesel-inbox-nats` publisher sets `Nats-Msg-Id` to the event id) and the
//! consumer's inbox the rest. A failed row is kept with its reason until ops retry it
//! ([`Outbox::retry`], `diesel-inbox outbox retry`); the rows after it go on, so it is the one
//! place order per aggregate can break. [`Outbox::prune`] deletes published rows older than a
//! window; pending and failed rows are never deleted.
//!
//! **Order per aggregate is enqueue order, with any number of producers.** The relay cannot see
//! uncommitted rows, so [`Outbox::enqueue`] takes a lock on the aggregate, held until the
//! producer's transaction ends, before its row takes a position: a second producer of the same
//! aggregate, in this process or another, waits for the first to commit or roll back.
//! PostgreSQL: a transaction-scoped advisory lock keyed by a hash of the aggregate; MySQL and
//! MariaDB: a row of `diesel_inbox_outbox_aggregates`, which a Galera cluster certifies as well;
//! SQLite: nothing, one writer holds the database until its commit. It costs one statement per
//! enqueue on the servers (the bench's `enqueue / enqueue, no order lock` row,
//! `docs/performance.md` in the repository). Producers of different aggregates never wait for
//! each other.
//!
//! **Publishers.** `diesel_inbox_nats::JetStreamPublisher` (the package `diesel-inbox-nats`)
//! waits for each publish acknowledgement and tells transient errors (no stream yet, timeouts)
//! from permanent ones (too large, refused by the stream). Another broker takes a screen of
//! code: an [`AsyncPublisher`] (or [`Publisher`]) that sends
//! [`Envelope::to_message`](crate::envelope::Envelope::to_message)'s headers and body and
//! answers [`PublishError::transient`] or [`PublishError::permanent`]; a RabbitMQ one with
//! `lapin`, for instance:
//!
//! ```ignore
//! struct Rabbit(lapin::Channel);
//!
//! impl AsyncPublisher for Rabbit {
//!     async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
//!         let wire = message.envelope.to_message();
//!         let headers = wire.headers.into_iter()
//!             .map(|(name, value)| (name.into(), AMQPValue::LongString(value.into())))
//!             .collect::<BTreeMap<_, _>>();
//!         let properties = BasicProperties::default()
//!             .with_message_id(message.envelope.id().as_str().into())
//!             .with_headers(FieldTable::from(headers));
//!         let confirm = self.0
//!             .basic_publish("events", &message.topic, BasicPublishOptions::default(), &wire.body, properties)
//!             .await
//!             .map_err(PublishError::transient)?;
//!         match confirm.await.map_err(PublishError::transient)? {
//!             Confirmation::Nack(_) => Err(PublishError::transient("the broker nacked it")),
//!             _ => Ok(()), // publisher confirms: the broker has it
//!         }
//!     }
//! }
//! ```
//!
//! **Schema versions.** A consumer declares what it reads,
//! [`SchemaVersions::new().accept("order.placed", [1, 2])`](crate::envelope::SchemaVersions),
//! and checks each envelope inside the effect: an unknown version is a permanent error, so the
//! event is dead-lettered with the reason ("schema version 3 is not accepted ... deploy a
//! consumer that reads version 3, then redrive the event") and acked, never a crash loop.
//! Before a release, `diesel_inbox_test::check_schema_fixtures` reads one fixture per accepted
//! version and decodes it with the consumer's own code, so an incompatible schema fails a test
//! rather than production.
//!
//! `diesel-inbox-nats/examples/async_service.rs` in the repository plays the whole flow
//! against JetStream on diesel-async: an orders service enqueues events, a relay task publishes
//! them, a billing consumer runs each through the async inbox, acks after the commit and emits
//! `invoice.issued` through the outbox in the same transaction; a redelivery and an unknown
//! schema version are absorbed.
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
