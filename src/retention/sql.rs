//! The retention area's statements: what the tables hold per consumer (the stats' totals and
//! counters, the consumers themselves), and the batches that prune it; the trait a backend
//! implements, the rows it reads, and its statements for every backend, written once.
//!
//! Each backend's file stamps the whole area with one line,
//! `retention_statements!(Pg, schema = schema, codec = codec, ..)`: the backend type, its
//! module of [`crate::tables`] and its codec (how it binds keys and times, and sums) are
//! explicit arguments, and options name the variants a backend needs (`lease_insert =
//! do_nothing` where the database waits for a concurrent insert of a lease row, `plain`
//! elsewhere; `prune_lock = lease_row | named_lock | writer_lock`, what keeps a second prune
//! out; `lock = for_update` where it has row locks). Adding a statement touches this file
//! alone: the trait's method and its body below.

use std::future::Future;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use crate::dead_letter::state::DeadLetterState;
use crate::rows::ConsumerRows;
use crate::sql::{Db, TransactionSql};
use crate::state::{Counter, InboxState, UnknownState};

/// What the inbox table holds for one consumer in one state.
#[derive(Debug)]
pub struct InboxTotals {
    /// Parsed from the text, so that a state this version cannot read is counted.
    pub state: Result<InboxState, UnknownState>,
    pub rows: i64,
    /// `SUM(deliveries - 1)`: the deliveries after the settling one.
    pub repeats: i64,
    pub payload_conflicts: i64,
}

/// What the failure table holds for one consumer in one state.
#[derive(Debug)]
pub struct FailureTotals {
    /// Parsed from the text, so that a state this version cannot read is counted.
    pub state: Result<DeadLetterState, UnknownState>,
    pub rows: i64,
    pub attempts: i64,
}

/// A position in a consumer's settled rows, in `(processed_at, event_id)` order: where a
/// prune batch stopped, and so where the next one starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneCursor {
    pub processed_at: DateTime<Utc>,
    pub event_id: String,
}

/// What a prune would delete now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneCounts {
    pub events: i64,
    pub failures: i64,
    pub history: i64,
    pub counters: i64,
    pub claims: i64,
}

/// A counter and its total; the counter parsed from the text, so that one this version
/// does not know is counted as unreadable rather than failing the stats.
pub(crate) type CounterTotal = (Result<Counter, UnknownState>, i64);

/// The named lock that lets one prune run at a time (`GET_LOCK`), before the database name.
#[cfg(feature = "mysql")]
pub(crate) const PRUNE_LOCK_NAME: &str = "diesel_inbox.prune";

