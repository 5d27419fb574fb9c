//! What a cursor refuses, and why: inside [`Error::Cursor`](crate::Error::Cursor).

use crate::names::InvalidStreamName;

/// Why a cursor refused a sequence, or a stream's name. Nothing was committed, the effect
/// included. Its broker answer is [`Refused::ack`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// Another instance acquired the stream since this cursor's epoch was handed out (a
    /// rebalance): this instance is a zombie. Nothing was committed, the effect included.
    /// Stop consuming the stream, or [`acquire`](crate::cursor::Cursor::acquire) it again.
    #[error("stream {stream:?} is fenced: this cursor writes with epoch {}, but the stream's epoch is {current} (another instance acquired it); nothing was committed, so stop consuming the stream or acquire it again", .epoch.map_or_else(|| "none".to_owned(), |e| e.to_string()))]
    Fenced {
        /// The stream.
        stream: String,
        /// The epoch this cursor writes with, if it has one.
        epoch: Option<u64>,
        /// The stream's epoch.
        current: u64,
    },
    /// Accepting the sequence would open more gaps that may still fill than
    /// [`Cursor::max_open_gaps`](crate::cursor::Cursor::max_open_gaps) allows. Nothing was
    /// committed. Deliver the missing sequences, resolve gaps given up on
    /// ([`Gaps::resolve`](crate::cursor::Gaps::resolve), `diesel-inbox gaps resolve`), or raise the
    /// bound; then redeliver.
    #[error("stream {stream:?} already has {open} open gaps, the most Cursor::max_open_gaps allows; nothing was committed: deliver the missing sequences or resolve gaps (diesel-inbox gaps), then redeliver")]
    TooManyOpenGaps {
        /// The stream.
        stream: String,
        /// Its open gaps that may still fill.
        open: usize,
    },
    /// The caller said the broker's first available sequence is above the sequence it
    /// delivered: one of the two numbers is wrong. Nothing was committed.
    #[error("sequence {sequence} of stream {stream:?} is below the first available sequence {first_available} the caller gave; pass the broker's first available sequence, or none")]
    BeforeFirstAvailable {
        /// The stream.
        stream: String,
        /// The sequence delivered.
        sequence: u64,
        /// The first available sequence given.
        first_available: u64,
    },
    /// The stream name was rejected.
    #[error(transparent)]
    InvalidStreamName(#[from] InvalidStreamName),
    /// A sequence above `i64::MAX`, which no backend stores (a chain's height, too). Nothing
    /// was committed.
    #[error("sequence {0} is above {max}, the largest a cursor stores", max = i64::MAX)]
    SequenceOutOfRange(u64),
}
