//! What a chain cursor refuses, and why: inside [`Error::Chain`](crate::Error::Chain).

use super::block::InvalidBlockHash;

/// Why a chain cursor refused a block. Nothing was committed. Its broker answer is
/// [`Refused::ack`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// A block that forks from the processed branch below its finalized height: the fork's
    /// common ancestor is at or below the stream's finalized height, or deeper than its
    /// finality depth (or the stream processes final blocks only, and never reverts).
    /// Nothing was committed; it is logged at error and counted. A chain that reorganised
    /// this deep needs ops: resync the stream from a trusted height, or raise the depth.
    #[error("block {height} of chain stream {stream:?} forks from the processed branch below its finalized height {finalized}; nothing was committed: a reorg this deep needs ops (resync the stream), or a larger finality depth")]
    ReorgBeyondFinality {
        /// The chain stream.
        stream: String,
        /// The block that forks.
        height: u64,
        /// The stream's finalized height: no reorg reaches at or below it.
        finalized: u64,
    },
    /// A block above the stream's head plus one: the blocks between were not processed, so
    /// its parent cannot be checked. Nothing was committed.
    #[error("block {height} of chain stream {stream:?} is ahead of its head {head}; nothing was committed: deliver the blocks from {next} first", next = head + 1)]
    MissingBlocks {
        /// The chain stream.
        stream: String,
        /// The stream's head.
        head: u64,
        /// The block delivered.
        height: u64,
    },
    /// A block forks from the processed branch, and the branch it belongs to is unknown at
    /// `height`: the block's parent is not a processed block, and the handler's
    /// [`ancestor`](crate::chain::ChainHandler::ancestor) did not answer for that height.
    /// Nothing was committed.
    #[error("a block of chain stream {stream:?} forks from the processed branch, and its own branch's block at height {height} is unknown; nothing was committed: deliver the new branch from the fork point, or answer ChainHandler::ancestor")]
    UnknownAncestor {
        /// The chain stream.
        stream: String,
        /// The height whose hash on the new branch is needed.
        height: u64,
    },
    /// A chain stream that processes final blocks only was given a block not yet deeper than
    /// its finality depth below the chain's tip ([`Block::tip`](crate::chain::Block::tip)).
    /// Nothing was committed: redeliver it later.
    #[error("block {height} of chain stream {stream:?} is not final yet (chain tip {}, finality depth {depth}); nothing was committed: redeliver it once the tip is at {final_at}", .tip.map_or_else(|| "not given: pass it with Block::tip".to_owned(), |tip| tip.to_string()))]
    BlockNotFinal {
        /// The chain stream.
        stream: String,
        /// The block delivered.
        height: u64,
        /// The chain's tip, as the caller gave it.
        tip: Option<u64>,
        /// The stream's finality depth.
        depth: u64,
        /// The tip at which the block is final.
        final_at: u64,
    },
    /// A block hash that is empty, longer than 255 bytes or holds a control character.
    #[error(transparent)]
    InvalidBlockHash(#[from] InvalidBlockHash),
}
