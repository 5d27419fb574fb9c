//! The async flavour, on diesel-async (feature `async`): the same inbox, with async closures
//! for handlers.
//!
//! The names and the guarantees are the sync API's: [`with_inbox`] and [`Inbox::process`]
//! run a handler once per event, in one transaction with the record that it did, on
//! `AsyncPgConnection`, `AsyncMysqlConnection`, `SyncConnectionWrapper<SqliteConnection>`, and
//! the pooled connections of diesel-async's deadpool and bb8 pools. Both flavours run the same
//! transaction bodies and statements; only the connection's I/O differs.
//!
//! Each a wrapper of the sync type with the same methods, awaited:
//! - [`Inbox`]: deliveries, stored results, batches ([`Inbox::process_batch`],
//!   [`Inbox::process_bulk`]), stats, [prune](Inbox::prune);
//! - [`Cursor`] ([`Inbox::cursor`]): ordered streams, batches of sequences, fencing, where to
//!   resume, pruning by cursor; [`Gaps`]: the gap ledger, listed and resolved;
//! - [`DeadLetters`] ([`Inbox::dead_letters`]): list, show, redrive, discard, release;
//! - [`Chain`] ([`Inbox::chain`]): chain cursors that undo reorgs, with an async
//!   [`ChainHandler`]; [`Reorgs`]: the fork ledger;
//! - [`Claims`] ([`Inbox::claims`]) and a held [`Claim`]: side effects outside the database,
//!   and the claims in doubt, listed and resolved;
//! - [`Replays`]: governed replays, with an async [`ReplayHandler`] and [`ReplaySource`];
//! - [`Outbox`] and [`Relay`]: the producer side, publishing through an
//!   [`AsyncPublisher`](crate::outbox::AsyncPublisher); the outbox's rows listed, retried, pruned;
//! - [`run_pending_migrations`]: the schema, fleet-safe; [`doctor::check`]: its health;
//!   [`stats::all`]: every consumer's stats.
//!
//! [`Inbox`] is the sync inbox's own type in the async flavour ([`crate::flavour`]): its
//! settings and builders are written once for both. The other types wrap their sync
//! configuration: each async builder forwards to it, and a configured sync value converts
//! with `From` ([`Relay`] has only that). A unit test names every field of the sync
//! [`crate::replay::Replays`] and sets each through the async builder, so a setting added on
//! the sync side fails to compile there until it is forwarded.
//!
//! A future dropped while its connection holds a transaction or a session-level lock (a
//! prune's, the migrations') marks the connection broken: it refuses the next transaction,
//! and diesel-async's pools discard it, which ends both on the server.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
//! use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
//! use diesel_inbox::{asynch, Outcome};
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let mut setup = SqliteConnection::establish(":memory:")?;
//! diesel_inbox::run_pending_migrations(&mut setup)?;
//! let mut conn = SyncConnectionWrapper::new(setup);
//! conn.batch_execute("CREATE TABLE points (n INTEGER NOT NULL)").await?;
//!
//! let award = async |tx: &mut SyncConnectionWrapper<SqliteConnection>| {
//!     diesel::sql_query("INSERT INTO points (n) VALUES (10)")
//!         .execute(tx)
//!         .await
//! };
//! let first = asynch::with_inbox(&mut conn, "evt-1", award).await?;
//! let again = asynch::with_inbox(&mut conn, "evt-1", award).await?;
//! assert_eq!(first, Outcome::Processed(1));
//! assert!(again.is_duplicate());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Handlers
//!
//! A handler is an async closure over the transaction's connection, `async |tx| { ... }`,
//! called again when contention rolls the transaction back. It may borrow from its
//! surroundings (`&event`), and its future must be `Send`, so that the delivery can run on a
//! multi-threaded runtime. It cannot take its captures by `move` or mutate them: each call's
//! future must stand on its own. A handler that counts its attempts uses an atomic or a
//! `Cell`.
//!
//! Every shape of handler, whatever the number of its arguments, is one trait, [`Handler`],
//! generic over the tuple of the arguments: `Handler<(&mut C,), T, E>` for a delivery's,
//! `Handler<(&mut C, &Delivery), T, E>` for a batch's, and so on.
//!
//! # Cancellation
//!
//! A delivery's future may be dropped at any await point: by a `timeout`, a `select!`, or a
//! shutdown. Its transaction never commits half an effect: it commits whole or not at all.
//! What a dropped delivery leaves is an open transaction on the connection, which
//! diesel-async does not end. The inbox marks that connection's transaction manager broken:
//! the next transaction on it fails with [`Error::Database`](crate::Error::Database)
//! (`BrokenTransactionManager`), and diesel-async's pools discard it instead of handing it out
//! again, which closes the session and ends the transaction on the server. So every cancelled
//! delivery costs a reconnect, and the event is neither lost nor doubled: redelivered, it is
//! processed, or a duplicate if the commit had gone through.
//!
//! Two cases to know:
//! - **deadpool** checks a connection when it hands it out, not when it takes it back: until
//!   then a cancelled delivery's connection sits idle in the pool with its transaction open,
//!   and a redelivery of the same event on another connection waits on that transaction's row
//!   lock. bb8 checks when it takes the connection back and closes it at once.
//! - **`SyncConnectionWrapper`** (SQLite) waits for a statement still running on tokio's
//!   blocking pool when its future is dropped, with `block_in_place`: cancelling a delivery
//!   on it needs tokio's multi-thread runtime, and holds up the task that drops it until the
//!   statement returns. A sibling delivery in the same task cannot go on meanwhile; if it
//!   holds SQLite's write lock that the dropped one waits for, the task stalls for the busy
//!   timeout. Give each delivery a task of its own that takes its own pooled connection
//!   (`tokio::spawn`, a `JoinSet`), as the NATS package's `examples/async_service.rs` does: a timeout then stops
//!   waiting for the delivery, which runs on to its end.
//!
//! # The other areas, awaited
//!
//! The producer side, ordered streams, chains and claims have the sync API's names and
//! semantics, with async closures (sketched here over a pool of diesel-async connections; the
//! sync chapters have the runnable examples):
//!
//! ```ignore
//! // In a handler's transaction: the invoice and its event commit together.
//! let outbox = asynch::Outbox::new("billing")?;
//! billing.process(&mut *conn, &envelope, async |tx| {
//!     diesel::insert_into(invoices::table).values(&invoice).execute(tx).await?;
//!     outbox.enqueue(tx, "invoices.issued", &issued).await
//! }).await;
//!
//! // A relay pass on a pooled connection, awaiting an `AsyncPublisher` (JetStream, say).
//! let pass = asynch::Relay::new().run_once(&mut *pool.get().await?, &publisher).await?;
//!
//! // A cursor over an ordered stream, fenced by the lease its owner acquired.
//! let orders = asynch::Inbox::new("projector")?.cursor("orders-0")?;
//! let lease = orders.acquire(&mut *conn, "worker-a").await?;
//! let orders = orders.epoch(lease.epoch());
//! orders.process(&mut *conn, seq, async |tx| project(tx, &order).await).await?;
//!
//! // A chain cursor: an `asynch::ChainHandler` writes its apply and revert as `async fn`s.
//! let chain = asynch::Inbox::new("rewards")?.chain("eth:mainnet", 64)?;
//! chain.process(&mut *conn, &block, &mut rewards).await?;
//!
//! // A claim: the side effect is an async closure over the claim.
//! let mailer = asynch::Inbox::new("mailer")?.claims();
//! let sent = mailer
//!     .run(&mut *conn, &envelope, async |claim| mail.send(&welcome, claim.idempotency_key()).await)
//!     .await?; // ClaimOutcome::Ran, or Completed with the first send's result
//! ```
//!
//! A relay pass holds its connection while it awaits the broker: take one from the pool for
//! each pass. An async handler's future is boxed, once per attempt, so that rustc lays it out
//! apart from the inbox's own (a handler that enqueues nests a second transaction body in the
//! first). Batches take an async closure over the transaction and one new delivery
//! (`process_batch`), or all of them at once (`process_bulk`), with the sync API's failure
//! isolation; cursor batches take `async |tx, sequence, message| ..`. The ops calls are here
//! too, awaited: pruning, the gap ledger, the claims in doubt, the outbox's rows, stats and the
//! doctor.

