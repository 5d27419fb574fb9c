//! PostgreSQL: a delivery's plain `INSERT` of the inbox row travels with the `BEGIN`, and the
//! unique key refuses a duplicate's, whose delivery `INSERT .. ON CONFLICT DO UPDATE ..
//! RETURNING` then records on the row.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::pg::{Pg, PgConnection};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};

use super::sealed::HasInboxSql;
use crate::check::{Check, CheckStatus};
use crate::dialect::Dialect;
use crate::rows::Recorded;
use crate::schema::postgres as schema;
use crate::sql::{
    Began, ChainSql, Db, DoctorSql, FailureSql, InboxSql, MigrationLock, MigrationsSql, ReplaySql,
    RetentionSql, Run,
};

/// How PostgreSQL binds keys (`TEXT COLLATE "C"`) and times (`TIMESTAMPTZ`).
mod codec {
    use chrono::{DateTime, Utc};

    pub(super) type Time = DateTime<Utc>;
    pub(super) type KeyOwned = String;

    pub(super) fn key(part: &str) -> &str {
        part
    }

    pub(super) fn key_string(key: KeyOwned) -> String {
        key
    }

    pub(super) fn time(time: DateTime<Utc>) -> Time {
        time
    }

    pub(super) fn utc(time: Time) -> DateTime<Utc> {
        time
    }

    /// `SUM(expr)` of an integer expression, as a `BIGINT`: PostgreSQL sums `BIGINT`s as `NUMERIC`.
    /// `expr` is SQL text, always a literal of the inbox's own.
    pub(super) fn sum_i64(
        expr: &'static str,
    ) -> diesel::expression::SqlLiteral<diesel::sql_types::Nullable<diesel::sql_types::BigInt>>
    {
        diesel::dsl::sql(&format!("CAST(SUM({expr}) AS BIGINT)"))
    }
}

row_mappings!(schema = schema, codec = codec);

/// The advisory lock key that lets one process at a time apply the inbox migrations: the
/// bytes of `inbxmigr`.
const MIGRATION_LOCK_KEY: i64 = 0x696e_6278_6d69_6772;

/// `pg_try_advisory_xact_lock(key)`: held until the transaction it is taken in ends, and so by
/// the server connection that does the work, whichever one a pooler in transaction mode gives.
/// No lock of the crate's is a session's: behind such a pooler the session is not the
/// client's, and a session lock would be unlocked elsewhere and outlive its holder.
async fn try_transaction_lock<F, C: Db<F, Backend = Pg>>(
    conn: &mut C,
    key: i64,
) -> QueryResult<bool> {
    diesel::select(
        diesel::dsl::sql::<Bool>("pg_try_advisory_xact_lock(")
            .bind::<BigInt, _>(key)
            .sql(")"),
    )
    .get_result_on::<bool>(conn)
    .await
}

impl HasInboxSql for PgConnection {}

/// What lets a transaction commit without waiting for the WAL flush, which costs more than the
/// round trip that sends it.
const COMMIT_WITHOUT_WAITING: &str = "SET LOCAL synchronous_commit = off";

/// Values as SQL text, for the one statement the inbox sends in a simple-protocol message,
/// where nothing can be bound: the inbox row's insert that travels with the `BEGIN`.
mod text {
    use std::fmt::Write;

    use chrono::{DateTime, Utc};

    use crate::backend::Key;

    /// `bytes` as a `bytea` the server decodes from hex: only hex digits go between the
    /// quotes, so no input can change the statement, whatever the server's string settings.
    pub(super) fn bytes(bytes: &[u8]) -> String {
        let mut sql = String::with_capacity(bytes.len() * 2 + 18);
        sql.push_str("decode('");
        for byte in bytes {
            let _ = write!(sql, "{byte:02x}");
        }
        sql.push_str("', 'hex')");
        sql
    }

