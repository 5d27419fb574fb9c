//! The event envelope: what a producer says about an event, and what a consumer reads back.
//!
//! An [`Envelope`] carries the event's identity, the aggregate it is about, its type and
//! schema version, when it happened, who produced it, the trace it belongs to, headers and
//! the payload. Delivery observations (broker offsets, redelivery counts) are not part of the
//! event's meaning and stay out of it.
//!
//! On the wire ([`wire`]) an envelope is a broker message: its fields as headers, its payload
//! as the body, so any broker with headers carries it unchanged.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::{Delivery, Error, EventId, IntoDelivery, IntoEventId, InvalidEventId, Payload};

mod trace;
mod versions;
pub(crate) mod wire;

pub use trace::TraceContextLayer;
pub use versions::SchemaVersions;
pub use wire::Message;

/// An event as its producer describes it.
///
/// ```
/// use diesel_inbox::Envelope;
///
/// let placed = Envelope::new("order.placed", "order", "42")
///     .producer("orders-service")
///     .schema_version(2)
///     .json(&serde_json::json!({"total": 1250}))?;
/// assert_eq!(placed.id().as_str().len(), 36); // a UUIDv7
/// assert_eq!(placed.schema_version(), 2);
/// # Ok::<(), diesel_inbox::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub(crate) id: EventId,
    pub(crate) event_type: String,
    pub(crate) aggregate_type: String,
    pub(crate) aggregate_id: String,
    pub(crate) occurred_at: DateTime<Utc>,
    pub(crate) producer: String,
    pub(crate) schema_version: u32,
    pub(crate) traceparent: Option<String>,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) payload: Payload,
}

impl Envelope {
    /// A new event of `event_type` about the aggregate `aggregate_type`/`aggregate_id`: a
    /// fresh UUIDv7 id, occurred now, schema version 1, the trace context of the current span
    /// (see [`TraceContextLayer`]), no headers, an empty JSON payload (`null`), and no producer
    /// yet (the [`Outbox`](crate::Outbox) names it at enqueue).
    pub fn new(event_type: &str, aggregate_type: &str, aggregate_id: &str) -> Self {
        todo!("{event_type}{aggregate_type}{aggregate_id}")
    }

    /// With this id instead of a fresh UUIDv7.
    ///
    /// # Errors
    ///
    /// [`InvalidEventId`] as for [`EventId::new`].
    pub fn with_id(self, id: impl IntoEventId) -> Result<Self, InvalidEventId> {
        todo!("{:?}", id.into_event_id())
    }

    /// With a JSON payload serialized from `value`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidEnvelope`] when `value` does not serialize.
    pub fn json(self, value: &impl serde::Serialize) -> Result<Self, Error> {
        let _ = serde_json::to_value(value);
        todo!()
    }

    /// The event id.
    pub fn id(&self) -> &EventId {
        &self.id
    }

    /// The payload.
    pub fn payload(&self) -> &Payload {
        &self.payload
    }

    /// The schema version.
    pub fn schema_version(&self) -> u32 {
        self.schema_version
    }

    /// The message that carries this envelope: headers and body.
    pub fn to_message(&self) -> Message {
        todo!()
    }

    /// Reads an envelope back from a message's headers and body.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidEnvelope`] when a required header is missing or malformed.
    pub fn from_message<'a>(
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
        body: &[u8],
    ) -> Result<Self, Error> {
        let _ = (headers.into_iter().count(), body);
        todo!()
    }
}

/// Hands the envelope's id and payload to the inbox.
impl IntoDelivery for &Envelope {
    fn into_delivery(self) -> Result<Delivery, InvalidEventId> {
        Ok(Delivery::new(self.id.clone())?.with_payload(self.payload.clone()))
    }
}
