//! Where a replay stands, and what its notes say, as stored.

use std::fmt;

use diesel::deserialize::FromSqlRow;
use diesel::expression::AsExpression;
use diesel::sql_types::Text;

use crate::state::stored_as_text;

/// Where a replay stands ([`Replays`](crate::replay::Replays)): planned → running → finished →
/// accepted or rejected; planned or running → aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
#[non_exhaustive]
pub enum ReplayState {
    /// Recorded with its range, reason, target and expectation; no event read yet.
    Planned,
    /// A runner holds it and works through the range; a crashed runner's replay resumes from
    /// its checkpoint.
    Running,
    /// Every event of the range is settled in the target; awaiting reconciliation and a
    /// decision.
    Finished,
    /// Its evidence matched the plan's expectation (or ops overrode it, with a reason).
    Accepted,
    /// Ops rejected it.
    Rejected,
    /// Stopped before the end of its range: it never runs again.
    Aborted,
}

impl ReplayState {
    /// The states a replay never leaves: retention may prune them.
    pub(crate) const DECIDED: [Self; 3] = [Self::Accepted, Self::Rejected, Self::Aborted];

    /// The states whose replay may still read its source: retention keeps that source's
    /// range.
    pub(crate) const OPEN: [Self; 3] = [Self::Planned, Self::Running, Self::Finished];
}

stored_as_text!(ReplayState, "diesel_inbox_replays.state" {
    Planned = "planned",
    Running = "running",
    Finished = "finished",
    Accepted = "accepted",
    Rejected = "rejected",
    Aborted = "aborted",
});

impl fmt::Display for ReplayState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a note of a replay says about one event ([`ReplayNote`](crate::replay::ReplayNote)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
#[non_exhaustive]
pub enum NoteKind {
    /// The plan's schema interpretation does not read the event's type and version (or it
    /// is not an envelope at all): not delivered, counted as skipped.
    Skipped,
    /// The handler failed on it; the target's failure policy recorded the attempt.
    Failed,
    /// The target holds it dead-lettered.
    DeadLettered,
    /// Its effect ran in a replay into the live consumer, where the plan expected none (or
    /// would have: a [`Probe`](crate::replay::Probe) rolled it back).
    Ran,
    /// A side effect of its handler was suppressed: a claim not run, an enqueue dropped or
    /// redirected.
    Suppressed,
}

stored_as_text!(NoteKind, "diesel_inbox_replay_notes.kind" {
    Skipped = "skipped",
    Failed = "failed",
    DeadLettered = "dead_lettered",
    Ran = "ran",
    Suppressed = "suppressed",
});

impl fmt::Display for NoteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::{NoteKind, ReplayState};

    #[test]
    fn every_replay_state_and_note_kind_reads_back_from_the_text_it_is_stored_as() {
        for state in [
            ReplayState::Planned,
            ReplayState::Running,
            ReplayState::Finished,
            ReplayState::Accepted,
            ReplayState::Rejected,
            ReplayState::Aborted,
        ] {
            assert_eq!(state.as_str().parse(), Ok(state));
        }
        for kind in [
            NoteKind::Skipped,
            NoteKind::Failed,
            NoteKind::DeadLettered,
            NoteKind::Ran,
            NoteKind::Suppressed,
        ] {
            assert_eq!(kind.as_str().parse(), Ok(kind));
        }
    }
}
