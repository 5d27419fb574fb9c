//! The chain area's statements: the blocks a chain stream processed, the events each took
//! effect for, the fork ledger and the orphaned side effects; the trait a backend implements,
//! the rows it reads and writes, and its statements for every backend, written once. A chain
//! stream's head and finalized height are its row of the cursor area
//! ([`crate::sql::CursorSql`]).
//!
//! Each backend's file stamps the whole area with one line,
//! `chain_statements!(Pg, schema = schema, codec = codec, ..)`: the backend type, its module
//! of [`crate::tables`] and its codec (how it binds keys and times) are explicit arguments,
//! and the options name the variants a backend needs: `reorg_id` says how the fork ledger's
//! new id is read back (`returning`, or `last_insert_id` on MySQL), `block_events` how a
//! block's events are inserted (`batch`, or `per_row` on SQLite). Adding a statement touches
//! this file alone: the trait's method and its body below.

use std::future::Future;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use crate::claim::state::ClaimState;
use crate::rows::{Key, StreamKey};
use crate::sql::{Db, TransactionSql};

/// A row of `diesel_inbox_blocks`: a block a chain stream processed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRow {
    pub height: i64,
    pub hash: String,
    pub parent_hash: String,
}

/// A row of `diesel_inbox_block_events`: an event a block took effect for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockEventRow {
    pub height: i64,
    pub position: i64,
    pub event_id: String,
}

/// A reorg as the fork ledger records it.
#[derive(Debug)]
pub struct NewReorg<'a> {
    pub ancestor_height: i64,
    pub old_head: (i64, &'a str),
    pub new_head: (i64, &'a str),
    pub events_reverted: i64,
    pub at: DateTime<Utc>,
}

/// A row of `diesel_inbox_reorgs`.
#[derive(Debug)]
pub struct ReorgRow {
    pub id: i64,
    pub stream: String,
    pub ancestor_height: i64,
    pub old_head: (i64, String),
    pub new_head: (i64, String),
    pub events_reverted: i64,
    pub events_reapplied: i64,
    pub happened_at: DateTime<Utc>,
}

/// A row of `diesel_inbox_orphaned_effects`.
#[derive(Debug)]
pub struct OrphanedRow {
    pub reorg_id: i64,
    pub event_id: String,
    pub stream: String,
    pub height: i64,
    pub block_hash: String,
    pub claim_state: ClaimState,
    pub found_at: DateTime<Utc>,
}

/// The chain area's statements for one database, on a connection of either flavour. Sealed.
pub trait ChainSql: TransactionSql {
    /// The stored block at `height`, if any.
    fn block<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        height: i64,
    ) -> impl Future<Output = QueryResult<Option<BlockRow>>> + Send;

    /// The stored blocks above `height`, highest first.
    fn blocks_above<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        height: i64,
    ) -> impl Future<Output = QueryResult<Vec<BlockRow>>> + Send;

    /// Records a processed block.
    fn insert_block<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        block: &BlockRow,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Records the events a block took effect for: `(position, event id)`, in one statement.
    fn insert_block_events<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        height: i64,
        events: &[(i64, &str)],
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// The events the blocks above `height` took effect for, last applied first.
    fn block_events_above<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        height: i64,
    ) -> impl Future<Output = QueryResult<Vec<BlockEventRow>>> + Send;

    /// Deletes the blocks above `height` and their events.
    fn delete_blocks_above<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        height: i64,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Deletes the blocks below `height`, and the events of those at or below it: what no
    /// reorg can reach any more.
    fn delete_final_blocks<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        height: i64,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Adds a reorg to the fork ledger; returns its id.
    fn insert_reorg<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: StreamKey<'_>,
        reorg: &NewReorg<'_>,
    ) -> impl Future<Output = QueryResult<i64>> + Send;

    /// Records that the reorg `reorg` reverted the event `key`, in place of any earlier record
    /// of the event's.
    fn set_reverted_by<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        reorg: i64,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// The reorgs that reverted the consumer's events `event_ids`, one per event recorded as
    /// reverted (an event reverted before the record existed has none), and the events'
    /// records deleted: they take effect again.
    fn take_reverted_by<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        event_ids: &[&str],
    ) -> impl Future<Output = QueryResult<Vec<i64>>> + Send;

    /// Adds `by` to the re-applied events of the reorg `reorg`.
    fn count_reapplied<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        reorg: i64,
        by: i64,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Up to `limit` of the consumer's reorgs after id `after`, of one stream where given, in
    /// id order.
    fn reorgs<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        stream: Option<&str>,
        after: i64,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<ReorgRow>>> + Send;

    /// Records a side effect a reorg orphaned.
    fn insert_orphaned<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        row: &OrphanedRow,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// The consumer's orphaned side effects, of one stream where given, by reorg and event.
    fn orphaned<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        stream: Option<&str>,
    ) -> impl Future<Output = QueryResult<Vec<OrphanedRow>>> + Send;
}

/// Rows per multi-row insert of a block's events: far below every backend's bind limit.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) const BLOCK_EVENTS_PER_STATEMENT: usize = 1000;

