//! Retention: pruning the inbox rows of events settled long ago (see [`Retention`]), and the
//! stats that read what it prunes.
//!
//! The inbox table grows by one row per event. [`Inbox::prune`] removes the rows no broker can
//! redeliver any more: processed rows of the consumer whose first *and* latest delivery are
//! both older than the age you give, with the failure records and history of exactly those
//! events, hourly counters of hours before it, and claims completed or abandoned before it.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use std::time::Duration;
//! use diesel::prelude::*;
//! use diesel_inbox::{retention::Retention, Inbox};
//!
//! let mut conn = SqliteConnection::establish(":memory:")?;
//! diesel_inbox::run_pending_migrations(&mut conn)?;
//! let day = Duration::from_secs(24 * 60 * 60);
//! // The longest a redelivery can take: the worst outage plus the broker's retention.
//! let orders = Inbox::new("orders")?.redelivery_window(7 * day);
//!
//! let would = orders.prune(&mut conn, &Retention::older_than(30 * day).dry_run(true))?;
//! let pruned = orders.prune(&mut conn, &Retention::older_than(30 * day).batch_size(1_000))?;
//! println!("{} events would go, {} went; longest lock {:?}", would.events, pruned.events, pruned.longest_batch);
//! assert!(orders.prune(&mut conn, &Retention::older_than(day)).is_err()); // below the window
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - **Size the window for the worst realistic outage, not the average one**: the longest the
//!   consumer can be down, plus how long the broker keeps and redelivers unacknowledged
//!   messages, plus a margin. A redelivery that arrives after its row was pruned is new to the
//!   inbox, and **its effect runs again**. Declare it with [`Inbox::redelivery_window`] (7 days
//!   unless declared); a prune of anything younger is refused
//!   (`AdminError::RetentionBelowWindow`).
//! - **Never removed**: dead-lettered and discarded events (their rows hold deliveries back),
//!   events whose failures have not settled, claims in progress, in doubt or released, other
//!   consumers' rows, and anything delivered within the window, however old its first
//!   delivery.
//! - **Safe beside live deliveries**: bounded batches (1,000 rows unless
//!   [`batch_size`](Retention::batch_size) says otherwise), each a short transaction that locks
//!   the rows it is about to delete (on MySQL/MariaDB at READ COMMITTED, so not the index gaps
//!   around them), deletes them in key order, re-checking that no delivery came meanwhile, and
//!   retries contention. A delivery of a row in the batch waits for it;
//!   [`Pruned::longest_batch`] is the longest any batch held its locks. SQLite's writer lock
//!   holds every writer for a batch.
//! - **One runner at a time**: a PostgreSQL advisory lock and `GET_LOCK` on MySQL/MariaDB, each
//!   per database: a second prune is refused at once (`AdminError::PruneRunning`). On a Galera
//!   node, where `GET_LOCK` is the node's own, a lease row as well, which the whole cluster sees
//!   ([`crate::doctor`], "Beyond one server"). On SQLite the writer lock serialises the batches,
//!   so two prunes interleave harmlessly.
//! - **Cheap selection**: the index `diesel_inbox_events_settled (consumer, state,
//!   processed_at, event_id)` hands each batch its candidates in order, without scanning or
//!   sorting the table.
//!
//! # Stats
//!
//! [`Inbox::stats`] says what a consumer has done over a window ([`Stats::all`] does it for
//! every consumer). `totals` are what the tables hold now (rows pruned by retention no longer
//! count): processed events, duplicate deliveries, payload conflicts, failed attempts, dead
//! letters awaiting a decision, discarded dead letters. `recent` covers the window since
//! `recent_since`: processed events from an index range scan of the inbox table, the rest from
//! hourly counters written as the last statement of the transaction that records what they
//! count (deliveries nested in a transaction of yours are not counted there: holding a shared
//! counter row through your transaction would serialise them). Each counter has 16 rows per
//! hour, one picked by event id, so that concurrent deliveries rarely wait on one row; stats
//! sum them. The window is counted in whole hours and never scans the inbox.
//! `oldest_unresolved_failure` is the first failure of the oldest event still needing
//! attention. `totals.unreadable` counts the inbox and failure rows whose state this version
//! cannot read (edited by hand, or written by a newer version) instead of failing the stats,
//! and `recent.unreadable` the hourly counters of a kind this version does not know.
//!
//! The stats read what retention prunes, with the same area's statements: `stats.rs`, and on
//! async connections `asynch/stats.rs`. The area's statements and
//! rows for every backend are `sql.rs`.

