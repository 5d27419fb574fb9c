//! Event identities, validated before any SQL runs.

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

/// The longest event id the inbox stores, in bytes (UTF-8).
pub const MAX_EVENT_ID_BYTES: usize = 255;

/// The identity of an event: what makes two deliveries the same event.
///
/// An event id is non-empty, at most [`MAX_EVENT_ID_BYTES`] bytes of UTF-8 and free of NUL.
/// It is compared byte for byte on every backend: ids that differ only by case, accents,
/// trailing spaces or Unicode normal form are different events.
///
/// ```
/// use diesel_inbox::EventId;
///
/// let id = EventId::new("order-42/created")?;
/// assert_eq!(id.as_str(), "order-42/created");
/// assert!(EventId::new("").is_err());
/// # Ok::<(), diesel_inbox::InvalidEventId>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(Box<str>);

impl EventId {
    /// Validates `id` and wraps it.
    ///
    /// # Errors
    ///
    /// [`InvalidEventId`] when `id` is empty, longer than [`MAX_EVENT_ID_BYTES`] bytes, or
    /// contains a NUL character.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidEventId> {
        let id = id.into();
        validate(&id)?;
        Ok(Self(id.into_boxed_str()))
    }

    /// The id as text, exactly as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn validate(id: &str) -> Result<(), InvalidEventId> {
    if id.is_empty() {
        return Err(InvalidEventId::Empty);
    }
    if id.len() > MAX_EVENT_ID_BYTES {
        return Err(InvalidEventId::TooLong { len: id.len() });
    }
    if let Some(index) = id.bytes().position(|b| b == 0) {
        return Err(InvalidEventId::ContainsNul { index });
    }
    Ok(())
}

impl fmt::Debug for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for EventId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for EventId {
    type Err = InvalidEventId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<&str> for EventId {
    type Error = InvalidEventId;

    fn try_from(id: &str) -> Result<Self, Self::Error> {
        Self::new(id)
    }
}

impl TryFrom<String> for EventId {
    type Error = InvalidEventId;

    fn try_from(id: String) -> Result<Self, Self::Error> {
        Self::new(id)
    }
}

/// A UUID becomes its lowercase hyphenated form (`67e55044-10b1-426f-9247-bb680e5fe0c8`),
/// so the same UUID given as text in that form is the same event.
impl From<Uuid> for EventId {
    fn from(id: Uuid) -> Self {
        Self(id.hyphenated().to_string().into_boxed_str())
    }
}

/// Why an event id was rejected. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidEventId {
    /// The id is the empty string.
    #[error("the event id is empty: give each event a stable identity, such as the producer's message id")]
    Empty,
    /// The id is longer than [`MAX_EVENT_ID_BYTES`] bytes.
    #[error("the event id is {len} bytes long, more than the {MAX_EVENT_ID_BYTES} the inbox stores: use a shorter identity, such as a UUID or a hash of the long one")]
    TooLong {
        /// The id's length in bytes.
        len: usize,
    },
    /// The id contains a NUL character, which PostgreSQL cannot store in text.
    #[error("the event id contains a NUL character at byte {index}: NUL cannot be stored on every backend, so encode binary ids (hex, base64) first")]
    ContainsNul {
        /// Byte offset of the first NUL.
        index: usize,
    },
}

/// Anything that names an event: `&str`, `String`, [`Uuid`] and [`EventId`] (owned or borrowed).
///
/// The inbox calls this before any SQL runs, so an invalid id costs no round trip.
pub trait IntoEventId {
    /// Validates and converts.
    ///
    /// # Errors
    ///
    /// [`InvalidEventId`] when the id is empty, too long or contains NUL.
    fn into_event_id(self) -> Result<EventId, InvalidEventId>;
}

impl IntoEventId for EventId {
    fn into_event_id(self) -> Result<EventId, InvalidEventId> {
        Ok(self)
    }
}

impl IntoEventId for &EventId {
    fn into_event_id(self) -> Result<EventId, InvalidEventId> {
        Ok(self.clone())
    }
}

impl IntoEventId for &str {
    fn into_event_id(self) -> Result<EventId, InvalidEventId> {
        EventId::new(self)
    }
}

impl IntoEventId for String {
    fn into_event_id(self) -> Result<EventId, InvalidEventId> {
        EventId::new(self)
    }
}

impl IntoEventId for &String {
    fn into_event_id(self) -> Result<EventId, InvalidEventId> {
        EventId::new(self.as_str())
    }
}

impl IntoEventId for Uuid {
    fn into_event_id(self) -> Result<EventId, InvalidEventId> {
        Ok(self.into())
    }
}

impl IntoEventId for &Uuid {
    fn into_event_id(self) -> Result<EventId, InvalidEventId> {
        Ok((*self).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_ids_are_rejected() {
        assert_eq!(EventId::new(""), Err(InvalidEventId::Empty));
    }

    #[test]
    fn ids_longer_than_255_bytes_are_rejected_by_bytes_not_chars() {
        assert!(EventId::new("a".repeat(255)).is_ok());
        assert_eq!(
            EventId::new("a".repeat(256)),
            Err(InvalidEventId::TooLong { len: 256 })
        );
        // 128 two-byte characters: 128 chars, 256 bytes.
        assert_eq!(
            EventId::new("é".repeat(128)),
            Err(InvalidEventId::TooLong { len: 256 })
        );
    }

    #[test]
    fn nul_is_rejected_with_its_position() {
        assert_eq!(
            EventId::new("ab\0c"),
            Err(InvalidEventId::ContainsNul { index: 2 })
        );
    }

    #[test]
    fn ids_are_kept_exactly_as_given() {
        for raw in ["Order-1", "order-1 ", " order-1", "café", "cafe\u{301}"] {
            assert_eq!(EventId::new(raw).unwrap().as_str(), raw);
        }
    }

    #[test]
    fn uuids_become_lowercase_hyphenated_text() {
        let id = Uuid::from_u128(0x67e5_5044_10b1_426f_9247_bb68_0e5f_e0c8);
        assert_eq!(
            id.into_event_id().unwrap().as_str(),
            "67e55044-10b1-426f-9247-bb680e5fe0c8"
        );
    }
}
