//! The transactional outbox: events enqueued in the business transaction, published after it
//! commits by a [`Relay`].

mod publish;

pub use publish::{AsyncPublisher, OutboxMessage, PublishError, Publisher};
