//! What the relay publishes through: a [`Publisher`] (blocking) or an [`AsyncPublisher`]
//! (for tokio services), each a single method that sends one [`OutboxMessage`] and says
//! whether it failed for good.

use std::future::Future;

use crate::Envelope;

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
