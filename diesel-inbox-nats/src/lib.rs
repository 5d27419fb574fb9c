//! NATS JetStream: a publisher for the outbox relay, envelopes read back from JetStream
//! messages, and a stream as a replay's source.
//!
//! [`JetStreamPublisher`] publishes each outbox message to its topic as the subject, the
//! envelope's fields as headers and its payload as the body, and sets `Nats-Msg-Id` to the
//! event id. It returns only once the stream has acknowledged the message.
//! [`envelope_of`] reads the envelope back on the consumer's side, for the inbox.
//! `JetStreamSource` (with the feature `async` too) reads a range of a stream's sequences
//! back for a governed replay ([`diesel_inbox::replay`]), on the async flavour.
//!
//! # Two layers of deduplication
//!
//! The relay publishes at least once: a publish whose acknowledgement was lost, or a relay
//! that crashed between the publish and marking the row published, sends the same event again.
//! Two layers absorb the copy, both keyed by the event id:
//!
//! - **The stream's dedup window.** JetStream remembers each `Nats-Msg-Id` for the stream's
//!   `duplicate_window` (2 minutes unless configured). A retry within the window is dropped by
//!   the server: it acknowledges the retry as a duplicate, stores nothing, and the relay counts
//!   it as published. Consumers never see it.
//! - **The consumer's inbox.** A retry after the window is stored again and delivered again;
//!   the inbox on the consumer's side finds the event id already processed and answers
//!   [`Outcome::Duplicate`](diesel_inbox::Outcome::Duplicate), so the effect does not run twice.
//!
//! The window is an optimisation, the inbox the guarantee. Size the window to cover most
//! retries: longer than the relay's backoff between attempts and its lease (after which
//! another relay takes over a crashed one's rows). The server keeps every id of the window in
//! memory, and the stream's `max_age`, when set, must not be shorter than the window.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use async_nats::jetstream::{self, stream};
//! use diesel_inbox_nats::JetStreamPublisher;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let client = async_nats::connect("127.0.0.1:4222").await?;
//! let context = jetstream::new(client);
//! // Created once, by ops or at startup; an existing stream keeps its configuration
//! // (change its window with `context.update_stream`).
//! context
//!     .get_or_create_stream(stream::Config {
//!         name: "ORDERS".to_owned(),
//!         subjects: vec!["orders.>".to_owned()],
//!         duplicate_window: Duration::from_secs(10 * 60),
//!         ..Default::default()
//!     })
//!     .await?;
//!
//! // The relay publishes the outbox rows through it; an outbox topic is a subject, such as
//! // "orders.placed".
//! let publisher = JetStreamPublisher::new(context);
//! # let _ = publisher;
//! # Ok(())
//! # }
//! ```
//!
//! # Server versions
//!
//! Everything here works with NATS server 2.9: headers, `Nats-Msg-Id` and the dedup window,
//! publish acknowledgements, pull consumers, and stream info and message gets (what a replay
//! reads). None of async-nats's 2.10+ features is used.

use std::error::Error as _;

