//! Where a claim stands, as stored.

use std::fmt;

use diesel::deserialize::FromSqlRow;
use diesel::expression::AsExpression;
use diesel::sql_types::Text;

use crate::state::stored_as_text;

/// Where a claim on a side effect stands ([`Claims`](super::Claims)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
#[non_exhaustive]
pub enum ClaimState {
    /// A worker holds the claim and its lease is running: the side effect may be under way.
    InProgress,
    /// Whether the side effect happened is unknown: the worker's lease ran out before it
    /// completed the claim (it crashed, hung or lost its connection), or the effect failed in
    /// a way that does not say. Never re-run on its own (unless the claims opt into
    /// [`InDoubtPolicy::RerunAfterLease`](super::InDoubtPolicy)); ops resolve it.
    InDoubt,
    /// The side effect happened, and its result is stored: deliveries get it back.
    Completed,
    /// The side effect did not happen, and may run again: the next delivery acquires the
    /// claim. An effect that failed without taking effect, or ops' retry.
    Released,
    /// The side effect did not happen and never will: a permanent failure, or ops gave it up.
    Abandoned,
}

impl ClaimState {
    /// The states a claim never leaves on its own: retention may prune them.
    pub(crate) const SETTLED: [Self; 2] = [Self::Completed, Self::Abandoned];
}

stored_as_text!(ClaimState, "diesel_inbox_claims.state" {
    InProgress = "in_progress",
    InDoubt = "in_doubt",
    Completed = "completed",
    Released = "released",
    Abandoned = "abandoned",
});

impl fmt::Display for ClaimState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InProgress => "in progress",
            Self::InDoubt => "in doubt",
            Self::Completed => "completed",
            Self::Released => "released",
            Self::Abandoned => "abandoned",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ClaimState;

    #[test]
    fn every_claim_state_reads_back_from_the_text_it_is_stored_as() {
        for state in [
            ClaimState::InProgress,
            ClaimState::InDoubt,
            ClaimState::Completed,
            ClaimState::Released,
            ClaimState::Abandoned,
        ] {
            assert_eq!(state.as_str().parse(), Ok(state));
        }
    }
}
