//! What a claim came to: for the closure form ([`ClaimOutcome`]), and what the two-phase
//! form ([`Claimed`](super::Claimed)) finds when it does not hold the claim.

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;

use crate::Error;

/// What [`Claims::run`](crate::claim::Claims::run) came to.
#[must_use = "a ClaimOutcome says whether the side effect ran; ack the message by ClaimOutcome::ack"]
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ClaimOutcome<T> {
    /// This delivery ran the side effect, and its completion committed.
    Ran(T),
    /// The side effect had run before: its stored result. It did not run again.
    Completed(T),
    /// Another worker holds the claim and its lease runs: the side effect did not run.
    InProgress(InProgress),
    /// Whether the side effect happened is unknown: this delivery ran it and it failed in a
    /// way that does not say, or an earlier holder's lease ran out (then it did not run
    /// now). Ops resolve the claim.
    InDoubt(InDoubt),
    /// The side effect did not happen and will not: it failed permanently, or ops gave it up.
    Abandoned(Abandoned),
    /// Under a replay that does not call out: the side effect did not run, and nothing was
    /// claimed; what a live delivery would have done is noted in the replay.
    Suppressed(Suppressed),
}

impl<T> ClaimOutcome<T> {
    /// The side effect's result: from this delivery's run, or stored by an earlier one.
    pub fn into_value(self) -> Option<T> {
        match self {
            Self::Ran(value) | Self::Completed(value) => Some(value),
            Self::InProgress(_) | Self::InDoubt(_) | Self::Abandoned(_) | Self::Suppressed(_) => {
                None
            }
        }
    }

    /// `true` when this delivery ran the side effect.
    pub fn has_run(&self) -> bool {
        matches!(self, Self::Ran(_))
    }

    /// `true` when the claim is in doubt.
    pub fn is_in_doubt(&self) -> bool {
        matches!(self, Self::InDoubt(_))
    }
}

/// A completed claim's stored result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    pub(crate) result: Option<String>,
    pub(crate) at: Option<DateTime<Utc>>,
}

impl Completed {
    /// The side effect's result, as its holder (or ops) stored it.
    ///
    /// # Errors
    ///
    /// [`Error::StoredResult`] when the stored JSON does not deserialize into `T`.
    pub fn result<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_str(self.result.as_deref().unwrap_or("null")).map_err(Error::StoredResult)
    }

    /// When it was completed.
    pub fn completed_at(&self) -> Option<DateTime<Utc>> {
        self.at
    }
}

/// A claim another worker holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InProgress {
    pub(crate) attempt: u64,
    pub(crate) lease_until: DateTime<Utc>,
}

impl InProgress {
    /// The holder's attempt.
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// When its lease runs out: after that the claim is in doubt (or, under
    /// [`InDoubtPolicy::RerunAfterLease`](crate::claim::InDoubtPolicy), taken over).
    pub fn lease_until(&self) -> DateTime<Utc> {
        self.lease_until
    }
}

/// A claim whose side effect may or may not have happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InDoubt {
    pub(crate) attempt: u64,
    pub(crate) since: DateTime<Utc>,
    pub(crate) reason: String,
}

impl InDoubt {
    /// The attempt whose outcome is unknown.
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// Since when: the end of the holder's lease, when it ran out or when the holder said it
    /// could not tell whether the side effect happened.
    pub fn since(&self) -> DateTime<Utc> {
        self.since
    }

    /// Why: the lease ran out, or the side effect's error.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// A claim given up on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abandoned {
    pub(crate) reason: Option<String>,
}

impl Abandoned {
    /// The permanent failure that abandoned it, if one did. Ops' reasons are on the claim's
    /// record ([`ClaimRecord::resolution`](crate::claim::ClaimRecord::resolution)).
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }
}

/// A claim a replay suppressed ([`Replayed::claims`](crate::replay::Replayed::claims)): the
/// claim's state as a live delivery would have found it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Suppressed {
    /// The claim's state; `None` when the event was never claimed.
    pub state: Option<super::state::ClaimState>,
}

impl Suppressed {
    /// `true` when a live delivery would have run the side effect: the event was never
    /// claimed, or its claim was released.
    pub fn would_run(&self) -> bool {
        matches!(self.state, None | Some(super::state::ClaimState::Released))
    }

    /// What a live delivery would have done, in words.
    pub(crate) fn describe(&self, consumer: &str, event_id: &str) -> String {
        match self.state {
            _ if self.would_run() => {
                format!("claim {consumer}/{event_id}: would have run its side effect; not called")
            }
            Some(state) => {
                format!("claim {consumer}/{event_id}: {state}; its side effect would not run")
            }
            None => unreachable!("a claim never made would run"),
        }
    }
}
