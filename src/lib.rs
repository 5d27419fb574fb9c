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
//! # How it works
//!
//! [`with_inbox`]`(conn, event_id, |tx| effect)`:
//!
//! 1. validates the id (non-empty, at most 255 bytes, no NUL) before any SQL;
//! 2. opens a transaction on your connection (`BEGIN IMMEDIATE` on SQLite);
//! 3. inserts `(consumer, event_id)` into `diesel_inbox_events`, whose primary key is exactly
//!    that pair; on a conflict the existing row's `deliveries` and `last_seen_at` are updated
//!    instead;
//! 4. runs the effect only if the row is new, on the same connection in the same transaction;
//! 5. commits both together and returns [`Outcome::Processed`]`(value)`, or
//!    [`Outcome::Duplicate`] with when the event was first processed and how many deliveries it
//!    has seen ([`Duplicate::processed_at`], [`Duplicate::deliveries`]).
//!
//! [`Inbox::new`]`("billing.rewards")?.`[`process`](Inbox::process)`(conn, id, effect)` does the
//! same for a named consumer; each consumer keeps its own record, so two consumers of one event
//! both process it once.
//!
//! [`Inbox::process_batch`] takes many deliveries in one transaction: one statement records
//! every id and learns which are new, the effect runs for the new ones only, and one commit
//! settles them all; it returns one result per delivery, in order. When an effect fails, the
//! batch is rolled back and run again with a savepoint per event, so that event alone is rolled
//! back (and recorded as a failure) and the others commit; effects may therefore run more than
//! once inside transactions that roll back, never in one that commits.
//! [`Inbox::process_bulk`] calls the effect once, with all the batch's new deliveries, so that
//! it can write them in one statement (a multi-row `INSERT`); when that call fails, the batch
//! runs again with one call per new event, each in a savepoint, and only the failing ones roll
//! back.
//!
//! What a delivery sends to the server, and what it costs against the bare transaction, is the
//! repository's `docs/performance.md`.
//!
//! # Guarantees
//!
//! - **One effect per `(consumer, event_id)`**, whatever the interleaving of deliveries across
//!   threads, connections, processes and machines: the unique key decides. Contention the
//!   database raises for it (serialization failures, deadlocks, lock-wait timeouts, a busy
//!   SQLite) rolls back and retries the whole transaction with a bounded, jittered backoff
//!   ([`RetryPolicy`], default 10 retries from 5 ms up to 500 ms); only when the retries run
//!   out does the caller see an error. The effect may therefore run more than once *inside
//!   transactions that roll back*; it is an `FnMut`. Contention met by the effect's own
//!   statements is retried the same way, and never counts as a failed attempt: a deadlock
//!   between two healthy handlers ends `Processed` for both, even with `max_attempts(1)`.
//! - **Failures leave no trace.** A handler that returns an error or panics leaves neither its
//!   effect nor an inbox row, and the next delivery runs it again. A panic rolls back before
//!   it continues unwinding, so neither a bare nor a pooled connection is left inside a
//!   transaction. The failure is recorded, and after [`Inbox::max_attempts`] failures the event
//!   is dead-lettered: later deliveries skip it until ops redrive, discard or release it
//!   ([`dead_letter`]).
//! - **No false success.** A handler that swallows a failed statement on PostgreSQL (which
//!   turns the `COMMIT` into a silent rollback), or whose transaction the database rolled back
//!   behind it (a MySQL deadlock), gets [`Error::TransactionAborted`] or a database error,
//!   never `Processed`.
//! - **No effect outside the transaction.** A statement the handler runs after the database
//!   ended its transaction (a deadlock it swallowed, a Galera brute-force abort) takes no
//!   effect: on PostgreSQL the aborted transaction refuses it, on MariaDB it runs inside the
//!   fence ([`doctor`], "Beyond one server") and is rolled back. SQLite, whose writers never
//!   deadlock, ends a transaction under a statement only on I/O errors, a full disk or a
//!   trigger's `RAISE(ROLLBACK)`; a handler that swallows one of those and writes on
//!   autocommits.
//! - **Errors that tell the truth.** The handler's own error always comes back unchanged, even
//!   when its session died under it. A connection lost before the commit is
//!   [`Error::ConnectionLost`]: nothing was committed, redeliver. A connection lost *during*
//!   the commit is [`Error::CommitUnknown`]: the commit may or may not have applied, and
//!   redelivering is safe, because if it applied the inbox answers `Duplicate`. Handlers that
//!   return `diesel::result::Error` get these wrapped in it, and [`Error::from_diesel`] gets
//!   them back.
//! - **Nesting.** Inside a transaction you already hold, the inbox runs as a savepoint and
//!   *your* commit decides: roll back and the event was not processed. Nested calls do not
//!   retry contention, because only your outer transaction can be run again.
//! - **Payloads are fingerprinted.** A [`Delivery`] with a payload is fingerprinted: the same
//!   id with a different payload is [`Error::PayloadMismatch`], not a silent duplicate.
//! - **One effect per sequence of a stream**, with a [cursor]: the cursor row, locked
//!   for the transaction, decides, and the advance commits with the effect. Skipped and evicted
//!   sequences are recorded as gaps, never silently reset. A fenced instance commits nothing.
//! - **One effect per event on a chain's canonical branch, none for an orphaned one**, with a
//!   [chain cursor](chain): a reorg's reverts commit with the rewind, once per event, and a fork
//!   below the finalized height commits nothing.
//! - **At most once for side effects outside the database**, with a [claim]: the claim
//!   commits before the side effect, the completion with its result. Concurrent deliveries run
//!   it once; a crash between the two leaves the claim in doubt, visible and resolved by ops,
//!   never run again on its own (unless the consumer opts into re-running it with the same
//!   idempotency key, for a service that deduplicates it).
//! - **No lost event on the producer side**, with the [outbox]: an enqueued event
//!   commits with the business writes or not at all, and every committed one is published at
//!   least once, across relay crashes and restarts, in enqueue order per aggregate, also when
//!   producers in several processes enqueue for one aggregate at once; a row that fails for
//!   good is kept, with its reason, for ops.
//! - **One effect per event in a replay's target, and a record of the replay**
//!   ([`replay`]): each event's effect commits with the replay's checkpoint; side effects are
//!   suppressed unless the plan allows them; a replay is accepted only on evidence that matches
//!   its plan, or by an override with a reason.
//! - **Identity is the id, byte for byte**, on every backend ([`EventId`]): ids differing by
//!   case, accents, trailing spaces or Unicode normal form are different events. A `Uuid` is
//!   stored in its lowercase hyphenated form.
//! - **Observable.** Each call runs in a `tracing` span `inbox` with `consumer` and
//!   `event_id`; processed deliveries log at debug, duplicates at info with their delivery
//!   count, contention retries at debug. Failures, dead letters and exhausted retries log at
//!   warn or error and carry `consumer` and `event_id` as fields of their own, so they keep them
//!   at `RUST_LOG=warn`, where the span is filtered out. A SQLite connection without a busy
//!   timeout is named once, at warn, with [`SqliteSetup`] as the fix. Diesel's own
//!   instrumentation sees the inbox's top-level `BEGIN` and `COMMIT` as queries rather than as
//!   transaction events: the inbox sends them itself.
//!
//! # Not guaranteed
//!
//! - **Side effects made inside a handler.** An email sent or an HTTP call made from inside an
//!   inbox handler happens again whenever the transaction rolls back (handler error, contention
//!   retry, crash before commit) and the event is redelivered. Only writes through the given
//!   connection are exactly-once. Run such side effects under a [claim] instead.
//! - **Exactly once for a service that keeps no key.** No order of "record" and "act" survives
//!   every crash: a worker that dies after the side effect and before its completion leaves the
//!   claim in doubt, and the crate holds it for ops rather than guess. Once, rather than at most
//!   once, needs the service to deduplicate the claim's idempotency key, and holds only within
//!   the window it keeps keys for.
//! - **Side effects a replayed handler makes on its own.** A replay suppresses the enqueues and
//!   claims made through its [`Replayed`](replay::Replayed); an email sent directly from a
//!   replay handler happens in a replay as it would live.
//! - **Effects acknowledged before a failover to an asynchronous standby.** A standby that did
//!   not confirm a commit before its promotion lacks it: the effect and its inbox row are gone,
//!   though the event was acked. Exactly once across a failover needs synchronous replication
//!   ([`doctor`], "Beyond one server").
//! - **Clocks.** Claims' leases, the relay's leases and backoff run on each worker's clock:
//!   skewed clocks move the instant a claim counts as in doubt, and a relay's clock ahead by
//!   more than the lease takes over another relay's live rows (published twice). Keep clocks in
//!   sync and leases well above the side effect's timeout.
//! - **A lapsed claim no delivery comes for** is listed in doubt and counted by the
//!   `diesel_inbox_claims_in_doubt` gauge when [`Claims::in_doubt`](claim::Claims::in_doubt)
//!   runs (call it from a health check), but logged and counted as a transition only when a
//!   delivery records it.
//! - **Publishing exactly once.** The relay publishes at least once: a relay that dies between
//!   a publish and its mark, or a lease that runs out mid-publish, sends the event again. The
//!   broker's dedup window drops repeats inside it; consumers' inboxes absorb the rest. A failed
//!   row lets the rows after it go on: ops retrying it later publish it after them.
//! - **Delivery.** The inbox does not acknowledge messages; ask [`Ack::of`] after the call
//!   returns, and ack, redeliver or reject accordingly.
//! - **Redeliveries later than the window.** Retention removes inbox rows older than the
//!   consumer's redelivery window; a redelivery after that runs the effect again. A failure
//!   record stays in state `retrying` after the event later succeeds, until retention removes
//!   it with the event.
//! - **Sequences of a resolved gap.** Resolving a gap gives its sequences up: one arriving later
//!   is a duplicate. The gap ledger keeps every gap; retention does not prune it.
//! - **Nested calls record no failures.** Inside your own transaction the inbox cannot write a
//!   failure record that would outlive your rollback, so failures there are not counted.
//! - **Isolation of your outer transaction.** With SQLite, nest the inbox in an *immediate*
//!   transaction (`SqliteConnection::immediate_transaction`); a deferred one may fail to
//!   upgrade to a writer under concurrency.
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
//! pooled connections of them; an app's `#[derive(diesel::MultiConnection)]` enum runs the
//! inbox through [`multi::on_variant!`]. On SQLite, set up each connection with
//! [`SqliteSetup`] (WAL, a busy timeout). PostgreSQL databases must use the UTF8 encoding (the
//! default); ids are `TEXT COLLATE "C"` there and `VARBINARY` on MySQL, so no collation merges
//! two ids. The `async` feature adds the async flavour on diesel-async, [`asynch`]: the same
//! inbox on `AsyncPgConnection`, `AsyncMysqlConnection` and
//! `SyncConnectionWrapper<SqliteConnection>`, with async closures for handlers; the `tokio` and
//! `deadpool` features run sync Diesel from async services through a [`pool::BlockingPool`].
//!
//! ```no_run
//! # #[cfg(all(feature = "postgres", feature = "sqlite", feature = "mysql"))] {
//! use diesel::prelude::*;
//! use diesel::r2d2::{ConnectionManager, Pool};
//! use diesel_inbox::{with_inbox, Error, InboxConnection, SqliteSetup};
//!
//! /// Your handler, on any backend: its writes through `tx` commit with the inbox row, or not
//! /// at all. `InboxConnection` is the one bound it needs to run `sql_query` and untyped DSL.
//! fn effect<C: InboxConnection>(tx: &mut C) -> Result<(), Error> {
//!     diesel::sql_query("UPDATE accounts SET points = points + 5 WHERE id = 42").execute(tx)?;
//!     Ok(())
//! }
//!
//! // PostgreSQL
//! let mut conn = PgConnection::establish("postgres://app@db/app")?;
//! diesel_inbox::run_pending_migrations(&mut conn)?;
//! let _outcome = with_inbox(&mut conn, "evt-1", |tx| effect(tx))?;
//!
//! // SQLite
//! let mut conn = SqliteConnection::establish("app.db")?;
//! SqliteSetup::default().apply(&mut conn)?;
//! diesel_inbox::run_pending_migrations(&mut conn)?;
//! let _outcome = with_inbox(&mut conn, "evt-1", |tx| effect(tx))?;
//!
//! // MySQL / MariaDB, through an r2d2 pool
//! let pool = Pool::new(ConnectionManager::<MysqlConnection>::new("mysql://app@db/app"))?;
//! let mut conn = pool.get()?;
//! diesel_inbox::run_pending_migrations(&mut conn)?;
//! let _outcome = with_inbox(&mut conn, uuid::Uuid::now_v7(), |tx| effect(tx))?;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A generic handler that binds values or loads typed rows needs Diesel's bounds for that query
//! (`where UncheckedBind<SqlQuery, i64, BigInt>: ExecuteDsl<C>`, as rustc suggests): Rust
//! cannot imply them from one trait. An app that runs one code path on several backends has
//! Diesel's answer, a `MultiConnection` enum: see [`multi`].
//!
//! The `mysql` backend is tested against MariaDB 10.11. Oracle MySQL lacks MariaDB's
//! `@@in_transaction` and its compound statements outside stored programs, so there the inbox
//! cannot tell when a deadlock that a handler swallowed has ended its transaction, and sends a
//! delivery's `BEGIN`, upsert and `COMMIT` one by one (it logs a warning once); and the third
//! migration's `CREATE INDEX IF NOT EXISTS` is MariaDB syntax: on MySQL 8, install the
//! migrations ([`migrations::install`]) and drop `IF NOT EXISTS` from that file. Everything else
//! is the same SQL. Replicated engines (Galera, a PostgreSQL standby) and poolers (PgBouncer)
//! are [`doctor`]'s chapter.
//!
//! # Packages
//!
//! Beside this crate, the workspace ships what an app adds only when it needs it:
//! `diesel-inbox-test`, a dev-dependency with helpers that prove a handler idempotent in a
//! unit test (throwaway databases, inbox assertions, a delivery harness, fault injection and
//! randomized delivery schedules); `diesel-inbox-nats`, JetStream for the outbox relay and
//! replays; and `diesel-inbox-cli`, the ops tool.
//!
//! # Features and build cost
//!
//! The backends and `async`, `tokio`, `deadpool`, `anyhow`, `eyre` and `metrics` add what their
//! names say; the defaults `diesel-migrations` (the migrations as `EmbeddedMigrations`, for an
//! app's own harness: [`migrations`]) and `trace-context` (envelopes carry the current span's
//! `traceparent`: [`envelope`]) can be turned off with `default-features = false`. Always
//! compiled besides Diesel: `chrono` (the timestamps Diesel binds), `serde` and `serde_json`
//! (stored results and envelopes), `sha2` (payload fingerprints, and claims' idempotency keys,
//! which must not change with a feature), `uuid` (envelope ids), `thiserror`, `tracing`,
//! `fastrand`.
//!
//! A clean debug build of a minimal PostgreSQL app, Diesel alone and then with
//! `diesel-inbox = { default-features = false, features = ["postgres"] }`, one after the other
//! in one run on a 2-core machine (the repository's `scripts/build-cost`):
//!
//! | | Diesel alone | with diesel-inbox | added |
//! |---|---|---|---|
//! | before the optional features (every dependency always compiled) | 17.3 s, 24 crates | 36.7 s, 79 crates | +112% |
//! | with them off, run 1 | 16.2 s, 24 crates | 32.0 s, 65 crates | +98% |
//! | with them off, run 2 | 18.4 s, 24 crates | 32.2 s, 65 crates | +75% |
//!
//! What remains is diesel-inbox itself, about 9.5 s compiled after Diesel (of which about 6.5 s
//! is type-checking: the statements and transaction bodies are generic over both flavours and
//! all three backends), and the second `syn` that `thiserror`'s derive needs.
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
//! # Metrics
//!
//! With the `metrics` feature the inbox records through the
//! [`metrics`](https://docs.rs/metrics) facade, to whatever exporter the application installs
//! (Prometheus and others). Call `describe_metrics()` once after installing the recorder.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `diesel_inbox_deliveries_total` | `consumer`, `outcome` | deliveries by what the caller got: `processed`, `duplicate`, `dead_lettered`, `payload_conflict`, `failed`, `error` |
//! | `diesel_inbox_delivery_duration_seconds` | `consumer`, `outcome` | histogram of a delivery's time, retries included |
//! | `diesel_inbox_failed_attempts_total` | `consumer` | failed attempts the failure policy counted |
//! | `diesel_inbox_dead_lettered_total` | `consumer` | events dead-lettered |
//! | `diesel_inbox_contention_retries_total` | `consumer` | transactions rolled back and run again for contention |
//! | `diesel_inbox_pruned_rows_total` | `consumer`, `table` | rows retention removed |
//! | `diesel_inbox_gaps_total` | `consumer`, `cause` | gaps cursors found: `skipped`, or `evicted` (an outage outlasted the broker's retention: page on it) |
//! | `diesel_inbox_gap_sequences_total` | `consumer`, `cause` | sequences missing in those gaps |
//! | `diesel_inbox_reorgs_total` | `consumer` | reorgs chain cursors undid |
//! | `diesel_inbox_reorg_blocks_total` | `consumer` | blocks those reorgs orphaned |
//! | `diesel_inbox_reorg_events_reverted_total` | `consumer` | events whose effect a reorg reverted |
//! | `diesel_inbox_reorgs_refused_total` | `consumer` | blocks refused for forking at or below the finalized height: page on it |
//! | `diesel_inbox_replay_events_total` | `consumer`, `outcome` | events replays settled, by target consumer: `processed`, `duplicate`, `failed`, `dead_lettered`, `skipped`, `would_run` |
//! | `diesel_inbox_claim_transitions_total` | `consumer`, `state` | claims entering a state: `in_progress`, `completed`, `released`, `abandoned`, `in_doubt` (page on it) |
//! | `diesel_inbox_claims_fenced_total` | `consumer` | writes of a claim's former holder refused |
//! | `diesel_inbox_claims_in_doubt` | `consumer` | gauge: claims in doubt when `Claims::in_doubt` last read them |
//! | `diesel_inbox_outbox_enqueued_total` | `topic` | events enqueued (counted at the INSERT: a rollback undoes the row, not the count) |
//! | `diesel_inbox_outbox_published_total` | `topic` | outbox rows the broker accepted |
//! | `diesel_inbox_outbox_publish_failures_total` | `topic`, `outcome` | failed publishes: `retry` or `failed` (kept for ops: page on it) |
//! | `diesel_inbox_outbox_fenced_total` | | rows another relay took over before this one marked them: published twice |
//! | `diesel_inbox_outbox_pending` | | gauge: rows waiting for the relay when `Outbox::stats` last read them |
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
//! [`Inbox::max_attempts`]. With the `anyhow` and `eyre` features, `anyhow::Error` and
//! `eyre::Report` implement it too, and so does `Box<dyn Error + Send + Sync>`.
//!
//! What the failure policy does with a handler's error:
//!
//! | the handler's error | recorded | counts toward `max_attempts` | the call returns | [`Ack::of`] |
//! |---|---|---|---|---|
//! | contention in its statements (serialization failure, deadlock, lock timeout, busy SQLite) | no | no | retried under the [`RetryPolicy`]; if that runs out, the error | `Redeliver` |
//! | a lost connection | no | no | the error | `Redeliver` |
//! | marked transient ([`Error::transient`], or [`FailureKind::Transient`]) | no | no | the error | `Redeliver` |
//! | marked permanent ([`Error::permanent`], or [`FailureKind::Permanent`]) | yes | dead-lettered now | [`Outcome::DeadLettered`] | `Ack` |
//! | anything else (the default) | yes | yes | the error; at the limit [`Outcome::DeadLettered`] | `Redeliver`; `Ack` once dead-lettered |
//!
//! The inbox finds the Diesel error inside `diesel::result::Error`,
//! `Box<dyn Error + Send + Sync>`, `anyhow::Error` and `eyre::Report` by itself, looking along
//! the error's sources, so a context layer hides nothing: contention under `.context(..)` is
//! still retried, and [`Error::permanent`] under it keeps its kind.
//!
//! ```
//! # #[cfg(all(feature = "sqlite", feature = "anyhow"))] {
//! use anyhow::Context;
//! use diesel::prelude::*;
//! use diesel_inbox::Inbox;
//!
//! let mut conn = SqliteConnection::establish(":memory:")?;
//! diesel_inbox::run_pending_migrations(&mut conn)?;
//! diesel::sql_query("CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT)").execute(&mut conn)?;
//! let inbox = Inbox::new("orders")?;
//!
//! let outcome = inbox.process(&mut conn, "order-7", |tx| -> anyhow::Result<()> {
//!     diesel::sql_query("UPDATE accounts SET balance = balance + 1 WHERE id = 7")
//!         .execute(tx)
//!         .context("crediting order 7")?;
//!     Ok(())
//! })?;
//! assert!(outcome.is_processed());
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! An error type of your own says what it carries by implementing [`HandlerError`]; every
//! method has a default:
//!
//! ```
//! use diesel_inbox::{Error, FailureKind, HandlerError};
//!
//! #[derive(Debug, thiserror::Error)]
//! enum OrderError {
//!     #[error(transparent)]
//!     Db(#[from] diesel::result::Error),
//!     #[error(transparent)]
//!     Inbox(#[from] Error),
//!     #[error("unknown order {0}")]
//!     UnknownOrder(u64),
//! }
//!
//! impl HandlerError for OrderError {
//!     fn diesel_error(&self) -> Option<&diesel::result::Error> {
//!         match self {
//!             OrderError::Db(error) => Some(error),
//!             _ => None,
//!         }
//!     }
//!     fn inbox_error(&self) -> Option<&Error> {
//!         match self {
//!             OrderError::Inbox(error) => Some(error),
//!             _ => None,
//!         }
//!     }
//!     fn failure_kind(&self) -> FailureKind {
//!         match self {
//!             OrderError::UnknownOrder(_) => FailureKind::Permanent, // no retry will find it
//!             _ => FailureKind::Counted,
//!         }
//!     }
//! }
//! ```
//!
//! Contention is redelivered without limit by the inbox: when it never clears (a handler that
//! writes through a second connection to rows or a SQLite file its own transaction holds, a row
//! a stuck session keeps locked), the broker's own redelivery limit is what stops it, and the
//! warn-level log line `handler failed on contention` says which event. In
//! [`Inbox::process_batch`], contention in one event's effect while the batch runs event by
//! event (after another event failed) comes back as that event's error, unretried and
//! uncounted.
//!
//! [`Error`] holds only what a delivery can meet. The operations around the deliveries (dead
//! letters, the gap and claims ledgers, the outbox's rows and relay, pruning, migrations)
//! return [`AdminError`]: their own refusals, and [`AdminError::Inbox`] for the database's and
//! the inbox's errors they meet on the way, so `?` carries an [`Error`] into it. Reads that can
//! only fail on the database (`list`, `stats`) return [`Error`].
//!
//! A row whose state this version cannot read (edited by hand, or written by a newer version),
//! or whose stored event id is not a valid one, is never left out of a listing: the listing
//! returns a [`CorruptRow`] error in its place, naming the table, key, column and text, and
//! its key is where the next page starts. A delivery of its
//! event is `Ack::Reject`: redelivering would read the same row forever. A cursor whose stream
//! has a gap row it cannot read rejects its deliveries the same way: the watermark cannot be
//! known without it.
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
pub mod flavour;
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
pub use inbox::{with_inbox, InboxRecord};

/// The inbox for one consumer, on sync Diesel connections: the one configuration type,
/// [`flavour::Inbox`], in the [`Blocking`](flavour::Blocking) flavour. `asynch::Inbox` is the
/// same type for diesel-async's connections, with the same builders.
pub type Inbox = flavour::Inbox<flavour::Blocking>;
pub use migrations::run_pending_migrations;
pub use names::{InvalidConsumerName, DEFAULT_CONSUMER, MAX_CONSUMER_BYTES};
#[cfg(feature = "metrics")]
pub use observe::describe_metrics;
pub use outcome::{DeadLettered, Duplicate, Outcome};
pub use retry::RetryPolicy;
pub use state::{CorruptRow, UnknownState};
