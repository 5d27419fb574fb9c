//! A block as the caller delivers it: its identity, its parent, what the caller knows of the
//! chain's tip and finality, and its events.

use std::fmt;

use crate::EventId;

/// The longest block hash, in bytes.
pub const MAX_BLOCK_HASH_BYTES: usize = 255;

/// A block's height and hash: where a chain stream's effects were applied.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlockId {
    height: u64,
    hash: String,
}

impl BlockId {
    pub(crate) fn new(height: u64, hash: String) -> Self {
        Self { height, hash }
    }

    /// The block's height.
    pub fn height(&self) -> u64 {
        self.height
    }

    /// The block's hash, as the caller gave it.
    pub fn hash(&self) -> &str {
        &self.hash
    }
}

impl fmt::Display for BlockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.height, self.hash)
    }
}

/// Why a block hash was rejected by [`Block::new`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidBlockHash {
    /// The hash is empty.
    #[error(
        "a block hash is empty: pass the block's hash as the chain reports it, e.g. \"0x9c1f...\""
    )]
    Empty,
    /// The hash is longer than [`MAX_BLOCK_HASH_BYTES`] bytes.
    #[error("a block hash is {len} bytes long, more than the {MAX_BLOCK_HASH_BYTES} allowed")]
    TooLong {
        /// The hash's length in bytes.
        len: usize,
    },
    /// The hash has a control character.
    #[error("a block hash has a control character at byte {index}: pass it as printable text (hex, base58)")]
    ControlCharacter {
        /// Its byte offset.
        index: usize,
    },
}

fn checked(hash: &str) -> Result<String, InvalidBlockHash> {
    if hash.is_empty() {
        return Err(InvalidBlockHash::Empty);
    }
    if hash.len() > MAX_BLOCK_HASH_BYTES {
        return Err(InvalidBlockHash::TooLong { len: hash.len() });
    }
    if let Some((index, _)) = hash.char_indices().find(|(_, c)| c.is_control()) {
        return Err(InvalidBlockHash::ControlCharacter { index });
    }
    Ok(hash.to_owned())
}

/// One block delivered to a [`Chain`](super::Chain): its height, hash and parent hash, and
/// its events in the order they take effect, each with its identity (a transaction hash and
/// log index, say, as the app defines it).
///
/// Hashes compare byte for byte: give them in one form (lower-case hex, say) every time.
///
/// ```
/// use diesel_inbox::chain::Block;
/// use diesel_inbox::EventId;
///
/// let block = Block::new(100, "0x100a", "0x099a")?
///     .event(EventId::new("0xt1:0")?, 25_u64)
///     .event(EventId::new("0xt2:3")?, 10_u64)
///     .tip(112);
/// assert_eq!(block.id().height(), 100);
/// assert_eq!(block.events().len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Block<E> {
    id: BlockId,
    parent: String,
    tip: Option<u64>,
    finalized: Option<u64>,
    events: Vec<(EventId, E)>,
}

impl<E> Block<E> {
    /// The block at `height` with hash `hash`, whose parent's hash is `parent`, with no events
    /// yet.
    ///
    /// # Errors
    ///
    /// [`InvalidBlockHash`] for a hash that is empty, longer than 255 bytes or holds a
    /// control character.
    pub fn new(height: u64, hash: &str, parent: &str) -> Result<Self, InvalidBlockHash> {
        Ok(Self {
            id: BlockId::new(height, checked(hash)?),
            parent: checked(parent)?,
            tip: None,
            finalized: None,
            events: Vec::new(),
        })
    }

    /// Adds an event, after those added before.
    pub fn event(mut self, id: EventId, event: E) -> Self {
        self.events.push((id, event));
        self
    }

    /// Adds events, in order, after those added before.
    pub fn events_from(mut self, events: impl IntoIterator<Item = (EventId, E)>) -> Self {
        self.events.extend(events);
        self
    }

    /// The chain's tip (its latest height) as the caller's node reports it: what a stream
    /// that [processes final blocks only](super::Chain::final_blocks_only) needs to tell
    /// whether this block is final.
    pub fn tip(mut self, height: u64) -> Self {
        self.tip = Some(height);
        self
    }

    /// The chain's own finalized height (Ethereum's `finalized` block tag, say), when the
    /// caller knows it: the stream's finalized height moves up to it (never above this
    /// block), beside the finality depth.
    pub fn finalized(mut self, height: u64) -> Self {
        self.finalized = Some(height);
        self
    }

    /// The block's height and hash.
    pub fn id(&self) -> &BlockId {
        &self.id
    }

    /// Its parent's hash.
    pub fn parent(&self) -> &str {
        &self.parent
    }

    /// Its events, in order.
    pub fn events(&self) -> &[(EventId, E)] {
        &self.events
    }

    pub(crate) fn known_tip(&self) -> Option<u64> {
        self.tip
    }

    pub(crate) fn known_finalized(&self) -> Option<u64> {
        self.finalized
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_hashes_are_printable_text_of_at_most_255_bytes() {
        assert!(Block::<()>::new(1, "0xab", "0xaa").is_ok());
        assert_eq!(
            Block::<()>::new(1, "", "0xaa").unwrap_err(),
            InvalidBlockHash::Empty
        );
        assert_eq!(
            Block::<()>::new(1, "0xab", &"f".repeat(256)).unwrap_err(),
            InvalidBlockHash::TooLong { len: 256 }
        );
        assert_eq!(
            Block::<()>::new(1, "0x\nab", "0xaa").unwrap_err(),
            InvalidBlockHash::ControlCharacter { index: 2 }
        );
    }
}