    /// `text` as a `text` value, by way of its UTF-8 [`bytes`].
    pub(super) fn text(text: &str) -> String {
        format!("convert_from({}, 'UTF8')", bytes(text.as_bytes()))
    }

    /// `time` as a `timestamptz`, in UTC to the microsecond, as a bound value is stored.
    pub(super) fn time(time: DateTime<Utc>) -> String {
        format!("'{}'::timestamptz", time.format("%Y-%m-%d %H:%M:%S%.6f+00"))
    }

    /// The inbox row of an event's first delivery, as `record_delivery`'s upsert inserts it.
    pub(super) fn insert_delivery(
        key: Key<'_>,
        now: DateTime<Utc>,
        payload_hash: Option<&[u8]>,
    ) -> String {
        let now = time(now);
        format!(
            "INSERT INTO diesel_inbox_events \
             (consumer, event_id, processed_at, last_seen_at, deliveries, payload_hash) \
             VALUES ({}, {}, {now}, {now}, 1, {})",
            text(key.0),
            text(key.1),
            payload_hash.map_or_else(|| "NULL".to_owned(), bytes),
        )
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn only_hex_digits_go_between_the_quotes_of_a_value() {
            let id = "o'k\\'); DROP TABLE diesel_inbox_events; -- Zoë";
            let sql = text(id);
            let hex = sql
                .strip_prefix("convert_from(decode('")
                .and_then(|rest| rest.strip_suffix("', 'hex'), 'UTF8')"))
                .unwrap();
            assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{sql}");
            let decoded: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            assert_eq!(decoded, id.as_bytes());
            assert_eq!(bytes(&[0, 0xab, 0xff]), "decode('00abff', 'hex')");
            assert_eq!(bytes(&[]), "decode('', 'hex')");
        }

        #[test]
        fn a_time_is_written_in_utc_to_the_microsecond() {
            let time = DateTime::parse_from_rfc3339("2026-12-07T06:14:36.123456789+01:00")
                .unwrap()
                .with_timezone(&Utc);
            assert_eq!(
                super::time(time),
                "'2026-12-07 05:14:36.123456+00'::timestamptz"
            );
        }
    }
}

/// A delivery whose insert found its key taken, the first transaction aborted: a duplicate, or
/// an event held back. A second transaction records the delivery on the row, and commits
/// without waiting for the disk, since it records bookkeeping alone.
async fn seen_after_conflict<F, C: Db<F, Backend = Pg>>(
    conn: &mut C,
    begin: &str,
    key: super::Key<'_>,
    now: DateTime<Utc>,
    payload_hash: Option<&[u8]>,
) -> QueryResult<Began> {
    conn.batch_execute(&format!("ROLLBACK; {begin}; {COMMIT_WITHOUT_WAITING}"))
        .await?;
    let recorded = <Pg as InboxSql>::record_delivery(conn, key, now, payload_hash).await;
    let error = match recorded {
        Ok(recorded @ Recorded::Seen(_)) => {
            return Ok(Began {
                recorded,
                without_waiting_for_disk: true,
            })
        }
        // The row went (a prune) between the two transactions, and this one must not run an
        // effect without waiting for the disk: run the delivery again.
        Ok(Recorded::New) => diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::SerializationFailure,
            Box::new(
                "the event's inbox row was deleted while its delivery was recorded; retrying"
                    .to_owned(),
            ),
        ),
        Err(error) => error,
    };
    super::roll_back_uncounted(conn).await;
    Err(error)
}

impl InboxSql for Pg {
    const RECORD_WITH_BEGIN_REFUSES_DUPLICATES: bool = true;

    inbox_statement!(record_delivery, schema, codec, rows, upsert_returning);
    inbox_statement!(record_deliveries, schema, codec, rows, upsert_returning);

