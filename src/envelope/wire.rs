//! An envelope as a broker message: its fields as headers, its payload as the body; and as a
//! JSON document, for fixtures and logs.
//!
//! The header names are the constants below, listed with their values in one table, on
//! [`Message`] (public docs). Reading matches names in any case and takes the first of repeated
//! names; headers starting with `Nats-`, `tracestate` and unknown `Event-` headers are not
//! read: they belong to the broker, or to a later version of this crate.
//!
//! The JSON form ([`Envelope::to_json`]) has the fields as `snake_case` keys, and a bytes
//! payload as `payload_hex`, lowercase hex digits: no new dependency, and readable in a diff.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};
use serde_json::{Map, Value};

use super::{is_reserved, Envelope, TraceContext};
use crate::{Error, EventId, Payload};

pub(crate) const EVENT_ID: &str = "Event-Id";
pub(crate) const EVENT_TYPE: &str = "Event-Type";
pub(crate) const EVENT_SCHEMA_VERSION: &str = "Event-Schema-Version";
pub(crate) const EVENT_OCCURRED_AT: &str = "Event-Occurred-At";
pub(crate) const EVENT_PRODUCER: &str = "Event-Producer";
pub(crate) const EVENT_AGGREGATE_TYPE: &str = "Event-Aggregate-Type";
pub(crate) const EVENT_AGGREGATE_ID: &str = "Event-Aggregate-Id";
pub(crate) const TRACEPARENT: &str = "traceparent";
pub(crate) const CONTENT_TYPE: &str = "Content-Type";
pub(crate) const APPLICATION_JSON: &str = "application/json";
pub(crate) const OCTET_STREAM: &str = "application/octet-stream";

/// The keys of an envelope's JSON document.
const KEYS: [&str; 11] = [
    "id",
    "event_type",
    "schema_version",
    "occurred_at",
    "producer",
    "aggregate_type",
    "aggregate_id",
    "traceparent",
    "headers",
    "payload",
    "payload_hex",
];

/// A broker message: headers in order, and the body.
///
/// [`Envelope::to_message`] makes one; [`Envelope::from_message`] reads one back. The
/// headers, in this order:
///
/// | header | value | when read |
/// |---|---|---|
/// | `Event-Id` | the event id | required |
/// | `Event-Type` | the event type, such as `order.placed` | required, not empty |
/// | `Event-Schema-Version` | the schema version, decimal | required |
/// | `Event-Occurred-At` | RFC 3339 in UTC, to the microsecond: `2024-05-01T10:00:00.123456Z` | required; any offset is read |
/// | `Event-Producer` | the producer, possibly empty | required |
/// | `Event-Aggregate-Type` | the aggregate's type | required, not empty |
/// | `Event-Aggregate-Id` | the aggregate's id | required, not empty |
/// | `traceparent` | the W3C trace context, only when the event has one | checked when present |
/// | `Content-Type` | `application/json` for a JSON payload, `application/octet-stream` for bytes | a body without `application/json` is bytes |
/// | any other | the custom headers, in name order | kept, except `Nats-*`, `tracestate` and unknown `Event-*` |
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Message {
    /// Header names and values.
    pub headers: Vec<(String, String)>,
    /// The payload's bytes.
    pub body: Vec<u8>,
}

impl Message {
    /// A message as a broker delivered it: its headers, in the order it gave them, and its
    /// body. [`Envelope::from_message`] reads an envelope back from it.
    pub fn new(headers: Vec<(String, String)>, body: Vec<u8>) -> Self {
        Self { headers, body }
    }

    /// The value of the header `name`, in any case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(held, _)| held.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// The first value of the header `name`, in any case.
fn header_value<'a>(headers: &[(&'a str, &'a str)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(held, _)| held.eq_ignore_ascii_case(name))
        .map(|(_, value)| *value)
}

fn required<'a>(headers: &[(&'a str, &'a str)], name: &str) -> Result<&'a str, Error> {
    header_value(headers, name).ok_or_else(|| {
        Error::invalid_envelope(format!(
            "the message has no {name} header: it was not published as an event envelope; \
             publish it with Envelope::to_message or through the outbox, or read it without \
             Envelope::from_message"
        ))
    })
}

