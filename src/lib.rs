//! Exactly-once processing for at-least-once consumers, on the database you already use.
//!
//! Brokers deliver at least once: after a crash, a timeout, a rebalance or a reorg the same
//! event comes again. `diesel-inbox` makes a handler take effect once per event identity by
//! inserting `(consumer, event_id)` into a unique-keyed inbox table **in the same transaction**
//! as the handler's own writes. A duplicate delivery conflicts on the key, the effect does not
//! run, and the delivery is still counted on the existing row. The database, not a read-then-write
//! check in Rust, decides what is a duplicate; identity is the event id, never the payload.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_inbox::{with_inbox, Outcome};
//!
//! let mut conn = SqliteConnection::establish(":memory:")?;
//! diesel_inbox::run_pending_migrations(&mut conn)?;
//! diesel::sql_query("CREATE TABLE balances (account TEXT PRIMARY KEY, cents BIGINT NOT NULL)")
//!     .execute(&mut conn)?;
//! diesel::sql_query("INSERT INTO balances VALUES ('alice', 0)").execute(&mut conn)?;
//!
//! let credit = |tx: &mut SqliteConnection| {
//!     diesel::sql_query("UPDATE balances SET cents = cents + 500 WHERE account = 'alice'")
//!         .execute(tx)
//! };
//! // The broker delivers the same event twice: the effect runs once.
//! let first = with_inbox(&mut conn, "payment-7f3a", credit)?;
//! let second = with_inbox(&mut conn, "payment-7f3a", credit)?;
//! assert!(first.is_processed());
//! assert!(matches!(second, Outcome::Duplicate(ref d) if d.deliveries() == Some(2)));
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Guarantees
//!
//! - One effect per `(consumer, event_id)` whatever the interleaving of deliveries across
//!   connections, processes and machines. Contention is retried inside the library with a
//!   bounded, jittered backoff ([`RetryPolicy`]).
//! - A handler that returns an error or panics leaves neither its effect nor an inbox row;
//!   the next delivery runs it again. A panic rolls back before it continues unwinding. The
//!   failure is recorded, and after [`Inbox::max_attempts`] failures the event is
//!   dead-lettered: later deliveries skip it until ops redrive, discard or release it
//!   ([`DeadLetters`](dead_letter::DeadLetters)).
//! - A [`Delivery`] with a payload is fingerprinted: the same id with a different payload is
//!   [`Error::PayloadMismatch`], not a silent duplicate.
//! - A handler that swallows a failed statement is not reported as processed when the database
//!   has aborted its transaction ([`Error::TransactionAborted`]).
//! - The handler's own error comes back unchanged, even when its session died under it. A
//!   connection lost before the commit is [`Error::ConnectionLost`] (nothing committed); one
//!   lost during the commit is [`Error::CommitUnknown`] (redelivering is safe: the inbox
//!   answers `Duplicate` if it applied). [`Error::from_diesel`] finds them inside a
//!   [`diesel::result::Error`](https://docs.rs/diesel/2/diesel/result/enum.Error.html).
//! - Inside a transaction the caller already holds, the inbox runs as a savepoint and the
//!   caller's commit decides.
//! - Ids are compared byte for byte on every backend ([`EventId`]).
//!
//! Not guaranteed: side effects a handler makes outside the database (emails, HTTP calls,
//! messages to other systems) happen again whenever the transaction rolls back and the event
//! is redelivered. Run those under a claim instead.
//!
//! # Side effects outside the database
//!
//! A rollback cannot unsend an email. [`Claims`](claim::Claims) commit a claim on the event before
//! the side effect runs outside any transaction, and its completion, with the result, after. A
//! duplicate gets the stored result; a concurrent delivery sees the claim [in
//! progress](claim::ClaimOutcome::InProgress). A crash between the two leaves the claim [in
//! doubt](claim::ClaimOutcome::InDoubt): never run again on its own, visible, and resolved by ops
//! ([`Claims::resolve`](claim::Claims::resolve)).
//! [`InDoubtPolicy::RerunAfterLease`](claim::InDoubtPolicy::RerunAfterLease) re-runs it instead,
//! with a stable [idempotency key](claim::Claim::idempotency_key) the downstream service
//! deduplicates.
//!
//! # The producer side: a transactional outbox
//!
//! [`Outbox::enqueue`](outbox::Outbox::enqueue) writes an [`Envelope`](envelope::Envelope) (a
//! UUIDv7 id, the aggregate, the event type and schema version, when, who, the trace context,
//! headers and payload) with one INSERT in the caller's transaction, an inbox effect's included:
//! the business writes and the event commit together or not at all. A [`Relay`](outbox::Relay)
//! publishes the committed rows through a [`Publisher`](outbox::Publisher) or an
//! [`AsyncPublisher`](outbox::AsyncPublisher), in order per aggregate, and marks them; several
//! relays share the work, a failing publish is retried with backoff, and a poison row is failed
//! with its reason while the rows after it go on. The relay publishes at least once; the broker's
//! dedup window (JetStream's `Nats-Msg-Id`, set by the `diesel-inbox-nats` package's
//! `JetStreamPublisher`) and the consumers' inbox absorb repeats. Consumers read an envelope back
//! ([`Envelope::from_message`](envelope::Envelope::from_message)), hand it to the inbox as the
//! delivery, and check its version against the [`SchemaVersions`](envelope::SchemaVersions) they
//! accept: an unknown version is dead-lettered, never a crash loop.
//!
//! # Ordered streams
//!
//! Where the broker numbers messages once (Kafka offsets, JetStream stream sequences), a
//! [`Cursor`](cursor::Cursor) dedupes with one row per stream: a sequence at or below the watermark
//! is [`Outcome::Duplicate`], the next one costs one update, and a jump is processed and recorded
//! in the gap ledger ([`Gaps`](cursor::Gaps), [`Outcome::ProcessedAfterGap`]). Late arrivals fill
//! gaps; the broker's first available sequence turns a cursor behind it into an evicted gap, never
//! a silent reset. [`Cursor::acquire`](cursor::Cursor::acquire) fences zombies with an epoch, and
//! [`Cursor::resume`](cursor::Cursor::resume) says where to seek the broker.
//!
//! # Chains and reorgs
//!
//! A block height is not such a number: a reorg gives it to another block. A
//! [`chain::Chain`] (from [`Inbox::chain`]) keeps a stream's recent blocks by hash and parent
//! hash, finds forks, reverts the effects of orphaned blocks' events exactly once through the
//! app's [`chain::ChainHandler`], in the transaction that rewinds the stream, records every
//! fork in a ledger ([`chain::Reorgs`]), and refuses a fork below the finalized height.
//!
//! # Replaying events
//!
//! Rebuilding a projection, backfilling a consumer or re-running a range a bad deploy
//! mishandled is a governed operation: [`replay::Replays`] records a replay's bounded range,
//! reason, schema interpretation, target and expectation; runs it through the target
//! consumer's inbox in resumable, fenced batches with side effects suppressed; reconciles it
//! (every input's inbox row, the counts, a digest of the input re-read, the app's own
//! reports); and accepts it only when the evidence matches, or on an override with a reason.
//!
//! # Backends
//!
//! Cargo features `postgres`, `sqlite` and `mysql` (MySQL and MariaDB) enable
//! [`InboxConnection`] for `PgConnection`, `SqliteConnection`, `MysqlConnection` and r2d2
//! pooled connections of them. On SQLite, set up each connection with [`SqliteSetup`]. The
//! `async` feature adds the async flavour on diesel-async, `asynch`: the same inbox on
//! `AsyncPgConnection`, `AsyncMysqlConnection` and `SyncConnectionWrapper<SqliteConnection>`,
//! with async closures for handlers.
//!
//! # Packages
//!
//! Beside this crate, the workspace ships what an app adds only when it needs it:
//! `diesel-inbox-test`, a dev-dependency with helpers that prove a handler idempotent in a
//! unit test (throwaway databases, inbox assertions, a delivery harness, fault injection and
//! randomized delivery schedules); `diesel-inbox-nats`, JetStream for the outbox relay and
//! replays; and `diesel-inbox-cli`, the ops tool.
//!
//! # Operating it
//!
//! - **Retention**: [`Inbox::prune`] removes processed rows older than the consumer's [redelivery
//!   window](Inbox::redelivery_window), in short batches, one runner at a time
//!   ([`Retention`](retention::Retention)).
//! - **Stats**: [`Inbox::stats`] and [`Stats::all`](retention::Stats::all) read what each consumer
//!   processed, skipped and failed, in total and over a recent window.
//! - **Metrics**: the `metrics` feature records deliveries, their durations, failed attempts, dead
//!   letters, contention retries and pruned rows through the [`metrics`](https://docs.rs/metrics)
//!   facade, for whatever exporter the application installs (`describe_metrics` lists them).
//! - **Health**: [`doctor::check`] says whether the schema is applied and current and the backend
//!   set up as the inbox needs.
//! - **The ops CLI**: `cargo install diesel-inbox-cli` installs `diesel-inbox`: stats, dead letters
//!   (list, show, export, discard, release), gaps (list, resolve), claims (list, show, resolve),
//!   the outbox (list, show, retry, prune), reorgs, replays (plan, run, reconcile, accept and the
//!   rest), prune, doctor and the migrations (`diesel-inbox --help`).
//!
//! # Errors
//!
//! Handlers return their own `Result<T, E>` with `E: `[`HandlerError`]: `From<`[`Error`]`>`, so the
//! handler's error comes back unchanged and the inbox's own errors travel the same way; `Display`,
//! so a failure can be recorded with its message; and optional accessors for the Diesel error
//! inside (contention is retried, never counted) and the inbox error inside.
//! [`diesel::result::Error`](https://docs.rs/diesel/2/diesel/result/enum.Error.html) implements it,
//! so handlers returning
//! [`diesel::QueryResult`](https://docs.rs/diesel/2/diesel/result/type.QueryResult.html) work as
//! they are. A handler marks a failure permanent ([`Error::permanent`]: dead-lettered at once) or
//! transient ([`Error::transient`]: redelivered, never counted); the default counts it toward
//! [`Inbox::max_attempts`].
//!
//! [`Error`] holds only what a delivery can meet. The operations around the deliveries (dead
//! letters, the gap and claims ledgers, the outbox's rows and relay, pruning, migrations)
//! return [`AdminError`]: their own refusals, and [`AdminError::Inbox`] for the database's and
//! the inbox's errors they meet on the way.
//!
//! # Reading results
//!
//! An [`Outcome`] is asked, not matched on one variant: [`Outcome::is_processed`] and
//! [`Outcome::processed`] cover a cursor's [`Outcome::ProcessedAfterGap`] too. The records an
//! operator lists are plain data with public fields: [`DeadLetter`](dead_letter::DeadLetter),
//! [`ClaimRecord`](claim::ClaimRecord), [`OutboxRecord`](outbox::OutboxRecord),
//! [`Gap`](cursor::Gap), [`Stats`](retention::Stats), [`doctor::Check`]. Values that interpret what
//! is stored answer through methods: [`Duplicate`], [`DeadLettered`],
//! [`Position`](cursor::Position) (whose watermark tells a fresh stream from one whose first
//! sequence is in a gap), [`Claim`](claim::Claim) and [`Lease`](cursor::Lease) (which act on the
//! row they hold).
//!
//! # What to ack
//!
//! [`Ack::of`]`(&result)` tells a broker loop what to do with the message, for every
//! [`Outcome`] and every [`Error`]: [`Ack::Ack`] for processed, duplicate, dead-lettered and a
//! recorded payload conflict; [`Ack::Redeliver`] when nothing was committed or the commit's
//! outcome is unknown; [`Ack::Reject`] for an id that can never be valid or a permanent
//! failure the inbox could not dead-letter itself.

