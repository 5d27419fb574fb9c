//! Where a gap stands, and why it was opened, as stored.

use std::fmt;

use diesel::deserialize::FromSqlRow;
use diesel::expression::AsExpression;
use diesel::sql_types::Text;

use crate::state::stored_as_text;

/// Why a cursor skipped a range of sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
#[non_exhaustive]
pub enum GapCause {
    /// A later sequence arrived first: the missing ones may still come (after a nack, from a
    /// parallel worker), and the watermark waits for them.
    Skipped,
    /// The sequences are behind the broker's first available sequence: its retention evicted
    /// them while the consumer was away, and they will never come. The watermark moves past;
    /// the gap stays open until ops resolve it.
    Evicted,
}

stored_as_text!(GapCause, "diesel_inbox_gaps.cause" {
    Skipped = "skipped",
    Evicted = "evicted",
});

impl fmt::Display for GapCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a gap stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
#[non_exhaustive]
pub enum GapState {
    /// Its sequences are missing.
    Open,
    /// Late arrivals filled it: every one of its sequences took effect.
    Filled,
    /// Ops resolved it (gave its sequences up, or recovered them elsewhere), saying who and
    /// why. A late arrival of one of its sequences is then a duplicate.
    Resolved,
}

stored_as_text!(GapState, "diesel_inbox_gaps.state" {
    Open = "open",
    Filled = "filled",
    Resolved = "resolved",
});

impl fmt::Display for GapState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::{GapCause, GapState};

    #[test]
    fn every_gap_cause_and_state_reads_back_from_the_text_it_is_stored_as() {
        for cause in [GapCause::Skipped, GapCause::Evicted] {
            assert_eq!(cause.as_str().parse(), Ok(cause));
        }
        for state in [GapState::Open, GapState::Filled, GapState::Resolved] {
            assert_eq!(state.as_str().parse(), Ok(state));
        }
    }
}