fn malformed(name: &str, value: &str, expected: &str) -> Error {
    Error::invalid_envelope(format!(
        "header {name} is {value:?}, not {expected}: fix the producer; the message can never be \
         read as it is"
    ))
}

fn not_empty<'a>(name: &str, value: &'a str) -> Result<&'a str, Error> {
    if value.is_empty() {
        return Err(malformed(name, value, "a non-empty name"));
    }
    Ok(value)
}

fn occurred_at(name: &str, value: &str) -> Result<DateTime<Utc>, Error> {
    DateTime::parse_from_rfc3339(value)
        .map(|at| at.with_timezone(&Utc).trunc_subsecs(6))
        .map_err(|_| {
            malformed(
                name,
                value,
                "an RFC 3339 time such as 2024-05-01T10:00:00.123456Z",
            )
        })
}

fn format_time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn schema_version(name: &str, value: &str) -> Result<u32, Error> {
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed(name, value, "a schema version (a whole number)"));
    }
    value
        .parse()
        .map_err(|_| malformed(name, value, "a schema version (a whole number)"))
}

fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(APPLICATION_JSON))
}

impl Envelope {
    /// The message that carries this envelope: the headers of the table on [`Message`], and
    /// the payload as the body (a JSON payload as `serde_json` writes it).
    ///
    /// [`from_message`](Envelope::from_message) reads it back equal, for an envelope that
    /// passes [`validate`](Envelope::validate).
    pub fn to_message(&self) -> Message {
        let mut headers = vec![
            (EVENT_ID.to_owned(), self.id.as_str().to_owned()),
            (EVENT_TYPE.to_owned(), self.event_type.clone()),
            (
                EVENT_SCHEMA_VERSION.to_owned(),
                self.schema_version.to_string(),
            ),
            (EVENT_OCCURRED_AT.to_owned(), format_time(self.occurred_at)),
            (EVENT_PRODUCER.to_owned(), self.producer.clone()),
            (EVENT_AGGREGATE_TYPE.to_owned(), self.aggregate_type.clone()),
            (EVENT_AGGREGATE_ID.to_owned(), self.aggregate_id.clone()),
        ];
        if let Some(traceparent) = &self.traceparent {
            headers.push((TRACEPARENT.to_owned(), traceparent.clone()));
        }
        let content_type = match self.payload {
            Payload::Json(_) => APPLICATION_JSON,
            Payload::Bytes(_) => OCTET_STREAM,
        };
        headers.push((CONTENT_TYPE.to_owned(), content_type.to_owned()));
        headers.extend(
            self.headers
                .iter()
                .map(|(name, value)| (name.clone(), value.clone())),
        );
        Message {
            headers,
            body: self.payload.to_bytes(),
        }
    }

