//! The claims area's statements that read the same on every backend, written once: a backend's
//! `impl ClaimSql` takes each by name, `claim_statement!(NAME, schema, codec, ..)`, with its
//! schema, codec and row mappings as explicit arguments (see `portable.rs`). The trait, and what
//! each statement does, is [`crate::sql::ClaimSql`].

/// One `ClaimSql` statement whose SQL reads the same on every backend, by name.
macro_rules! claim_statement {
    // Where the backend has `INSERT .. ON CONFLICT .. RETURNING` (PostgreSQL, SQLite).
    (record_claim, $schema:ident, $codec:ident, $rows:ident, upsert_returning) => {
        async fn record_claim<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
            claim: &$crate::rows::NewClaim<'_>,
        ) -> QueryResult<Option<$crate::rows::ClaimRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_claims::dsl as k;
            // A second claimant of the same key blocks here until the first commits. A
            // delivery counts on the row and keeps it from retention.
            let row = diesel::insert_into(k::diesel_inbox_claims)
                .values(new_claim_row!($schema, $codec, key, claim))
                .on_conflict((k::consumer, k::event_id))
                .do_update()
                .set((
                    k::deliveries.eq(k::deliveries + 1),
                    k::updated_at.eq($codec::time(claim.now)),
                ))
                .returning($rows::claim_columns())
                .get_result_on::<$rows::ClaimColumns>(conn)
                .await?;
            let row = $crate::backend::readable($rows::claim_row(row))?;
            Ok((row.deliveries > 1).then_some(row))
        }
    };
    (claim, $schema:ident, $codec:ident, $rows:ident $(, lock = $lock:ident)?) => {
        async fn claim<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
            lock: bool,
        ) -> QueryResult<Option<$crate::rows::ClaimRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_claims::dsl as k;
            let row = k::diesel_inbox_claims
                .find(($codec::key(key.0), $codec::key(key.1)))
                .select($rows::claim_columns());
            $(
                if lock {
                    return row
                        .$lock()
                        .limit(1)
                        .get_result_on::<$rows::ClaimColumns>(conn)
                        .await
                        .optional()?
                        .map(|row| $crate::backend::readable($rows::claim_row(row)))
                        .transpose();
                }
            )?
            let _ = lock;
            row.limit(1).get_result_on::<$rows::ClaimColumns>(conn).await
                .optional()?
                .map(|row| $crate::backend::readable($rows::claim_row(row)))
                .transpose()
        }
    };
    (claims, $schema:ident, $codec:ident, $rows:ident) => {
        async fn claims<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            states: Option<&[$crate::state::ClaimState]>,
            after: Option<&str>,
            limit: i64,
        ) -> QueryResult<Vec<$crate::rows::Listed<$crate::rows::ClaimRow>>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_claims::dsl as k;
            let mut query = k::diesel_inbox_claims
                .filter(k::consumer.eq($codec::key(consumer)))
                .into_boxed();
            if let Some(states) = states {
                query = query.filter(k::state.eq_any(states.to_vec()));
            }
            if let Some(after) = after {
                query = query.filter(k::event_id.gt($codec::key(after)));
            }
            query
                .order(k::event_id)
                .limit(limit)
                .select($rows::claim_summary_columns())
                .load_on::<$rows::ClaimSummaryColumns>(conn)
                .await
                .map(|rows| rows.into_iter().map($rows::claim_summary_row).collect())
        }
    };
    (update_claim, $schema:ident, $codec:ident) => {
        async fn update_claim<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
            attempt: i64,
            from: &[$crate::state::ClaimState],
            change: &$crate::rows::ClaimChange<'_>,
        ) -> QueryResult<bool> {
            use $crate::sql::Run;
            use $crate::state::ClaimState;
            use $schema::diesel_inbox_claims::dsl as k;
            let now = $codec::time(change.now);
            let row = k::diesel_inbox_claims
                .find(($codec::key(key.0), $codec::key(key.1)))
                .filter(k::attempt.eq(attempt))
                .filter(k::state.eq_any(from.to_vec()));
            // `None` leaves a column as it is.
            diesel::update(row)
                .set((
                    k::state.eq(change.state),
                    change.acquire.then(|| k::attempt.eq(k::attempt + 1)),
                    change.lease_until.map(|until| k::lease_until.eq($codec::time(until))),
                    change.result.map(|json| k::result.eq(Some(json))),
                    (change.state == ClaimState::Completed)
                        .then(|| k::completed_at.eq(Some(now))),
                    // A new holder starts without the last one's reason.
                    if change.acquire { Some(None) } else { change.note.map(Some) }
                        .map(|note| k::last_error.eq(note)),
                    change.audit.map(|audit| {
                        (
                            k::resolved_by.eq(Some(audit.actor())),
                            k::resolution.eq(Some(audit.reason())),
                        )
                    }),
                    k::updated_at.eq(now),
                ))
                .execute_on(conn)
                .await
                .map(|changed| changed == 1)
        }
    };
}
