//! The replay area's statements: the replay record, its fenced lease and progress, its audited
//! transitions and its notes, and the reads its reconciliation and retention need; the trait a
//! backend implements, the rows it reads and writes, and its statements for every backend,
//! written once.
//!
//! Each backend's file stamps the whole area with one line,
//! `replay_statements!(Pg, schema = schema, codec = codec, ..)`: the backend type, its module
//! of [`crate::tables`] and its codec (how it binds keys and times) are explicit arguments,
//! and `replay_id` says how a new replay's id is read back (`returning`, or `last_insert_id`
//! on MySQL), as the fork ledger's is. Adding a statement touches this file alone: the
//! trait's method and its body below.

use std::future::Future;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use crate::sql::{Db, TransactionSql};

use super::state::ReplayState;

/// A row of `diesel_inbox_replays`, its state, plan, counts and evidence as stored (read
/// above the backend).
#[derive(Debug)]
pub struct ReplayRow {
    pub id: i64,
    pub consumer: String,
    pub source: String,
    pub range: (Option<i64>, Option<i64>),
    pub plan: String,
    pub reason: String,
    pub requested_by: String,
    pub state: String,
    pub checkpoint: Option<i64>,
    pub counts: String,
    pub digest: String,
    pub fence: i64,
    pub lease_until: Option<DateTime<Utc>>,
    pub evidence: Option<String>,
    pub updated_at: DateTime<Utc>,
}

/// A replay as planned: what `diesel_inbox_replays` gets first.
#[derive(Debug)]
pub struct NewReplay<'a> {
    pub consumer: &'a str,
    pub source: &'a str,
    pub range: (Option<i64>, Option<i64>),
    pub plan: &'a str,
    pub reason: &'a str,
    pub requested_by: &'a str,
    pub counts: &'a str,
    pub digest: &'a str,
    pub now: DateTime<Utc>,
}

/// A replay's progress after an event: written with the fence that holds it.
#[derive(Debug)]
pub struct ReplayProgressRow<'a> {
    pub checkpoint: i64,
    pub counts: &'a str,
    pub digest: &'a str,
    pub lease_until: DateTime<Utc>,
    pub now: DateTime<Utc>,
}

/// A row of `diesel_inbox_replay_notes`.
#[derive(Debug, Clone)]
pub struct NoteRow {
    pub position: i64,
    pub kind: String,
    pub event_id: String,
    pub detail: String,
}

