//! The event envelope: what a producer says about an event, and what a consumer reads back.
//!
//! An [`Envelope`] carries the event's identity, the aggregate it is about, its type and
//! schema version, when it happened, who produced it, the trace it belongs to, headers and
//! the payload. Delivery observations (broker offsets, redelivery counts) are not part of the
//! event's meaning and stay out of it.
//!
//! On the wire (`wire.rs`) an envelope is a broker message: its fields as headers, its payload
//! as the body, so any broker with headers carries it unchanged. `trace.rs` keeps a W3C trace
//! context on each `tracing` span, and `versions.rs` says which schema versions a consumer
//! reads.
//!
//! | field | header | default |
//! |---|---|---|
//! | id | `Event-Id` | a fresh UUIDv7 ([`with_id`](Envelope::with_id) for your own) |
//! | event type, schema version | `Event-Type`, `Event-Schema-Version` | version 1 |
//! | aggregate type and id | `Event-Aggregate-Type`, `Event-Aggregate-Id` | |
//! | occurred at | `Event-Occurred-At` (RFC 3339, microseconds) | now |
//! | producer | `Event-Producer` | the outbox's name |
//! | trace context | `traceparent` (W3C) | the current `tracing` span's, with `TraceContextLayer` installed |
//! | payload | body, `Content-Type` `application/json` or `application/octet-stream` | `null` |
//! | headers | your own, beside these | none |
//!
//! `TraceContextLayer` (feature `trace-context`, on by default) is a `tracing-subscriber`
//! layer: install it once (`tracing_subscriber::registry().with(TraceContextLayer).with(fmt::layer())`),
//! and a span that records an incoming `traceparent` field continues that trace, so follow-up
//! events carry it on. With OpenTelemetry, set [`Envelope::with_traceparent`] from your own
//! context instead.

use std::collections::BTreeMap;

use chrono::{DateTime, SubsecRound, Utc};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{Delivery, Error, EventId, IntoDelivery, IntoEventId, InvalidEventId, Payload};

mod trace;
mod versions;
pub(crate) mod wire;

#[cfg(feature = "trace-context")]
pub use trace::TraceContextLayer;
pub(crate) use trace::{current_traceparent, TraceContext};
pub use versions::{SchemaVersions, UnsupportedSchemaVersion};
pub(crate) use wire::to_hex;
pub use wire::Message;

