//! The fork ledger: every reorg a chain stream went through, and the side effects outside the
//! database that reorgs orphaned.

use chrono::{DateTime, Utc};

use super::sql::{ChainSql, OrphanedRow, ReorgRow};
use super::BlockId;
use crate::engine::run_ready;
use crate::names::StreamName;
use crate::sql::{Blocking, Db, Sql};
use crate::{claim::ClaimState, cursor::InvalidStreamName, Error, InboxConnection};

/// One reorg of a chain stream: the branch above `ancestor` was orphaned, its events'
/// effects reverted, and the stream went on along the branch of `new_head`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reorg {
    /// Its number in the ledger.
    pub id: i64,
    /// The chain stream.
    pub stream: String,
    /// The height of the last block both branches share.
    pub ancestor: u64,
    /// The orphaned branch's head.
    pub old_head: BlockId,
    /// The block of the new branch that revealed the fork.
    pub new_head: BlockId,
    /// Events whose effect the reorg reverted.
    pub events_reverted: u64,
    /// Of those, how many took effect again so far, on whatever branch later blocks came:
    /// a re-applied event counts in the reorg that reverted it, whichever reorgs came between
    /// (and in none, if that revert predates the migration `diesel_inbox_reverted_events`).
    /// In the outcome of the block that found the reorg: those of them that block included
    /// again.
    pub events_reapplied: u64,
    /// When it happened.
    pub happened_at: DateTime<Utc>,
}

impl Reorg {
    /// How many blocks the reorg orphaned.
    pub fn depth(&self) -> u64 {
        self.old_head.height().saturating_sub(self.ancestor)
    }

    pub(crate) fn from_row(row: ReorgRow) -> Self {
        Self {
            id: row.id,
            stream: row.stream,
            ancestor: row.ancestor_height.unsigned_abs(),
            old_head: BlockId::new(row.old_head.0.unsigned_abs(), row.old_head.1),
            new_head: BlockId::new(row.new_head.0.unsigned_abs(), row.new_head.1),
            events_reverted: row.events_reverted.unsigned_abs(),
            events_reapplied: row.events_reapplied.unsigned_abs(),
            happened_at: row.happened_at,
        }
    }
}

/// A side effect outside the database (a claim: an email, a payout) made for an event a
/// reorg orphaned. The inbox reverted the event's database effects, but cannot undo this:
/// ops decide. Make irreversible effects only for events below the finalized height to have
/// none.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OrphanedEffect {
    /// The reorg that orphaned the event.
    pub reorg: i64,
    /// The event, whose claim ([`Claims::show`](crate::claim::Claims::show)) holds the side effect.
    pub event_id: String,
    /// The chain stream.
    pub stream: String,
    /// The orphaned block the event was in.
    pub block: BlockId,
    /// The claim's state when the reorg found it: completed, in progress or in doubt.
    pub claim_state: ClaimState,
    /// When the reorg found it.
    pub found_at: DateTime<Utc>,
}

impl OrphanedEffect {
    fn from_row(row: OrphanedRow) -> Self {
        Self {
            reorg: row.reorg_id,
            event_id: row.event_id,
            stream: row.stream,
            block: BlockId::new(row.height.unsigned_abs(), row.block_hash),
            claim_state: row.claim_state,
            found_at: row.found_at,
        }
    }
}

/// The fork ledger of a consumer's chain streams, or of one: [`Chain::reorgs`](super::Chain::reorgs),
/// [`Inbox::reorgs`](crate::Inbox::reorgs); `diesel-inbox reorgs` on the command line.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::Inbox;
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let reorgs = Inbox::new("indexer")?.reorgs();
/// assert!(reorgs.list(&mut conn, 0, 100)?.is_empty());
/// assert!(reorgs.orphaned_effects(&mut conn)?.is_empty());
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Reorgs {
    consumer: String,
    stream: Option<String>,
}

impl Reorgs {
    pub(crate) fn new(consumer: &str, stream: Option<&str>) -> Self {
        Self {
            consumer: consumer.to_owned(),
            stream: stream.map(str::to_owned),
        }
    }

    /// Only the reorgs of the chain stream called `stream`.
    ///
    /// # Errors
    ///
    /// [`InvalidStreamName`] for a name no chain stream can have.
    pub fn of_stream(mut self, stream: &str) -> Result<Self, InvalidStreamName> {
        self.stream = Some(StreamName::new(stream)?.as_str().to_owned());
        Ok(self)
    }

    /// Up to `limit` reorgs after ledger id `after` (0 for the first page), oldest first.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn list<C: InboxConnection>(
        &self,
        conn: &mut C,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Reorg>, Error> {
        run_ready(self.list_in::<Blocking, _>(conn, after, limit))
    }

    /// [`list`](Self::list) in either flavour.
    pub(crate) async fn list_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Reorg>, Error> {
        let rows = C::Backend::reorgs(
            conn,
            &self.consumer,
            self.stream.as_deref(),
            after,
            i64::from(limit),
        )
        .await?;
        Ok(rows.into_iter().map(Reorg::from_row).collect())
    }

    /// Every side effect a reorg orphaned, by reorg and event id.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn orphaned_effects<C: InboxConnection>(
        &self,
        conn: &mut C,
    ) -> Result<Vec<OrphanedEffect>, Error> {
        run_ready(self.orphaned_effects_in::<Blocking, _>(conn))
    }

    /// [`orphaned_effects`](Self::orphaned_effects) in either flavour.
    pub(crate) async fn orphaned_effects_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
    ) -> Result<Vec<OrphanedEffect>, Error> {
        let rows = C::Backend::orphaned(conn, &self.consumer, self.stream.as_deref()).await?;
        Ok(rows.into_iter().map(OrphanedEffect::from_row).collect())
    }
}
