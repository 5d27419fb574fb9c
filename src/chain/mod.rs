//! Chain cursors: exactly-once effects over a blockchain that reorganises, with every
//! orphaned effect undone exactly once and every fork in a ledger.
//!
//! A [`Chain`] keeps, per stream, the blocks it processed (height, hash, parent hash) down to
//! its finalized height. Each [`Chain::process`] commits in one transaction: the block's
//! events' effects, each through the inbox by its event id; the block's record; the head's
//! advance. A block whose parent is not the stored head, or that replaces a stored block, is
//! a fork: the effects of every event in the orphaned blocks are reverted by the handler's
//! [`revert`](ChainHandler::revert), in the same transaction that marks those events reverted
//! and rewinds the stream to the common ancestor; a crash leaves the old branch or the new,
//! never half of each. An event the new branch includes again takes effect again, once.
//!
//! A chain's blocks arrive again, and some disappear: a reorg discards the blocks above a
//! common ancestor, and their transactions come back in other blocks, at other heights or at
//! the same one, or never. A [sequence cursor](crate::cursor) keyed by block height would call
//! the replacing block a duplicate (its events never take effect) and keep the effects of the
//! block that no longer exists. The example on [`Chain`] plays a reorg through on SQLite;
//! `examples/chain_rewards.rs` plays two (one delivered from the fork point, one found through
//! the node's view of the branch) and refuses a fork of a final block.
//!
//! - **One transaction per block.** Each event's effect goes through the inbox by its event
//!   id (the app defines it: tx hash and log index, say), and commits with the block's record
//!   and the stream's new head. An event the consumer already processed, under another block
//!   or by [`Inbox::process`], is a duplicate and does not run again. A redelivered block is
//!   [`BlockOutcome::Duplicate`].
//! - **Forks.** A block whose parent hash is not the stored hash below it, or a block at a
//!   stored height with another hash, is a fork. The caller shows the common ancestor one of
//!   two ways: it delivers the new branch from the fork point, where the block's parent is the
//!   ancestor, or its handler's [`ancestor(height)`](ChainHandler::ancestor) answers the new
//!   branch's hashes from the node, and the stream rewinds ([`BlockOutcome::Rewound`]: deliver
//!   again from the ancestor plus one). With neither, `chain::Refused::UnknownAncestor`; a block above
//!   the head plus one is `chain::Refused::MissingBlocks`.
//! - **Undo exactly once.** For every event that took effect in an orphaned block, last first,
//!   [`ChainHandler::revert`] runs once, in the same transaction that marks the event's inbox
//!   row reverted, drops the orphaned blocks and rewinds the head. An event included again on
//!   the new branch moves from reverted back to processed, taking effect once more. The net
//!   result: one effect for an event on the canonical chain, none for one only an orphaned
//!   branch had. The app writes the revert (a delete, a `-1` correction row); the crate keeps
//!   no undo record of its own.
//! - **Finality.** A fork reaching at or below the finalized height (the finality depth below
//!   the head, or the chain's own finalized height, [`Block::finalized`]) is
//!   `chain::Refused::ReorgBeyondFinality`: nothing commits, it is logged at error and counted by
//!   `diesel_inbox_reorgs_refused_total`, and the block is redelivered until ops act.
//! - **The fork ledger.** Every reorg is a row of `diesel_inbox_reorgs`: the stream, the
//!   ancestor, the old and new heads, its depth, the events reverted and, as later blocks
//!   arrive, how many of those took effect again, and when. It is the [`Reorg`] in the block's
//!   outcome, a warn log line, `diesel_inbox_reorgs_total`, [`Chain::reorgs`] and
//!   `diesel-inbox reorgs`. Block records below the finalized height are pruned as the head
//!   moves (one delete per 16 blocks).
//! - **Side effects outside the database.** A [claim](crate::claim) made for an event a reorg
//!   then orphans cannot be undone. The reorg lists it as an orphaned side effect, with its
//!   claim's state ([`Reorgs::orphaned_effects`], `diesel-inbox reorgs`), for ops to settle.
//!   Make irreversible side effects only for final blocks: the simplest way is a consumer of
//!   their own whose chain cursor processes final blocks only (below).
//!
//! | stream | use |
//! |---|---|
//! | offsets or sequences the broker assigns once (Kafka, JetStream, a log) | a [sequence cursor](crate::cursor) |
//! | a chain's blocks, effects the app can revert (balances, projections, indexes) | a chain cursor: effects at the tip, undone on reorgs |
//! | a chain's blocks, effects that cannot be reverted (payouts, emails) | a chain cursor with [`final_blocks_only`](Chain::final_blocks_only): a block given with [`Block::tip`] is processed only once it is the finality depth below the tip, and nothing is ever reverted; the price is latency, the finality depth in blocks (64 blocks are about 13 minutes on Ethereum); a block not final yet is `chain::Refused::BlockNotFinal`, to redeliver later |
//!
//! The decisions (where a block goes, how far a fork may reach) are in `fork.rs`; the
//! statements in `sql.rs` (`ChainSql`); this module runs the transaction.

