//! Consumer and stream names: which handler an inbox row belongs to, and which ordered stream
//! a cursor follows.

use std::fmt;
use std::sync::Arc;

/// The longest stream name, in bytes.
pub const MAX_STREAM_BYTES: usize = 255;

/// The longest consumer name, in bytes.
pub const MAX_CONSUMER_BYTES: usize = 128;

/// The consumer [`with_inbox`](crate::with_inbox) and [`Inbox::default`](crate::Inbox) use.
pub const DEFAULT_CONSUMER: &str = "default";

/// A validated consumer name; cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Consumer(Arc<str>);

impl Consumer {
    pub(crate) fn new(name: &str) -> Result<Self, InvalidConsumerName> {
        if name.is_empty() {
            return Err(InvalidConsumerName::Empty);
        }
        if name.len() > MAX_CONSUMER_BYTES {
            return Err(InvalidConsumerName::TooLong { len: name.len() });
        }
        if let Some((index, character)) = name
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_alphanumeric() || "-_.:/".contains(c)))
        {
            return Err(InvalidConsumerName::InvalidCharacter { character, index });
        }
        Ok(Self(name.into()))
    }

    pub(crate) fn default_consumer() -> Self {
        Self(DEFAULT_CONSUMER.into())
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a consumer name was rejected by [`Inbox::new`](crate::Inbox::new).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidConsumerName {
    /// The name is empty.
    #[error("the consumer name is empty: name the handler, e.g. \"billing.rewards\"")]
    Empty,
    /// The name is longer than [`MAX_CONSUMER_BYTES`] bytes.
    #[error("the consumer name is {len} bytes long, more than the {MAX_CONSUMER_BYTES} allowed: use a shorter name")]
    TooLong {
        /// The name's length in bytes.
        len: usize,
    },
    /// The name has a character outside ASCII letters, digits and `- _ . : /`.
    #[error("the consumer name has {character:?} at byte {index}: use ASCII letters, digits and - _ . : / only")]
    InvalidCharacter {
        /// The first character not allowed.
        character: char,
        /// Its byte offset.
        index: usize,
    },
}

/// Why a stream name was rejected by [`Inbox::cursor`](crate::Inbox::cursor).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidStreamName {
    /// The name is empty.
    #[error("the stream name is empty: name the stream or partition, e.g. \"orders-3\"")]
    Empty,
    /// The name is longer than [`MAX_STREAM_BYTES`] bytes.
    #[error("the stream name is {len} bytes long, more than the {MAX_STREAM_BYTES} allowed: use a shorter name")]
    TooLong {
        /// The name's length in bytes.
        len: usize,
    },
    /// The name has a control character.
    #[error("the stream name has a control character at byte {index}: use printable text")]
    ControlCharacter {
        /// Its byte offset.
        index: usize,
    },
}

/// A validated stream name; cheap to clone.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct StreamName(Arc<str>);

impl StreamName {
    pub(crate) fn new(name: &str) -> Result<Self, InvalidStreamName> {
        if name.is_empty() {
            return Err(InvalidStreamName::Empty);
        }
        if name.len() > MAX_STREAM_BYTES {
            return Err(InvalidStreamName::TooLong { len: name.len() });
        }
        if let Some((index, _)) = name.char_indices().find(|(_, c)| c.is_control()) {
            return Err(InvalidStreamName::ControlCharacter { index });
        }
        Ok(Self(name.into()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for StreamName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_are_accepted() {
        for name in ["default", "billing.rewards-v2", "svc:orders/created", "A_1"] {
            assert_eq!(Consumer::new(name).unwrap().as_str(), name);
        }
    }

    #[test]
    fn empty_long_and_odd_names_are_rejected() {
        assert_eq!(Consumer::new(""), Err(InvalidConsumerName::Empty));
        assert_eq!(
            Consumer::new(&"a".repeat(129)),
            Err(InvalidConsumerName::TooLong { len: 129 })
        );
        assert_eq!(
            Consumer::new("bad name"),
            Err(InvalidConsumerName::InvalidCharacter {
                character: ' ',
                index: 3
            })
        );
        assert!(Consumer::new("naïve").is_err());
    }
}
