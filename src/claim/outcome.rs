//! What a claim came to: for the two-phase form ([`Claimed`]) and the closure form
//! ([`ClaimOutcome`]).

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;

use super::sql::ClaimRow;
use crate::{claim::Claim, Error};

/// What [`Claims::claim`](crate::claim::Claims::claim) found: the claim to run the side effect
/// under, or why not to run it. `H` is the held claim's type: [`Claim`], or the async
/// flavour's `asynch::Claim`.
#[must_use = "only Claimed::Acquired may run the side effect"]
#[derive(Debug)]
#[non_exhaustive]
pub enum Claimed<H = Claim> {
    /// This delivery holds the claim: run the side effect now, then finish the claim
    /// ([`Claim::complete`] and the others).
    Acquired(H),
    /// The side effect happened before: its stored result, and the side effect must not run.
    Completed(Completed),
    /// Another worker holds the claim and its lease runs: do not run the side effect;
    /// redeliver after the lease.
    InProgress(InProgress),
    /// Whether the side effect happened is unknown: do not run it; ops resolve the claim.
    InDoubt(InDoubt),
    /// The side effect did not happen and must not run.
    Abandoned(Abandoned),
    /// Under a replay that does not call out: nothing was claimed and the side effect must
    /// not run; what a live delivery would have done is noted in the replay.
    Suppressed(Suppressed),
}

impl<H> Claimed<H> {
    /// The same finding, with the held claim (if any) made into another type.
    #[cfg(feature = "async")]
    pub(crate) fn map_held<K>(self, held: impl FnOnce(H) -> K) -> Claimed<K> {
        match self {
            Self::Acquired(claim) => Claimed::Acquired(held(claim)),
            Self::Completed(done) => Claimed::Completed(done),
            Self::InProgress(progress) => Claimed::InProgress(progress),
            Self::InDoubt(doubt) => Claimed::InDoubt(doubt),
            Self::Abandoned(abandoned) => Claimed::Abandoned(abandoned),
            Self::Suppressed(suppressed) => Claimed::Suppressed(suppressed),
        }
    }
}

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
    result: Option<String>,
    at: Option<DateTime<Utc>>,
}

impl Completed {
    pub(crate) fn from_row(row: &ClaimRow) -> Self {
        Self {
            result: row.result.clone(),
            at: row.completed_at,
        }
    }

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
    /// The claim `row`, which is in doubt. It is so since the end of its holder's lease: a
    /// holder that cannot tell what its side effect did ends the lease there and then.
    pub(crate) fn from_row(row: &ClaimRow) -> Self {
        Self {
            attempt: row.attempt.unsigned_abs(),
            since: row.lease_until,
            reason: reason_in_doubt(row),
        }
    }

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

/// Why the claim `row`, in doubt, is: the reason stored with it, or, for a lapse no delivery
/// has recorded yet, the one a delivery would record.
pub(crate) fn reason_in_doubt(row: &ClaimRow) -> String {
    if let (Some(reason), super::ClaimState::InDoubt) = (&row.last_error, row.state) {
        return reason.clone();
    }
    let at = row.lease_until.format("%Y-%m-%d %H:%M:%S UTC");
    format!("the holder's lease ran out at {at} before it completed the claim (it crashed, hung or lost its connection)")
}

/// A claim given up on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abandoned {
    pub(crate) reason: Option<String>,
}

impl Abandoned {
    pub(crate) fn from_row(row: &ClaimRow) -> Self {
        Self {
            reason: row.last_error.clone(),
        }
    }

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
    pub state: Option<super::ClaimState>,
}

impl Suppressed {
    /// `true` when a live delivery would have run the side effect: the event was never
    /// claimed, or its claim was released.
    pub fn would_run(&self) -> bool {
        matches!(self.state, None | Some(super::ClaimState::Released))
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
