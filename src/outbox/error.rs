//! What the outbox refuses to enqueue, and why: inside [`Error::Outbox`](crate::Error::Outbox).

use crate::id::EventId;

/// Why an event was not enqueued, or an envelope not built or read. Nothing was enqueued.
/// Its broker answer is [`Refused::ack`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// An envelope could not be built, encoded or read back: a header is missing or
    /// malformed, a custom header takes a reserved name, or the payload does not serialize.
    /// Nothing was enqueued.
    #[error("invalid event envelope: {0}")]
    InvalidEnvelope(String),
    /// An event with this id is in the outbox already: the producer enqueued it twice, or
    /// reused an id. Nothing more was enqueued; give each event its own id.
    #[error("event {event_id:?} is already in the outbox: enqueue each event once, with an id of its own")]
    AlreadyEnqueued {
        /// The id.
        event_id: EventId,
    },
}