pub(crate) mod sql;
pub(crate) mod stats;

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tracing::{debug, info, warn, Instrument};

use crate::decide::{Failure, Scope};
use crate::duration;
use crate::engine::{self, run_ready, Body, Open};
use crate::observe;
use crate::sql::{Blocking, Db, Sql, TransactionSql};
use crate::{AdminError, Error, Inbox, InboxConnection};
use sql::{PruneCursor, RetentionSql};

pub use stats::{Counts, Stats};

/// Rows per batch unless [`Retention::batch_size`] says otherwise.
const DEFAULT_BATCH_SIZE: NonZeroU32 = NonZeroU32::new(1000).expect("not zero");

/// The most rows one batch takes: keeps each statement's bound ids far below every backend's
/// parameter limit, and each batch's locks short.
pub const MAX_PRUNE_BATCH_SIZE: u32 = 10_000;

/// [`MAX_PRUNE_BATCH_SIZE`], as the type batch sizes are kept in.
const MAX_BATCH_SIZE: NonZeroU32 = NonZeroU32::new(MAX_PRUNE_BATCH_SIZE).expect("not zero");

/// The lease a prune holds where its lock is local to a node: its row in
/// `diesel_inbox_leases`.
const PRUNE_LEASE: &str = "prune";

/// How long a prune's lease lasts unless renewed. Every batch renews it, so a prune that died
/// holds back the next one for at most this long.
pub const PRUNE_LEASE_TERM: Duration = Duration::from_secs(60);

/// What to prune: rows older than an age, in batches of a size, or only count them. Pruning
/// keeps the inbox table the size of the redelivery window instead of growing forever.
///
/// An inbox row is what makes a redelivery a duplicate. Once no broker can deliver an event
/// again, its row is dead weight, and [`Inbox::prune`] removes it. The one thing to size is
/// *how late a redelivery can come*: declare it per consumer with
/// [`Inbox::redelivery_window`] (7 days unless declared), and prune with an age at least that
/// long ([`Retention::older_than`]); a shorter age is refused with
/// [`AdminError::RetentionBelowWindow`] before any SQL runs.
///
/// # Sizing the window
///
/// Size it for the worst realistic outage, not the average one: the longest the consumer can
/// be down (a weekend, a stuck deploy, a region failover), plus how long the broker keeps and
/// redelivers unacknowledged events (its retention or redelivery period), plus a margin. An
/// event redelivered *after* its row was pruned is new to the inbox and **its effect runs
/// again**. Rows cost little; a double effect costs more.
///
/// # What is removed, and what never is
///
/// Removed, for this consumer only: inbox rows in state `processed` whose `processed_at`
/// **and** `last_seen_at` are both older than the cutoff (a row still being redelivered is
/// kept, however old its first delivery), the failure rows and failure history of exactly
/// those events (they failed, then took effect: settled), hourly counters of hours before
/// the cutoff, and [claims](crate::claim::Claims) completed or abandoned before the cutoff (a
/// delivery after that claims the event anew, and runs its side effect again).
///
/// Never removed: dead-lettered and discarded rows (they hold deliveries back: removing one
/// would let the event run), failure rows of events with no inbox row (still retrying), and
/// claims in progress, in doubt or released (they wait for a holder or for ops).
/// Other consumers' rows are untouched.
///
/// # Running it
///
/// Run it from a cron or ops job (the ops CLI calls it), on a connection outside any
/// transaction. It is safe alongside live deliveries: it works in short batches, each its own
/// transaction, which lock only the rows they delete, re-check them in the `DELETE`, and retry
/// contention under the inbox's [`RetryPolicy`](crate::RetryPolicy). A delivery of a row being
/// pruned waits for that batch (milliseconds), then either finds the row (a duplicate, and the
/// row is now too recent to prune) or, if the batch deleted it first, runs as new: exactly the
/// redelivery-after-the-window case above. [`Pruned::longest_batch`] says how long locks were
/// held at most; lower [`Retention::batch_size`] if that is too long for your latency.
///
/// One prune runs at a time; a second one gets [`AdminError::PruneRunning`] at once. On
/// PostgreSQL a prune holds the lease row `prune` of `diesel_inbox_leases`: taken in a
/// transaction of its own, renewed by each batch, deleted at the end, and free again
/// [`PRUNE_LEASE_TERM`] after a prune that died or was dropped. It takes no lock of a session,
/// so it holds behind a pooler in transaction mode (PgBouncer), where a session's lock would
/// be taken on one server connection and released on another. On MySQL/MariaDB a prune holds
/// the named lock `diesel_inbox.prune:` followed by the database name, cut at 64 characters
/// (`GET_LOCK`), released when the prune ends, by error too, and by the server when the
/// session ends; on a Galera node (`wsrep_on`), where `GET_LOCK` holds on that node only, it
/// also holds the lease row, which every node sees. Two nodes writing it at once conflict at
/// certification, and the loser finds the winner's lease: one prune runs in the whole
/// cluster. SQLite needs no lock of its own: its writer lock serialises the batches, so two
/// prunes there interleave harmlessly.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::prelude::*;
/// use diesel_inbox::{retention::Retention, Inbox};
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let day = Duration::from_secs(24 * 60 * 60);
/// let orders = Inbox::new("orders")?.redelivery_window(3 * day);
/// orders.process(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(()))?;
///
/// let would = orders.prune(&mut conn, &Retention::older_than(14 * day).dry_run(true))?;
/// assert_eq!((would.events, would.dry_run), (0, true));
/// let pruned = orders.prune(&mut conn, &Retention::older_than(14 * day))?;
/// assert_eq!(pruned.events, 0, "evt-1 is a few milliseconds old");
/// assert!(orders.prune(&mut conn, &Retention::older_than(day)).is_err(), "below the window");
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use]
pub struct Retention {
    older_than: Duration,
    batch_size: NonZeroU32,
    dry_run: bool,
}