/// An event as its producer describes it.
///
/// [`Envelope::new`] names the event type and the aggregate; the `with_*` setters, [`json`]
/// and [`bytes`] fill in the rest; the getters read it back. [`to_message`] makes the broker
/// message that carries it, and [`from_message`] reads one back on the consumer's side.
///
/// ```
/// use diesel_inbox::{envelope::Envelope, Payload};
///
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct OrderPlaced {
///     total: u64,
/// }
///
/// let placed = Envelope::new("order.placed", "order", "42")
///     .with_producer("orders-service")
///     .with_schema_version(2)
///     .with_header("Tenant", "acme")?
///     .json(&OrderPlaced { total: 1250 })?;
/// assert_eq!(placed.id().as_str().len(), 36); // a UUIDv7
/// assert_eq!(placed.schema_version(), 2);
///
/// // The consumer reads the same envelope back from the broker message.
/// let message = placed.to_message();
/// let headers = message.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
/// let received = Envelope::from_message(headers, &message.body)?;
/// assert_eq!(received, placed);
/// assert_eq!(received.decode_json::<OrderPlaced>()?, OrderPlaced { total: 1250 });
/// # Ok::<(), diesel_inbox::Error>(())
/// ```
///
/// [`json`]: Envelope::json
/// [`bytes`]: Envelope::bytes
/// [`to_message`]: Envelope::to_message
/// [`from_message`]: Envelope::from_message
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
    /// fresh version 7 UUID as id, occurred now (to the microsecond), schema version 1, the trace
    /// context of the current span (see `TraceContextLayer`, feature `trace-context`), no headers, an empty JSON
    /// payload (`null`), and no producer yet (the outbox names it at enqueue).
    ///
    /// The three names must not be empty and must not contain a line break or NUL, since they
    /// travel as header values; [`validate`](Envelope::validate) checks that.
    pub fn new(event_type: &str, aggregate_type: &str, aggregate_id: &str) -> Self {
        Self {
            id: EventId::from(uuid::Uuid::now_v7()),
            event_type: event_type.to_owned(),
            aggregate_type: aggregate_type.to_owned(),
            aggregate_id: aggregate_id.to_owned(),
            occurred_at: Utc::now().trunc_subsecs(6),
            producer: String::new(),
            schema_version: 1,
            traceparent: current_traceparent(),
            headers: BTreeMap::new(),
            payload: Payload::Json(Value::Null),
        }
    }

    /// With this id instead of a fresh version 7 UUID: for a producer whose events already have a
    /// stable identity.
    ///
    /// # Errors
    ///
    /// [`InvalidEventId`] as for [`EventId::new`].
    pub fn with_id(mut self, id: impl IntoEventId) -> Result<Self, InvalidEventId> {
        self.id = id.into_event_id()?;
        Ok(self)
    }

    /// Produced by `producer` (a service name). The outbox stamps its own producer on an
    /// envelope that has none.
    #[must_use]
    pub fn with_producer(mut self, producer: &str) -> Self {
        producer.clone_into(&mut self.producer);
        self
    }

    /// With the schema version of the payload (1 unless set).
    #[must_use]
    pub fn with_schema_version(mut self, version: u32) -> Self {
        self.schema_version = version;
        self
    }

    /// Occurred at `at`, instead of when [`new`](Envelope::new) ran; truncated to the
    /// microsecond, the precision the wire form keeps.
    #[must_use]
    pub fn with_occurred_at(mut self, at: DateTime<Utc>) -> Self {
        self.occurred_at = at.trunc_subsecs(6);
        self
    }

    /// In the trace `traceparent`, a W3C trace context (`00-<trace id>-<parent id>-<flags>`),
    /// instead of the current span's. OpenTelemetry users set it from their own context.
    ///
    /// ```
    /// use diesel_inbox::envelope::Envelope;
    ///
    /// let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    /// let event = Envelope::new("order.placed", "order", "42").with_traceparent(parent)?;
    /// assert_eq!(event.traceparent(), Some(parent));
    /// assert!(Envelope::new("order.placed", "order", "42").with_traceparent("00-0-0-0").is_err());
    /// # Ok::<(), diesel_inbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`outbox::Refused::InvalidEnvelope`](crate::outbox::Refused::InvalidEnvelope) when
    /// `traceparent` is not a valid W3C `traceparent`.
    pub fn with_traceparent(mut self, traceparent: &str) -> Result<Self, Error> {
        TraceContext::parse(traceparent)?;
        self.traceparent = Some(traceparent.to_owned());
        Ok(self)
    }

    /// Without trace context, even if [`new`](Envelope::new) took one from the current span.
    #[must_use]
    pub fn without_traceparent(mut self) -> Self {
        self.traceparent = None;
        self
    }

    /// With the custom header `name: value`, replacing one of the same name in any case.
    ///
    /// The envelope's own headers are reserved, in any case: names starting with `Event-`
    /// or `Nats-`, `traceparent`, `tracestate` and `Content-Type`. A name is a token (letters,
    /// digits and ``!#$%&'*+-.^_`|~``); a value has no line break and no NUL.
    ///
    /// # Errors
    ///
    /// [`outbox::Refused::InvalidEnvelope`](crate::outbox::Refused::InvalidEnvelope) for a reserved
    /// or malformed name or a malformed value.
    pub fn with_header(mut self, name: &str, value: &str) -> Result<Self, Error> {
        check_header_name(name)?;
        check_value(&format!("header {name}"), value)?;
        self.headers
            .retain(|held, _| !held.eq_ignore_ascii_case(name));
        self.headers.insert(name.to_owned(), value.to_owned());
        Ok(self)
    }

    /// With a JSON payload serialized from `value`.
    ///
    /// # Errors
    ///
    /// [`outbox::Refused::InvalidEnvelope`](crate::outbox::Refused::InvalidEnvelope) when `value`
    /// does not serialize.
    pub fn json(self, value: &impl serde::Serialize) -> Result<Self, Error> {
        let value = serde_json::to_value(value).map_err(|error| {
            Error::invalid_envelope(format!(
                "the payload of a {:?} event does not serialize to JSON: {error}; nothing was \
                 enqueued",
                self.event_type
            ))
        })?;
        Ok(self.with_payload(Payload::Json(value)))
    }

    /// With a raw payload, sent as `application/octet-stream`.
    #[must_use]
    pub fn bytes(self, bytes: impl Into<Vec<u8>>) -> Self {
        self.with_payload(Payload::Bytes(bytes.into()))
    }

    /// With `payload`.
    #[must_use]
    pub fn with_payload(mut self, payload: Payload) -> Self {
        self.payload = payload;
        self
    }

    /// The event id.
    pub fn id(&self) -> &EventId {
        &self.id
    }

    /// The event type, such as `order.placed`.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The type of the aggregate the event is about, such as `order`.
    pub fn aggregate_type(&self) -> &str {
        &self.aggregate_type
    }

    /// The id of the aggregate the event is about.
    pub fn aggregate_id(&self) -> &str {
        &self.aggregate_id
    }

    /// When the event occurred, to the microsecond.
    pub fn occurred_at(&self) -> DateTime<Utc> {
        self.occurred_at
    }

    /// The producer, empty until set or stamped by the outbox.
    pub fn producer(&self) -> &str {
        &self.producer
    }

    /// The schema version.
    pub fn schema_version(&self) -> u32 {
        self.schema_version
    }

    /// The W3C `traceparent` of the trace the event belongs to, if any.
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }

    /// The custom headers.
    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.headers
    }

    /// The payload.
    pub fn payload(&self) -> &Payload {
        &self.payload
    }

    /// The payload decoded as `T`: a JSON payload, or a bytes payload that holds JSON.
    ///
    /// ```
    /// use diesel_inbox::{envelope::Envelope, FailureKind, HandlerError};
    ///
    /// #[derive(Debug, serde::Deserialize)]
    /// struct OrderPlaced {
    ///     total: u64,
    /// }
    ///
    /// let event = Envelope::new("order.placed", "order", "42")
    ///     .json(&serde_json::json!({"total": 1250}))?;
    /// assert_eq!(event.decode_json::<OrderPlaced>()?.total, 1250);
    ///
    /// let unreadable = Envelope::new("order.placed", "order", "43")
    ///     .json(&serde_json::json!({"sum": 1250}))?;
    /// let error = unreadable.decode_json::<OrderPlaced>().unwrap_err();
    /// assert_eq!(error.failure_kind(), FailureKind::Permanent); // dead-lettered by the inbox
    /// # Ok::<(), diesel_inbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::permanent`] when the payload does not decode: it never will, so returned
    /// from an inbox handler it dead-letters the event at once.
    pub fn decode_json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        let decoded = match &self.payload {
            Payload::Json(value) => T::deserialize(value),
            Payload::Bytes(bytes) => serde_json::from_slice(bytes),
        };
        decoded.map_err(|error| {
            Error::permanent(format!(
                "the payload of event {} ({:?}, schema version {}) does not decode as {}: \
                 {error}; fix the consumer or the producer, then redrive the event",
                self.id,
                self.event_type,
                self.schema_version,
                std::any::type_name::<T>(),
            ))
        })
    }

    /// Checks that the envelope can travel as a message and be read back: the event type
    /// and the aggregate's type and id are not empty, and no header value (the id and the
    /// names included) holds a line break or NUL. The outbox checks this at enqueue.
    ///
    /// # Errors
    ///
    /// [`outbox::Refused::InvalidEnvelope`](crate::outbox::Refused::InvalidEnvelope) naming the
    /// field.
    pub fn validate(&self) -> Result<(), Error> {
        for (field, value) in [
            ("event type", &self.event_type),
            ("aggregate type", &self.aggregate_type),
            ("aggregate id", &self.aggregate_id),
        ] {
            if value.is_empty() {
                return Err(Error::invalid_envelope(format!(
                    "the {field} is empty: give every event its type and the type and id of the \
                     aggregate it is about"
                )));
            }
            check_value(field, value)?;
        }
        check_value("event id", self.id.as_str())?;
        check_value("producer", &self.producer)?;
        for (name, value) in &self.headers {
            check_value(&format!("header {name}"), value)?;
        }
        Ok(())
    }
}

