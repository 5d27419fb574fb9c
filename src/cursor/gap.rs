//! A gap: one range of sequences a cursor skipped, why, and what became of it. The ledger that
//! keeps them is [`crate::cursor`]'s.

use std::ops::RangeInclusive;

use chrono::{DateTime, Utc};

use super::state::{GapCause, GapState};
use super::watermark::{unstored, OpenGap};
use crate::audit::Audit;

/// One range of missing sequences in a stream, as the ledger keeps it: a record read back, so
/// its fields are public, as every record the crate lists is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Gap {
    /// The gap's number, to resolve it by.
    pub id: i64,
    /// The stream.
    pub stream: String,
    /// The first missing sequence.
    pub first: u64,
    /// The last missing sequence, never below [`first`](Self::first).
    pub last: u64,
    /// Why the sequences are missing.
    pub cause: GapCause,
    /// Whether they still are.
    pub state: GapState,
    /// When the cursor found the gap.
    pub detected_at: DateTime<Utc>,
    /// When it was filled or resolved.
    pub closed_at: Option<DateTime<Utc>>,
    /// Who resolved it, and why.
    pub resolution: Option<Audit>,
}

impl Gap {
    /// A gap a cursor has just written.
    pub(crate) fn found(id: i64, stream: &str, gap: &OpenGap) -> Self {
        Self {
            id,
            stream: stream.to_owned(),
            first: unstored(gap.first),
            last: unstored(gap.last),
            cause: gap.cause,
            state: GapState::Open,
            detected_at: gap.detected_at,
            closed_at: None,
            resolution: None,
        }
    }

    /// The missing sequences. A gap that late arrivals filled in the middle is two rows: the
    /// part below the arrival keeps this id, the part above gets a new one.
    pub fn sequences(&self) -> RangeInclusive<u64> {
        self.first..=self.last
    }

    /// How many sequences are missing.
    pub fn len(&self) -> u64 {
        self.last.saturating_sub(self.first) + 1
    }

    /// Never: a gap holds at least one sequence.
    pub fn is_empty(&self) -> bool {
        false
    }
}