/// A row of `diesel_inbox_replay_transitions`, its states as stored.
#[derive(Debug)]
pub struct TransitionRow {
    pub from: Option<String>,
    pub to: String,
    pub actor: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

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

/// Implements [`ReplaySql`] for a backend: `replay_statements!(Backend, schema = .., codec = ..,
/// replay_id = returning | last_insert_id)`.
///
/// `schema` is the backend's module of [`crate::tables`]; `codec` its module of key and time
/// conversions (`key`, `key_string`, `time`, `utc`, `Time`, `KeyOwned`). Nothing else is
/// taken from the caller's scope. A new replay's id is read back by the chain area's
/// `@returning` or `@last_insert_id` arm (see `chain/sql.rs`), which the fork ledger uses too.
macro_rules! replay_statements {
    (
        $backend:ty,
        schema = $schema:ident,
        codec = $codec:ident,
        replay_id = $replay_id:ident $(,)?
    ) => {
        impl $crate::replay::sql::ReplaySql for $backend {
            async fn insert_replay<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                replay: &$crate::replay::sql::NewReplay<'_>,
            ) -> diesel::QueryResult<i64> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_replays::dsl as r;
                let now = $codec::time(replay.now);
                let insert = diesel::insert_into(r::diesel_inbox_replays).values((
                    (
                        r::consumer.eq($codec::key(replay.consumer)),
                        r::source.eq(replay.source),
                        r::range_first.eq(replay.range.0),
                        r::range_last.eq(replay.range.1),
                        r::plan.eq(replay.plan),
                        r::reason.eq(replay.reason),
                        r::requested_by.eq(replay.requested_by),
                    ),
                    (
                        r::state.eq($crate::replay::state::ReplayState::Planned),
                        r::counts.eq(replay.counts),
                        r::digest.eq(replay.digest),
                        r::updated_at.eq(now),
                    ),
                ));
                $crate::chain::sql::chain_statements!(@$replay_id insert, r, conn)
            }

            async fn replay<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                id: i64,
            ) -> diesel::QueryResult<Option<$crate::replay::sql::ReplayRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_replays::dsl as r;
                r::diesel_inbox_replays
                    .find(id)
                    .select($crate::replay::sql::replay_statements!(@columns r))
                    .limit(1)
                    .get_result_on::<$crate::replay::sql::replay_statements!(@types $codec)>(conn)
                    .await
                    .optional()
                    .map(|row| row.map($crate::replay::sql::replay_statements!(@row $codec)))
            }

            async fn replays<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                after: i64,
                limit: i64,
            ) -> diesel::QueryResult<Vec<$crate::replay::sql::ReplayRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_replays::dsl as r;
                r::diesel_inbox_replays
                    .filter(r::id.gt(after))
                    .order(r::id)
                    .limit(limit)
                    .select($crate::replay::sql::replay_statements!(@columns r))
                    .load_on::<$crate::replay::sql::replay_statements!(@types $codec)>(conn)
                    .await
                    .map(|rows| {
                        rows.into_iter()
                            .map($crate::replay::sql::replay_statements!(@row $codec))
                            .collect()
                    })
            }

            async fn take_replay<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                id: i64,
                now: chrono::DateTime<chrono::Utc>,
                lease_until: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $crate::replay::state::ReplayState;
                use $schema::diesel_inbox_replays::dsl as r;
                let now = $codec::time(now);
                let free = r::state.eq(ReplayState::Planned).or(r::state
                    .eq(ReplayState::Running)
                    .and(r::lease_until.is_null().or(r::lease_until.lt(now))));
                diesel::update(r::diesel_inbox_replays.find(id).filter(free))
                    .set((
                        r::state.eq(ReplayState::Running),
                        r::fence.eq(r::fence + 1_i64),
                        r::lease_until.eq($codec::time(lease_until)),
                        r::updated_at.eq(now),
                    ))
                    .execute_on(conn)
                    .await
                    .map(|changed| changed == 1)
            }

            async fn save_replay_progress<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                id: i64,
                fence: i64,
                progress: &$crate::replay::sql::ReplayProgressRow<'_>,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $crate::replay::state::ReplayState;
                use $schema::diesel_inbox_replays::dsl as r;
                diesel::update(
                    r::diesel_inbox_replays
                        .find(id)
                        .filter(r::fence.eq(fence))
                        .filter(r::state.eq(ReplayState::Running)),
                )
                .set((
                    r::checkpoint.eq(progress.checkpoint),
                    r::counts.eq(progress.counts),
                    r::digest.eq(progress.digest),
                    r::lease_until.eq($codec::time(progress.lease_until)),
                    r::updated_at.eq($codec::time(progress.now)),
                ))
                .execute_on(conn)
                .await
                .map(|changed| changed == 1)
            }

            async fn set_replay_state<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                id: i64,
                from: &[$crate::replay::state::ReplayState],
                to: $crate::replay::state::ReplayState,
                fence: Option<i64>,
                now: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_replays::dsl as r;
                use diesel::IntoSql;
                // Any fence when none is given.
                let fenced = r::fence
                    .eq(fence.unwrap_or_default())
                    .or(fence.is_none().into_sql::<diesel::sql_types::Bool>());
                // The fence is raised so that a runner still holding the lease writes nothing
                // after this.
                let changed = diesel::update(
                    r::diesel_inbox_replays
                        .find(id)
                        .filter(r::state.eq_any(from))
                        .filter(fenced),
                )
                .set((
                    r::state.eq(to),
                    r::fence.eq(r::fence + 1_i64),
                    r::lease_until.eq(None::<$codec::Time>),
                    r::updated_at.eq($codec::time(now)),
                ))
                .execute_on(conn)
                .await?;
                Ok(changed == 1)
            }

            async fn set_replay_evidence<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                id: i64,
                evidence: &str,
                now: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $crate::replay::state::ReplayState;
                use $schema::diesel_inbox_replays::dsl as r;
                diesel::update(
                    r::diesel_inbox_replays
                        .find(id)
                        .filter(r::state.eq(ReplayState::Finished)),
                )
                .set((r::evidence.eq(evidence), r::updated_at.eq($codec::time(now))))
                .execute_on(conn)
                .await
                .map(|changed| changed == 1)
            }

            async fn insert_replay_transition<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                id: i64,
                transition: &$crate::replay::sql::TransitionRow,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_replay_transitions::dsl as t;
                diesel::insert_into(t::diesel_inbox_replay_transitions)
                    .values((
                        t::replay_id.eq(id),
                        t::from_state.eq(transition.from.as_deref()),
                        t::to_state.eq(&transition.to),
                        t::actor.eq(&transition.actor),
                        t::reason.eq(&transition.reason),
                        t::at.eq($codec::time(transition.at)),
                    ))
                    .execute_on(conn)
                    .await
                    .map(drop)
            }

            async fn replay_transitions<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                id: i64,
            ) -> diesel::QueryResult<Vec<$crate::replay::sql::TransitionRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_replay_transitions::dsl as t;
                t::diesel_inbox_replay_transitions
                    .filter(t::replay_id.eq(id))
                    .order(t::id)
                    .select((t::from_state, t::to_state, t::actor, t::reason, t::at))
                    .load_on::<(Option<String>, String, String, String, $codec::Time)>(conn)
                    .await
                    .map(|rows| {
                        rows.into_iter()
                            .map(|(from, to, actor, reason, at)| $crate::replay::sql::TransitionRow {
                                from,
                                to,
                                actor,
                                reason,
                                at: $codec::utc(at),
                            })
                            .collect()
                    })
            }

            async fn merge_replay_note<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                id: i64,
                note: &$crate::replay::sql::NoteRow,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_replay_notes::dsl as n;
                // The replay's fence, raised in this transaction before its notes are written,
                // keeps every other runner out: nothing inserts the note between the two.
                let merged = diesel::update(n::diesel_inbox_replay_notes.find((
                    id,
                    note.position,
                    &note.kind,
                )))
                .set(n::detail.eq(n::detail.concat("; ").concat(&note.detail)))
                .execute_on(conn)
                .await?;
                if merged > 0 {
                    return Ok(());
                }
                diesel::insert_into(n::diesel_inbox_replay_notes)
                    .values((
                        n::replay_id.eq(id),
                        n::position.eq(note.position),
                        n::kind.eq(&note.kind),
                        n::event_id.eq($codec::key(&note.event_id)),
                        n::detail.eq(&note.detail),
                    ))
                    .execute_on(conn)
                    .await
                    .map(drop)
            }

            async fn replay_notes<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                id: i64,
                after: i64,
                limit: i64,
            ) -> diesel::QueryResult<Vec<$crate::replay::sql::NoteRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_replay_notes::dsl as n;
                n::diesel_inbox_replay_notes
                    .filter(n::replay_id.eq(id))
                    .filter(n::position.gt(after))
                    .order((n::position, n::kind))
                    .limit(limit)
                    .select((n::position, n::kind, n::event_id, n::detail))
                    .load_on::<(i64, String, $codec::KeyOwned, String)>(conn)
                    .await
                    .map(|rows| {
                        rows.into_iter()
                            .map(|(position, kind, event_id, detail)| $crate::replay::sql::NoteRow {
                                position,
                                kind,
                                event_id: $codec::key_string(event_id),
                                detail,
                            })
                            .collect()
                    })
            }

            async fn inbox_rows_of<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                event_ids: &[&str],
            ) -> diesel::QueryResult<Vec<String>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_events::dsl as e;
                let ids: Vec<_> = event_ids.iter().map(|id| $codec::key(id)).collect();
                e::diesel_inbox_events
                    .filter(e::consumer.eq($codec::key(consumer)))
                    .filter(e::event_id.eq_any(ids))
                    .select(e::event_id)
                    .load_on::<$codec::KeyOwned>(conn)
                    .await
                    .map(|rows| rows.into_iter().map($codec::key_string).collect())
            }

            async fn open_replay_ranges<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                source: &str,
            ) -> diesel::QueryResult<Vec<Option<i64>>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $crate::replay::state::ReplayState;
                use $schema::diesel_inbox_replays::dsl as r;
                let of_source = r::source.eq(source).or(r::source.like(format!("{source}:%")));
                r::diesel_inbox_replays
                    .filter(of_source)
                    .filter(r::state.eq_any(ReplayState::OPEN))
                    .select(r::range_first)
                    .load_on::<Option<i64>>(conn)
                    .await
            }

            async fn delete_decided_replays<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                cutoff: chrono::DateTime<chrono::Utc>,
                limit: i64,
            ) -> diesel::QueryResult<usize> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $crate::replay::state::ReplayState;
                use $schema::diesel_inbox_replay_notes::dsl as n;
                use $schema::diesel_inbox_replay_transitions::dsl as t;
                use $schema::diesel_inbox_replays::dsl as r;
                // Two steps: MySQL takes no LIMIT in an IN subquery.
                let ids: Vec<i64> = r::diesel_inbox_replays
                    .filter(r::state.eq_any(ReplayState::DECIDED))
                    .filter(r::updated_at.lt($codec::time(cutoff)))
                    .order(r::id)
                    .limit(limit)
                    .select(r::id)
                    .load_on::<i64>(conn)
                    .await?;
                if ids.is_empty() {
                    return Ok(0);
                }
                diesel::delete(n::diesel_inbox_replay_notes.filter(n::replay_id.eq_any(&ids)))
                    .execute_on(conn)
                    .await?;
                diesel::delete(t::diesel_inbox_replay_transitions.filter(t::replay_id.eq_any(&ids)))
                    .execute_on(conn)
                    .await?;
                diesel::delete(r::diesel_inbox_replays.filter(r::id.eq_any(&ids)))
                    .execute_on(conn)
                    .await
            }
        }
    };
    (@columns $r:ident) => {
        (
            ($r::id, $r::consumer, $r::source, $r::range_first, $r::range_last),
            ($r::plan, $r::reason, $r::requested_by, $r::state, $r::checkpoint),
            ($r::counts, $r::digest, $r::fence, $r::lease_until, $r::evidence),
            $r::updated_at,
        )
    };
    (@types $codec:ident) => {
        (
            (i64, $codec::KeyOwned, String, Option<i64>, Option<i64>),
            (String, String, String, String, Option<i64>),
            (String, String, i64, Option<$codec::Time>, Option<String>),
            $codec::Time,
        )
    };
    (@row $codec:ident) => {
        |(
            (id, consumer, source, first, last),
            (plan, reason, requested_by, state, checkpoint),
            (counts, digest, fence, lease_until, evidence),
            updated_at,
        )| $crate::replay::sql::ReplayRow {
            id,
            consumer: $codec::key_string(consumer),
            source,
            range: (first, last),
            plan,
            reason,
            requested_by,
            state,
            checkpoint,
            counts,
            digest,
            fence,
            lease_until: lease_until.map($codec::utc),
            evidence,
            updated_at: $codec::utc(updated_at),
        }
    };
}
pub(crate) use replay_statements;
