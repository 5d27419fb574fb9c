//! Where a failed event stands, and what a line of its history records, as stored.

use std::fmt;

use diesel::deserialize::FromSqlRow;
use diesel::expression::AsExpression;
use diesel::sql_types::Text;

use crate::state::stored_as_text;

/// Where a failed event stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
#[non_exhaustive]
pub enum DeadLetterState {
    /// It has failed, fewer times than the limit: redeliveries run it again.
    Retrying,
    /// It failed too often: redeliveries skip it until ops redrive or discard it.
    DeadLettered,
    /// Ops redrove it and it was processed.
    Redriven,
    /// Ops discarded it: kept for the record, never run again.
    Discarded,
    /// Ops released it to be published again: the next delivery runs the effect, once, with
    /// the attempts counted afresh.
    Released,
}

stored_as_text!(DeadLetterState, "diesel_inbox_failures.state" {
    Retrying = "retrying",
    DeadLettered = "dead_lettered",
    Redriven = "redriven",
    Discarded = "discarded",
    Released = "released",
});

impl fmt::Display for DeadLetterState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Retrying => "retrying",
            Self::DeadLettered => "dead-lettered",
            Self::Redriven => "redriven",
            Self::Discarded => "discarded",
            Self::Released => "released",
        })
    }
}

/// What one line of a failed event's history records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
#[non_exhaustive]
pub enum HistoryKind {
    /// An attempt failed (the handler returned an error or panicked).
    Failed,
    /// The failure policy dead-lettered the event.
    DeadLettered,
    /// Ops redrove the dead letter and it was processed.
    Redriven,
    /// Ops discarded the dead letter.
    Discarded,
    /// Ops released the dead letter to be published again.
    Released,
}

stored_as_text!(HistoryKind, "diesel_inbox_failure_log.entry" {
    Failed = "failed",
    DeadLettered = "dead_lettered",
    Redriven = "redriven",
    Discarded = "discarded",
    Released = "released",
});

impl fmt::Display for HistoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Failed => "failed",
            Self::DeadLettered => "dead-lettered",
            Self::Redriven => "redriven",
            Self::Discarded => "discarded",
            Self::Released => "released",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{DeadLetterState, HistoryKind};

    #[test]
    fn every_dead_letter_state_and_history_kind_reads_back_from_the_text_it_is_stored_as() {
        for state in [
            DeadLetterState::Retrying,
            DeadLetterState::DeadLettered,
            DeadLetterState::Redriven,
            DeadLetterState::Discarded,
            DeadLetterState::Released,
        ] {
            assert_eq!(state.as_str().parse(), Ok(state));
        }
        for kind in [
            HistoryKind::Failed,
            HistoryKind::DeadLettered,
            HistoryKind::Redriven,
            HistoryKind::Discarded,
            HistoryKind::Released,
        ] {
            assert_eq!(kind.as_str().parse(), Ok(kind));
        }
    }
}