use async_nats::header::{HeaderMap, HeaderName, HeaderValue, NATS_MESSAGE_ID};
use async_nats::jetstream::context::{PublishError as NatsPublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::{Context, ErrorCode};

use diesel_inbox::{
    envelope::Envelope,
    outbox::{AsyncPublisher, OutboxMessage, PublishError},
    Error,
};

#[cfg(feature = "async")]
mod replay;

#[cfg(feature = "async")]
pub use replay::JetStreamSource;

/// The header namespace NATS reserves: the server acts on these (`Nats-Msg-Id`,
/// `Nats-Expected-*`, `Nats-Rollup`) or sets them itself, so they are never envelope headers.
const NATS_PREFIX: &str = "nats-";

/// Publishes outbox messages to NATS JetStream, with `Nats-Msg-Id` set to the event id.
///
/// Each message goes to its [`topic`](OutboxMessage::topic) as the subject; a stream must
/// capture that subject. `publish` resolves once the stream has stored the message (or
/// dropped it as a duplicate within its dedup window, which counts as published: see the
/// [module documentation](self)). It waits for the acknowledgement at most the context's
/// timeout, 5 seconds unless set with `ContextBuilder::timeout`.
///
/// # Errors
///
/// Each failure is [transient](PublishError::Transient) (the relay retries after its backoff)
/// or [permanent](PublishError::Permanent) (the relay fails the row at once):
///
/// | Failure (async-nats `PublishErrorKind`) | What it means | Mapped to |
/// |---|---|---|
/// | `TimedOut` | no acknowledgement within the context's timeout: a slow server, or the connection is down and reconnecting | Transient |
/// | `BrokenPipe` | the connection dropped before the acknowledgement came | Transient |
/// | `StreamNotFound` | no responders: no stream captures the subject (yet), or JetStream is down | Transient |
/// | `MaxAckPending` | too many publishes in flight on this context | Transient |
/// | `MaxPayloadExceeded` | headers and body exceed the server's `max_payload` (1 MiB unless configured) | Permanent |
/// | `WrongLastMessageId`, `WrongLastSequence` | a `Nats-Expected-*` header did not hold (never sent: see below) | Permanent |
/// | `Other`: invalid subject | the topic is not a valid publish subject (empty, or with whitespace) | Permanent |
/// | `Other`: server error 10054 or 10097 | the message exceeds the stream's `max_message_size`, or its headers the server's header limit | Permanent |
/// | `Other`: server error 10109 | the stream is sealed and takes no more messages | Permanent |
/// | `Other`: any other server error | storage or account limits, a stream full under `DiscardPolicy::New`, no leader: conditions that pass | Transient |
/// | `Other`: anything else | the client's connection task is gone, an unreadable acknowledgement | Transient |
/// | (before sending) an envelope that does not [validate](Envelope::validate) | an empty event type or aggregate, a line break or NUL in a header value | Permanent |
/// | (before sending) an envelope header NATS cannot carry | a name with a colon, a space or a non-ASCII character; a value with a line break | Permanent |
/// | (before sending) an envelope header named `Nats-…` | that namespace is the server's to act on (`Nats-Rollup` purges a stream); [`Envelope::with_header`] refuses it too | Permanent |
///
/// A server error not named here is transient because the relay's attempt limit bounds its
/// retries, while failing a row the broker could take later would strand the event.
#[derive(Debug, Clone)]
pub struct JetStreamPublisher {
    context: Context,
}

impl JetStreamPublisher {
    /// A publisher over this JetStream context.
    pub fn new(context: Context) -> Self {
        Self { context }
    }

    /// Publishes one envelope to `subject`, as [`AsyncPublisher::publish`] does for an outbox
    /// message, and returns the stream's acknowledgement: its stream, sequence, and whether
    /// the stream dropped it as a duplicate of a message published within its dedup window.
    ///
    /// For publishing outside the outbox: test fixtures, or a consumer's tests that need an
    /// event in the stream (twice, to see the inbox absorb the copy).
    ///
    /// # Errors
    ///
    /// As [`JetStreamPublisher`] lists them.
    pub async fn publish_envelope(
        &self,
        subject: &str,
        envelope: &Envelope,
    ) -> Result<PublishAck, PublishError> {
        envelope.validate().map_err(PublishError::permanent)?;
        let message = envelope.to_message();
        let headers = nats_headers(envelope, &message.headers)?;
        let ack = self
            .context
            .publish_with_headers(subject.to_owned(), headers, message.body.into())
            .await
            .map_err(classify)?
            .await
            .map_err(classify)?;
        if ack.duplicate {
            tracing::debug!(
                subject,
                event_id = envelope.id().as_str(),
                stream = ack.stream,
                sequence = ack.sequence,
                "JetStream dropped the publish as a duplicate within its dedup window: a retry of a message it already has"
            );
        }
        Ok(ack)
    }
}

impl AsyncPublisher for JetStreamPublisher {
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        self.publish_envelope(&message.topic, &message.envelope)
            .await
            .map(|_ack| ())
    }
}

/// The envelope carried by a NATS message: its headers and body read back with
/// [`Envelope::from_message`].
///
/// Takes a core NATS message, and a JetStream one through its `Deref`. The envelope reads back
/// equal to the one published: `from_message` leaves out the headers in the `Nats-`
/// namespace, which are the broker's (`Nats-Msg-Id` among them).
///
/// ```no_run
/// use async_nats::jetstream::{self, consumer::pull, AckKind};
/// use futures_util::StreamExt;
/// use diesel_inbox_nats::envelope_of;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let context = jetstream::new(async_nats::connect("127.0.0.1:4222").await?);
/// let stream = context.get_stream("ORDERS").await?;
/// let consumer = stream
///     .get_or_create_consumer(
///         "billing",
///         pull::Config { durable_name: Some("billing".to_owned()), ..Default::default() },
///     )
///     .await?;
/// let mut messages = consumer.fetch().max_messages(10).messages().await?;
/// while let Some(message) = messages.next().await {
///     let message = message?;
///     match envelope_of(&message) {
///         Ok(envelope) => {
///             // Run the handler through the inbox with `&envelope` (its id and payload),
///             // on the blocking pool, and ack once that has committed.
///             # let _ = envelope;
///             message.ack().await?;
///         }
///         // Not an envelope: it never will be, so redelivering it cannot help.
///         Err(error) => {
///             tracing::warn!(%error, subject = %message.subject, "not an event envelope");
///             message.ack_with(AckKind::Term).await?;
///         }
///     }
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`outbox::Refused::InvalidEnvelope`](diesel_inbox::outbox::Refused::InvalidEnvelope) when the
/// message has no envelope headers, or one is malformed.
pub fn envelope_of(message: &async_nats::Message) -> Result<Envelope, Error> {
    let headers = message
        .headers
        .iter()
        .flat_map(HeaderMap::iter)
        .flat_map(|(name, values)| {
            values
                .iter()
                .map(move |value| (name.as_ref(), value.as_str()))
        });
    Envelope::from_message(headers, &message.payload)
}

