//! A gap: one range of sequences a cursor skipped, why, and what became of it. The ledger that
//! keeps them is [`crate::cursor`]'s.

use std::ops::RangeInclusive;

use chrono::{DateTime, Utc};

use crate::audit::Audit;
use crate::rows::GapRow;
use crate::state::{GapCause, GapState};
use crate::watermark::{unstored, OpenGap};

/// One range of missing sequences in a stream, as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    id: i64,
    stream: String,
    first: u64,
    last: u64,
    cause: GapCause,
    state: GapState,
    detected_at: DateTime<Utc>,
    closed_at: Option<DateTime<Utc>>,
    resolution: Option<Audit>,
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

    pub(crate) fn from_row(row: GapRow) -> Self {
        let resolution = match (row.resolved_by, row.resolution) {
            (Some(actor), Some(reason)) => Audit::new(actor, reason).ok(),
            _ => None,
        };
        Self {
            id: row.id,
            stream: row.stream,
            first: unstored(row.first),
            last: unstored(row.last),
            cause: row.cause,
            state: row.state,
            detected_at: row.detected_at,
            closed_at: row.closed_at,
            resolution,
        }
    }

    /// The gap `row` as an operator's resolution at `now` leaves it.
    pub(crate) fn resolved(row: GapRow, audit: &Audit, now: DateTime<Utc>) -> Self {
        Self {
            state: GapState::Resolved,
            closed_at: Some(now),
            resolution: Some(audit.clone()),
            ..Self::from_row(row)
        }
    }

    /// The gap's number, to resolve it by.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The stream.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The first missing sequence.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// The last missing sequence.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The missing sequences. A gap that late arrivals filled in the middle is two rows: the
    /// part below the arrival keeps this id, the part above gets a new one.
    pub fn sequences(&self) -> RangeInclusive<u64> {
        self.first..=self.last
    }

    /// How many sequences are missing.
    pub fn len(&self) -> u64 {
        self.last - self.first + 1
    }

    /// Never: a gap holds at least one sequence.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Why the sequences are missing.
    pub fn cause(&self) -> GapCause {
        self.cause
    }

    /// Whether they still are.
    pub fn state(&self) -> GapState {
        self.state
    }

    /// When the cursor found the gap.
    pub fn detected_at(&self) -> DateTime<Utc> {
        self.detected_at
    }

    /// When it was filled or resolved.
    pub fn closed_at(&self) -> Option<DateTime<Utc>> {
        self.closed_at
    }

    /// Who resolved it, and why.
    pub fn resolution(&self) -> Option<&Audit> {
        self.resolution.as_ref()
    }
}