#[cfg(feature = "async")]
pub(crate) mod asynch;
pub(crate) mod block;
pub(crate) mod error;
mod fork;
mod ledger;
pub(crate) mod sql;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;

use chrono::{DateTime, Utc};
use tracing::{error, warn, Instrument};

use crate::backend::StreamKey;
use crate::claim::sql::ClaimSql;
use crate::claim::state::ClaimState;
use crate::decide::{Failure, Then};
use crate::duration::now;
use crate::engine::{self, run_ready, Body, Effect};
use crate::names::{InvalidStreamName, StreamName};
use crate::observe;
use crate::rows::Recorded;
use crate::sql::{Blocking, CursorSql, Db, InboxSql, Sql};
use crate::state::InboxState;
use crate::{AckOutcome, Error, EventId, HandlerError, Inbox, InboxConnection};

pub use block::{Block, BlockId, InvalidBlockHash, MAX_BLOCK_HASH_BYTES};
pub use error::Refused;
use fork::{Offered, Placement, Refusal, Step, Stored};
pub use ledger::{OrphanedEffect, Reorg, Reorgs};
use sql::{BlockRow, ChainSql, NewReorg, OrphanedRow};

/// A consumer's exactly-once position on one chain: blocks checked by their parent hashes,
/// reorgs undone, forks recorded. Made with [`Inbox::chain`].
///
/// What a delivered [`Block`] comes to:
/// - the stream's first block, or a child of its head: its events take effect, each once by
///   its event id ([`BlockOutcome::Processed`]);
/// - a block this branch has: [`BlockOutcome::Duplicate`], nothing runs;
/// - a block whose parent is a processed block below the head, or that replaces one: a
///   reorg. The orphaned blocks' events are reverted, last first, the fork goes into the
///   ledger, and the block takes effect ([`BlockOutcome::Processed`] with its [`Reorg`]);
/// - a block forking below its parent: the handler's [`ancestor`](ChainHandler::ancestor)
///   names the new branch's hashes down to the common ancestor, the stream rewinds there
///   ([`BlockOutcome::Rewound`]), and the caller delivers the new branch from the ancestor up;
///   without an answer, [`chain::Refused::UnknownAncestor`](Refused::UnknownAncestor);
/// - a block above the head plus one: [`chain::Refused::MissingBlocks`](Refused::MissingBlocks);
/// - a fork reaching the finalized height (the finality depth below the head, or the chain's own
///   [`finalized`](Block::finalized) height):
///   [`chain::Refused::ReorgBeyondFinality`](Refused::ReorgBeyondFinality), logged at error and
///   counted. Nothing commits on any error.
///
/// An event already processed under another block of the stream (or by the same consumer's
/// [`Inbox::process`]) is a duplicate and does not run again. A handler error or panic rolls
/// the whole block back, to be redelivered; a chain waits for its poison block.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::chain::{Block, BlockId, ChainHandler};
/// use diesel_inbox::{EventId, Inbox};
///
/// /// Credits rewards; a reorg takes back those of orphaned blocks.
/// struct Rewards;
///
/// impl ChainHandler<SqliteConnection> for Rewards {
///     type Event = i64;
///     type Error = diesel_inbox::Error;
///
///     fn apply(&mut self, tx: &mut SqliteConnection, _: &BlockId, id: &EventId, amount: &i64) -> Result<(), Self::Error> {
///         diesel::sql_query("INSERT INTO credits (event, amount) VALUES (?, ?)")
///             .bind::<diesel::sql_types::Text, _>(id.as_str())
///             .bind::<diesel::sql_types::BigInt, _>(amount)
///             .execute(tx)?;
///         Ok(())
///     }
///
///     fn revert(&mut self, tx: &mut SqliteConnection, _: &BlockId, id: &EventId) -> Result<(), Self::Error> {
///         diesel::sql_query("DELETE FROM credits WHERE event = ?")
///             .bind::<diesel::sql_types::Text, _>(id.as_str())
///             .execute(tx)?;
///         Ok(())
///     }
/// }
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// diesel::sql_query("CREATE TABLE credits (event TEXT PRIMARY KEY, amount BIGINT)").execute(&mut conn)?;
/// let chain = Inbox::new("rewards")?.chain("eth:mainnet", 64)?;
/// let tx = |id: &str| EventId::new(id);
///
/// chain.process(&mut conn, &Block::new(99, "99a", "98a")?, &mut Rewards)?;
/// let a = Block::new(100, "100a", "99a")?.event(tx("t1")?, 25).event(tx("t2")?, 5);
/// assert!(chain.process(&mut conn, &a, &mut Rewards)?.is_processed());
/// assert!(chain.process(&mut conn, &a, &mut Rewards)?.is_duplicate());
///
/// // 100a is orphaned: 100b re-includes t1, drops t2.
/// let b = Block::new(100, "100b", "99a")?.event(tx("t1")?, 25);
/// let outcome = chain.process(&mut conn, &b, &mut Rewards)?;
/// let reorg = outcome.reorg().expect("100b replaced 100a");
/// assert_eq!((reorg.ancestor, reorg.depth(), reorg.events_reverted), (99, 1, 2));
/// let total: i64 = diesel::dsl::sql::<diesel::sql_types::BigInt>("SELECT SUM(amount) FROM credits")
///     .get_result(&mut conn)?;
/// assert_eq!(total, 25); // t1 once, t2 not at all
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Chain {
    inbox: Inbox,
    stream: StreamName,
    finality_depth: u64,
    final_only: bool,
}

