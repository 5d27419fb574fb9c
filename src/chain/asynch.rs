//! Chain cursors on async connections: [`Chain`], a [`crate::chain::Chain`] whose blocks are
//! awaited, with an async [`ChainHandler`]. The same transaction body and statements as the
//! sync API.

use std::future::Future;

use crate::chain::{
    self, Block, BlockId, BlockOutcome, ChainPosition, Effects, OrphanedEffect, Reorg,
};
use crate::sql::Async;
use crate::{cursor::InvalidStreamName, Error, EventId, HandlerError};

use crate::asynch::{AsyncInboxConnection, Inbox};

impl Inbox {
    /// A chain cursor of this consumer: [`crate::Inbox::chain`].
    ///
    /// # Errors
    ///
    /// [`InvalidStreamName`] for a name that is not 1 to 255 bytes of UTF-8 without control
    /// characters.
    pub fn chain(&self, stream: &str, finality_depth: u64) -> Result<Chain, InvalidStreamName> {
        self.blocking().chain(stream, finality_depth).map(Chain)
    }

    /// The fork ledger of this consumer's chain streams: [`crate::Inbox::reorgs`].
    pub fn reorgs(&self) -> Reorgs {
        Reorgs(self.blocking().reorgs())
    }
}

/// What the app does with a chain's events, on an async connection:
/// [`crate::chain::ChainHandler`], whose methods return `Send` futures (write them as
/// `async fn`s in the impl).
pub trait ChainHandler<C>: Send {
    /// An event as the block carries it.
    type Event: Sync;
    /// The handler's error; the inbox's own converts into it.
    type Error: HandlerError + Send;

    /// [`crate::chain::ChainHandler::apply`].
    fn apply(
        &mut self,
        tx: &mut C,
        block: &BlockId,
        id: &EventId,
        event: &Self::Event,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// [`crate::chain::ChainHandler::revert`].
    fn revert(
        &mut self,
        tx: &mut C,
        block: &BlockId,
        id: &EventId,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// [`crate::chain::ChainHandler::ancestor`]: `None` by default.
    fn ancestor(&mut self, height: u64) -> impl Future<Output = Option<String>> + Send {
        let _ = height;
        std::future::ready(None)
    }
}

/// A consumer's exactly-once position on one chain, on async connections:
/// [`crate::chain::Chain`], whose blocks are awaited. Made with [`Inbox::chain`].
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
/// use diesel_inbox::asynch::{self, ChainHandler};
/// use diesel_inbox::chain::{Block, BlockId};
/// use diesel_inbox::EventId;
///
/// type Conn = SyncConnectionWrapper<SqliteConnection>;
///
/// /// Counts what it applied and reverted; a real one writes through `tx`.
/// #[derive(Default)]
/// struct Tally { applied: u32, reverted: u32 }
///
/// impl ChainHandler<Conn> for Tally {
///     type Event = ();
///     type Error = diesel_inbox::Error;
///
///     async fn apply(&mut self, _: &mut Conn, _: &BlockId, _: &EventId, _: &()) -> Result<(), Self::Error> {
///         self.applied += 1;
///         Ok(())
///     }
///
///     async fn revert(&mut self, _: &mut Conn, _: &BlockId, _: &EventId) -> Result<(), Self::Error> {
///         self.reverted += 1;
///         Ok(())
///     }
/// }
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let mut conn = Conn::new(SqliteConnection::establish(":memory:")?);
/// asynch::run_pending_migrations(&mut conn).await?;
/// let chain = asynch::Inbox::new("indexer")?.chain("eth:mainnet", 64)?;
/// let mut tally = Tally::default();
///
/// chain.process(&mut conn, &Block::new(99, "99a", "98a")?, &mut tally).await?;
/// let a = Block::new(100, "100a", "99a")?.event(EventId::new("t1")?, ());
/// chain.process(&mut conn, &a, &mut tally).await?;
/// // 100b replaces 100a and includes t1 again: reverted once, applied once more.
/// let b = Block::new(100, "100b", "99a")?.event(EventId::new("t1")?, ());
/// let outcome = chain.process(&mut conn, &b, &mut tally).await?;
/// assert_eq!(outcome.reorg().map(|reorg| reorg.events_reverted), Some(1));
/// assert_eq!((tally.applied, tally.reverted), (2, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Chain(chain::Chain);

impl From<chain::Chain> for Chain {
    fn from(chain: chain::Chain) -> Self {
        Self(chain)
    }
}

impl Chain {
    /// [`crate::chain::Chain::final_blocks_only`].
    pub fn final_blocks_only(self) -> Self {
        Self(self.0.final_blocks_only())
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        self.0.consumer()
    }

    /// The chain stream's name.
    pub fn stream(&self) -> &str {
        self.0.stream()
    }

    /// This stream's fork ledger.
    pub fn reorgs(&self) -> Reorgs {
        Reorgs(self.0.reorgs())
    }

    /// Delivers `block`: [`crate::chain::Chain::process`], awaited, with the async inbox's
    /// backoff and cancellation (see [`Inbox::process`]).
    ///
    /// # Errors
    ///
    /// As [`crate::chain::Chain::process`].
    pub fn process<'a, C, H>(
        &'a self,
        conn: &'a mut C,
        block: &'a Block<H::Event>,
        handler: &'a mut H,
    ) -> impl Future<Output = Result<BlockOutcome, H::Error>> + Send + 'a
    where
        C: AsyncInboxConnection,
        H: ChainHandler<C>,
    {
        self.0
            .process_in::<Async, _, _>(conn, block, Awaited(handler))
    }

    /// Where the stream stands: [`crate::chain::Chain::position`], awaited.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn position<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
    ) -> Result<Option<ChainPosition>, Error> {
        self.0.position_in::<Async, _>(conn).await
    }
}

/// The fork ledger, on async connections: [`crate::chain::Reorgs`], awaited.
#[derive(Debug, Clone)]
#[must_use]
pub struct Reorgs(chain::Reorgs);

impl Reorgs {
    /// [`crate::chain::Reorgs::of_stream`].
    ///
    /// # Errors
    ///
    /// [`InvalidStreamName`] for a name no chain stream can have.
    pub fn of_stream(self, stream: &str) -> Result<Self, InvalidStreamName> {
        Ok(Self(self.0.of_stream(stream)?))
    }

    /// [`crate::chain::Reorgs::list`].
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn list<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Reorg>, Error> {
        self.0.list_in::<Async, _>(conn, after, limit).await
    }

    /// [`crate::chain::Reorgs::orphaned_effects`].
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub async fn orphaned_effects<C: AsyncInboxConnection>(
        &self,
        conn: &mut C,
    ) -> Result<Vec<OrphanedEffect>, Error> {
        self.0.orphaned_effects_in::<Async, _>(conn).await
    }
}

/// An async [`ChainHandler`] as the chain's transaction calls it.
struct Awaited<'a, H>(&'a mut H);

impl<C, H: ChainHandler<C>> Effects<C> for Awaited<'_, H> {
    type Event = H::Event;
    type Error = H::Error;

    fn apply(
        &mut self,
        tx: &mut C,
        block: &BlockId,
        id: &EventId,
        event: &H::Event,
    ) -> impl Future<Output = Result<(), H::Error>> {
        self.0.apply(tx, block, id, event)
    }

    fn revert(
        &mut self,
        tx: &mut C,
        block: &BlockId,
        id: &EventId,
    ) -> impl Future<Output = Result<(), H::Error>> {
        self.0.revert(tx, block, id)
    }

    fn ancestor(&mut self, height: u64) -> impl Future<Output = Option<String>> {
        self.0.ancestor(height)
    }
}
