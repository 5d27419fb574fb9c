//! Where an outbox row stands, as stored.

use std::fmt;

use diesel::deserialize::FromSqlRow;
use diesel::expression::AsExpression;
use diesel::sql_types::Text;

use crate::state::stored_as_text;

/// Where an outbox row stands ([`Outbox`](super::Outbox)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
#[non_exhaustive]
pub enum OutboxState {
    /// Enqueued and committed; the relay has not had the broker accept it yet.
    Pending,
    /// The broker accepted it. Retention deletes it after a while.
    Published,
    /// Its publish failed for good (a permanent error, or the relay's attempt limit): kept,
    /// with its reason, until ops retry it. The rows after it are published.
    Failed,
}

stored_as_text!(OutboxState, "diesel_inbox_outbox.state" {
    Pending = "pending",
    Published = "published",
    Failed = "failed",
});

impl fmt::Display for OutboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::OutboxState;

    #[test]
    fn every_outbox_state_reads_back_from_the_text_it_is_stored_as() {
        for state in [
            OutboxState::Pending,
            OutboxState::Published,
            OutboxState::Failed,
        ] {
            assert_eq!(state.as_str().parse(), Ok(state));
        }
    }
}