impl Inbox {
    /// A chain cursor of this consumer over the chain stream called `stream` (`eth:mainnet`),
    /// accepting reorgs up to `finality_depth` blocks deep: blocks further below the head
    /// are final, and no fork may reach them. It shares the consumer's name and retry policy.
    ///
    /// # Errors
    ///
    /// [`InvalidStreamName`] for a name that is not 1 to 255 bytes of UTF-8 without control
    /// characters.
    pub fn chain(&self, stream: &str, finality_depth: u64) -> Result<Chain, InvalidStreamName> {
        Ok(Chain {
            inbox: self.clone(),
            stream: StreamName::new(stream)?,
            finality_depth,
            final_only: false,
        })
    }

    /// The fork ledger of this consumer's chain streams, every stream.
    pub fn reorgs(&self) -> Reorgs {
        Reorgs::new(self.consumer(), None)
    }
}

/// What the app does with a chain's events: apply one, revert one that a reorg orphaned,
/// and, optionally, name the new branch's blocks when a fork's ancestor is not the parent of
/// the block delivered. Both run inside the chain cursor's transaction, on its connection.
pub trait ChainHandler<C> {
    /// An event as the block carries it.
    type Event;
    /// The handler's error; the inbox's own converts into it.
    type Error: HandlerError;

    /// Applies `event`, the event `id` of `block`. Runs once per event on the canonical
    /// chain (again after a reorg reverted it, if the new branch includes it).
    ///
    /// # Errors
    ///
    /// Any: the whole block rolls back and comes back to the caller.
    fn apply(
        &mut self,
        tx: &mut C,
        block: &BlockId,
        id: &EventId,
        event: &Self::Event,
    ) -> Result<(), Self::Error>;

    /// Undoes what [`apply`](Self::apply) did for event `id` of the orphaned `block`. Runs
    /// once per reorg that orphans it.
    ///
    /// # Errors
    ///
    /// Any: the whole reorg rolls back and comes back to the caller.
    fn revert(&mut self, tx: &mut C, block: &BlockId, id: &EventId) -> Result<(), Self::Error>;

    /// The hash of the block at `height` on the branch of the block being delivered, from the
    /// app's node (`eth_getBlockByNumber`), when a fork's ancestor is further down than the
    /// block's parent. `None` (the default) when the app delivers each new branch from its
    /// fork point instead, where the block's parent is the ancestor.
    fn ancestor(&mut self, height: u64) -> Option<String> {
        let _ = height;
        None
    }
}

/// What a block came to. Every variant settled the block: ack it.
#[must_use = "a BlockOutcome says whether the block took effect and whether a reorg happened"]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockOutcome {
    /// The block took effect: `applied` events ran, `duplicates` had taken effect before (in
    /// another block, or twice in this one). With `reorg`, it replaced an orphaned branch
    /// first.
    Processed {
        /// Events whose effect ran.
        applied: usize,
        /// Events that had taken effect already.
        duplicates: usize,
        /// The reorg this block revealed and that was undone before it took effect.
        reorg: Option<Reorg>,
    },
    /// The stream has this block already (or it is final and no longer kept): nothing ran.
    Duplicate,
    /// The block forks below its parent: the stream rewound to the common ancestor, reverting
    /// the orphaned branch, and the block itself did not take effect. Deliver the new branch
    /// from `reorg.ancestor + 1`.
    Rewound {
        /// The reorg.
        reorg: Reorg,
    },
}