impl Retention {
    /// Prune rows settled and last seen more than `age` ago. It must be at least the inbox's
    /// [`redelivery_window`](Inbox::redelivery_window). Batches of 1000 rows; not a dry run.
    pub fn older_than(age: Duration) -> Self {
        Self {
            older_than: age,
            batch_size: DEFAULT_BATCH_SIZE,
            dry_run: false,
        }
    }

    /// Rows deleted per batch (one short transaction each). Defaults to 1000; more than
    /// [`MAX_PRUNE_BATCH_SIZE`] is lowered to it. Smaller batches hold locks for less time and
    /// take more round trips.
    ///
    /// # Panics
    ///
    /// When `rows` is 0: a prune that can delete nothing is a mistake, not a setting.
    pub fn batch_size(mut self, rows: u32) -> Self {
        let rows = NonZeroU32::new(rows).expect("Retention::batch_size must be at least 1");
        self.batch_size = rows.min(MAX_BATCH_SIZE);
        self
    }

    /// Only count what would be deleted: nothing is deleted, no row is locked and no prune lock
    /// is taken. Defaults to `false`.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }
}

/// What [`Inbox::prune`] deleted (or, in a dry run, would delete).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
#[must_use]
pub struct Pruned {
    /// Inbox rows (processed events).
    pub events: u64,
    /// Failure rows of those events.
    pub failures: u64,
    /// Failure history entries of those events.
    pub history: u64,
    /// Hourly counter rows.
    pub counters: u64,
    /// Completed and abandoned claims.
    pub claims: u64,
    /// Batches that deleted inbox rows, each its own transaction (0 in a dry run).
    pub batches: u64,
    /// The longest transaction, the counters' one included: the longest any row stayed locked.
    pub longest_batch: Duration,
    /// The whole run.
    pub elapsed: Duration,
    /// Whether this was a dry run, which deleted nothing.
    pub dry_run: bool,
}

impl<F> crate::inbox::Inbox<F> {
    /// The longest a broker may take to redeliver an event to this consumer: the worst
    /// realistic outage of the consumer plus the broker's redelivery or retention period.
    /// Defaults to 7 days. [`prune`](Inbox::prune) refuses to remove rows younger than this.
    pub fn redelivery_window(mut self, window: Duration) -> Self {
        self.redelivery_window = window;
        self
    }
}