    /// Reads an envelope back from a message's headers and body (see [`Message`] for the
    /// headers). Names are matched in any case; for repeated names the first counts. The body
    /// is JSON when `Content-Type` is `application/json` (parameters such as `charset`
    /// allowed), else bytes. Headers starting with `Nats-`, `tracestate` and unknown `Event-`
    /// headers are left out; every other header becomes a custom header.
    ///
    /// ```
    /// use diesel_inbox::envelope::Envelope;
    ///
    /// let headers = [
    ///     ("event-id", "0190a1b2-0000-7000-8000-000000000001"),
    ///     ("event-type", "order.placed"),
    ///     ("event-schema-version", "2"),
    ///     ("event-occurred-at", "2024-05-01T10:00:00.123456Z"),
    ///     ("event-producer", "orders-service"),
    ///     ("event-aggregate-type", "order"),
    ///     ("event-aggregate-id", "42"),
    ///     ("content-type", "application/json"),
    ///     ("Nats-Msg-Id", "0190a1b2-0000-7000-8000-000000000001"),
    ///     ("Tenant", "acme"),
    /// ];
    /// let event = Envelope::from_message(headers, br#"{"total":1250}"#)?;
    /// assert_eq!(event.schema_version(), 2);
    /// assert_eq!(event.headers().len(), 1); // Tenant; Nats-Msg-Id is the broker's
    /// # Ok::<(), diesel_inbox::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`outbox::Refused::InvalidEnvelope`](crate::outbox::Refused::InvalidEnvelope) naming the
    /// header, when a required header is missing or malformed, or when a JSON body does not parse.
    /// The message can never be read: [`Ack::of`](crate::Ack::of) says to reject it.
    pub fn from_message<'a>(
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
        body: &[u8],
    ) -> Result<Self, Error> {
        let headers: Vec<(&str, &str)> = headers.into_iter().collect();
        let id = required(&headers, EVENT_ID)?;
        let id = EventId::new(id)
            .map_err(|error| malformed(EVENT_ID, id, &format!("a valid event id ({error})")))?;
        let event_type = not_empty(EVENT_TYPE, required(&headers, EVENT_TYPE)?)?;
        let version = schema_version(
            EVENT_SCHEMA_VERSION,
            required(&headers, EVENT_SCHEMA_VERSION)?,
        )?;
        let at = occurred_at(EVENT_OCCURRED_AT, required(&headers, EVENT_OCCURRED_AT)?)?;
        let producer = required(&headers, EVENT_PRODUCER)?;
        let aggregate_type = not_empty(
            EVENT_AGGREGATE_TYPE,
            required(&headers, EVENT_AGGREGATE_TYPE)?,
        )?;
        let aggregate_id = not_empty(EVENT_AGGREGATE_ID, required(&headers, EVENT_AGGREGATE_ID)?)?;
        let traceparent = header_value(&headers, TRACEPARENT)
            .map(|value| {
                TraceContext::parse(value)
                    .map(|_| value.to_owned())
                    .map_err(|_| malformed(TRACEPARENT, value, "a W3C traceparent"))
            })
            .transpose()?;
        let payload = if header_value(&headers, CONTENT_TYPE).is_some_and(is_json) {
            Payload::Json(serde_json::from_slice(body).map_err(|error| {
                Error::invalid_envelope(format!(
                    "the body of event {id} is not valid JSON although its Content-Type is \
                     application/json: {error}; fix the producer"
                ))
            })?)
        } else {
            Payload::Bytes(body.to_vec())
        };
        let mut custom = BTreeMap::new();
        for (name, value) in headers {
            if !is_reserved(name)
                && !custom
                    .keys()
                    .any(|held: &String| held.eq_ignore_ascii_case(name))
            {
                custom.insert(name.to_owned(), value.to_owned());
            }
        }
        Ok(Self {
            id,
            event_type: event_type.to_owned(),
            aggregate_type: aggregate_type.to_owned(),
            aggregate_id: aggregate_id.to_owned(),
            occurred_at: at,
            producer: producer.to_owned(),
            schema_version: version,
            traceparent,
            headers: custom,
            payload,
        })
    }

    /// The envelope as a JSON document, for fixtures and logs:
    ///
    /// ```json
    /// {
    ///   "id": "0190a1b2-0000-7000-8000-000000000001",
    ///   "event_type": "order.placed",
    ///   "schema_version": 2,
    ///   "occurred_at": "2024-05-01T10:00:00.123456Z",
    ///   "producer": "orders-service",
    ///   "aggregate_type": "order",
    ///   "aggregate_id": "42",
    ///   "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ///   "headers": {"Tenant": "acme"},
    ///   "payload": {"total": 1250}
    /// }
    /// ```
    ///
    /// `traceparent` is left out when there is none. A bytes payload is `"payload_hex"`, its
    /// bytes as lowercase hex digits, instead of `"payload"`.
    /// [`from_json`](Envelope::from_json) reads it back equal.
    pub fn to_json(&self) -> Value {
        let mut document = Map::new();
        let mut put = |key: &str, value: Value| {
            document.insert(key.to_owned(), value);
        };
        put("id", self.id.as_str().into());
        put("event_type", self.event_type.as_str().into());
        put("schema_version", self.schema_version.into());
        put("occurred_at", format_time(self.occurred_at).into());
        put("producer", self.producer.as_str().into());
        put("aggregate_type", self.aggregate_type.as_str().into());
        put("aggregate_id", self.aggregate_id.as_str().into());
        if let Some(traceparent) = &self.traceparent {
            put("traceparent", traceparent.as_str().into());
        }
        put(
            "headers",
            Value::Object(
                self.headers
                    .iter()
                    .map(|(name, value)| (name.clone(), value.as_str().into()))
                    .collect(),
            ),
        );
        match &self.payload {
            Payload::Json(value) => put("payload", value.clone()),
            Payload::Bytes(bytes) => put("payload_hex", to_hex(bytes).into()),
        }
        Value::Object(document)
    }

    /// Reads the JSON document of [`to_json`](Envelope::to_json) back. `producer`,
    /// `traceparent` (or `null`) and `headers` may be left out; unknown keys are refused, so a
    /// misspelt key in a fixture does not pass unnoticed.
    ///
    /// # Errors
    ///
    /// [`outbox::Refused::InvalidEnvelope`](crate::outbox::Refused::InvalidEnvelope) naming the key
    /// that is missing, unknown or malformed.
    pub fn from_json(document: &Value) -> Result<Self, Error> {
        let invalid = |key: &str, expected: &str| {
            Error::invalid_envelope(format!(
                "the envelope document's {key:?} is {}, not {expected}",
                document
                    .get(key)
                    .map_or("missing".to_owned(), Value::to_string)
            ))
        };
        let Some(fields) = document.as_object() else {
            return Err(Error::invalid_envelope(
                "an envelope document is a JSON object, as Envelope::to_json writes it".to_owned(),
            ));
        };
        if let Some(unknown) = fields.keys().find(|key| !KEYS.contains(&key.as_str())) {
            return Err(Error::invalid_envelope(format!(
                "the envelope document has the unknown key {unknown:?}: its keys are {}",
                KEYS.join(", ")
            )));
        }
        let text = |key: &str| {
            fields
                .get(key)
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(key, "a string"))
        };
        let name = |key: &str| {
            text(key).and_then(|value| {
                if value.is_empty() {
                    Err(invalid(key, "a non-empty string"))
                } else {
                    Ok(value)
                }
            })
        };
        let id = EventId::new(text("id")?)
            .map_err(|error| invalid("id", &format!("a valid event id ({error})")))?;
        let schema_version = fields
            .get("schema_version")
            .and_then(Value::as_u64)
            .and_then(|version| u32::try_from(version).ok())
            .ok_or_else(|| invalid("schema_version", "a whole number up to 4294967295"))?;
        let occurred_at = DateTime::parse_from_rfc3339(text("occurred_at")?)
            .map(|at| at.with_timezone(&Utc).trunc_subsecs(6))
            .map_err(|_| invalid("occurred_at", "an RFC 3339 time"))?;
        let producer = match fields.get("producer") {
            None => "",
            Some(_) => text("producer")?,
        };
        let traceparent = match fields.get("traceparent") {
            None | Some(Value::Null) => None,
            Some(_) => {
                let value = text("traceparent")?;
                TraceContext::parse(value)?;
                Some(value.to_owned())
            }
        };
        let payload = match (fields.get("payload"), fields.get("payload_hex")) {
            (Some(value), None) => Payload::Json(value.clone()),
            (None, Some(_)) => Payload::Bytes(
                from_hex(text("payload_hex")?)
                    .ok_or_else(|| invalid("payload_hex", "an even number of hex digits"))?,
            ),
            _ => {
                return Err(Error::invalid_envelope(
                    "the envelope document needs exactly one of \"payload\" (JSON) and \
                     \"payload_hex\" (bytes)"
                        .to_owned(),
                ))
            }
        };
        let mut envelope = Envelope {
            id,
            event_type: name("event_type")?.to_owned(),
            aggregate_type: name("aggregate_type")?.to_owned(),
            aggregate_id: name("aggregate_id")?.to_owned(),
            occurred_at,
            producer: producer.to_owned(),
            schema_version,
            traceparent,
            headers: BTreeMap::new(),
            payload,
        };
        match fields.get("headers") {
            None => {}
            Some(Value::Object(headers)) => {
                for (name, value) in headers {
                    let value = value
                        .as_str()
                        .ok_or_else(|| invalid("headers", "an object of strings"))?;
                    envelope = envelope.with_header(name, value)?;
                }
            }
            Some(_) => return Err(invalid("headers", "an object of strings")),
        }
        Ok(envelope)
    }
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    })
}