impl BlockOutcome {
    /// `true` when the block took effect.
    pub fn is_processed(&self) -> bool {
        matches!(self, Self::Processed { .. })
    }

    /// `true` when the stream had the block already.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Self::Duplicate)
    }

    /// The reorg this block revealed, if any.
    pub fn reorg(&self) -> Option<&Reorg> {
        match self {
            Self::Processed { reorg, .. } => reorg.as_ref(),
            Self::Rewound { reorg } => Some(reorg),
            Self::Duplicate => None,
        }
    }

    /// How many of the block's events ran.
    pub fn applied(&self) -> usize {
        match self {
            Self::Processed { applied, .. } => *applied,
            Self::Duplicate | Self::Rewound { .. } => 0,
        }
    }
}

impl crate::ack::sealed::Sealed for BlockOutcome {}

impl AckOutcome for BlockOutcome {
    fn ack(&self) -> crate::Ack {
        crate::Ack::Ack
    }
}

/// Where a chain stream stands: [`Chain::position`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChainPosition {
    /// The last block processed: deliver `head.height() + 1` next.
    pub head: BlockId,
    /// No reorg reaches at or below it; `None` while the head is less than the finality depth
    /// above height 0.
    pub finalized: Option<u64>,
}

impl Chain {
    /// Processes only blocks at least the finality depth below the chain's tip ([`Block::tip`]),
    /// and never reverts: a block not final yet is
    /// [`chain::Refused::BlockNotFinal`](Refused::BlockNotFinal) (redeliver it later), and any fork
    /// is [`chain::Refused::ReorgBeyondFinality`](Refused::ReorgBeyondFinality). The effects then
    /// lag the tip by the finality depth (64 blocks are about 13 minutes on Ethereum), in exchange
    /// for never being undone: the mode for effects that cannot be reverted.
    pub fn final_blocks_only(mut self) -> Self {
        self.final_only = true;
        self
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        self.inbox.consumer()
    }

    /// The chain stream's name.
    pub fn stream(&self) -> &str {
        self.stream.as_str()
    }

    /// The finality depth.
    pub fn finality_depth(&self) -> u64 {
        self.finality_depth
    }

    /// This stream's fork ledger.
    pub fn reorgs(&self) -> Reorgs {
        Reorgs::new(self.consumer(), Some(self.stream()))
    }

    /// Delivers `block`: see [`Chain`] for what each block comes to. Runs in one
    /// transaction, retried under contention as [`Inbox::process`] is; inside a caller's
    /// transaction, as a savepoint.
    ///
    /// # Errors
    ///
    /// The handler's own error, unchanged; or the inbox's [`Error`] converted into it:
    /// [`chain::Refused::MissingBlocks`](Refused::MissingBlocks),
    /// [`chain::Refused::UnknownAncestor`](Refused::UnknownAncestor),
    /// [`chain::Refused::ReorgBeyondFinality`](Refused::ReorgBeyondFinality),
    /// [`chain::Refused::BlockNotFinal`](Refused::BlockNotFinal),
    /// [`cursor::Refused::SequenceOutOfRange`](crate::cursor::Refused::SequenceOutOfRange) for a
    /// height above `i64::MAX`, and the database errors of [`Inbox::process`]. Nothing commits on
    /// any of them.
    pub fn process<C, H>(
        &self,
        conn: &mut C,
        block: &Block<H::Event>,
        handler: &mut H,
    ) -> Result<BlockOutcome, H::Error>
    where
        C: InboxConnection,
        H: ChainHandler<C>,
    {
        run_ready(self.process_in::<Blocking, _, _>(conn, block, Sync(handler)))
    }

    /// A block's delivery in either flavour.
    pub(crate) async fn process_in<F, C, H>(
        &self,
        conn: &mut C,
        block: &Block<H::Event>,
        mut handler: H,
    ) -> Result<BlockOutcome, H::Error>
    where
        C: Db<F, Backend: Sql>,
        H: Effects<C>,
    {
        let span = tracing::info_span!(
            "chain",
            consumer = self.consumer(),
            stream = self.stream(),
            height = block.id().height(),
            hash = block.id().hash(),
        );
        async {
            let result = self.run_in(conn, block, &mut handler).await;
            match &result {
                Ok(outcome) => self.report(outcome),
                Err(Failure::Inbox(refused @ Error::Chain(Refused::ReorgBeyondFinality { .. }))) => {
                    error!(consumer = self.consumer(), stream = self.stream(), error = %refused, "reorg beyond finality refused");
                    observe::reorg_refused(self.consumer());
                }
                Err(_) => {}
            }
            result.map_err(Failure::into_error)
        }
        .instrument(span)
        .await
    }

