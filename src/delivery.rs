//! A delivery: the event's identity, and optionally its payload.

use sha2::{Digest, Sha256};

use crate::{EventId, IntoEventId, InvalidEventId};

/// An event's payload, kept with its failures so a dead letter can be redriven, and
/// fingerprinted so a reused identity with a different payload is caught.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Payload {
    /// A JSON document. Stored as `serde_json` writes it (object keys sorted), so two deliveries
    /// equal as JSON have the same fingerprint whatever their original key order or spacing.
    Json(serde_json::Value),
    /// Raw bytes, stored and fingerprinted byte for byte.
    Bytes(Vec<u8>),
}

impl Payload {
    /// The bytes the inbox stores and fingerprints.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        match self {
            Self::Json(value) => value.to_string().into_bytes(),
            Self::Bytes(bytes) => bytes.clone(),
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Json(_) => "json",
            Self::Bytes(_) => "bytes",
        }
    }

    /// Rebuilds a payload read back from storage.
    pub(crate) fn from_stored(kind: &str, bytes: Vec<u8>) -> Option<Self> {
        match kind {
            "json" => serde_json::from_slice(&bytes).ok().map(Self::Json),
            "bytes" => Some(Self::Bytes(bytes)),
            _ => None,
        }
    }

    /// SHA-256 over the kind and the stored bytes: JSON and bytes never collide.
    pub(crate) fn fingerprint(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(self.kind().as_bytes());
        hasher.update([0]);
        hasher.update(self.to_bytes());
        hasher.finalize().into()
    }
}

/// One delivery of an event: its id and, optionally, its payload.
///
/// Giving the payload turns on two things: the payload's fingerprint is stored with the inbox
/// row, so a later delivery with the same id and a different payload is reported as
/// [`Error::PayloadMismatch`](crate::Error::PayloadMismatch) instead of passing as a duplicate;
/// and failures keep the payload, so a dead letter can be redriven.
///
/// ```
/// use diesel_inbox::Delivery;
///
/// let delivery = Delivery::new("order-42")?.json(serde_json::json!({"total": 1250}));
/// let raw = Delivery::new("frame-7")?.bytes(vec![0xde, 0xad, 0xbe, 0xef]);
/// # Ok::<(), diesel_inbox::InvalidEventId>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub(crate) id: EventId,
    pub(crate) payload: Option<Payload>,
}

impl Delivery {
    /// A delivery of the event `id`, without payload.
    ///
    /// # Errors
    ///
    /// [`InvalidEventId`] as for [`EventId::new`].
    pub fn new(id: impl IntoEventId) -> Result<Self, InvalidEventId> {
        Ok(Self {
            id: id.into_event_id()?,
            payload: None,
        })
    }

    /// With a JSON payload.
    #[must_use]
    pub fn json(self, value: serde_json::Value) -> Self {
        self.with_payload(Payload::Json(value))
    }

    /// With a raw payload.
    #[must_use]
    pub fn bytes(self, bytes: impl Into<Vec<u8>>) -> Self {
        self.with_payload(Payload::Bytes(bytes.into()))
    }

    /// With `payload`.
    #[must_use]
    pub fn with_payload(mut self, payload: Payload) -> Self {
        self.payload = Some(payload);
        self
    }

    /// The event id.
    pub fn id(&self) -> &EventId {
        &self.id
    }

    /// The payload, if one was given.
    pub fn payload(&self) -> Option<&Payload> {
        self.payload.as_ref()
    }
}

/// What [`Inbox::process`](crate::Inbox::process) accepts: a [`Delivery`], or any event id
/// ([`IntoEventId`]) for a delivery without payload.
pub trait IntoDelivery {
    /// Validates and converts.
    ///
    /// # Errors
    ///
    /// [`InvalidEventId`] when the id is invalid.
    fn into_delivery(self) -> Result<Delivery, InvalidEventId>;
}

impl IntoDelivery for Delivery {
    fn into_delivery(self) -> Result<Delivery, InvalidEventId> {
        Ok(self)
    }
}

impl IntoDelivery for &Delivery {
    fn into_delivery(self) -> Result<Delivery, InvalidEventId> {
        Ok(self.clone())
    }
}

impl<T: IntoEventId> IntoDelivery for T {
    fn into_delivery(self) -> Result<Delivery, InvalidEventId> {
        Delivery::new(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_fingerprints_ignore_key_order_and_spacing() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": [1, 2]}"#).unwrap();
        let b: serde_json::Value = serde_json::from_str(r#"{"a":[1,2],"b":1}"#).unwrap();
        assert_eq!(
            Payload::Json(a).fingerprint(),
            Payload::Json(b).fingerprint()
        );
    }

    #[test]
    fn different_payloads_and_kinds_have_different_fingerprints() {
        let json = Payload::Json(serde_json::json!("x"));
        let same_bytes = Payload::Bytes(b"\"x\"".to_vec());
        assert_ne!(json.fingerprint(), same_bytes.fingerprint());
        assert_ne!(
            Payload::Bytes(b"a".to_vec()).fingerprint(),
            Payload::Bytes(b"b".to_vec()).fingerprint()
        );
    }

    #[test]
    fn stored_payloads_come_back_equal() {
        for payload in [
            Payload::Json(serde_json::json!({"name": "Zoë", "n": [1, 2.5, null]})),
            Payload::Bytes(vec![0, 159, 146, 150, 255]),
        ] {
            let back = Payload::from_stored(payload.kind(), payload.to_bytes());
            assert_eq!(back, Some(payload));
        }
    }
}