fn from_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() % 2 != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&hex[at..at + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::outbox::Refused;

    fn sample() -> Envelope {
        Envelope::new("order.placed", "order", "42")
            .with_producer("orders-service")
            .with_schema_version(3)
            .with_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .unwrap()
            .with_header("Tenant", "acme")
            .unwrap()
            .with_header("Priority", "high")
            .unwrap()
            .json(&json!({"total": 1250, "lines": [{"sku": "a", "qty": 2.5}]}))
            .unwrap()
    }

    fn read(message: &Message) -> Result<Envelope, Error> {
        Envelope::from_message(
            message
                .headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
            &message.body,
        )
    }

    fn without(message: &Message, name: &str) -> Message {
        let mut message = message.clone();
        message.headers.retain(|(held, _)| held != name);
        message
    }

    fn replaced(message: &Message, name: &str, value: &str) -> Message {
        let mut message = message.clone();
        for (held, held_value) in &mut message.headers {
            if held == name {
                value.clone_into(held_value);
            }
        }
        message
    }

    #[test]
    fn a_json_envelope_reads_back_equal_from_its_message() {
        let event = sample();
        assert_eq!(read(&event.to_message()).unwrap(), event);
    }

    #[test]
    fn a_bytes_envelope_reads_back_equal_from_its_message() {
        let event = sample()
            .bytes(vec![0, 159, 146, 150, 255])
            .without_traceparent();
        let message = event.to_message();
        assert_eq!(message.header("content-type"), Some(OCTET_STREAM));
        assert_eq!(message.header("traceparent"), None);
        assert_eq!(read(&message).unwrap(), event);
    }

    #[test]
    fn the_headers_come_in_the_documented_order() {
        let names: Vec<String> = sample()
            .to_message()
            .headers
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(
            names,
            [
                "Event-Id",
                "Event-Type",
                "Event-Schema-Version",
                "Event-Occurred-At",
                "Event-Producer",
                "Event-Aggregate-Type",
                "Event-Aggregate-Id",
                "traceparent",
                "Content-Type",
                "Priority",
                "Tenant"
            ]
        );
    }

    #[test]
    fn the_occurrence_time_is_rfc_3339_utc_to_the_microsecond() {
        let at = DateTime::parse_from_rfc3339("2024-05-01T12:00:00.5+02:00")
            .unwrap()
            .with_timezone(&Utc);
        let message = sample().with_occurred_at(at).to_message();
        assert_eq!(
            message.header(EVENT_OCCURRED_AT),
            Some("2024-05-01T10:00:00.500000Z")
        );
        let offset = replaced(&message, EVENT_OCCURRED_AT, "2024-05-01T12:00:00.5+02:00");
        assert_eq!(read(&offset).unwrap().occurred_at(), at);
    }

    #[test]
    fn header_names_are_read_in_any_case() {
        let event = sample();
        let mut message = event.to_message();
        for (name, _) in &mut message.headers {
            *name = if name.len() % 2 == 0 {
                name.to_lowercase()
            } else {
                name.to_uppercase()
            };
        }
        let back = read(&message).unwrap();
        assert_eq!(back.id(), event.id());
        assert_eq!(back.payload(), event.payload());
        assert_eq!(back.traceparent(), event.traceparent());
        assert_eq!(back.headers().len(), 2);
    }

    #[test]
    fn each_missing_required_header_is_named() {
        let message = sample().to_message();
        for name in [
            EVENT_ID,
            EVENT_TYPE,
            EVENT_SCHEMA_VERSION,
            EVENT_OCCURRED_AT,
            EVENT_PRODUCER,
            EVENT_AGGREGATE_TYPE,
            EVENT_AGGREGATE_ID,
        ] {
            let error = read(&without(&message, name)).unwrap_err();
            assert!(
                matches!(error, Error::Outbox(Refused::InvalidEnvelope(_))),
                "{name}"
            );
            assert!(
                error.to_string().contains(&format!("no {name} header")),
                "{name}: {error}"
            );
        }
    }

    #[test]
    fn malformed_headers_are_named() {
        let message = sample().to_message();
        for (name, value) in [
            (EVENT_ID, ""),
            (EVENT_TYPE, ""),
            (EVENT_SCHEMA_VERSION, "two"),
            (EVENT_SCHEMA_VERSION, "-1"),
            (EVENT_SCHEMA_VERSION, "4294967296"),
            (EVENT_OCCURRED_AT, "yesterday"),
            (EVENT_AGGREGATE_TYPE, ""),
            (EVENT_AGGREGATE_ID, ""),
            (TRACEPARENT, "00-xyz"),
        ] {
            let error = read(&replaced(&message, name, value)).unwrap_err();
            assert!(
                error.to_string().contains(&format!("header {name} is")),
                "{name}: {error}"
            );
        }
    }

    #[test]
    fn a_json_body_that_does_not_parse_is_an_invalid_envelope() {
        let mut message = sample().to_message();
        message.body = b"{not json".to_vec();
        assert!(matches!(
            read(&message),
            Err(Error::Outbox(Refused::InvalidEnvelope(_)))
        ));
    }

    #[test]
    fn without_a_json_content_type_the_body_is_bytes() {
        let message = sample().to_message();
        let plain = without(&message, CONTENT_TYPE);
        assert_eq!(
            read(&plain).unwrap().payload(),
            &Payload::Bytes(message.body.clone())
        );
        let charset = replaced(&message, CONTENT_TYPE, "Application/JSON; charset=utf-8");
        assert_eq!(read(&charset).unwrap().payload(), sample().payload());
    }

    #[test]
    fn broker_headers_and_unknown_event_headers_are_left_out() {
        let event = sample();
        let mut message = event.to_message();
        message
            .headers
            .push(("Nats-Msg-Id".to_owned(), event.id().to_string()));
        message
            .headers
            .push(("Event-From-The-Future".to_owned(), "x".to_owned()));
        message
            .headers
            .push(("tracestate".to_owned(), "vendor=1".to_owned()));
        assert_eq!(read(&message).unwrap(), event);
    }

    #[test]
    fn the_json_form_reads_back_equal() {
        let event = sample();
        let document = event.to_json();
        assert_eq!(document["schema_version"], 3);
        assert_eq!(document["headers"]["Tenant"], "acme");
        assert_eq!(Envelope::from_json(&document).unwrap(), event);

        let bytes = event.bytes(vec![0, 1, 254, 255]).without_traceparent();
        let document = bytes.to_json();
        assert_eq!(document["payload_hex"], "0001feff");
        assert!(document.get("payload").is_none());
        assert!(document.get("traceparent").is_none());
        assert_eq!(Envelope::from_json(&document).unwrap(), bytes);
    }

    #[test]
    fn the_json_form_refuses_unknown_keys_and_a_missing_payload() {
        let mut document = sample().to_json();
        document["schemaVersion"] = json!(2);
        let error = Envelope::from_json(&document).unwrap_err();
        assert!(error.to_string().contains("schemaVersion"), "{error}");

        let mut document = sample().to_json();
        document.as_object_mut().unwrap().remove("payload");
        assert!(Envelope::from_json(&document).is_err());
        document["payload_hex"] = json!("abc");
        assert!(Envelope::from_json(&document).is_err());

        let mut document = sample().to_json();
        document.as_object_mut().unwrap().remove("event_type");
        let error = Envelope::from_json(&document).unwrap_err();
        assert!(error.to_string().contains("event_type"), "{error}");
    }

    #[test]
    fn the_json_form_may_leave_out_producer_traceparent_and_headers() {
        let document = json!({
            "id": "evt-1",
            "event_type": "order.placed",
            "schema_version": 1,
            "occurred_at": "2024-05-01T10:00:00Z",
            "aggregate_type": "order",
            "aggregate_id": "42",
            "traceparent": null,
            "payload": {"total": 1},
        });
        let event = Envelope::from_json(&document).unwrap();
        assert_eq!(event.producer(), "");
        assert_eq!(event.traceparent(), None);
        assert!(event.headers().is_empty());
    }

    #[test]
    fn hex_reads_back() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(from_hex(&to_hex(&bytes)).unwrap(), bytes);
        assert_eq!(from_hex("zz"), None);
    }
}
