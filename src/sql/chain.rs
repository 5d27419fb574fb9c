//! The chain area's statements: the blocks a chain stream processed, the events each took
//! effect for, the fork ledger and the orphaned side effects. A chain stream's head and
//! finalized height are its row of the cursor area ([`super::CursorSql`]).
//!
//! Written once for every backend in `backend/chain.rs`; each backend's impl takes them by
//! name.

use std::future::Future;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use super::{Db, TransactionSql};
use crate::rows::{BlockEventRow, BlockRow, Key, NewReorg, OrphanedRow, ReorgRow, StreamKey};

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