/// The retention area's statements for one database, on a connection of either flavour. Sealed.
pub trait RetentionSql: TransactionSql {
    /// Over the consumer's inbox rows, per state: the rows, their deliveries beyond the
    /// first, and their payload conflicts.
    fn inbox_totals<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
    ) -> impl Future<Output = QueryResult<Vec<InboxTotals>>> + Send;

    /// Over the consumer's failure rows, per state: the rows and their failed attempts.
    fn failure_totals<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
    ) -> impl Future<Output = QueryResult<Vec<FailureTotals>>> + Send;

    /// The consumer's inbox rows processed at or after `since`: a range scan of the
    /// `(consumer, state, processed_at, event_id)` index.
    fn processed_since<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        since: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<i64>> + Send;

    /// The consumer's hourly counters summed per counter, over the buckets at or after
    /// `since`.
    fn counters_since<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        since: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<Vec<CounterTotal>>> + Send;

    /// The first failure of the consumer's oldest event that still needs something: one
    /// dead-lettered, or one retrying that no delivery has processed since.
    fn oldest_unresolved_failure<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
    ) -> impl Future<Output = QueryResult<Option<DateTime<Utc>>>> + Send;

    /// Every consumer with a row in the tables of `area`, each once, sorted by name (byte
    /// order).
    fn consumers<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        area: ConsumerRows,
    ) -> impl Future<Output = QueryResult<Vec<String>>> + Send;

    /// Up to `limit` of the consumer's processed rows that are prunable at `cutoff`
    /// (`processed_at` and `last_seen_at` before it), after `after` in `(processed_at,
    /// event_id)` order, through the `diesel_inbox_events_settled` index; locked for the
    /// rest of the transaction where the backend has row locks (SQLite's immediate
    /// transaction holds the whole database instead).
    fn prune_candidates<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        cutoff: DateTime<Utc>,
        after: &PruneCursor,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<PruneCursor>>> + Send;

    /// Deletes those of `event_ids` whose inbox row is still prunable at `cutoff`; returns
    /// how many it deleted.
    fn delete_prunable_events<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        cutoff: DateTime<Utc>,
        event_ids: &[&str],
    ) -> impl Future<Output = QueryResult<usize>> + Send;

    /// Those of `event_ids` that still have an inbox row.
    fn remaining_events<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        event_ids: &[&str],
    ) -> impl Future<Output = QueryResult<Vec<String>>> + Send;

    /// Deletes the failure rows and the history of `event_ids`; returns how many of each.
    fn delete_failures_of<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        event_ids: &[&str],
    ) -> impl Future<Output = QueryResult<(usize, usize)>> + Send;

    /// Deletes the consumer's counters of hours that start before `cutoff`.
    fn delete_counters_before<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        cutoff: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<usize>> + Send;

    /// Deletes the consumer's completed and abandoned claims last changed or delivered
    /// before `cutoff`.
    fn delete_settled_claims<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        cutoff: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<usize>> + Send;

    /// Counts what a prune at `cutoff` would delete, locking nothing.
    fn count_prunable<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        cutoff: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<PruneCounts>> + Send;

    /// Takes the session-level lock that lets one prune run at a time, without waiting:
    /// `false` when another session holds it. MySQL/MariaDB only: SQLite's writer lock already
    /// serialises the batches, and PostgreSQL's prune holds a lease row instead.
    fn try_prune_lock<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<bool>> + Send {
        let _ = conn;
        std::future::ready(Ok(true))
    }

    /// Releases the lock [`try_prune_lock`](Self::try_prune_lock) took.
    fn release_prune_lock<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        let _ = conn;
        std::future::ready(Ok(()))
    }

    /// Whether a prune holds the lease row `prune` of `diesel_inbox_leases`: where
    /// [`try_prune_lock`](Self::try_prune_lock) holds on this node only while other nodes
    /// write the same tables (a Galera node, `wsrep_on`), and on PostgreSQL, which has no
    /// session lock (a pooler in transaction mode may stand between client and session), and
    /// where the lease is the prune's only lock.
    fn prune_needs_lease<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<bool>> + Send {
        let _ = conn;
        std::future::ready(Ok(false))
    }

    /// Inside a transaction: gives the lease `name` to `holder` until `until` if it is free
    /// at `now` (never taken, expired, or `holder`'s already); whether `holder` holds it.
    fn take_lease<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        name: &str,
        holder: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Extends `holder`'s lease `name` to `until`: `false` when another holder has it now.
    fn renew_lease<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        name: &str,
        holder: &str,
        until: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Ends `holder`'s lease `name`, if it still has it.
    fn release_lease<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        name: &str,
        holder: &str,
    ) -> impl Future<Output = QueryResult<()>> + Send;
}

