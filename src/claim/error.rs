//! What a claim's holder is refused, and why: inside [`Error::Claim`](crate::Error::Claim).

use super::state::ClaimState;
use crate::id::EventId;

/// Why a write of a claim's holder was refused. Nothing was committed, the writes that were
/// to record the side effect's result included: when the side effect ran, record its result
/// by hand. Its broker answer is [`Refused::ack`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// A write of a claim's holder was refused: another worker took the claim over (its lease
    /// had run out), or ops completed it. Nothing was committed, the writes that were to
    /// record the result included. When the side effect ran, it may have run twice; the log
    /// line of this refusal has its result.
    #[error("claim {event_id:?} is no longer held by attempt {attempt}: it is {state} (attempt {current}); nothing was committed, so record this result by hand if the side effect ran")]
    Fenced {
        /// The claimed event.
        event_id: EventId,
        /// The attempt that tried to write.
        attempt: u64,
        /// The claim's attempt now.
        current: u64,
        /// The claim's state now.
        state: ClaimState,
    },
    /// The claim a worker holds is gone from the ledger: someone deleted its row while it
    /// was held. Nothing was committed; when the side effect ran, record its result by hand.
    #[error("claim {event_id:?} is no longer in the claims ledger (its row was deleted while held); nothing was committed, so record this result by hand if the side effect ran")]
    Deleted {
        /// The claimed event.
        event_id: EventId,
    },
}