impl Inbox {
    /// Deletes this consumer's processed inbox rows settled and last seen more than
    /// `retention`'s age ago, with their failure rows and history, and its hourly counters and
    /// settled claims older than that; in batches, each a short transaction of its own.
    ///
    /// A redelivery of a pruned event runs its effect again: size the age for the worst
    /// realistic outage plus the broker's redelivery period, not the average one. Dead-lettered
    /// and discarded rows, and failures of events still retrying, are never removed. Safe to
    /// run alongside live deliveries; meant for a cron or ops job. See the
    /// [`Retention`] documentation for what it locks and how to size it.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use std::time::Duration;
    /// use diesel::prelude::*;
    /// use diesel_inbox::{retention::Retention, Inbox};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let inbox = Inbox::default();
    /// inbox.process(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(()))?;
    ///
    /// let month = Duration::from_secs(30 * 24 * 60 * 60);
    /// let pruned = inbox.prune(&mut conn, &Retention::older_than(month).batch_size(500))?;
    /// assert_eq!(pruned.events, 0);
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`AdminError::RetentionBelowWindow`] for an age below the
    /// [`redelivery_window`](Self::redelivery_window), before any SQL; [`Error::InsideTransaction`]
    /// (in [`AdminError::Inbox`]) on a connection inside a transaction;
    /// [`AdminError::PruneRunning`] when another prune holds the lock; [`Error::Database`] or
    /// [`Error::RetriesExhausted`] (in [`AdminError::Inbox`]) from a batch. Batches committed
    /// before an error stay committed: running it again continues where it stopped.
    pub fn prune<C: InboxConnection>(
        &self,
        conn: &mut C,
        retention: &Retention,
    ) -> Result<Pruned, AdminError> {
        run_ready(self.prune_in::<Blocking, _>(conn, retention))
    }
}