/// Whether `name` is one of the envelope's own headers or a broker's, in any case.
pub(crate) fn is_reserved(name: &str) -> bool {
    let starts = |prefix: &str| {
        name.get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
    };
    starts("Event-")
        || starts("Nats-")
        || ["traceparent", "tracestate", "Content-Type"]
            .iter()
            .any(|reserved| name.eq_ignore_ascii_case(reserved))
}

fn check_header_name(name: &str) -> Result<(), Error> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(Error::invalid_envelope(format!(
            "header name {name:?} is not a token: use letters, digits and -, such as \
             \"Tenant-Id\""
        )));
    }
    if is_reserved(name) {
        return Err(Error::invalid_envelope(format!(
            "header name {name:?} is reserved (the envelope's own headers start with Event- \
             or are traceparent, tracestate and Content-Type; Nats- belongs to the broker): \
             set the field with its setter, or choose another name"
        )));
    }
    Ok(())
}

/// A header value must not break the header block it travels in.
fn check_value(field: &str, value: &str) -> Result<(), Error> {
    if value.contains(['\r', '\n', '\0']) {
        return Err(Error::invalid_envelope(format!(
            "the {field} {value:?} holds a line break or NUL, which no broker header carries: \
             remove it"
        )));
    }
    Ok(())
}