pub(crate) mod batch;
pub mod doctor;
mod handler;
mod migrations;
pub mod stats;

pub(crate) use handler::Called;
pub use handler::{AsyncInboxConnection, Handler};

pub use crate::chain::asynch::{Chain, ChainHandler, Reorgs};
pub use crate::claim::asynch::{Claim, Claimed, Claims};
pub use crate::cursor::asynch::{Cursor, Gaps};
pub use crate::dead_letter::asynch::DeadLetters;
pub use crate::inbox::asynch::{with_inbox, Inbox};
pub use crate::outbox::asynch::{Outbox, Relay};
pub use crate::replay::asynch::{ReplayHandler, ReplaySource, Replays};
pub use migrations::{run_pending_migrations, run_pending_migrations_with};

/// Parity with the sync builders, for the configurations the async front still wraps (the
/// inbox's are one type for both flavours). Each test names every field of a sync
/// configuration without `..`: a setting added to the sync type fails to compile here, and
/// each field is set through the async builder to something other than its default, so a
/// setting the async type does not forward fails the test.
#[cfg(test)]
mod parity {
    use std::time::Duration;

    use crate::replay;
    use crate::RetryPolicy;

    fn other_policy() -> RetryPolicy {
        RetryPolicy::default().max_retries(3)
    }

    #[test]
    fn every_setting_of_the_sync_replays_is_set_through_the_async_one() {
        let replays = super::Replays::new()
            .runner("nightly")
            .batch_size(7)
            .lease(Duration::from_secs(11))
            .retry(other_policy());

        let replay::Replays {
            runner,
            batch_size,
            lease,
            retry,
        } = replays.into_sync();
        assert_eq!(runner, "nightly");
        assert_eq!(batch_size, 7);
        assert_eq!(lease, Duration::from_secs(11));
        assert_eq!(retry, other_policy());
    }
}
