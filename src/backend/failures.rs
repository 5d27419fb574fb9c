//! The failures area's statements that read the same on every backend, written once: a backend's
//! `impl FailureSql` takes each by name, `failure_statement!(NAME, schema, codec, ..)`, with its
//! schema, codec and row mappings as explicit arguments (see `portable.rs`). The trait, and what
//! each statement does, is [`crate::sql::FailureSql`].

/// One `FailureSql` statement whose SQL reads the same on every backend, by name.
macro_rules! failure_statement {
    // `conflict` is the backend's upsert target for `diesel_inbox_failures`.
    (record_failure, $schema:ident, $codec:ident, conflict = $target:expr) => {
        async fn record_failure<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
            now: DateTime<Utc>,
            error: &str,
            payload: Option<&$crate::Payload>,
        ) -> QueryResult<(i64, $crate::state::DeadLetterState)> {
            use $crate::sql::Run;
            use $crate::rows::HistoryRow;
            use $crate::state::{DeadLetterState, HistoryKind};
            use $schema::diesel_inbox_failures::dsl as f;
            let stored = payload.map(|p| (p.to_bytes(), p.kind()));
            let (bytes, kind) = (stored.as_ref().map(|s| &s.0[..]), stored.as_ref().map(|s| s.1));
            let when = $codec::time(now);
            // The counter is bumped in the database, so concurrent failures of one event each
            // get their own attempt number.
            diesel::insert_into(f::diesel_inbox_failures)
                .values((
                    f::consumer.eq($codec::key(key.0)),
                    f::event_id.eq($codec::key(key.1)),
                    f::state.eq(DeadLetterState::Retrying),
                    f::attempts.eq(1),
                    f::last_error.eq(error),
                    f::first_failed_at.eq(when),
                    f::last_failed_at.eq(when),
                    f::payload.eq(bytes),
                    f::payload_kind.eq(kind),
                    f::updated_at.eq(when),
                ))
                .on_conflict($target)
                .do_update()
                .set((
                    f::attempts.eq(f::attempts + 1),
                    f::last_error.eq(error),
                    f::last_failed_at.eq(when),
                    f::payload.eq(bytes),
                    f::payload_kind.eq(kind),
                    f::updated_at.eq(when),
                ))
                .execute_on(conn)
                .await?;
            let (attempts, state) = f::diesel_inbox_failures
                .find(($codec::key(key.0), $codec::key(key.1)))
                .select((f::attempts, f::state))
                .limit(1)
                .get_result_on::<(i64, DeadLetterState)>(conn)
                .await?;
            Self::append_history(conn,
                key,
                &HistoryRow {
                    kind: HistoryKind::Failed,
                    attempt: Some(attempts),
                    error: Some(error.to_owned()),
                    actor: None,
                    reason: None,
                    at: now,
                },
            )
            .await?;
            Ok((attempts, state))
        }
    };
    // `lock`: `for_update` where the backend has row locks; SQLite locks the whole database
    // for the (immediate) transaction instead.
    (failure, $schema:ident, $codec:ident, $rows:ident $(, lock = $lock:ident)?) => {
        async fn failure<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
        ) -> QueryResult<Option<$crate::rows::FailureRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_failures::dsl as f;
            f::diesel_inbox_failures
                .find(($codec::key(key.0), $codec::key(key.1)))
                .select($rows::failure_columns())
                $(.$lock())?
                .limit(1)
                .get_result_on::<$rows::FailureColumns>(conn)
                .await
                .optional()
                .map(|row| row.map($rows::failure_row))
        }
    };
    (failures, $schema:ident, $codec:ident, $rows:ident) => {
        async fn failures<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            state: $crate::state::DeadLetterState,
            after: Option<&str>,
            limit: i64,
        ) -> QueryResult<Vec<$crate::rows::FailureRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_failures::dsl as f;
            // The state is compared as text: a row whose state this version cannot read is
            // listed too, as unreadable, rather than left out.
            let mut query = f::diesel_inbox_failures
                .filter(f::consumer.eq($codec::key(consumer)))
                .filter(
                    f::state
                        .eq(state)
                        .or(f::state.ne_all($crate::state::DeadLetterState::TEXTS)),
                )
                .into_boxed();
            if let Some(after) = after {
                query = query.filter(f::event_id.gt($codec::key(after)));
            }
            query
                .order(f::event_id)
                .limit(limit)
                .select($rows::failure_summary_columns())
                .load_on::<$rows::FailureSummaryColumns>(conn)
                .await
                .map(|rows| rows.into_iter().map($rows::failure_summary_row).collect())
        }
    };
    (set_failure_state, $schema:ident, $codec:ident) => {
        async fn set_failure_state<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
            from: $crate::state::DeadLetterState,
            to: $crate::state::DeadLetterState,
            now: DateTime<Utc>,
        ) -> QueryResult<bool> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_failures::dsl as f;
            let row = f::diesel_inbox_failures
                .find(($codec::key(key.0), $codec::key(key.1)))
                .filter(f::state.eq(from));
            diesel::update(row)
                .set((f::state.eq(to), f::updated_at.eq($codec::time(now))))
                .execute_on(conn)
                .await
                .map(|changed| changed == 1)
        }
    };
    (reset_attempts, $schema:ident, $codec:ident) => {
        async fn reset_attempts<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
            now: DateTime<Utc>,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_failures::dsl as f;
            diesel::update(f::diesel_inbox_failures.find(($codec::key(key.0), $codec::key(key.1))))
                .set((f::attempts.eq(0), f::updated_at.eq($codec::time(now))))
                .execute_on(conn)
                .await
                .map(drop)
        }
    };
    (append_history, $schema:ident, $codec:ident) => {
        async fn append_history<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
            row: &$crate::rows::HistoryRow,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_failure_log::dsl as l;
            diesel::insert_into(l::diesel_inbox_failure_log)
                .values((
                    l::consumer.eq($codec::key(key.0)),
                    l::event_id.eq($codec::key(key.1)),
                    l::entry.eq(row.kind),
                    l::attempt.eq(row.attempt),
                    l::error.eq(row.error.as_deref()),
                    l::actor.eq(row.actor.as_deref()),
                    l::reason.eq(row.reason.as_deref()),
                    l::at.eq($codec::time(row.at)),
                ))
                .execute_on(conn)
                .await
                .map(drop)
        }
    };
    (history, $schema:ident, $codec:ident, $rows:ident) => {
        async fn history<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
        ) -> QueryResult<Vec<$crate::rows::Listed<$crate::rows::HistoryRow>>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_failure_log::dsl as l;
            l::diesel_inbox_failure_log
                .filter(l::consumer.eq($codec::key(key.0)).and(l::event_id.eq($codec::key(key.1))))
                .order(l::id)
                .select($rows::history_columns())
                .load_on::<$rows::HistoryColumns>(conn)
                .await
                .map(|rows| rows.into_iter().map($rows::history_row).collect())
        }
    };
}