    /// Where the stream stands, if it processed a block.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn position<C: InboxConnection>(
        &self,
        conn: &mut C,
    ) -> Result<Option<ChainPosition>, Error> {
        run_ready(self.position_in::<Blocking, _>(conn))
    }

    /// [`position`](Self::position) in either flavour.
    pub(crate) async fn position_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
    ) -> Result<Option<ChainPosition>, Error> {
        let Some(row) = C::Backend::cursor(conn, self.key()).await? else {
            return Ok(None);
        };
        let Some(head) = row.high else {
            return Ok(None);
        };
        let block = C::Backend::block(conn, self.key(), head)
            .await?
            .ok_or(diesel::result::Error::NotFound)?;
        Ok(Some(ChainPosition {
            head: BlockId::new(head.unsigned_abs(), block.hash),
            finalized: row.watermark.map(i64::unsigned_abs),
        }))
    }

    /// The transaction, retried under contention.
    async fn run_in<F, C, H>(
        &self,
        conn: &mut C,
        block: &Block<H::Event>,
        handler: &mut H,
    ) -> Result<BlockOutcome, Failure<H::Error>>
    where
        C: Db<F, Backend: Sql>,
        H: Effects<C>,
    {
        let height = stored(block.id().height()).map_err(Failure::Inbox)?;
        if self.final_only
            && !fork::is_final_at(
                height,
                block.known_tip().map(stored_or_max),
                self.finality_depth,
            )
        {
            return Err(Failure::Inbox(Error::Chain(Refused::BlockNotFinal {
                stream: self.stream().to_owned(),
                height: block.id().height(),
                tip: block.known_tip(),
                depth: self.finality_depth,
                final_at: block.id().height().saturating_add(self.finality_depth),
            })));
        }
        let scope = engine::scope_of(conn)?;
        let subject = self.inbox.subject(None);
        let body = Settle {
            chain: self,
            block,
            height,
            handler,
        };
        engine::run(conn, scope, self.inbox.retry_policy(), subject, body).await
    }

    /// The body of the transaction: place the block, revert what a fork orphaned, apply it.
    async fn settle<F, C, H>(
        &self,
        conn: &mut C,
        block: &Block<H::Event>,
        height: i64,
        handler: &mut H,
    ) -> Result<BlockOutcome, Failure<H::Error>>
    where
        C: Db<F, Backend: Sql>,
        H: Effects<C>,
    {
        let now = now();
        let key = self.key();
        let row = C::Backend::cursor_or_insert(conn, key, now).await?;
        let finalized = row.watermark;
        let head = match row.high {
            Some(head) => Some(
                C::Backend::block(conn, key, head)
                    .await?
                    .ok_or(diesel::result::Error::NotFound)?,
            ),
            None => None,
        };
        let offered = Offered {
            height,
            hash: block.id().hash(),
            parent: block.parent(),
        };
        let head_ref = head.as_ref().map(|head| (head.height, head.hash.as_str()));
        let placement = if fork::extends(offered, head_ref) {
            Placement::Extends
        } else {
            let at_height = C::Backend::block(conn, key, height).await?;
            let at_parent = C::Backend::block(conn, key, height - 1).await?;
            let stored = Stored {
                head: head_ref,
                at_height: at_height.as_ref().map(|b| b.hash.as_str()),
                at_parent: at_parent.as_ref().map(|b| b.hash.as_str()),
                finalized,
            };
            fork::place(offered, stored)
                .map_err(|refusal| self.refused(refusal, block, finalized))?
        };
        let ancestor = match placement {
            Placement::Extends => None,
            Placement::Known => return Ok(BlockOutcome::Duplicate),
            Placement::ForksAt { ancestor } => Some(ancestor),
            Placement::ForksBelow { from } => Some(
                self.find_ancestor(conn, block, from, finalized, handler)
                    .await?,
            ),
        };
        let mut reorg = match ancestor {
            Some(_) if self.final_only => {
                return Err(self.refused(Refusal::BeyondFinality, block, finalized));
            }
            Some(ancestor) => Some(self.revert(conn, block, ancestor, handler, now).await?),
            None => None,
        };
        if let Some(reorg) = reorg.as_ref() {
            if reorg.ancestor + 1 != block.id().height() {
                // Rewound below the block's parent: the new branch comes from the ancestor up.
                let ancestor = stored_or_max(reorg.ancestor);
                C::Backend::save_cursor(conn, key, finalized, Some(ancestor), now).await?;
                return Ok(BlockOutcome::Rewound {
                    reorg: reorg.clone(),
                });
            }
        }
        let (applied, duplicates) = self
            .apply(conn, block, height, handler, reorg.as_mut(), now)
            .await?;
        let finalized = fork::finalized_after(
            finalized,
            height,
            self.finality_depth,
            block.known_finalized().map(stored_or_max),
        );
        C::Backend::save_cursor(conn, key, finalized, Some(height), now).await?;
        if let Some(finalized) = finalized.filter(|_| fork::prunes_at(height)) {
            C::Backend::delete_final_blocks(conn, key, finalized).await?;
        }
        Ok(BlockOutcome::Processed {
            applied,
            duplicates,
            reorg,
        })
    }

    /// Walks down from `from`, comparing the stored blocks with the new branch's hashes
    /// (the handler's [`ancestor`](ChainHandler::ancestor)), to the last block both share.
    async fn find_ancestor<F, C, H>(
        &self,
        conn: &mut C,
        block: &Block<H::Event>,
        from: i64,
        finalized: Option<i64>,
        handler: &mut H,
    ) -> Result<i64, Failure<H::Error>>
    where
        C: Db<F, Backend: Sql>,
        H: Effects<C>,
    {
        let mut height = from;
        // Bounded: every step goes one height down, and the walk stops at the finalized
        // height or the first block the stream no longer keeps.
        loop {
            let stored = C::Backend::block(conn, self.key(), height).await?;
            let Some(new_branch) = handler.ancestor(height.unsigned_abs()).await else {
                return Err(Failure::Inbox(Error::Chain(Refused::UnknownAncestor {
                    stream: self.stream().to_owned(),
                    height: height.unsigned_abs(),
                })));
            };
            let step = fork::walk(
                height,
                stored.as_ref().map(|b| b.hash.as_str()),
                &new_branch,
                finalized,
            )
            .map_err(|refusal| self.refused(refusal, block, finalized))?;
            match step {
                Step::Ancestor => return Ok(height),
                Step::Down => height -= 1,
            }
        }
    }

    /// Records the reorg, then reverts every event of the blocks above `ancestor`, last
    /// applied first, marks them reverted by the reorg, lists the side effects they orphan,
    /// and drops the blocks.
    async fn revert<F, C, H>(
        &self,
        conn: &mut C,
        block: &Block<H::Event>,
        ancestor: i64,
        handler: &mut H,
        now: DateTime<Utc>,
    ) -> Result<Reorg, Failure<H::Error>>
    where
        C: Db<F, Backend: Sql>,
        H: Effects<C>,
    {
        let key = self.key();
        let orphaned = C::Backend::blocks_above(conn, key, ancestor).await?;
        let events = C::Backend::block_events_above(conn, key, ancestor).await?;
        let old_head = orphaned.first().ok_or(diesel::result::Error::NotFound)?;
        let new_head = (stored_or_max(block.id().height()), block.id().hash());
        let events_reverted = events.len() as u64;
        // First, so that each event it reverts names it: a later block that includes the
        // event again credits this reorg, whatever reorgs came in between.
        let reorg_id = C::Backend::insert_reorg(
            conn,
            key,
            &NewReorg {
                ancestor_height: ancestor,
                old_head: (old_head.height, &old_head.hash),
                new_head,
                events_reverted: i64::try_from(events_reverted).unwrap_or(i64::MAX),
                at: now,
            },
        )
        .await?;
        for event in &events {
            let hash = orphaned
                .iter()
                .find(|b| b.height == event.height)
                .map(|b| b.hash.clone())
                .ok_or(diesel::result::Error::NotFound)?;
            let block_id = BlockId::new(event.height.unsigned_abs(), hash);
            let id = EventId::new(event.event_id.as_str())
                .map_err(|invalid| Failure::Inbox(invalid.into()))?;
            let mut revert = Revert {
                handler: &mut *handler,
                block: &block_id,
                id: &id,
            };
            engine::call_user(conn, &mut revert, Then::Statements).await?;
            let event_key = (self.consumer(), id.as_str());
            C::Backend::set_inbox_state(
                conn,
                event_key,
                InboxState::Processed,
                InboxState::Reverted,
            )
            .await?;
            C::Backend::set_reverted_by(conn, event_key, reorg_id).await?;
            if let Some(claim) = C::Backend::claim(conn, event_key, false).await? {
                let state = crate::claim::state_at(&claim, now);
                if matches!(
                    state,
                    ClaimState::Completed | ClaimState::InProgress | ClaimState::InDoubt
                ) {
                    let side_effect = OrphanedRow {
                        reorg_id,
                        event_id: event_key.1.to_owned(),
                        stream: self.stream().to_owned(),
                        height: event.height,
                        block_hash: block_id.hash().to_owned(),
                        claim_state: state,
                        found_at: now,
                    };
                    C::Backend::insert_orphaned(conn, self.consumer(), &side_effect).await?;
                }
            }
        }
        C::Backend::delete_blocks_above(conn, key, ancestor).await?;
        Ok(Reorg {
            id: reorg_id,
            stream: self.stream().to_owned(),
            ancestor: ancestor.unsigned_abs(),
            old_head: BlockId::new(old_head.height.unsigned_abs(), old_head.hash.clone()),
            new_head: block.id().clone(),
            events_reverted,
            events_reapplied: 0,
            happened_at: now,
        })
    }

    /// Records the block's events through the inbox, runs the new ones (and the reverted ones
    /// the new branch includes again, each credited in the ledger to the reorg that reverted
    /// it, `found` too where the block found it), and records the block; returns how many
    /// ran and how many were duplicates.
    async fn apply<F, C, H>(
        &self,
        conn: &mut C,
        block: &Block<H::Event>,
        height: i64,
        handler: &mut H,
        found: Option<&mut Reorg>,
        now: DateTime<Utc>,
    ) -> Result<(usize, usize), Failure<H::Error>>
    where
        C: Db<F, Backend: Sql>,
        H: Effects<C>,
    {
        let key = self.key();
        // The first of an id in the block takes effect; a later one is a duplicate.
        let mut seen = HashSet::with_capacity(block.events().len());
        let firsts: Vec<usize> = (0..block.events().len())
            .filter(|&i| seen.insert(block.events()[i].0.as_str()))
            .collect();
        let items: Vec<(&str, Option<&[u8]>)> = firsts
            .iter()
            .map(|&i| (block.events()[i].0.as_str(), None))
            .collect();
        let recorded = if items.is_empty() {
            Vec::new()
        } else {
            C::Backend::record_deliveries(conn, self.consumer(), &items, now).await?
        };
        let mut applied = Vec::with_capacity(firsts.len());
        let mut reapplied = Vec::new();
        for (&i, recorded) in firsts.iter().zip(recorded) {
            let (id, event) = &block.events()[i];
            let event_key = (self.consumer(), id.as_str());
            let recorded = recorded.map_err(|unreadable| {
                Failure::Inbox(
                    unreadable
                        .in_row(&[("consumer", self.consumer())], "event_id")
                        .into(),
                )
            })?;
            match recorded {
                Recorded::New => {}
                Recorded::Seen(existing) if existing.state == InboxState::Reverted => {
                    C::Backend::set_inbox_state(
                        conn,
                        event_key,
                        InboxState::Reverted,
                        InboxState::Processed,
                    )
                    .await?;
                    reapplied.push(id.as_str());
                }
                Recorded::Seen(_) => continue,
            }
            let mut apply = Apply {
                handler: &mut *handler,
                block: block.id(),
                id,
                event,
            };
            engine::call_user(conn, &mut apply, Then::Statements).await?;
            applied.push((i64::try_from(i).unwrap_or(i64::MAX), id.as_str()));
        }
        C::Backend::insert_block(
            conn,
            key,
            &BlockRow {
                height,
                hash: block.id().hash().to_owned(),
                parent_hash: block.parent().to_owned(),
            },
            now,
        )
        .await?;
        if !applied.is_empty() {
            C::Backend::insert_block_events(conn, key, height, &applied).await?;
        }
        if !reapplied.is_empty() {
            // Each credited to the reorg that reverted it, not to the stream's latest.
            let mut by_reorg = BTreeMap::<i64, i64>::new();
            for reorg in C::Backend::take_reverted_by(conn, self.consumer(), &reapplied).await? {
                *by_reorg.entry(reorg).or_default() += 1;
            }
            if let Some(found) = found {
                let by = by_reorg.get(&found.id).copied().unwrap_or_default();
                found.events_reapplied = by.unsigned_abs();
            }
            for (reorg, by) in by_reorg {
                C::Backend::count_reapplied(conn, reorg, by).await?;
            }
        }
        let ran = applied.len();
        Ok((ran, block.events().len() - ran))
    }

    /// Logs and counts what a committed block found.
    fn report(&self, outcome: &BlockOutcome) {
        let Some(reorg) = outcome.reorg() else {
            return;
        };
        warn!(
            consumer = self.consumer(),
            stream = self.stream(),
            reorg = reorg.id,
            ancestor = reorg.ancestor,
            old_head = %reorg.old_head,
            new_head = %reorg.new_head,
            depth = reorg.depth(),
            events_reverted = reorg.events_reverted,
            "chain reorg: orphaned blocks reverted; see diesel-inbox reorgs"
        );
        observe::reorg(self.consumer(), reorg.depth(), reorg.events_reverted);
    }

    fn refused<E>(
        &self,
        refusal: Refusal,
        block: &Block<impl Sized>,
        finalized: Option<i64>,
    ) -> Failure<E> {
        let stream = self.stream().to_owned();
        Failure::Inbox(Error::Chain(match refusal {
            Refusal::Ahead { head } => Refused::MissingBlocks {
                stream,
                head: head.unsigned_abs(),
                height: block.id().height(),
            },
            Refusal::BeyondFinality => Refused::ReorgBeyondFinality {
                stream,
                height: block.id().height(),
                finalized: finalized.map_or(0, i64::unsigned_abs),
            },
        }))
    }

    fn key(&self) -> StreamKey<'_> {
        (self.consumer(), self.stream())
    }
}

