//! The replay area's statements: the replay record, its fenced lease and progress, its audited
//! transitions and its notes, and the reads its reconciliation and retention need.
//!
//! Written once for every backend in `backend/replay.rs`; each backend's impl takes them by
//! name.

use std::future::Future;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use super::{Db, TransactionSql};
use crate::rows::{NewReplay, NoteRow, ReplayProgressRow, ReplayRow, TransitionRow};
use crate::state::ReplayState;

/// The replay area's statements for one database, on a connection of either flavour. Sealed.
pub trait ReplaySql: TransactionSql {
    /// Records a planned replay; returns its id.
    fn insert_replay<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        replay: &NewReplay<'_>,
    ) -> impl Future<Output = QueryResult<i64>> + Send;

    /// The replay `id`, if there is one.
    fn replay<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        id: i64,
    ) -> impl Future<Output = QueryResult<Option<ReplayRow>>> + Send;

    /// Up to `limit` replays after id `after`, in id order.
    fn replays<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        after: i64,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<ReplayRow>>> + Send;

    /// Takes the replay over for a runner: running, its fence raised, leased until
    /// `lease_until`; only from planned, or running with no live lease at `now`. `false`
    /// when it is in another state or another runner's lease lasts.
    fn take_replay<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        id: i64,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Writes a running replay's progress, if `fence` still holds it; `false` otherwise.
    fn save_replay_progress<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        id: i64,
        fence: i64,
        progress: &ReplayProgressRow<'_>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Moves the replay from one of `from` to `to`, raising its fence and ending its lease
    /// (so that no runner writes after it); with `fence`, only if that fence still holds it.
    /// `false` when it was in none of `from`.
    fn set_replay_state<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        id: i64,
        from: &[ReplayState],
        to: ReplayState,
        fence: Option<i64>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Stores a finished replay's evidence; `false` when it is not finished.
    fn set_replay_evidence<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        id: i64,
        evidence: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Adds a transition to the replay's history.
    fn insert_replay_transition<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        id: i64,
        transition: &TransitionRow,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// The replay's transitions, in order.
    fn replay_transitions<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        id: i64,
    ) -> impl Future<Output = QueryResult<Vec<TransitionRow>>> + Send;

    /// Adds a note about one event of the replay, or, where the event has a note of that kind
    /// already, merges it into that note: its detail goes after the note's, `; ` between.
    /// One note per event and kind, however many times the event is noted.
    fn merge_replay_note<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        id: i64,
        note: &NoteRow,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Up to `limit` of the replay's notes after source position `after`, in position order.
    fn replay_notes<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        id: i64,
        after: i64,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<NoteRow>>> + Send;

    /// Which of `event_ids` have a row in `consumer`'s inbox.
    fn inbox_rows_of<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        event_ids: &[&str],
    ) -> impl Future<Output = QueryResult<Vec<String>>> + Send;

    /// The first range positions of the open replays (planned, running, finished) that read
    /// the source `source` (or a part of it: `source:..`); `None` for one whose range is not
    /// a position range.
    fn open_replay_ranges<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        source: &str,
    ) -> impl Future<Output = QueryResult<Vec<Option<i64>>>> + Send;

    /// Deletes up to `limit` decided replays (accepted, rejected, aborted) last changed
    /// before `cutoff`, with their transitions and notes; returns how many replays.
    fn delete_decided_replays<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        cutoff: DateTime<Utc>,
        limit: i64,
    ) -> impl Future<Output = QueryResult<usize>> + Send;
}