// Without a backend feature the crate compiles (for docs and checks) but has nothing to run.
#![cfg_attr(
    not(any(feature = "postgres", feature = "sqlite", feature = "mysql")),
    allow(dead_code, unused_imports, unused_macros)
)]

mod ack;
#[cfg(feature = "async")]
pub mod asynch;
mod audit;
mod backend;
mod batch;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod capabilities;
pub mod chain;
mod check;
pub mod claim;
mod class;
pub mod cursor;
pub mod dead_letter;
mod decide;
mod delivery;
mod dialect;
pub mod doctor;
mod duration;
mod engine;
pub mod envelope;
mod error;
mod handler_error;
mod id;
mod inbox;
#[cfg(test)]
mod layers;
pub mod migrations;
pub mod multi;
mod names;
mod observe;
pub mod outbox;
mod outcome;
#[cfg(feature = "tokio")]
pub mod pool;
pub mod redact;
pub mod replay;
pub mod retention;
mod retry;
mod rows;
pub mod schema;
mod sql;
mod state;
mod tables;

pub use ack::{Ack, AckOutcome};
pub use audit::Audit;
pub use backend::InboxConnection;
#[cfg(feature = "sqlite")]
pub use backend::SqliteSetup;
pub use delivery::{Delivery, IntoDelivery, Payload};
pub use error::{AdminError, Error};
pub use handler_error::{FailureKind, HandlerError};
pub use id::{EventId, IntoEventId, InvalidEventId, MAX_EVENT_ID_BYTES};
pub use inbox::{with_inbox, Inbox, InboxRecord};
pub use migrations::run_pending_migrations;
pub use names::{InvalidConsumerName, DEFAULT_CONSUMER, MAX_CONSUMER_BYTES};
#[cfg(feature = "metrics")]
pub use observe::describe_metrics;
pub use outcome::{DeadLettered, Duplicate, Outcome};
pub use retry::RetryPolicy;
pub use state::{CorruptRow, UnknownState};