/// Event ids per statement that reads or deletes events by id: far below every backend's
/// bind limit.
pub(crate) const EVENT_IDS_PER_STATEMENT: usize = 1000;

/// Implements [`ChainSql`] for a backend: `chain_statements!(Backend, schema = .., codec = ..,
/// reorg_id = returning | last_insert_id, block_events = batch | per_row)`.
///
/// `schema` is the backend's module of [`crate::tables`]; `codec` its module of key and time
/// conversions (`key`, `key_string`, `time`, `utc`, `Time`, `KeyOwned`). Nothing else is
/// taken from the caller's scope. The `@returning` and `@last_insert_id` arms, which read
/// back the id of a row just inserted, serve the replay area's statements too.
macro_rules! chain_statements {
    // `block_events`: `batch` inserts a block's events in multi-row statements; `per_row`
    // (SQLite, where Diesel's generic multi-row insert does not build) one statement each,
    // kept prepared.
    (
        $backend:ty,
        schema = $schema:ident,
        codec = $codec:ident,
        reorg_id = $reorg_id:ident,
        block_events = $events:ident $(,)?
    ) => {
        impl $crate::chain::sql::ChainSql for $backend {
            async fn block<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
                height: i64,
            ) -> diesel::QueryResult<Option<$crate::chain::sql::BlockRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_blocks::dsl as b;
                b::diesel_inbox_blocks
                    .find(($codec::key(key.0), $codec::key(key.1), height))
                    .select((b::height, b::hash, b::parent_hash))
                    .limit(1)
                    .get_result_on::<(i64, $codec::KeyOwned, $codec::KeyOwned)>(conn)
                    .await
                    .optional()
                    .map(|row| row.map($crate::chain::sql::chain_statements!(@block $codec)))
            }

            async fn blocks_above<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
                height: i64,
            ) -> diesel::QueryResult<Vec<$crate::chain::sql::BlockRow>> {
                use diesel::prelude::*;
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
                    .map(|rows| {
                        rows.into_iter()
                            .map($crate::chain::sql::chain_statements!(@block $codec))
                            .collect()
                    })
            }

            async fn insert_block<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
                block: &$crate::chain::sql::BlockRow,
                now: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
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
                key: $crate::rows::StreamKey<'_>,
                height: i64,
                events: &[(i64, &str)],
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
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
                $crate::chain::sql::chain_statements!(@$events events, e, conn);
                Ok(())
            }

            async fn block_events_above<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
                height: i64,
            ) -> diesel::QueryResult<Vec<$crate::chain::sql::BlockEventRow>> {
                use diesel::prelude::*;
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
                            .map(|(height, position, event_id)| $crate::chain::sql::BlockEventRow {
                                height,
                                position,
                                event_id: $codec::key_string(event_id),
                            })
                            .collect()
                    })
            }

            async fn delete_blocks_above<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::StreamKey<'_>,
                height: i64,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
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
                key: $crate::rows::StreamKey<'_>,
                height: i64,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
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
                key: $crate::rows::StreamKey<'_>,
                reorg: &$crate::chain::sql::NewReorg<'_>,
            ) -> diesel::QueryResult<i64> {
                use diesel::prelude::*;
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
                $crate::chain::sql::chain_statements!(@$reorg_id insert, r, conn)
            }

            async fn set_reverted_by<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
                reorg: i64,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_reverted_events::dsl as v;
                // A record left by an earlier revert whose event was never re-applied (its inbox
                // row deleted meanwhile) gives way to this one.
                diesel::delete(
                    v::diesel_inbox_reverted_events.find(($codec::key(key.0), $codec::key(key.1))),
                )
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
            ) -> diesel::QueryResult<Vec<i64>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_reverted_events::dsl as v;
                let mut reorgs = Vec::with_capacity(event_ids.len());
                for chunk in event_ids.chunks($crate::chain::sql::EVENT_IDS_PER_STATEMENT) {
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
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
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
            ) -> diesel::QueryResult<Vec<$crate::chain::sql::ReorgRow>> {
                use diesel::prelude::*;
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
                                $crate::chain::sql::ReorgRow {
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
                row: &$crate::chain::sql::OrphanedRow,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
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
            ) -> diesel::QueryResult<Vec<$crate::chain::sql::OrphanedRow>> {
                use diesel::prelude::*;
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
                        $crate::claim::state::ClaimState,
                        $codec::Time,
                    )>(conn)
                    .await
                    .map(|rows| {
                        rows.into_iter()
                            .map(|(reorg_id, event_id, stream, height, hash, state, at)| {
                                $crate::chain::sql::OrphanedRow {
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
        }
    };
    (@block $codec:ident) => {
        |(height, hash, parent): (i64, $codec::KeyOwned, $codec::KeyOwned)| {
            $crate::chain::sql::BlockRow {
                height,
                hash: $codec::key_string(hash),
                parent_hash: $codec::key_string(parent),
            }
        }
    };
    (@batch $events:ident, $e:ident, $conn:ident) => {
        for chunk in $events.chunks($crate::chain::sql::BLOCK_EVENTS_PER_STATEMENT) {
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
pub(crate) use chain_statements;
