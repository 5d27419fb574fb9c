//! The chain area's statements, written once for every backend: a backend's `impl ChainSql`
//! is `chain_statements!(schema, codec, reorg_id = ..)`, with its schema and codec as explicit
//! arguments; `reorg_id` says how the fork ledger's new id is read back (`returning`, or
//! `last_insert_id` on MySQL). The trait, and what each statement does, is
//! [`crate::sql::ChainSql`].

/// Rows per multi-row insert of a block's events: far below every backend's bind limit.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) const BLOCK_EVENTS_PER_STATEMENT: usize = 1000;

/// Event ids per statement that reads or deletes events by id: far below every backend's
/// bind limit.
pub(crate) const EVENT_IDS_PER_STATEMENT: usize = 1000;

macro_rules! chain_statements {
    // `block_events`: `batch` inserts a block's events in multi-row statements; `per_row`
    // (SQLite, where Diesel's generic multi-row insert does not build) one statement each,
    // kept prepared.
    ($schema:ident, $codec:ident, reorg_id = $reorg_id:ident, block_events = $events:ident) => {
        async fn block<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            height: i64,
        ) -> QueryResult<Option<$crate::rows::BlockRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_blocks::dsl as b;
            b::diesel_inbox_blocks
                .find(($codec::key(key.0), $codec::key(key.1), height))
                .select((b::height, b::hash, b::parent_hash))
                .limit(1)
                .get_result_on::<(i64, $codec::KeyOwned, $codec::KeyOwned)>(conn)
                .await
                .optional()
                .map(|row| row.map(chain_statements!(@block $codec)))
        }

        async fn blocks_above<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            height: i64,
        ) -> QueryResult<Vec<$crate::rows::BlockRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_blocks::dsl as b;
            b::diesel_inbox_blocks
                .filter(b::consumer.eq($codec::key(key.0)))
                .filter(b::stream.eq($codec::key(key.1)))
                .filter(b::height.gt(height))
                .order(b::height.desc())
                .select((b::height, b::hash, b::parent_hash))
                .load_on::<(i64, $codec::KeyOwned, $codec::KeyOwned)>(conn)
                .await
                .map(|rows| rows.into_iter().map(chain_statements!(@block $codec)).collect())
        }

        async fn insert_block<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            block: &$crate::rows::BlockRow,
            now: DateTime<Utc>,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_blocks::dsl as b;
            diesel::insert_into(b::diesel_inbox_blocks)
                .values((
                    b::consumer.eq($codec::key(key.0)),
                    b::stream.eq($codec::key(key.1)),
                    b::height.eq(block.height),
                    b::hash.eq($codec::key(&block.hash)),
                    b::parent_hash.eq($codec::key(&block.parent_hash)),
                    b::processed_at.eq($codec::time(now)),
                ))
                .execute_on(conn)
                .await
                .map(drop)
        }

        async fn insert_block_events<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            height: i64,
            events: &[(i64, &str)],
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_block_events::dsl as e;
            macro_rules! row {
                ($event:expr) => {{
                    let &(position, event_id) = $event;
                    (
                        e::consumer.eq($codec::key(key.0)),
                        e::stream.eq($codec::key(key.1)),
                        e::height.eq(height),
                        e::position.eq(position),
                        e::event_id.eq($codec::key(event_id)),
                    )
                }};
            }
            chain_statements!(@$events events, e, conn);
            Ok(())
        }

        async fn block_events_above<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            height: i64,
        ) -> QueryResult<Vec<$crate::rows::BlockEventRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_block_events::dsl as e;
            e::diesel_inbox_block_events
                .filter(e::consumer.eq($codec::key(key.0)))
                .filter(e::stream.eq($codec::key(key.1)))
                .filter(e::height.gt(height))
                .order((e::height.desc(), e::position.desc()))
                .select((e::height, e::position, e::event_id))
                .load_on::<(i64, i64, $codec::KeyOwned)>(conn)
                .await
                .map(|rows| {
                    rows.into_iter()
                        .map(|(height, position, event_id)| $crate::rows::BlockEventRow {
                            height,
                            position,
                            event_id: $codec::key_string(event_id),
                        })
                        .collect()
                })
        }

        async fn delete_blocks_above<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            height: i64,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_block_events::dsl as e;
            use $schema::diesel_inbox_blocks::dsl as b;
            diesel::delete(
                e::diesel_inbox_block_events
                    .filter(e::consumer.eq($codec::key(key.0)))
                    .filter(e::stream.eq($codec::key(key.1)))
                    .filter(e::height.gt(height)),
            )
            .execute_on(conn)
            .await?;
            diesel::delete(
                b::diesel_inbox_blocks
                    .filter(b::consumer.eq($codec::key(key.0)))
                    .filter(b::stream.eq($codec::key(key.1)))
                    .filter(b::height.gt(height)),
            )
            .execute_on(conn)
            .await
            .map(drop)
        }

        async fn delete_final_blocks<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            height: i64,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_block_events::dsl as e;
            use $schema::diesel_inbox_blocks::dsl as b;
            diesel::delete(
                e::diesel_inbox_block_events
                    .filter(e::consumer.eq($codec::key(key.0)))
                    .filter(e::stream.eq($codec::key(key.1)))
                    .filter(e::height.le(height)),
            )
            .execute_on(conn)
            .await?;
            diesel::delete(
                b::diesel_inbox_blocks
                    .filter(b::consumer.eq($codec::key(key.0)))
                    .filter(b::stream.eq($codec::key(key.1)))
                    .filter(b::height.lt(height)),
            )
            .execute_on(conn)
            .await
            .map(drop)
        }

        async fn insert_reorg<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            reorg: &$crate::rows::NewReorg<'_>,
        ) -> QueryResult<i64> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_reorgs::dsl as r;
            let insert = diesel::insert_into(r::diesel_inbox_reorgs).values((
                r::consumer.eq($codec::key(key.0)),
                r::stream.eq($codec::key(key.1)),
                r::ancestor_height.eq(reorg.ancestor_height),
                r::old_head_height.eq(reorg.old_head.0),
                r::old_head_hash.eq($codec::key(reorg.old_head.1)),
                r::new_head_height.eq(reorg.new_head.0),
                r::new_head_hash.eq($codec::key(reorg.new_head.1)),
                r::events_reverted.eq(reorg.events_reverted),
                r::events_reapplied.eq(0_i64),
                r::happened_at.eq($codec::time(reorg.at)),
            ));
            chain_statements!(@$reorg_id insert, r, conn)
        }

        async fn set_reverted_by<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::rows::Key<'_>,
            reorg: i64,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_reverted_events::dsl as v;
            // A record left by an earlier revert whose event was never re-applied (its inbox
            // row deleted meanwhile) gives way to this one.
            diesel::delete(v::diesel_inbox_reverted_events.find(($codec::key(key.0), $codec::key(key.1))))
                .execute_on(conn)
                .await?;
            diesel::insert_into(v::diesel_inbox_reverted_events)
                .values((
                    v::consumer.eq($codec::key(key.0)),
                    v::event_id.eq($codec::key(key.1)),
                    v::reorg_id.eq(reorg),
                ))
                .execute_on(conn)
                .await
                .map(drop)
        }

        async fn take_reverted_by<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            event_ids: &[&str],
        ) -> QueryResult<Vec<i64>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_reverted_events::dsl as v;
            let mut reorgs = Vec::with_capacity(event_ids.len());
            for chunk in event_ids.chunks($crate::backend::chain::EVENT_IDS_PER_STATEMENT) {
                let ids: Vec<_> = chunk.iter().map(|id| $codec::key(id)).collect();
                let of_events = v::consumer
                    .eq($codec::key(consumer))
                    .and(v::event_id.eq_any(ids));
                reorgs.extend(
                    v::diesel_inbox_reverted_events
                        .filter(of_events.clone())
                        .select(v::reorg_id)
                        .load_on::<i64>(conn)
                        .await?,
                );
                diesel::delete(v::diesel_inbox_reverted_events.filter(of_events))
                    .execute_on(conn)
                    .await?;
            }
            Ok(reorgs)
        }

        async fn count_reapplied<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            reorg: i64,
            by: i64,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_reorgs::dsl as r;
            diesel::update(r::diesel_inbox_reorgs.find(reorg))
                .set(r::events_reapplied.eq(r::events_reapplied + by))
                .execute_on(conn)
                .await
                .map(drop)
        }

        async fn reorgs<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            stream: Option<&str>,
            after: i64,
            limit: i64,
        ) -> QueryResult<Vec<$crate::rows::ReorgRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_reorgs::dsl as r;
            let mut query = r::diesel_inbox_reorgs
                .filter(r::consumer.eq($codec::key(consumer)))
                .filter(r::id.gt(after))
                .into_boxed();
            if let Some(stream) = stream {
                query = query.filter(r::stream.eq($codec::key(stream)));
            }
            query
                .order(r::id)
                .limit(limit)
                .select((
                    r::id,
                    r::stream,
                    r::ancestor_height,
                    (r::old_head_height, r::old_head_hash),
                    (r::new_head_height, r::new_head_hash),
                    r::events_reverted,
                    r::events_reapplied,
                    r::happened_at,
                ))
                .load_on::<(
                    i64,
                    $codec::KeyOwned,
                    i64,
                    (i64, $codec::KeyOwned),
                    (i64, $codec::KeyOwned),
                    i64,
                    i64,
                    $codec::Time,
                )>(conn)
                .await
                .map(|rows| {
                    rows.into_iter()
                        .map(|(id, stream, ancestor_height, old, new, reverted, reapplied, at)| {
                            $crate::rows::ReorgRow {
                                id,
                                stream: $codec::key_string(stream),
                                ancestor_height,
                                old_head: (old.0, $codec::key_string(old.1)),
                                new_head: (new.0, $codec::key_string(new.1)),
                                events_reverted: reverted,
                                events_reapplied: reapplied,
                                happened_at: $codec::utc(at),
                            }
                        })
                        .collect()
                })
        }

        async fn insert_orphaned<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            row: &$crate::rows::OrphanedRow,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_orphaned_effects::dsl as o;
            diesel::insert_into(o::diesel_inbox_orphaned_effects)
                .values((
                    o::reorg_id.eq(row.reorg_id),
                    o::consumer.eq($codec::key(consumer)),
                    o::event_id.eq($codec::key(&row.event_id)),
                    o::stream.eq($codec::key(&row.stream)),
                    o::height.eq(row.height),
                    o::block_hash.eq($codec::key(&row.block_hash)),
                    o::claim_state.eq(row.claim_state),
                    o::found_at.eq($codec::time(row.found_at)),
                ))
                .execute_on(conn)
                .await
                .map(drop)
        }

        async fn orphaned<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            stream: Option<&str>,
        ) -> QueryResult<Vec<$crate::rows::OrphanedRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_orphaned_effects::dsl as o;
            let mut query = o::diesel_inbox_orphaned_effects
                .filter(o::consumer.eq($codec::key(consumer)))
                .into_boxed();
            if let Some(stream) = stream {
                query = query.filter(o::stream.eq($codec::key(stream)));
            }
            query
                .order((o::reorg_id, o::event_id))
                .select((
                    o::reorg_id,
                    o::event_id,
                    o::stream,
                    o::height,
                    o::block_hash,
                    o::claim_state,
                    o::found_at,
                ))
                .load_on::<(
                    i64,
                    $codec::KeyOwned,
                    $codec::KeyOwned,
                    i64,
                    $codec::KeyOwned,
                    $crate::claim::ClaimState,
                    $codec::Time,
                )>(conn)
                .await
                .map(|rows| {
                    rows.into_iter()
                        .map(|(reorg_id, event_id, stream, height, hash, state, at)| {
                            $crate::rows::OrphanedRow {
                                reorg_id,
                                event_id: $codec::key_string(event_id),
                                stream: $codec::key_string(stream),
                                height,
                                block_hash: $codec::key_string(hash),
                                claim_state: state,
                                found_at: $codec::utc(at),
                            }
                        })
                        .collect()
                })
        }
    };
    (@block $codec:ident) => {
        |(height, hash, parent): (i64, $codec::KeyOwned, $codec::KeyOwned)| {
            $crate::rows::BlockRow {
                height,
                hash: $codec::key_string(hash),
                parent_hash: $codec::key_string(parent),
            }
        }
    };
    (@batch $events:ident, $e:ident, $conn:ident) => {
        for chunk in $events.chunks($crate::backend::chain::BLOCK_EVENTS_PER_STATEMENT) {
            let rows: Vec<_> = chunk.iter().map(|event| row!(event)).collect();
            diesel::insert_into($e::diesel_inbox_block_events)
                .values(rows)
                .execute_on($conn)
                .await?;
        }
    };
    (@per_row $events:ident, $e:ident, $conn:ident) => {
        for event in $events {
            diesel::insert_into($e::diesel_inbox_block_events)
                .values(row!(event))
                .execute_on($conn)
                .await?;
        }
    };
    (@returning $insert:ident, $r:ident, $conn:ident) => {
        $insert.returning($r::id).get_result_on::<i64>($conn).await
    };
    (@last_insert_id $insert:ident, $r:ident, $conn:ident) => {{
        $insert.execute_on($conn).await?;
        diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
            "CAST(LAST_INSERT_ID() AS SIGNED)",
        ))
        .get_result_on::<i64>($conn)
        .await
    }};
}