/// A height as stored: `BIGINT`.
fn stored(height: u64) -> Result<i64, Error> {
    i64::try_from(height).map_err(|_| crate::cursor::Refused::SequenceOutOfRange(height).into())
}

/// A height the caller gave beside the block (its tip, the chain's finalized height), as
/// stored: one above `i64::MAX` is as far as a stored height goes.
fn stored_or_max(height: u64) -> i64 {
    i64::try_from(height).unwrap_or(i64::MAX)
}

/// The app's handler as the chain's transaction calls it, in either flavour: the sync
/// [`ChainHandler`] (ready futures) or the async one.
pub(crate) trait Effects<C> {
    /// An event as the block carries it.
    type Event;
    /// The handler's error.
    type Error: HandlerError;

    /// [`ChainHandler::apply`].
    fn apply(
        &mut self,
        tx: &mut C,
        block: &BlockId,
        id: &EventId,
        event: &Self::Event,
    ) -> impl Future<Output = Result<(), Self::Error>>;

    /// [`ChainHandler::revert`].
    fn revert(
        &mut self,
        tx: &mut C,
        block: &BlockId,
        id: &EventId,
    ) -> impl Future<Output = Result<(), Self::Error>>;

    /// [`ChainHandler::ancestor`].
    fn ancestor(&mut self, height: u64) -> impl Future<Output = Option<String>>;
}

