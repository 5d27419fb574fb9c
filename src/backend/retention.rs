//! The retention area's statements that read the same on every backend, written once: a backend's
//! `impl RetentionSql` takes each by name, `retention_statement!(NAME, schema, codec, ..)`, with
//! its schema, codec and row mappings as explicit arguments (see `portable.rs`). The trait, and
//! what each statement does, is [`crate::sql::RetentionSql`].

/// One `RetentionSql` statement whose SQL reads the same on every backend, by name.
macro_rules! retention_statement {
    // The statements that read stats. `$codec::sum_i64` is the backend's `SUM` of an integer
    // column as a `BIGINT`: PostgreSQL and MySQL sum integers as `NUMERIC`.
    (inbox_totals, $schema:ident, $codec:ident) => {
        async fn inbox_totals<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
        ) -> QueryResult<Vec<$crate::rows::InboxTotals>> {
            use $crate::sql::Run;
            use diesel::dsl::count_star;
            use $crate::rows::InboxTotals;
            use $crate::state::InboxState;
            use $schema::diesel_inbox_events::dsl as t;
            t::diesel_inbox_events
                .filter(t::consumer.eq($codec::key(consumer)))
                .group_by(t::state)
                .select((
                    t::state,
                    count_star(),
                    $codec::sum_i64("deliveries - 1"),
                    $codec::sum_i64("payload_conflicts"),
                ))
                .load_on::<(String, i64, Option<i64>, Option<i64>)>(conn)
                .await
                .map(|rows| {
                    rows.into_iter()
                        .map(|(state, rows, repeats, conflicts)| InboxTotals {
                            state: state.parse::<InboxState>(),
                            rows,
                            repeats: repeats.unwrap_or(0),
                            payload_conflicts: conflicts.unwrap_or(0),
                        })
                        .collect()
                })
        }
    };
    (failure_totals, $schema:ident, $codec:ident) => {
        async fn failure_totals<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
        ) -> QueryResult<Vec<$crate::rows::FailureTotals>> {
            use $crate::sql::Run;
            use diesel::dsl::count_star;
            use $crate::rows::FailureTotals;
            use $crate::dead_letter::DeadLetterState;
            use $schema::diesel_inbox_failures::dsl as f;
            f::diesel_inbox_failures
                .filter(f::consumer.eq($codec::key(consumer)))
                .group_by(f::state)
                .select((f::state, count_star(), $codec::sum_i64("attempts")))
                .load_on::<(String, i64, Option<i64>)>(conn)
                .await
                .map(|rows| {
                    rows.into_iter()
                        .map(|(state, rows, attempts)| FailureTotals {
                            state: state.parse::<DeadLetterState>(),
                            rows,
                            attempts: attempts.unwrap_or(0),
                        })
                        .collect()
                })
        }
    };
    (processed_since, $schema:ident, $codec:ident) => {
        async fn processed_since<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            since: DateTime<Utc>,
        ) -> QueryResult<i64> {
            use $crate::sql::Run;
            use $crate::state::InboxState;
            use $schema::diesel_inbox_events::dsl as t;
            t::diesel_inbox_events
                .filter(t::consumer.eq($codec::key(consumer)))
                .filter(t::state.eq(InboxState::Processed))
                .filter(t::processed_at.ge($codec::time(since)))
                .count()
                .get_result_on::<i64>(conn)
                .await
        }
    };
    (counters_since, $schema:ident, $codec:ident) => {
        async fn counters_since<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            since: DateTime<Utc>,
        ) -> QueryResult<Vec<$crate::rows::CounterTotal>> {
            use $crate::sql::Run;
            use $crate::state::Counter;
            use $schema::diesel_inbox_counters::dsl as c;
            c::diesel_inbox_counters
                .filter(c::consumer.eq($codec::key(consumer)))
                .filter(c::bucket.ge($codec::time(since)))
                .group_by(c::counter)
                .select((c::counter, $codec::sum_i64("total")))
                .load_on::<(String, Option<i64>)>(conn)
                .await
                .map(|rows| {
                    rows.into_iter()
                        .map(|(counter, total)| (counter.parse::<Counter>(), total.unwrap_or(0)))
                        .collect()
                })
        }
    };
    (oldest_unresolved_failure, $schema:ident, $codec:ident) => {
        async fn oldest_unresolved_failure<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
        ) -> QueryResult<Option<DateTime<Utc>>> {
            use $crate::sql::Run;
            use diesel::dsl::{exists, min, not};
            use $crate::dead_letter::DeadLetterState;
            use $crate::state::InboxState;
            use $schema::diesel_inbox_events::dsl as t;
            use $schema::diesel_inbox_failures::dsl as f;
            // A retrying failure row stays as it is when a later delivery succeeds; the
            // processed inbox row is what says the event is resolved.
            let processed = t::diesel_inbox_events
                .filter(t::consumer.eq(f::consumer))
                .filter(t::event_id.eq(f::event_id))
                .filter(t::state.eq(InboxState::Processed));
            let unresolved = f::state
                .eq(DeadLetterState::DeadLettered)
                .or(f::state
                    .eq(DeadLetterState::Retrying)
                    .and(not(exists(processed))));
            f::diesel_inbox_failures
                .filter(f::consumer.eq($codec::key(consumer)))
                .filter(unresolved)
                .select(min(f::first_failed_at))
                .get_result_on::<Option<$codec::Time>>(conn)
                .await
                .map(|first| first.map($codec::utc))
        }
    };
    (consumers, $schema:ident, $codec:ident) => {
        async fn consumers<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            area: $crate::rows::ConsumerRows,
        ) -> QueryResult<Vec<String>> {
            use $crate::sql::Run;
            use $crate::rows::ConsumerRows;
            use $schema::diesel_inbox_claims::dsl as k;
            use $schema::diesel_inbox_counters::dsl as c;
            use $schema::diesel_inbox_cursors::dsl as s;
            use $schema::diesel_inbox_events::dsl as t;
            use $schema::diesel_inbox_failures::dsl as f;
            use $schema::diesel_inbox_gaps::dsl as g;
            type Names = Vec<$codec::KeyOwned>;
            let mut names = Names::new();
            match area {
                ConsumerRows::Inbox => {
                    let read = t::diesel_inbox_events.select(t::consumer).distinct();
                    names.extend(read.load_on::<$codec::KeyOwned>(conn).await?);
                    let read = f::diesel_inbox_failures.select(f::consumer).distinct();
                    names.extend(read.load_on::<$codec::KeyOwned>(conn).await?);
                    let read = c::diesel_inbox_counters.select(c::consumer).distinct();
                    names.extend(read.load_on::<$codec::KeyOwned>(conn).await?);
                }
                ConsumerRows::Streams => {
                    use $schema::diesel_inbox_blocks::dsl as b;
                    let chain = b::diesel_inbox_blocks
                        .filter(b::consumer.eq(s::consumer))
                        .filter(b::stream.eq(s::stream));
                    let read = s::diesel_inbox_cursors
                        .filter(diesel::dsl::not(diesel::dsl::exists(chain)))
                        .select(s::consumer)
                        .distinct();
                    names.extend(read.load_on::<$codec::KeyOwned>(conn).await?);
                    let read = g::diesel_inbox_gaps.select(g::consumer).distinct();
                    names.extend(read.load_on::<$codec::KeyOwned>(conn).await?);
                }
                ConsumerRows::Claims => {
                    let read = k::diesel_inbox_claims.select(k::consumer).distinct();
                    names.extend(read.load_on::<$codec::KeyOwned>(conn).await?);
                }
            }
            let mut names: Vec<String> = names.into_iter().map($codec::key_string).collect();
            names.sort_unstable();
            names.dedup();
            Ok(names)
        }
    };
    // `lock`: `for_update` where the backend has row locks; SQLite locks the whole database
    // for the (immediate) transaction instead.
    (prune_candidates, $schema:ident, $codec:ident $(, lock = $lock:ident)?) => {
        async fn prune_candidates<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            cutoff: DateTime<Utc>,
            after: &$crate::rows::PruneCursor,
            limit: i64,
        ) -> QueryResult<Vec<$crate::rows::PruneCursor>> {
            use $crate::sql::Run;
            use $crate::state::InboxState;
            use $schema::diesel_inbox_events::dsl as t;
            let (cutoff, after_at) = ($codec::time(cutoff), $codec::time(after.processed_at));
            let after_id = $codec::key(&after.event_id);
            // The index gives `consumer, state` and the range start on `processed_at`; the
            // keyset condition then skips what earlier batches saw, kept or not.
            t::diesel_inbox_events
                .filter(t::consumer.eq($codec::key(consumer)))
                .filter(t::state.eq(InboxState::Processed))
                .filter(t::processed_at.ge(after_at))
                .filter(t::processed_at.lt(cutoff))
                .filter(t::processed_at.gt(after_at).or(t::event_id.gt(after_id)))
                .filter(t::last_seen_at.lt(cutoff))
                .order((t::processed_at, t::event_id))
                .limit(limit)
                .select((t::processed_at, t::event_id))
                $(.$lock())?
                .load_on::<($codec::Time, $codec::KeyOwned)>(conn)
                .await
                .map(|rows| {
                    rows.into_iter()
                        .map(|(at, id)| $crate::rows::PruneCursor {
                            processed_at: $codec::utc(at),
                            event_id: $codec::key_string(id),
                        })
                        .collect()
                })
        }
    };
    (delete_prunable_events, $schema:ident, $codec:ident) => {
        async fn delete_prunable_events<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            cutoff: DateTime<Utc>,
            event_ids: &[&str],
        ) -> QueryResult<usize> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            let cutoff = $codec::time(cutoff);
            let ids: Vec<_> = event_ids.iter().map(|id| $codec::key(id)).collect();
            // By primary key, re-checking what can change under a delivery: `last_seen_at`.
            // `state` and `processed_at` of a processed row never change, and naming them here
            // would tempt a planner without statistics (SQLite, MariaDB) into a range scan of
            // the settled index, over every row left to prune, once per batch.
            diesel::delete(
                t::diesel_inbox_events
                    .filter(t::consumer.eq($codec::key(consumer)))
                    .filter(t::event_id.eq_any(ids))
                    .filter(t::last_seen_at.lt(cutoff)),
            )
            .execute_on(conn)
            .await
        }
    };
    (remaining_events, $schema:ident, $codec:ident) => {
        async fn remaining_events<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            event_ids: &[&str],
        ) -> QueryResult<Vec<String>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            let ids: Vec<_> = event_ids.iter().map(|id| $codec::key(id)).collect();
            t::diesel_inbox_events
                .filter(t::consumer.eq($codec::key(consumer)))
                .filter(t::event_id.eq_any(ids))
                .select(t::event_id)
                .load_on::<$codec::KeyOwned>(conn)
                .await
                .map(|ids| ids.into_iter().map($codec::key_string).collect())
        }
    };
    (delete_failures_of, $schema:ident, $codec:ident) => {
        async fn delete_failures_of<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            event_ids: &[&str],
        ) -> QueryResult<(usize, usize)> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_failure_log::dsl as l;
            use $schema::diesel_inbox_failures::dsl as f;
            let ids: Vec<_> = event_ids.iter().map(|id| $codec::key(id)).collect();
            let failures = diesel::delete(
                f::diesel_inbox_failures
                    .filter(f::consumer.eq($codec::key(consumer)))
                    .filter(f::event_id.eq_any(&ids)),
            )
            .execute_on(conn)
            .await?;
            let history = diesel::delete(
                l::diesel_inbox_failure_log
                    .filter(l::consumer.eq($codec::key(consumer)))
                    .filter(l::event_id.eq_any(&ids)),
            )
            .execute_on(conn)
            .await?;
            Ok((failures, history))
        }
    };
    (delete_counters_before, $schema:ident, $codec:ident) => {
        async fn delete_counters_before<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            cutoff: DateTime<Utc>,
        ) -> QueryResult<usize> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_counters::dsl as c;
            diesel::delete(
                c::diesel_inbox_counters
                    .filter(c::consumer.eq($codec::key(consumer)))
                    .filter(c::bucket.lt($codec::time(cutoff))),
            )
            .execute_on(conn)
            .await
        }
    };
    (delete_settled_claims, $schema:ident, $codec:ident) => {
        async fn delete_settled_claims<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            cutoff: DateTime<Utc>,
        ) -> QueryResult<usize> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_claims::dsl as k;
            diesel::delete(
                k::diesel_inbox_claims
                    .filter(k::consumer.eq($codec::key(consumer)))
                    .filter(k::state.eq_any($crate::claim::ClaimState::SETTLED))
                    .filter(k::updated_at.lt($codec::time(cutoff))),
            )
            .execute_on(conn)
            .await
        }
    };
    (count_prunable, $schema:ident, $codec:ident) => {
        async fn count_prunable<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            cutoff: DateTime<Utc>,
        ) -> QueryResult<$crate::rows::PruneCounts> {
            use $crate::sql::Run;
            use $crate::state::InboxState;
            use $schema::diesel_inbox_claims::dsl as k;
            use $schema::diesel_inbox_counters::dsl as c;
            use $schema::diesel_inbox_events::dsl as t;
            use $schema::diesel_inbox_failure_log::dsl as l;
            use $schema::diesel_inbox_failures::dsl as f;
            let (who, cutoff) = ($codec::key(consumer), $codec::time(cutoff));
            let prunable = || {
                t::diesel_inbox_events
                    .filter(t::consumer.eq(who))
                    .filter(t::state.eq(InboxState::Processed))
                    .filter(t::processed_at.lt(cutoff))
                    .filter(t::last_seen_at.lt(cutoff))
            };
            let events = prunable().count().get_result_on::<i64>(conn).await?;
            let failures = f::diesel_inbox_failures
                .filter(f::consumer.eq(who))
                .filter(f::event_id.eq_any(prunable().select(t::event_id)))
                .count()
                .get_result_on::<i64>(conn)
                .await?;
            let history = l::diesel_inbox_failure_log
                .filter(l::consumer.eq(who))
                .filter(l::event_id.eq_any(prunable().select(t::event_id)))
                .count()
                .get_result_on::<i64>(conn)
                .await?;
            let counters = c::diesel_inbox_counters
                .filter(c::consumer.eq(who))
                .filter(c::bucket.lt(cutoff))
                .count()
                .get_result_on::<i64>(conn)
                .await?;
            let claims = k::diesel_inbox_claims
                .filter(k::consumer.eq(who))
                .filter(k::state.eq_any($crate::claim::ClaimState::SETTLED))
                .filter(k::updated_at.lt(cutoff))
                .count()
                .get_result_on::<i64>(conn)
                .await?;
            Ok($crate::rows::PruneCounts {
                events,
                failures,
                history,
                counters,
                claims,
            })
        }
    };
    // The lease rows: `take_lease`, `renew_lease` and `release_lease` at once. The first
    // holder makes the row; `insert = do_nothing` where the database waits for a concurrent
    // insert of the key and then skips it (PostgreSQL), `insert = plain` where the loser of two
    // at once conflicts, to retry, as on a Galera cluster at certification.
    (leases, $schema:ident, $codec:ident, insert = $insert:ident) => {
        async fn take_lease<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            name: &str,
            holder: &str,
            now: DateTime<Utc>,
            until: DateTime<Utc>,
        ) -> QueryResult<bool> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_leases::dsl as h;
            let free = h::held_until.le($codec::time(now)).or(h::holder.eq(holder));
            let taken = diesel::update(h::diesel_inbox_leases.filter(h::name.eq(name)).filter(free))
                .set((h::holder.eq(holder), h::held_until.eq($codec::time(until))))
                .execute_on(conn)
                .await?;
            if taken == 1 {
                return Ok(true);
            }
            let held = h::diesel_inbox_leases
                .filter(h::name.eq(name))
                .count()
                .get_result_on::<i64>(conn)
                .await?;
            if held > 0 {
                return Ok(false);
            }
            // Never taken: the first holder makes the row.
            let insert = diesel::insert_into(h::diesel_inbox_leases).values((
                h::name.eq(name),
                h::holder.eq(holder),
                h::held_until.eq($codec::time(until)),
            ));
            retention_statement!(@insert_lease $insert, insert, conn)
        }

        async fn renew_lease<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            name: &str,
            holder: &str,
            until: DateTime<Utc>,
        ) -> QueryResult<bool> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_leases::dsl as h;
            diesel::update(h::diesel_inbox_leases.filter(h::name.eq(name)).filter(h::holder.eq(holder)))
                .set(h::held_until.eq($codec::time(until)))
                .execute_on(conn)
                .await
                .map(|renewed| renewed == 1)
        }

        async fn release_lease<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            name: &str,
            holder: &str,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_leases::dsl as h;
            diesel::delete(h::diesel_inbox_leases.filter(h::name.eq(name)).filter(h::holder.eq(holder)))
                .execute_on(conn)
                .await
                .map(drop)
        }
    };
    // Inserts the first lease row: whether this holder made it.
    (@insert_lease do_nothing, $insert:expr, $conn:expr) => {
        $insert
            .on_conflict_do_nothing()
            .execute_on($conn)
            .await
            .map(|inserted| inserted == 1)
    };
    (@insert_lease plain, $insert:expr, $conn:expr) => {
        $insert.execute_on($conn).await.map(|_| true)
    };
}
