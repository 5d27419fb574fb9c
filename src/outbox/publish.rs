//! What the relay publishes through: a [`Publisher`] (blocking) or an [`AsyncPublisher`]
//! (for tokio services), each a single method that sends one [`OutboxMessage`] and says
//! whether it failed for good; [`BlockingPublisher`] turns the second into the first.

use std::future::Future;

use crate::envelope::Envelope;

/// One outbox record on its way to the broker: where it goes and the envelope it carries.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OutboxMessage {
    /// The outbox row's position: enqueue order, and so publish order per aggregate.
    pub position: i64,
    /// The destination named at enqueue: a subject, topic, queue or routing key.
    pub topic: String,
    /// The event.
    pub envelope: Envelope,
    /// Which publish attempt this is, from 1.
    pub attempt: u32,
}

impl OutboxMessage {
    /// A message for `topic` carrying `envelope`, as a relay's first attempt at the row at
    /// position 0 would hand it over: for a publisher's own tests.
    pub fn new(topic: &str, envelope: Envelope) -> Self {
        Self {
            position: 0,
            topic: topic.to_owned(),
            envelope,
            attempt: 1,
        }
    }
}

/// Why a publish failed, and whether trying again can help.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The broker could not take it now (unreachable, timed out, no stream yet): the relay
    /// tries again after its backoff, up to its attempt limit.
    #[error("transient publish failure: {0}")]
    Transient(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// It will fail the same way every time (too large, refused by the broker): the relay
    /// fails the row at once, with this reason.
    #[error("permanent publish failure: {0}")]
    Permanent(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl PublishError {
    /// A failure that may pass: retried after the relay's backoff.
    pub fn transient(reason: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Transient(reason.into())
    }

    /// A failure that will recur: the row is failed at once.
    pub fn permanent(reason: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Permanent(reason.into())
    }

    /// Whether the relay may try again.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Transient(_))
    }
}

/// Sends outbox messages to a broker, blocking until the broker has them.
///
/// `Ok` must mean the broker accepted the message (a publish acknowledgement where the broker
/// has one): the relay then marks the row published and never sends it again.
pub trait Publisher {
    /// Sends one message.
    ///
    /// # Errors
    ///
    /// [`PublishError::Transient`] to be retried, [`PublishError::Permanent`] to fail the row.
    fn publish(&mut self, message: &OutboxMessage) -> Result<(), PublishError>;
}

/// [`Publisher`] for async services: the relay awaits each publish in order.
pub trait AsyncPublisher: Send + Sync {
    /// Sends one message; resolves once the broker has accepted it.
    ///
    /// # Errors
    ///
    /// As [`Publisher::publish`].
    fn publish(
        &self,
        message: &OutboxMessage,
    ) -> impl Future<Output = Result<(), PublishError>> + Send;
}

/// A blocking [`Publisher`] made of an [`AsyncPublisher`]: each publish is run to its end on a
/// tokio runtime, from a thread that may block.
///
/// For a blocking relay pass on a thread of its own (inside deadpool-diesel's `interact`, or
/// `spawn_blocking`) with an async broker client, such as the JetStream publisher. Not for a
/// runtime's worker thread, where waiting on the runtime panics: an async service awaits
/// [`Relay::run_once_async`](crate::outbox::Relay::run_once_async) instead.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::{outbox::{AsyncPublisher, BlockingPublisher, Outbox, OutboxMessage, PublishError, Relay}, envelope::Envelope};
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
/// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
/// let mut publisher = BlockingPublisher::new(Accepting, runtime.handle().clone());
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// Outbox::new("orders")?.enqueue(&mut conn, "orders.placed", &Envelope::new("order.placed", "order", "42"))?;
/// assert_eq!(Relay::new().run_once(&mut conn, &mut publisher)?.published, 1);
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub struct BlockingPublisher<P> {
    publisher: P,
    runtime: tokio::runtime::Handle,
}

#[cfg(feature = "tokio")]
impl<P: AsyncPublisher> BlockingPublisher<P> {
    /// Publishes through `publisher`, awaiting each publish on `runtime` (in a tokio service,
    /// `Handle::current()` taken before the blocking step).
    pub fn new(publisher: P, runtime: tokio::runtime::Handle) -> Self {
        Self { publisher, runtime }
    }

    /// The async publisher inside.
    pub fn get_ref(&self) -> &P {
        &self.publisher
    }
}

#[cfg(feature = "tokio")]
impl<P: AsyncPublisher> Publisher for BlockingPublisher<P> {
    fn publish(&mut self, message: &OutboxMessage) -> Result<(), PublishError> {
        self.runtime.block_on(self.publisher.publish(message))
    }
}