fn is_nats_header(name: &str) -> bool {
    name.get(..NATS_PREFIX.len())
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(NATS_PREFIX))
}

/// The envelope's headers as NATS headers, plus `Nats-Msg-Id`; any header NATS cannot carry,
/// or that claims its namespace, is a permanent failure.
fn nats_headers(
    envelope: &Envelope,
    headers: &[(String, String)],
) -> Result<HeaderMap, PublishError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        if is_nats_header(name) {
            return Err(PublishError::permanent(format!(
                "envelope header {name:?} is in the Nats- namespace, which the NATS server acts on; rename the header"
            )));
        }
        let header_name: HeaderName = name.parse().map_err(|_| {
            PublishError::permanent(format!(
                "envelope header name {name:?} cannot be a NATS header: use printable ASCII without spaces or colons"
            ))
        })?;
        let header_value: HeaderValue = value.parse().map_err(|_| {
            PublishError::permanent(format!(
                "the value of envelope header {name:?} cannot be a NATS header value: it has a line break"
            ))
        })?;
        map.append(header_name, header_value);
    }
    let id = envelope.id().as_str();
    let id_value: HeaderValue = id.parse().map_err(|_| {
        PublishError::permanent(format!(
            "event id {id:?} cannot be a Nats-Msg-Id header value: it has a line break"
        ))
    })?;
    map.insert(NATS_MESSAGE_ID, id_value);
    Ok(map)
}

/// Transient or permanent, as the table on [`JetStreamPublisher`] says.
fn classify(error: NatsPublishError) -> PublishError {
    let permanent = match error.kind() {
        PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe
        | PublishErrorKind::StreamNotFound
        | PublishErrorKind::MaxAckPending => false,
        PublishErrorKind::MaxPayloadExceeded
        | PublishErrorKind::WrongLastMessageId
        | PublishErrorKind::WrongLastSequence => true,
        PublishErrorKind::Other => error.source().is_some_and(|source| {
            source.is::<async_nats::SubjectError>()
                || source
                    .downcast_ref::<async_nats::jetstream::Error>()
                    .is_some_and(|server| is_permanent_server_error(server.error_code()))
        }),
    };
    if permanent {
        PublishError::permanent(error)
    } else {
        PublishError::transient(error)
    }
}

/// The server's refusals that will recur for the same message on the same stream.
fn is_permanent_server_error(code: ErrorCode) -> bool {
    [
        ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM,
        ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM,
        ErrorCode::STREAM_SEALED,
    ]
    .contains(&code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nats_headers_are_recognised_whatever_their_case() {
        assert!(is_nats_header("Nats-Msg-Id"));
        assert!(is_nats_header("NATS-ROLLUP"));
        assert!(is_nats_header("nats-expected-stream"));
        assert!(!is_nats_header("natsy"));
        assert!(!is_nats_header("event-type"));
        assert!(!is_nats_header("Nats"));
        assert!(!is_nats_header("é-multibyte"));
    }

    #[test]
    fn timeouts_and_missing_streams_are_transient() {
        for kind in [
            PublishErrorKind::TimedOut,
            PublishErrorKind::BrokenPipe,
            PublishErrorKind::StreamNotFound,
            PublishErrorKind::MaxAckPending,
            PublishErrorKind::Other,
        ] {
            assert!(
                classify(NatsPublishError::new(kind)).is_transient(),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn oversized_messages_and_failed_expectations_are_permanent() {
        for kind in [
            PublishErrorKind::MaxPayloadExceeded,
            PublishErrorKind::WrongLastMessageId,
            PublishErrorKind::WrongLastSequence,
        ] {
            assert!(
                !classify(NatsPublishError::new(kind)).is_transient(),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn an_invalid_subject_is_permanent() {
        let error = NatsPublishError::with_source(
            PublishErrorKind::Other,
            async_nats::SubjectError::InvalidFormat,
        );
        assert!(!classify(error).is_transient());
    }

    fn server_error(code: u64) -> NatsPublishError {
        let error: async_nats::jetstream::Error = serde_json::from_value(serde_json::json!({
            "code": 400,
            "err_code": code,
            "description": "refused",
        }))
        .unwrap();
        NatsPublishError::with_source(PublishErrorKind::Other, error)
    }

    #[test]
    fn server_refusals_that_recur_are_permanent_and_the_rest_transient() {
        for code in [10054, 10097, 10109] {
            assert!(!classify(server_error(code)).is_transient(), "{code}");
        }
        // Storage full, stream full under DiscardPolicy::New, account limits, no leader.
        for code in [10047, 10077, 10002, 10008] {
            assert!(classify(server_error(code)).is_transient(), "{code}");
        }
    }
}