    async fn begin_and_record_delivery<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        idle_timeout: Option<Duration>,
        key: super::Key<'_>,
        now: DateTime<Utc>,
        payload_hash: Option<&[u8]>,
    ) -> Option<QueryResult<Began>> {
        // A plain insert, in the BEGIN's simple-protocol message: it goes in for a new event,
        // and the unique key refuses it otherwise. Nothing comes back from such a message but
        // success or the error.
        let begin = crate::sql::postgres_begin(idle_timeout);
        let insert = text::insert_delivery(key, now, payload_hash);
        Some(
            match conn.batch_execute(&format!("{begin}; {insert}")).await {
                Ok(()) => Ok(Began::recorded(Recorded::New)),
                Err(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::UniqueViolation,
                    _,
                )) => seen_after_conflict(conn, &begin, key, now, payload_hash).await,
                Err(error) => {
                    super::roll_back_uncounted(conn).await;
                    Err(error)
                }
            },
        )
    }

    fn commit_without_waiting_for_disk<F, C: crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        // One round trip saves the WAL flush at commit, which costs several.
        conn.batch_execute(COMMIT_WITHOUT_WAITING)
    }

    inbox_statement!(insert_held_row, schema, codec, on_conflict_do_nothing);
    inbox_statement!(note_payload_conflict, schema, codec);
    inbox_statement!(store_result, schema, codec);
    inbox_statement!(set_inbox_state, schema, codec);
    inbox_statement!(delete_inbox_row, schema, codec);
    inbox_statement!(inbox_row, schema, codec, rows);
    inbox_statement!(inbox_rows, schema, rows);
    inbox_statement!(
        bump_counter,
        schema,
        codec,
        conflict = (
            schema::diesel_inbox_counters::consumer,
            schema::diesel_inbox_counters::counter,
            schema::diesel_inbox_counters::bucket
        )
    );
}

impl FailureSql for Pg {
    failure_statement!(
        record_failure,
        schema,
        codec,
        conflict = (
            schema::diesel_inbox_failures::consumer,
            schema::diesel_inbox_failures::event_id
        )
    );
    failure_statement!(failure, schema, codec, rows, lock = for_update);
    failure_statement!(failures, schema, codec, rows);
    failure_statement!(set_failure_state, schema, codec);
    failure_statement!(reset_attempts, schema, codec);
    failure_statement!(append_history, schema, codec);
    failure_statement!(history, schema, codec, rows);
}

impl RetentionSql for Pg {
    retention_statement!(inbox_totals, schema, codec);
    retention_statement!(failure_totals, schema, codec);
    retention_statement!(processed_since, schema, codec);
    retention_statement!(counters_since, schema, codec);
    retention_statement!(oldest_unresolved_failure, schema, codec);
    retention_statement!(consumers, schema, codec);
    retention_statement!(prune_candidates, schema, codec, lock = for_update);
    retention_statement!(delete_prunable_events, schema, codec);
    retention_statement!(remaining_events, schema, codec);
    retention_statement!(delete_failures_of, schema, codec);
    retention_statement!(delete_counters_before, schema, codec);
    retention_statement!(delete_settled_claims, schema, codec);
    retention_statement!(count_prunable, schema, codec);
    retention_statement!(leases, schema, codec, insert = do_nothing);

    fn prune_needs_lease<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<bool>> + Send {
        // A prune spans many transactions, and no lock of a session holds behind a pooler in
        // transaction mode: the lease row is the prune's lock here.
        let _ = conn;
        std::future::ready(Ok(true))
    }
}

crate::cursor::sql::cursor_statements!(
    Pg,
    schema = schema,
    codec = codec,
    insert_cursor = on_conflict_do_nothing,
    gap_id = returning,
    lock = for_update,
);

crate::claim::sql::claim_statements!(
    Pg,
    schema = schema,
    codec = codec,
    record_claim = upsert_returning,
    lock = for_update,
);

impl ChainSql for Pg {
    chain_statements!(schema, codec, reorg_id = returning, block_events = batch);
}

impl ReplaySql for Pg {
    replay_statements!(schema, codec, replay_id = returning);
}

