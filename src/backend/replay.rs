//! The replay area's statements, written once for every backend: a backend's `impl ReplaySql`
//! is `replay_statements!(schema, codec, replay_id = ..)`, with its schema and codec as
//! explicit arguments; `replay_id` says how a new replay's id is read back (`returning`, or
//! `last_insert_id` on MySQL), as the fork ledger's is. The trait, and what each statement
//! does, is [`crate::sql::ReplaySql`].

macro_rules! replay_statements {
    ($schema:ident, $codec:ident, replay_id = $replay_id:ident) => {
        async fn insert_replay<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            replay: &$crate::rows::NewReplay<'_>,
        ) -> QueryResult<i64> {
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
                    r::state.eq($crate::state::ReplayState::Planned),
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
        ) -> QueryResult<Option<$crate::rows::ReplayRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_replays::dsl as r;
            r::diesel_inbox_replays
                .find(id)
                .select(replay_statements!(@columns r))
                .limit(1)
                .get_result_on::<replay_statements!(@types $codec)>(conn)
                .await
                .optional()
                .map(|row| row.map(replay_statements!(@row $codec)))
        }

        async fn replays<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            after: i64,
            limit: i64,
        ) -> QueryResult<Vec<$crate::rows::ReplayRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_replays::dsl as r;
            r::diesel_inbox_replays
                .filter(r::id.gt(after))
                .order(r::id)
                .limit(limit)
                .select(replay_statements!(@columns r))
                .load_on::<replay_statements!(@types $codec)>(conn)
                .await
                .map(|rows| rows.into_iter().map(replay_statements!(@row $codec)).collect())
        }

        async fn take_replay<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            id: i64,
            now: DateTime<Utc>,
            lease_until: DateTime<Utc>,
        ) -> QueryResult<bool> {
            use $crate::sql::Run;
            use $crate::state::ReplayState;
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
            progress: &$crate::rows::ReplayProgressRow<'_>,
        ) -> QueryResult<bool> {
            use $crate::sql::Run;
            use $crate::state::ReplayState;
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
            from: &[$crate::state::ReplayState],
            to: $crate::state::ReplayState,
            fence: Option<i64>,
            now: DateTime<Utc>,
        ) -> QueryResult<bool> {
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
            now: DateTime<Utc>,
        ) -> QueryResult<bool> {
            use $crate::sql::Run;
            use $crate::state::ReplayState;
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
            transition: &$crate::rows::TransitionRow,
        ) -> QueryResult<()> {
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
        ) -> QueryResult<Vec<$crate::rows::TransitionRow>> {
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
                        .map(|(from, to, actor, reason, at)| $crate::rows::TransitionRow {
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
            note: &$crate::rows::NoteRow,
        ) -> QueryResult<()> {
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
        ) -> QueryResult<Vec<$crate::rows::NoteRow>> {
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
                        .map(|(position, kind, event_id, detail)| $crate::rows::NoteRow {
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
        ) -> QueryResult<Vec<String>> {
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
        ) -> QueryResult<Vec<Option<i64>>> {
            use $crate::sql::Run;
            use $crate::state::ReplayState;
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
            cutoff: DateTime<Utc>,
            limit: i64,
        ) -> QueryResult<usize> {
            use $crate::sql::Run;
            use $crate::state::ReplayState;
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
        )| $crate::rows::ReplayRow {
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