/// Implements [`RetentionSql`] for a backend: `retention_statements!(Backend, schema = ..,
/// codec = .., lease_insert = do_nothing | plain, prune_lock = lease_row | named_lock |
/// writer_lock $(, lock = for_update)?)`.
///
/// `schema` is the backend's module of [`crate::tables`]; `codec` its module of key and time
/// conversions (`key`, `key_string`, `time`, `utc`, `Time`, `KeyOwned`, and `sum_i64`, its
/// `SUM` of an integer column as a `BIGINT`). Nothing else is taken from the caller's scope.
///
/// - `lease_insert`: how the first holder makes a lease row. `do_nothing` where the database
///   waits for a concurrent insert of the key and then skips it (PostgreSQL), `plain` where
///   the loser of two at once conflicts, to retry, as on a Galera cluster at certification.
/// - `prune_lock`: what lets one prune run at a time. `lease_row` where the lease row is the
///   prune's only lock (PostgreSQL: no lock of a session holds behind a pooler in
///   transaction mode); `named_lock`, MySQL's `GET_LOCK` of the session, and the lease row
///   too on a Galera node; `writer_lock` where the database's writer lock already serialises
///   the batches (SQLite), the trait's defaults.
/// - `lock`: `for_update` where the backend has row locks; SQLite locks the whole database
///   for the (immediate) transaction instead.
macro_rules! retention_statements {
    (
        $backend:ty,
        schema = $schema:ident,
        codec = $codec:ident,
        lease_insert = $lease_insert:ident,
        prune_lock = $prune_lock:ident
        $(, lock = $lock:ident)? $(,)?
    ) => {
        impl $crate::retention::sql::RetentionSql for $backend {
            // The statements that read stats. `$codec::sum_i64` is the backend's `SUM` of an
            // integer column as a `BIGINT`: PostgreSQL and MySQL sum integers as `NUMERIC`.
            async fn inbox_totals<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
            ) -> diesel::QueryResult<Vec<$crate::retention::sql::InboxTotals>> {
                use diesel::dsl::count_star;
                use diesel::prelude::*;
                use $crate::retention::sql::InboxTotals;
                use $crate::sql::Run;
                use $crate::state::InboxState;
                use $schema::diesel_inbox_events::dsl as t;
                t::diesel_inbox_events
                    .filter(t::consumer.eq($codec::key(consumer)))
                    .group_by(t::state)
                    .select((
                        t::state,
                        count_star(),
                        $codec::sum_i64("deliveries - 1"),
                        $codec::sum_i64("payload_conflicts"),
                    ))
                    .load_on::<(String, i64, Option<i64>, Option<i64>)>(conn)
                    .await
                    .map(|rows| {
                        rows.into_iter()
                            .map(|(state, rows, repeats, conflicts)| InboxTotals {
                                state: state.parse::<InboxState>(),
                                rows,
                                repeats: repeats.unwrap_or(0),
                                payload_conflicts: conflicts.unwrap_or(0),
                            })
                            .collect()
                    })
            }

            async fn failure_totals<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
            ) -> diesel::QueryResult<Vec<$crate::retention::sql::FailureTotals>> {
                use diesel::dsl::count_star;
                use diesel::prelude::*;
                use $crate::dead_letter::state::DeadLetterState;
                use $crate::retention::sql::FailureTotals;
                use $crate::sql::Run;
                use $schema::diesel_inbox_failures::dsl as f;
                f::diesel_inbox_failures
                    .filter(f::consumer.eq($codec::key(consumer)))
                    .group_by(f::state)
                    .select((f::state, count_star(), $codec::sum_i64("attempts")))
                    .load_on::<(String, i64, Option<i64>)>(conn)
                    .await
                    .map(|rows| {
                        rows.into_iter()
                            .map(|(state, rows, attempts)| FailureTotals {
                                state: state.parse::<DeadLetterState>(),
                                rows,
                                attempts: attempts.unwrap_or(0),
                            })
                            .collect()
                    })
            }

            async fn processed_since<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                since: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<i64> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $crate::state::InboxState;
                use $schema::diesel_inbox_events::dsl as t;
                t::diesel_inbox_events
                    .filter(t::consumer.eq($codec::key(consumer)))
                    .filter(t::state.eq(InboxState::Processed))
                    .filter(t::processed_at.ge($codec::time(since)))
                    .count()
                    .get_result_on::<i64>(conn)
                    .await
            }

            async fn counters_since<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                since: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<Vec<$crate::retention::sql::CounterTotal>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $crate::state::Counter;
                use $schema::diesel_inbox_counters::dsl as c;
                c::diesel_inbox_counters
                    .filter(c::consumer.eq($codec::key(consumer)))
                    .filter(c::bucket.ge($codec::time(since)))
                    .group_by(c::counter)
                    .select((c::counter, $codec::sum_i64("total")))
                    .load_on::<(String, Option<i64>)>(conn)
                    .await
                    .map(|rows| {
                        rows.into_iter()
                            .map(|(counter, total)| (counter.parse::<Counter>(), total.unwrap_or(0)))
                            .collect()
                    })
            }

            async fn oldest_unresolved_failure<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
            ) -> diesel::QueryResult<Option<chrono::DateTime<chrono::Utc>>> {
                use diesel::dsl::{exists, min, not};
                use diesel::prelude::*;
                use $crate::dead_letter::state::DeadLetterState;
                use $crate::sql::Run;
                use $crate::state::InboxState;
                use $schema::diesel_inbox_events::dsl as t;
                use $schema::diesel_inbox_failures::dsl as f;
                // A retrying failure row stays as it is when a later delivery succeeds; the
                // processed inbox row is what says the event is resolved.
                let processed = t::diesel_inbox_events
                    .filter(t::consumer.eq(f::consumer))
                    .filter(t::event_id.eq(f::event_id))
                    .filter(t::state.eq(InboxState::Processed));
                let unresolved = f::state
                    .eq(DeadLetterState::DeadLettered)
                    .or(f::state
                        .eq(DeadLetterState::Retrying)
                        .and(not(exists(processed))));
                f::diesel_inbox_failures
                    .filter(f::consumer.eq($codec::key(consumer)))
                    .filter(unresolved)
                    .select(min(f::first_failed_at))
                    .get_result_on::<Option<$codec::Time>>(conn)
                    .await
                    .map(|first| first.map($codec::utc))
            }

            async fn consumers<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                area: $crate::rows::ConsumerRows,
            ) -> diesel::QueryResult<Vec<String>> {
                use diesel::prelude::*;
                use $crate::rows::ConsumerRows;
                use $crate::sql::Run;
                use $schema::diesel_inbox_claims::dsl as k;
                use $schema::diesel_inbox_counters::dsl as c;
                use $schema::diesel_inbox_cursors::dsl as s;
                use $schema::diesel_inbox_events::dsl as t;
                use $schema::diesel_inbox_failures::dsl as f;
                use $schema::diesel_inbox_gaps::dsl as g;
                type Names = Vec<$codec::KeyOwned>;
                let mut names = Names::new();
                match area {
                    ConsumerRows::Inbox => {
                        let read = t::diesel_inbox_events.select(t::consumer).distinct();
                        names.extend(read.load_on::<$codec::KeyOwned>(conn).await?);
                        let read = f::diesel_inbox_failures.select(f::consumer).distinct();
                        names.extend(read.load_on::<$codec::KeyOwned>(conn).await?);
                        let read = c::diesel_inbox_counters.select(c::consumer).distinct();
                        names.extend(read.load_on::<$codec::KeyOwned>(conn).await?);
                    }
                    ConsumerRows::Streams => {
                        use $schema::diesel_inbox_blocks::dsl as b;
                        let chain = b::diesel_inbox_blocks
                            .filter(b::consumer.eq(s::consumer))
                            .filter(b::stream.eq(s::stream));
                        let read = s::diesel_inbox_cursors
                            .filter(diesel::dsl::not(diesel::dsl::exists(chain)))
                            .select(s::consumer)
                            .distinct();
                        names.extend(read.load_on::<$codec::KeyOwned>(conn).await?);
                        let read = g::diesel_inbox_gaps.select(g::consumer).distinct();
                        names.extend(read.load_on::<$codec::KeyOwned>(conn).await?);
                    }
                    ConsumerRows::Claims => {
                        let read = k::diesel_inbox_claims.select(k::consumer).distinct();
                        names.extend(read.load_on::<$codec::KeyOwned>(conn).await?);
                    }
                }
                let mut names: Vec<String> = names.into_iter().map($codec::key_string).collect();
                names.sort_unstable();
                names.dedup();
                Ok(names)
            }

            async fn prune_candidates<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                cutoff: chrono::DateTime<chrono::Utc>,
                after: &$crate::retention::sql::PruneCursor,
                limit: i64,
            ) -> diesel::QueryResult<Vec<$crate::retention::sql::PruneCursor>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $crate::state::InboxState;
                use $schema::diesel_inbox_events::dsl as t;
                let (cutoff, after_at) = ($codec::time(cutoff), $codec::time(after.processed_at));
                let after_id = $codec::key(&after.event_id);
                // The index gives `consumer, state` and the range start on `processed_at`; the
                // keyset condition then skips what earlier batches saw, kept or not.
                t::diesel_inbox_events
                    .filter(t::consumer.eq($codec::key(consumer)))
                    .filter(t::state.eq(InboxState::Processed))
                    .filter(t::processed_at.ge(after_at))
                    .filter(t::processed_at.lt(cutoff))
                    .filter(t::processed_at.gt(after_at).or(t::event_id.gt(after_id)))
                    .filter(t::last_seen_at.lt(cutoff))
                    .order((t::processed_at, t::event_id))
                    .limit(limit)
                    .select((t::processed_at, t::event_id))
                    $(.$lock())?
                    .load_on::<($codec::Time, $codec::KeyOwned)>(conn)
                    .await
                    .map(|rows| {
                        rows.into_iter()
                            .map(|(at, id)| $crate::retention::sql::PruneCursor {
                                processed_at: $codec::utc(at),
                                event_id: $codec::key_string(id),
                            })
                            .collect()
                    })
            }

            async fn delete_prunable_events<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                cutoff: chrono::DateTime<chrono::Utc>,
                event_ids: &[&str],
            ) -> diesel::QueryResult<usize> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_events::dsl as t;
                let cutoff = $codec::time(cutoff);
                let ids: Vec<_> = event_ids.iter().map(|id| $codec::key(id)).collect();
                // By primary key, re-checking what can change under a delivery:
                // `last_seen_at`. `state` and `processed_at` of a processed row never change,
                // and naming them here would tempt a planner without statistics (SQLite,
                // MariaDB) into a range scan of the settled index, over every row left to
                // prune, once per batch.
                diesel::delete(
                    t::diesel_inbox_events
                        .filter(t::consumer.eq($codec::key(consumer)))
                        .filter(t::event_id.eq_any(ids))
                        .filter(t::last_seen_at.lt(cutoff)),
                )
                .execute_on(conn)
                .await
            }

            async fn remaining_events<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                event_ids: &[&str],
            ) -> diesel::QueryResult<Vec<String>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_events::dsl as t;
                let ids: Vec<_> = event_ids.iter().map(|id| $codec::key(id)).collect();
                t::diesel_inbox_events
                    .filter(t::consumer.eq($codec::key(consumer)))
                    .filter(t::event_id.eq_any(ids))
                    .select(t::event_id)
                    .load_on::<$codec::KeyOwned>(conn)
                    .await
                    .map(|ids| ids.into_iter().map($codec::key_string).collect())
            }

            async fn delete_failures_of<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                event_ids: &[&str],
            ) -> diesel::QueryResult<(usize, usize)> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_failure_log::dsl as l;
                use $schema::diesel_inbox_failures::dsl as f;
                let ids: Vec<_> = event_ids.iter().map(|id| $codec::key(id)).collect();
                let failures = diesel::delete(
                    f::diesel_inbox_failures
                        .filter(f::consumer.eq($codec::key(consumer)))
                        .filter(f::event_id.eq_any(&ids)),
                )
                .execute_on(conn)
                .await?;
                let history = diesel::delete(
                    l::diesel_inbox_failure_log
                        .filter(l::consumer.eq($codec::key(consumer)))
                        .filter(l::event_id.eq_any(&ids)),
                )
                .execute_on(conn)
                .await?;
                Ok((failures, history))
            }

            async fn delete_counters_before<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                cutoff: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<usize> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_counters::dsl as c;
                diesel::delete(
                    c::diesel_inbox_counters
                        .filter(c::consumer.eq($codec::key(consumer)))
                        .filter(c::bucket.lt($codec::time(cutoff))),
                )
                .execute_on(conn)
                .await
            }

            async fn delete_settled_claims<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                cutoff: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<usize> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_claims::dsl as k;
                diesel::delete(
                    k::diesel_inbox_claims
                        .filter(k::consumer.eq($codec::key(consumer)))
                        .filter(k::state.eq_any($crate::claim::state::ClaimState::SETTLED))
                        .filter(k::updated_at.lt($codec::time(cutoff))),
                )
                .execute_on(conn)
                .await
            }

            async fn count_prunable<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                cutoff: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<$crate::retention::sql::PruneCounts> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $crate::state::InboxState;
                use $schema::diesel_inbox_claims::dsl as k;
                use $schema::diesel_inbox_counters::dsl as c;
                use $schema::diesel_inbox_events::dsl as t;
                use $schema::diesel_inbox_failure_log::dsl as l;
                use $schema::diesel_inbox_failures::dsl as f;
                let (who, cutoff) = ($codec::key(consumer), $codec::time(cutoff));
                let prunable = || {
                    t::diesel_inbox_events
                        .filter(t::consumer.eq(who))
                        .filter(t::state.eq(InboxState::Processed))
                        .filter(t::processed_at.lt(cutoff))
                        .filter(t::last_seen_at.lt(cutoff))
                };
                let events = prunable().count().get_result_on::<i64>(conn).await?;
                let failures = f::diesel_inbox_failures
                    .filter(f::consumer.eq(who))
                    .filter(f::event_id.eq_any(prunable().select(t::event_id)))
                    .count()
                    .get_result_on::<i64>(conn)
                    .await?;
                let history = l::diesel_inbox_failure_log
                    .filter(l::consumer.eq(who))
                    .filter(l::event_id.eq_any(prunable().select(t::event_id)))
                    .count()
                    .get_result_on::<i64>(conn)
                    .await?;
                let counters = c::diesel_inbox_counters
                    .filter(c::consumer.eq(who))
                    .filter(c::bucket.lt(cutoff))
                    .count()
                    .get_result_on::<i64>(conn)
                    .await?;
                let claims = k::diesel_inbox_claims
                    .filter(k::consumer.eq(who))
                    .filter(k::state.eq_any($crate::claim::state::ClaimState::SETTLED))
                    .filter(k::updated_at.lt(cutoff))
                    .count()
                    .get_result_on::<i64>(conn)
                    .await?;
                Ok($crate::retention::sql::PruneCounts {
                    events,
                    failures,
                    history,
                    counters,
                    claims,
                })
            }

            // The lease rows. The first holder makes the row, as `lease_insert` says.
            async fn take_lease<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                name: &str,
                holder: &str,
                now: chrono::DateTime<chrono::Utc>,
                until: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_leases::dsl as h;
                let free = h::held_until.le($codec::time(now)).or(h::holder.eq(holder));
                let taken = diesel::update(h::diesel_inbox_leases.filter(h::name.eq(name)).filter(free))
                    .set((h::holder.eq(holder), h::held_until.eq($codec::time(until))))
                    .execute_on(conn)
                    .await?;
                if taken == 1 {
                    return Ok(true);
                }
                let held = h::diesel_inbox_leases
                    .filter(h::name.eq(name))
                    .count()
                    .get_result_on::<i64>(conn)
                    .await?;
                if held > 0 {
                    return Ok(false);
                }
                // Never taken: the first holder makes the row.
                let insert = diesel::insert_into(h::diesel_inbox_leases).values((
                    h::name.eq(name),
                    h::holder.eq(holder),
                    h::held_until.eq($codec::time(until)),
                ));
                $crate::retention::sql::retention_statements!(@insert_lease $lease_insert, insert, conn)
            }

            async fn renew_lease<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                name: &str,
                holder: &str,
                until: chrono::DateTime<chrono::Utc>,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_leases::dsl as h;
                diesel::update(h::diesel_inbox_leases.filter(h::name.eq(name)).filter(h::holder.eq(holder)))
                    .set(h::held_until.eq($codec::time(until)))
                    .execute_on(conn)
                    .await
                    .map(|renewed| renewed == 1)
            }

            async fn release_lease<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                name: &str,
                holder: &str,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_leases::dsl as h;
                diesel::delete(h::diesel_inbox_leases.filter(h::name.eq(name)).filter(h::holder.eq(holder)))
                    .execute_on(conn)
                    .await
                    .map(drop)
            }

            $crate::retention::sql::retention_statements!(@prune_lock $prune_lock);
        }
    };

    // Inserts the first lease row: whether this holder made it.
    (@insert_lease do_nothing, $insert:expr, $conn:expr) => {
        $insert
            .on_conflict_do_nothing()
            .execute_on($conn)
            .await
            .map(|inserted| inserted == 1)
    };
    (@insert_lease plain, $insert:expr, $conn:expr) => {
        $insert.execute_on($conn).await.map(|_| true)
    };

    // SQLite: its writer lock already serialises the batches; the trait's defaults (no
    // session lock, no lease).
    (@prune_lock writer_lock) => {};

    // PostgreSQL: the lease row is the prune's lock.
    (@prune_lock lease_row) => {
        fn prune_needs_lease<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
        ) -> impl std::future::Future<Output = diesel::QueryResult<bool>> + Send {
            // A prune spans many transactions, and no lock of a session holds behind a pooler
            // in transaction mode: the lease row is the prune's lock here.
            let _ = conn;
            std::future::ready(Ok(true))
        }
    };

    // MySQL/MariaDB: a named lock of the session, and the lease row too on a Galera node.
    (@prune_lock named_lock) => {
        async fn try_prune_lock<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
        ) -> diesel::QueryResult<bool> {
            // A named lock of the session, so it outlives the batches' transactions; a
            // timeout of 0, so a second runner is told at once.
            $crate::backend::mysql::named_lock(
                conn,
                $crate::retention::sql::PRUNE_LOCK_NAME,
                std::time::Duration::ZERO,
            )
            .await
        }

        async fn release_prune_lock<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
        ) -> diesel::QueryResult<()> {
            $crate::backend::mysql::release_named_lock(conn, $crate::retention::sql::PRUNE_LOCK_NAME)
                .await
        }

        async fn prune_needs_lease<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
        ) -> diesel::QueryResult<bool> {
            // `GET_LOCK` is local to a Galera node, and the other nodes write the same tables.
            $crate::backend::mysql::is_galera_node(conn).await
        }
    };
}
pub(crate) use retention_statements;