/// A prune in either flavour.
impl<K> crate::inbox::Inbox<K> {
    /// [`prune`](Inbox::prune) in either flavour.
    pub(crate) async fn prune_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        retention: &Retention,
    ) -> Result<Pruned, AdminError> {
        if retention.older_than < self.redelivery_window {
            return Err(AdminError::RetentionBelowWindow {
                older_than: retention.older_than,
                window: self.redelivery_window,
            });
        }
        if conn.depth()? > 0 {
            return Err(Error::InsideTransaction {
                operation: "Inbox::prune",
            }
            .into());
        }
        let cutoff = duration::before(Utc::now(), retention.older_than);
        let span = tracing::info_span!("inbox_prune", consumer = self.consumer(), %cutoff);
        self.prune_until(conn, cutoff, retention)
            .instrument(span)
            .await
    }

    /// The prune (or the dry run's counts) at `cutoff`, then its log line and metrics.
    async fn prune_until<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        cutoff: DateTime<Utc>,
        retention: &Retention,
    ) -> Result<Pruned, AdminError> {
        let started = Instant::now();
        let consumer = self.consumer();
        let mut pruned = if retention.dry_run {
            let counts = C::Backend::count_prunable(conn, consumer, cutoff).await?;
            Pruned {
                events: counts.events.unsigned_abs(),
                failures: counts.failures.unsigned_abs(),
                history: counts.history.unsigned_abs(),
                counters: counts.counters.unsigned_abs(),
                claims: counts.claims.unsigned_abs(),
                dry_run: true,
                ..Pruned::default()
            }
        } else {
            self.prune_locked(conn, cutoff, retention.batch_size)
                .await?
        };
        pruned.elapsed = started.elapsed();
        info!(
            consumer,
            %cutoff,
            dry_run = pruned.dry_run,
            events = pruned.events,
            failures = pruned.failures,
            history = pruned.history,
            counters = pruned.counters,
            claims = pruned.claims,
            batches = pruned.batches,
            longest_batch = ?pruned.longest_batch,
            elapsed = ?pruned.elapsed,
            "inbox pruned"
        );
        if !pruned.dry_run {
            observe::pruned(consumer, "diesel_inbox_events", pruned.events);
            observe::pruned(consumer, "diesel_inbox_failures", pruned.failures);
            observe::pruned(consumer, "diesel_inbox_failure_log", pruned.history);
            observe::pruned(consumer, "diesel_inbox_counters", pruned.counters);
            observe::pruned(consumer, "diesel_inbox_claims", pruned.claims);
        }
        Ok(pruned)
    }

    /// Takes the prune lock, prunes, and releases it; a connection dropped or failing while
    /// it holds the lock is marked broken, so that no pool hands the lock out again (the
    /// server frees it with the session).
    async fn prune_locked<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        cutoff: DateTime<Utc>,
        batch_size: NonZeroU32,
    ) -> Result<Pruned, AdminError> {
        let mut held = Open::holding(conn, "the prune lock");
        match C::Backend::try_prune_lock(held.conn()).await {
            Ok(true) => {}
            Ok(false) => {
                held.close();
                return Err(AdminError::PruneRunning);
            }
            Err(error) => {
                held.close();
                return Err(error.into());
            }
        }
        let pruned = self.prune_leased(held.conn(), cutoff, batch_size).await;
        match C::Backend::release_prune_lock(held.conn()).await {
            Ok(()) => held.close(),
            Err(error) => {
                warn!(%error, "releasing the prune lock failed; it is freed when the session ends");
            }
        }
        pruned
    }

    /// Under the prune lock: where that lock holds on one node only (Galera), or there is none
    /// (PostgreSQL), takes the prune lease, which every session sees, and ends it after the
    /// batches.
    async fn prune_leased<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        cutoff: DateTime<Utc>,
        batch_size: NonZeroU32,
    ) -> Result<Pruned, AdminError> {
        if !C::Backend::prune_needs_lease(conn)
            .await
            .map_err(Error::from)?
        {
            return self.prune_batches(conn, cutoff, batch_size, None).await;
        }
        let holder = format!("{:032x}", fastrand::u128(..));
        let policy = self.retry_policy();
        let take = async |tx: &mut C| {
            let now = duration::now();
            let until = duration::after(now, PRUNE_LEASE_TERM);
            Ok::<_, Failure<Error>>(
                C::Backend::take_lease(tx, PRUNE_LEASE, &holder, now, until).await?,
            )
        };
        let taken = engine::run(conn, Scope::TopLevel, policy, self.subject(None), take)
            .await
            .map_err(Failure::into_error)?;
        if !taken {
            return Err(AdminError::PruneRunning);
        }
        let pruned = self
            .prune_batches(conn, cutoff, batch_size, Some(&holder))
            .await;
        if let Err(error) = C::Backend::release_lease(conn, PRUNE_LEASE, &holder).await {
            warn!(%error, "ending the prune lease failed; it expires by itself within {}", duration::human(PRUNE_LEASE_TERM));
        }
        pruned
    }

    /// The batches, then the counters and the settled claims, under the prune lock, and the
    /// lease of `holder` if it has one.
    async fn prune_batches<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        cutoff: DateTime<Utc>,
        batch_size: NonZeroU32,
        holder: Option<&str>,
    ) -> Result<Pruned, AdminError> {
        let consumer = self.consumer();
        let subject = self.subject(None);
        let policy = self.retry_policy();
        let mut pruned = Pruned::default();
        // Before every inbox row: processed_at is never before 1970, ids never empty.
        let mut cursor = PruneCursor {
            processed_at: DateTime::UNIX_EPOCH,
            event_id: String::new(),
        };
        let limit = i64::from(batch_size.get());
        // Bounded: the cursor only moves forward through rows settled before the cutoff, and
        // rows settled from now on land after the cutoff.
        loop {
            let batch_started = Instant::now();
            // A batch retried for contention runs at the session's own level.
            C::Backend::next_transaction_read_committed(conn).await?;
            let body = PruneBatch {
                consumer,
                cutoff,
                cursor: &cursor,
                limit,
                holder,
            };
            let batch = engine::run(conn, Scope::TopLevel, policy, subject, body)
                .await
                .map_err(Failure::into_error)?;
            let took = batch_started.elapsed();
            let Some(last) = batch.last else { break };
            pruned.batches += 1;
            pruned.events += count(batch.events);
            pruned.failures += count(batch.failures);
            pruned.history += count(batch.history);
            pruned.longest_batch = pruned.longest_batch.max(took);
            debug!(
                consumer,
                batch = pruned.batches,
                found = batch.found,
                events = batch.events,
                failures = batch.failures,
                history = batch.history,
                took = ?took,
                "prune batch committed"
            );
            cursor = last;
            if i64::try_from(batch.found).is_ok_and(|found| found < limit) {
                break;
            }
        }
        // Then, each in one transaction: the counters, and the claims settled before the
        // cutoff (claims are few: one per side effect, not per event).
        let counters_started = Instant::now();
        let body = PruneSettled {
            consumer,
            cutoff,
            holder,
        };
        let (counters, claims) = engine::run(conn, Scope::TopLevel, policy, subject, body)
            .await
            .map_err(Failure::into_error)?;
        pruned.counters = count(counters);
        pruned.claims = count(claims);
        pruned.longest_batch = pruned.longest_batch.max(counters_started.elapsed());
        Ok(pruned)
    }
}