crate::outbox::sql::outbox_statements!(
    Pg,
    schema = schema,
    codec = codec,
    insert = do_nothing,
    order_lock = advisory_lock,
    lock = for_update,
);

/// Rolls back every level above `depth`, as far as the connection lets it.
async fn roll_back_to<F, C: Db<F, Backend = Pg>>(conn: &mut C, depth: u32) {
    while conn.depth().is_ok_and(|now| now > depth) {
        if conn.rollback_level().await.is_err() {
            break;
        }
    }
}

impl MigrationsSql for Pg {
    const DIALECT: Dialect = Dialect::Postgres;

    async fn lock_migrations<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        timeout: Duration,
    ) -> Result<MigrationLock, crate::AdminError> {
        // One transaction around them all (PostgreSQL's DDL is transactional), holding a
        // transaction-scoped lock taken before anything is created: two sessions' `CREATE
        // TABLE IF NOT EXISTS` would race on the catalog (pg_type's unique index) and the
        // tracking table's key. Read committed, so that each statement after the wait sees
        // what the previous holder committed. Polled, so the wait has a bound without touching
        // the session's lock_timeout. Inside a caller's transaction, a savepoint of it.
        let depth = conn.depth()?;
        conn.begin_level().await?;
        let locked = async {
            if depth == 0 {
                conn.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                    .await?;
            }
            let wait = super::lock::Wait::start(timeout);
            while !try_transaction_lock(conn, MIGRATION_LOCK_KEY).await? {
                C::sleep(wait.next()?).await;
            }
            Ok::<(), crate::AdminError>(())
        }
        .await;
        match locked {
            Ok(()) => Ok(MigrationLock {
                sqlite: None,
                postgres: Some(depth),
            }),
            Err(error) => {
                roll_back_to(conn, depth).await;
                Err(error)
            }
        }
    }

    async fn unlock_migrations<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        lock: MigrationLock,
        applied: bool,
    ) -> QueryResult<()> {
        // Ending the transaction releases the lock: committed with what was applied, or
        // rolled back with all of it.
        let Some(depth) = lock.postgres else {
            return Ok(());
        };
        let committed = if applied {
            conn.commit_level().await
        } else {
            Ok(())
        };
        if !applied || committed.is_err() {
            roll_back_to(conn, depth).await;
        }
        committed
    }

    tracking_statements!();
}

impl DoctorSql for Pg {
    catalogue_statement!(
        table_exists,
        catalogue = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = "
    );
    catalogue_statement!(
        index_exists,
        catalogue =
            "SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = "
    );

    catalogue_statement!(
        column_exists,
        columns = (
            "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ",
            " AND column_name = "
        )
    );

    async fn backend_checks<F, C: Db<F, Backend = Self>>(conn: &mut C) -> QueryResult<Vec<Check>> {
        let encoding = diesel::select(diesel::dsl::sql::<Text>(
            "current_setting('server_encoding')",
        ))
        .get_result_on::<String>(conn)
        .await?;
        let (in_recovery, synchronous_commit) = diesel::select(diesel::dsl::sql::<(Bool, Text)>(
            "pg_is_in_recovery(), current_setting('synchronous_commit')",
        ))
        .get_result_on::<(bool, String)>(conn)
        .await?;
        let standbys = diesel::dsl::sql::<Nullable<Text>>(
            "SELECT sync_state FROM pg_stat_replication ORDER BY application_name",
        )
        .load_on::<Option<String>>(conn)
        .await?;
        let replication = crate::capabilities::Replication {
            in_recovery,
            standbys,
            synchronous_commit,
        };
        Ok(vec![
            Check::ok_if(
                "server_encoding",
                encoding == "UTF8",
                "UTF8",
                (
                    CheckStatus::Fail,
                    format!("{encoding}: event ids and consumer names are Unicode text, which this encoding refuses or mangles; create the database with ENCODING 'UTF8'"),
                ),
            ),
            replication.check(),
        ])
    }
}