/// A sync [`ChainHandler`], whose futures are ready when made.
struct Sync<'a, H>(&'a mut H);

impl<C, H: ChainHandler<C>> Effects<C> for Sync<'_, H> {
    type Event = H::Event;
    type Error = H::Error;

    fn apply(
        &mut self,
        tx: &mut C,
        block: &BlockId,
        id: &EventId,
        event: &H::Event,
    ) -> impl Future<Output = Result<(), H::Error>> {
        std::future::ready(self.0.apply(tx, block, id, event))
    }

    fn revert(
        &mut self,
        tx: &mut C,
        block: &BlockId,
        id: &EventId,
    ) -> impl Future<Output = Result<(), H::Error>> {
        std::future::ready(self.0.revert(tx, block, id))
    }

    fn ancestor(&mut self, height: u64) -> impl Future<Output = Option<String>> {
        std::future::ready(self.0.ancestor(height))
    }
}

/// One event's apply, as the engine calls user code.
struct Apply<'a, H, Ev> {
    handler: &'a mut H,
    block: &'a BlockId,
    id: &'a EventId,
    event: &'a Ev,
}

impl<C, H: Effects<C>> Effect<C> for Apply<'_, H, H::Event> {
    type Output = ();
    type Error = H::Error;

    fn call(&mut self, conn: &mut C) -> impl Future<Output = Result<(), H::Error>> {
        self.handler.apply(conn, self.block, self.id, self.event)
    }
}

/// One event's revert, as the engine calls user code.
struct Revert<'a, H> {
    handler: &'a mut H,
    block: &'a BlockId,
    id: &'a EventId,
}

impl<C, H: Effects<C>> Effect<C> for Revert<'_, H> {
    type Output = ();
    type Error = H::Error;

    fn call(&mut self, conn: &mut C) -> impl Future<Output = Result<(), H::Error>> {
        self.handler.revert(conn, self.block, self.id)
    }
}

/// The chain's transaction body: [`Chain::settle`], once per attempt.
struct Settle<'a, H: Effects<C>, C> {
    chain: &'a Chain,
    block: &'a Block<H::Event>,
    height: i64,
    handler: &'a mut H,
}

impl<F, C, H> Body<F, C> for Settle<'_, H, C>
where
    C: Db<F, Backend: Sql>,
    H: Effects<C>,
{
    type Output = BlockOutcome;
    type Error = H::Error;

    async fn attempt(&mut self, conn: &mut C) -> Result<BlockOutcome, Failure<H::Error>> {
        self.chain
            .settle(conn, self.block, self.height, &mut *self.handler)
            .await
    }
}
