//! What a replay refuses, and why.

use chrono::{DateTime, Utc};

use super::state::ReplayState;

/// Why a replay operation was refused. Inside [`Error::Replay`](crate::Error::Replay) for a
/// run (whose error is the handler's), and inside [`AdminError::Inbox`](crate::AdminError) for
/// the other operations. Its broker answer is [`Refused::ack`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// The plan cannot run as given.
    #[error("invalid replay plan: {0}")]
    InvalidPlan(String),
    /// No replay has this id.
    #[error("no replay {id}: list them with `diesel-inbox replays list`")]
    NotFound {
        /// The id asked for.
        id: i64,
    },
    /// The replay is in a state the operation does not leave.
    #[error("replay {id} is {state}; only a replay that is {allowed} can be {attempted}")]
    WrongState {
        /// The replay.
        id: i64,
        /// Its state.
        state: ReplayState,
        /// What was attempted: `run`, `reconciled`, `accepted`, `rejected`, `aborted`.
        attempted: &'static str,
        /// The states it is allowed from, in words.
        allowed: &'static str,
    },
    /// Another runner holds the replay, and its lease lasts.
    #[error("replay {id} is held by another runner until {until}; nothing was read: run it again after that, or abort it")]
    Held {
        /// The replay.
        id: i64,
        /// When the other runner's lease runs out.
        until: DateTime<Utc>,
    },
    /// This runner no longer holds the replay: another took it over after its lease ran out,
    /// or ops aborted it. What this runner did last rolled back; it stops.
    #[error("replay {id} was taken over or aborted while this runner held it; it stopped, and its last event rolled back")]
    Fenced {
        /// The replay.
        id: i64,
    },
    /// The source given is not the one the replay was planned with.
    #[error("replay {id} reads the source {recorded:?}, not {given:?}: give it its own source")]
    SourceMismatch {
        /// The replay.
        id: i64,
        /// The source it was planned with.
        recorded: String,
        /// The source given.
        given: String,
    },
    /// The source cannot read this kind of range.
    #[error("the source {source_name:?} cannot read a range of {range}: plan the replay with another kind of range")]
    UnsupportedRange {
        /// The source.
        source_name: String,
        /// The kind of range.
        range: &'static str,
    },
    /// The source failed to read.
    #[error("the source {source_name:?} failed to read: {message}; the run stopped and resumes from its checkpoint")]
    Source {
        /// The source.
        source_name: String,
        /// What failed.
        message: String,
    },
    /// What a [`Probe`](super::Probe) returns for an event that would take effect: its
    /// transaction rolls back, nothing is recorded for the target, and the replay notes it.
    #[error("this event would take effect in the target: the probe rolled it back")]
    WouldRun,
    /// A decision was asked for before the reconciliation.
    #[error("replay {id} has no evidence yet: reconcile it first (`diesel-inbox replays reconcile {id}`)")]
    NotReconciled {
        /// The replay.
        id: i64,
    },
    /// The evidence does not match the plan's expectation, and the acceptance did not
    /// override it.
    #[error("replay {id} does not match its plan's expectation: {}; reject it, or accept it with an override and a reason", .differences.join("; "))]
    EvidenceMismatch {
        /// The replay.
        id: i64,
        /// What differs.
        differences: Vec<String>,
    },
}