/// What one batch found and deleted.
struct Batch {
    /// Candidates found (and locked).
    found: usize,
    events: usize,
    failures: usize,
    history: usize,
    /// The last candidate, where the next batch starts; `None` when there was none.
    last: Option<PruneCursor>,
}

/// One batch's transaction: lock up to `limit` candidates after `cursor`, delete them in key
/// order re-checking the conditions, then the failures and history of exactly the events
/// whose rows went.
struct PruneBatch<'a> {
    consumer: &'a str,
    cutoff: DateTime<Utc>,
    cursor: &'a PruneCursor,
    limit: i64,
    /// The prune lease's holder, if the prune holds one.
    holder: Option<&'a str>,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for PruneBatch<'_> {
    type Output = Batch;
    type Error = AdminError;

    async fn attempt(&mut self, conn: &mut C) -> Result<Batch, Failure<AdminError>> {
        let Self {
            consumer,
            cutoff,
            cursor,
            limit,
            holder,
        } = *self;
        renew(conn, holder).await?;
        let candidates =
            C::Backend::prune_candidates(conn, consumer, cutoff, cursor, limit).await?;
        let Some(last) = candidates.last().cloned() else {
            return Ok(Batch {
                found: 0,
                events: 0,
                failures: 0,
                history: 0,
                last: None,
            });
        };
        let mut ids: Vec<&str> = candidates.iter().map(|c| c.event_id.as_str()).collect();
        ids.sort_unstable();
        let events = C::Backend::delete_prunable_events(conn, consumer, cutoff, &ids).await?;
        // The candidates are locked, so the DELETE takes them all; should it not, only the events
        // whose rows are gone lose their failures.
        let gone = if events == ids.len() {
            ids
        } else {
            let remaining: HashSet<String> = C::Backend::remaining_events(conn, consumer, &ids)
                .await?
                .into_iter()
                .collect();
            ids.retain(|id| !remaining.contains(*id));
            ids
        };
        let (failures, history) = if gone.is_empty() {
            (0, 0)
        } else {
            C::Backend::delete_failures_of(conn, consumer, &gone).await?
        };
        Ok(Batch {
            found: candidates.len(),
            events,
            failures,
            history,
            last: Some(last),
        })
    }
}

/// The transaction after the batches: the counters of hours before the cutoff, and the
/// claims settled before it.
struct PruneSettled<'a> {
    consumer: &'a str,
    cutoff: DateTime<Utc>,
    /// The prune lease's holder, if the prune holds one.
    holder: Option<&'a str>,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for PruneSettled<'_> {
    type Output = (usize, usize);
    type Error = AdminError;

    async fn attempt(&mut self, tx: &mut C) -> Result<(usize, usize), Failure<AdminError>> {
        let (consumer, cutoff) = (self.consumer, self.cutoff);
        renew(tx, self.holder).await?;
        let counters = C::Backend::delete_counters_before(tx, consumer, cutoff).await?;
        let claims = C::Backend::delete_settled_claims(tx, consumer, cutoff).await?;
        Ok((counters, claims))
    }
}

/// Extends the prune lease of `holder`, if it has one, in the transaction of a batch: the batch
/// commits only while the lease is still its prune's. Two nodes writing the lease at once
/// conflict at certification, so one of them retries and finds who holds it.
async fn renew<F, C: Db<F, Backend: Sql>>(
    tx: &mut C,
    holder: Option<&str>,
) -> Result<(), Failure<AdminError>> {
    let Some(holder) = holder else { return Ok(()) };
    let until = duration::after(duration::now(), PRUNE_LEASE_TERM);
    if C::Backend::renew_lease(tx, PRUNE_LEASE, holder, until).await? {
        Ok(())
    } else {
        Err(Failure::Handler(AdminError::PruneRunning))
    }
}

fn count(rows: usize) -> u64 {
    u64::try_from(rows).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "at least 1")]
    fn a_batch_size_of_zero_is_refused() {
        let _ = Retention::older_than(Duration::ZERO).batch_size(0);
    }

    #[test]
    fn a_huge_batch_size_is_lowered_to_the_maximum() {
        let retention = Retention::older_than(Duration::ZERO).batch_size(u32::MAX);
        assert_eq!(retention.batch_size.get(), MAX_PRUNE_BATCH_SIZE);
    }
}