/// Hands the envelope's id and payload to the inbox.
impl IntoDelivery for &Envelope {
    fn into_delivery(self) -> Result<Delivery, InvalidEventId> {
        Ok(Delivery::new(self.id.clone())?.with_payload(self.payload.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::Refused;
    use crate::{FailureKind, HandlerError};

    fn placed() -> Envelope {
        Envelope::new("order.placed", "order", "42")
    }

    #[test]
    fn a_new_envelope_has_a_uuid_v7_version_1_a_null_payload_and_no_producer() {
        let event = placed();
        let uuid = uuid::Uuid::parse_str(event.id().as_str()).unwrap();
        assert_eq!(uuid.get_version_num(), 7);
        assert_eq!(event.schema_version(), 1);
        assert_eq!(event.payload(), &Payload::Json(Value::Null));
        assert_eq!(event.producer(), "");
        assert!(event.headers().is_empty());
        assert_eq!(event.occurred_at().timestamp_subsec_nanos() % 1000, 0);
        assert_ne!(placed().id(), event.id());
    }

    #[test]
    fn the_occurrence_time_is_kept_to_the_microsecond() {
        let at = DateTime::parse_from_rfc3339("2024-05-01T10:00:00.123456789Z")
            .unwrap()
            .with_timezone(&Utc);
        let event = placed().with_occurred_at(at);
        assert_eq!(event.occurred_at().timestamp_subsec_nanos(), 123_456_000);
    }

    #[test]
    fn reserved_header_names_are_refused_in_any_case() {
        for name in [
            "Event-Id",
            "event-type",
            "EVENT-ANYTHING",
            "traceparent",
            "TraceState",
            "content-type",
            "Nats-Msg-Id",
            "nats-expected-stream",
        ] {
            let error = placed().with_header(name, "x").unwrap_err();
            assert!(error.to_string().contains("reserved"), "{name}: {error}");
        }
        assert!(placed().with_header("Eventual", "x").is_ok());
    }

    #[test]
    fn malformed_header_names_and_values_are_refused() {
        assert!(placed().with_header("", "x").is_err());
        assert!(placed().with_header("Tenant Id", "x").is_err());
        assert!(placed().with_header("Tenant:", "x").is_err());
        assert!(placed()
            .with_header("Tenant", "a\r\nEvent-Id: forged")
            .is_err());
    }

    #[test]
    fn a_header_replaces_one_of_the_same_name_in_another_case() {
        let event = placed()
            .with_header("Tenant", "acme")
            .unwrap()
            .with_header("TENANT", "globex")
            .unwrap();
        assert_eq!(event.headers().len(), 1);
        assert_eq!(event.headers()["TENANT"], "globex");
    }

    #[test]
    fn an_invalid_traceparent_is_refused_and_a_valid_one_kept_as_given() {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let event = placed().with_traceparent(valid).unwrap();
        assert_eq!(event.traceparent(), Some(valid));
        assert_eq!(event.without_traceparent().traceparent(), None);
        let error = placed().with_traceparent("nonsense").unwrap_err();
        assert!(matches!(error, Error::Outbox(Refused::InvalidEnvelope(_))));
    }

    #[test]
    fn an_undecodable_payload_is_a_permanent_failure_naming_the_event() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Placed {
            total: u64,
        }
        let event = placed().json(&serde_json::json!({"sum": 1})).unwrap();
        let error = event.decode_json::<Placed>().unwrap_err();
        assert_eq!(error.failure_kind(), FailureKind::Permanent);
        let message = error.to_string();
        assert!(message.contains(event.id().as_str()), "{message}");
        assert!(message.contains("missing field `total`"), "{message}");
    }

    #[test]
    fn a_bytes_payload_holding_json_decodes() {
        let event = placed().bytes(br#"{"total": 7}"#.to_vec());
        let value: Value = event.decode_json().unwrap();
        assert_eq!(value["total"], 7);
    }

    #[test]
    fn validation_refuses_empty_names_and_line_breaks() {
        assert!(placed().validate().is_ok());
        assert!(Envelope::new("", "order", "42").validate().is_err());
        assert!(Envelope::new("order.placed", "", "42").validate().is_err());
        assert!(Envelope::new("order.placed", "order", "")
            .validate()
            .is_err());
        assert!(Envelope::new("order.placed\n", "order", "42")
            .validate()
            .is_err());
        assert!(placed().with_producer("a\rb").validate().is_err());
        assert!(placed().with_id("a\nb").unwrap().validate().is_err());
    }

    #[test]
    fn the_inbox_gets_the_envelopes_id_and_payload() {
        let event = placed().json(&serde_json::json!({"total": 1})).unwrap();
        let delivery = (&event).into_delivery().unwrap();
        assert_eq!(delivery.id(), event.id());
        assert_eq!(delivery.payload(), Some(event.payload()));
    }
}
