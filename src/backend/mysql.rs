//! MySQL and MariaDB (InnoDB): `INSERT .. ON DUPLICATE KEY UPDATE`, never `INSERT IGNORE`,
//! which would also hide truncation and conversion errors.

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::mysql::{Mysql, MysqlConnection};
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::result::DatabaseErrorKind;
use diesel::sql_types::{BigInt, Binary, Datetime, Integer, Nullable, Text};

use super::sealed::HasInboxSql;
use super::Key;
use crate::check::{Check, CheckStatus};
use crate::dialect::Dialect;
use crate::rows::Recorded;
use crate::schema::mysql as schema;
use crate::sql::{
    Began, ChainSql, Db, DoctorSql, FailureSql, InboxSql, MigrationLock, MigrationsSql, ReplaySql,
    RetentionSql, Run,
};
use crate::state::{Counter, InboxState};

/// How MySQL binds keys (`VARBINARY`, as bytes, so no collation or charset conversion touches
/// them) and times (UTC `DATETIME(6)`).
mod codec {
    use chrono::{DateTime, NaiveDateTime, Utc};

    pub(super) type Time = NaiveDateTime;
    pub(super) type KeyOwned = Vec<u8>;

    pub(super) fn key(part: &str) -> &[u8] {
        part.as_bytes()
    }

    pub(super) fn key_string(key: KeyOwned) -> String {
        // Only ever written from validated `&str`s.
        String::from_utf8(key)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    pub(super) fn time(time: DateTime<Utc>) -> Time {
        time.naive_utc()
    }

    pub(super) fn utc(time: Time) -> DateTime<Utc> {
        time.and_utc()
    }

    /// `SUM(expr)` of an integer expression, as a `BIGINT`: MySQL sums integers as `DECIMAL`,
    /// and casts to a 64-bit integer as `SIGNED`.
    /// `expr` is SQL text, always a literal of the inbox's own.
    pub(super) fn sum_i64(
        expr: &'static str,
    ) -> diesel::expression::SqlLiteral<diesel::sql_types::Nullable<diesel::sql_types::BigInt>>
    {
        diesel::dsl::sql(&format!("CAST(SUM({expr}) AS SIGNED)"))
    }
}

row_mappings!(schema = schema, codec = codec);

/// The named lock that lets one prune run at a time (`GET_LOCK`), before the database name.
const PRUNE_LOCK_NAME: &str = "diesel_inbox.prune";

/// The named lock that lets one process at a time apply the inbox migrations, before the
/// database name.
const MIGRATION_LOCK_NAME: &str = "diesel_inbox.migrations";

/// Takes the session's named lock `name` (`GET_LOCK`), waiting up to `timeout`: `false`
/// when another session held it all that time. Named after the database too, as
/// PostgreSQL's advisory locks are per database, since `GET_LOCK`'s names are server-wide.
/// 1: taken, 0: timed out, NULL: an error took it.
async fn named_lock<F, C: Db<F, Backend = Mysql>>(
    conn: &mut C,
    name: &str,
    timeout: Duration,
) -> QueryResult<bool> {
    diesel::select(
        diesel::dsl::sql::<Nullable<Integer>>("GET_LOCK(LEFT(CONCAT(")
            .bind::<Text, _>(name)
            .sql(", ':', DATABASE()), 64), ")
            .bind::<diesel::sql_types::Double, _>(timeout.as_secs_f64())
            .sql(")"),
    )
    .get_result_on::<Option<i32>>(conn)
    .await
    .map(|taken| taken == Some(1))
}

/// Releases the session's named lock `name` that [`named_lock`] took.
async fn release_named_lock<F, C: Db<F, Backend = Mysql>>(
    conn: &mut C,
    name: &str,
) -> QueryResult<()> {
    diesel::select(
        diesel::dsl::sql::<Nullable<Integer>>("RELEASE_LOCK(LEFT(CONCAT(")
            .bind::<Text, _>(name)
            .sql(", ':', DATABASE()), 64))"),
    )
    .get_result_on::<Option<i32>>(conn)
    .await
    .map(drop)
}

impl HasInboxSql for MysqlConnection {}

/// `INSERT .. ON DUPLICATE KEY UPDATE deliveries = deliveries + 1` reports 1 affected row for an
/// insert and 2 for an update that changed the row (the update always changes `deliveries`),
/// with or without the client's found-rows flag.
const INSERTED: usize = 1;

/// Inserts an inbox row, or counts one more delivery on the existing one: the statement
/// Diesel's upsert builder makes, written out, since Diesel prepares a built upsert anew each
/// time, a round trip more, and keeps this one.
struct RecordDelivery<'a> {
    consumer: &'a [u8],
    event_id: &'a [u8],
    now: codec::Time,
    payload_hash: Option<&'a [u8]>,
}

impl QueryFragment<Mysql> for RecordDelivery<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
        out.push_sql(
            "INSERT INTO diesel_inbox_events \
             (consumer, event_id, processed_at, last_seen_at, deliveries, payload_hash) VALUES (",
        );
        out.push_bind_param::<Binary, _>(&self.consumer)?;
        out.push_sql(", ");
        out.push_bind_param::<Binary, _>(&self.event_id)?;
        out.push_sql(", ");
        out.push_bind_param::<Datetime, _>(&self.now)?;
        out.push_sql(", ");
        out.push_bind_param::<Datetime, _>(&self.now)?;
        out.push_sql(", 1, ");
        out.push_bind_param::<Nullable<Binary>, _>(&self.payload_hash)?;
        out.push_sql(") ON DUPLICATE KEY UPDATE deliveries = deliveries + 1, last_seen_at = ");
        out.push_bind_param::<Datetime, _>(&self.now)
    }
}

impl<'a> RecordDelivery<'a> {
    fn new(key: Key<'a>, now: DateTime<Utc>, payload_hash: Option<&'a [u8]>) -> Self {
        Self {
            consumer: codec::key(key.0),
            event_id: codec::key(key.1),
            now: codec::time(now),
            payload_hash,
        }
    }
}

/// What `RecordDelivery` did, from the rows it changed: inserted the row (the event is new),
/// or counted a delivery on the existing one, which the transaction now holds locked and
/// reads, for want of `RETURNING`.
async fn recorded<F, C: Db<F, Backend = Mysql>>(
    conn: &mut C,
    key: Key<'_>,
    affected: usize,
) -> QueryResult<Recorded> {
    use schema::diesel_inbox_events::dsl as t;
    if affected == INSERTED {
        return Ok(Recorded::New);
    }
    let row = t::diesel_inbox_events
        .find((codec::key(key.0), codec::key(key.1)))
        .select(rows::existing_columns())
        .limit(1)
        .get_result_on::<rows::ExistingColumns>(conn)
        .await?;
    Ok(super::recorded(super::known(rows::existing(row))?))
}

impl QueryId for RecordDelivery<'_> {
    type QueryId = RecordDelivery<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> RunQueryDsl<Conn> for RecordDelivery<'_> {}

/// Adds to a counter row, or inserts it: written out for the same reason as `RecordDelivery`.
struct BumpCounter<'a> {
    consumer: &'a [u8],
    counter: Counter,
    bucket: codec::Time,
    by: i64,
}

impl QueryFragment<Mysql> for BumpCounter<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
        out.push_sql(
            "INSERT INTO diesel_inbox_counters (consumer, counter, bucket, total) VALUES (",
        );
        out.push_bind_param::<Binary, _>(&self.consumer)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&self.counter)?;
        out.push_sql(", ");
        out.push_bind_param::<Datetime, _>(&self.bucket)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&self.by)?;
        out.push_sql(") ON DUPLICATE KEY UPDATE total = total + ");
        out.push_bind_param::<BigInt, _>(&self.by)
    }
}

impl QueryId for BumpCounter<'_> {
    type QueryId = BumpCounter<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> RunQueryDsl<Conn> for BumpCounter<'_> {}

impl InboxSql for Mysql {
    async fn record_delivery<F, C: crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        now: DateTime<Utc>,
        payload_hash: Option<&[u8]>,
    ) -> QueryResult<Recorded> {
        let affected = RecordDelivery::new(key, now, payload_hash)
            .execute_on(conn)
            .await?;
        recorded(conn, key, affected).await
    }

    async fn begin_and_record_delivery<F, C: crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        idle_timeout: Option<Duration>,
        key: Key<'_>,
        now: DateTime<Utc>,
        payload_hash: Option<&[u8]>,
    ) -> Option<QueryResult<Began>> {
        // No variable lasts one transaction here: the idle bound is the server's (`begin_top`).
        let _ = idle_timeout;
        let statement = crate::sql::BeginThen(RecordDelivery::new(key, now, payload_hash));
        let affected = match crate::sql::compound(conn, statement).await? {
            Ok(affected) => affected,
            Err(error) => return Some(Err(error)),
        };
        let recorded = recorded(conn, key, affected).await;
        if recorded.is_err() {
            super::roll_back_uncounted(conn).await;
        }
        Some(recorded.map(Began::recorded))
    }

    async fn record_deliveries<F, C: crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        items: &[(&str, Option<&[u8]>)],
        now: DateTime<Utc>,
    ) -> QueryResult<Vec<crate::rows::Listed<Recorded>>> {
        use crate::sql::Run;
        use schema::diesel_inbox_events::dsl as t;
        let when = codec::time(now);
        let mut found = std::collections::HashMap::with_capacity(items.len());
        for chunk in items.chunks(super::ROWS_PER_STATEMENT) {
            let new_rows: Vec<_> = chunk
                .iter()
                .map(|&(event_id, hash)| {
                    new_inbox_row!(schema, codec, consumer, event_id, when, hash)
                })
                .collect();
            diesel::insert_into(t::diesel_inbox_events)
                .values(new_rows)
                .on_conflict(diesel::dsl::DuplicatedKeys)
                .do_update()
                .set((
                    t::deliveries.eq(t::deliveries + 1),
                    t::last_seen_at.eq(when),
                ))
                .execute_on(conn)
                .await?;
            // The affected-row total cannot say which rows are new, but the rows can: every
            // one is locked by this transaction now, and only a fresh insert has 1 delivery.
            let ids: Vec<&[u8]> = chunk
                .iter()
                .map(|&(event_id, _)| codec::key(event_id))
                .collect();
            let read = t::diesel_inbox_events
                .filter(
                    t::consumer
                        .eq(codec::key(consumer))
                        .and(t::event_id.eq_any(ids)),
                )
                .select((t::event_id, rows::existing_columns()))
                .load_on::<(codec::KeyOwned, rows::ExistingColumns)>(conn)
                .await?;
            found.extend(
                read.into_iter()
                    .map(|(id, row)| (codec::key_string(id), rows::existing(row))),
            );
        }
        super::in_order(items, found)
    }

    async fn insert_held_row<F, C: crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        now: DateTime<Utc>,
        state: InboxState,
    ) -> QueryResult<bool> {
        use crate::sql::Run;
        use schema::diesel_inbox_events::dsl as t;
        let now = codec::time(now);
        // A plain insert, as `ON CONFLICT DO NOTHING` elsewhere: a duplicate key fails this
        // statement alone (InnoDB keeps the transaction) and leaves the existing row as it is.
        let inserted = diesel::insert_into(t::diesel_inbox_events)
            .values((
                t::consumer.eq(codec::key(key.0)),
                t::event_id.eq(codec::key(key.1)),
                t::state.eq(state),
                t::processed_at.eq(now),
                t::last_seen_at.eq(now),
                t::deliveries.eq(1),
            ))
            .execute_on(conn)
            .await;
        match inserted {
            Ok(_) => Ok(true),
            Err(diesel::result::Error::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    inbox_statement!(note_payload_conflict, schema, codec);
    inbox_statement!(store_result, schema, codec);
    inbox_statement!(set_inbox_state, schema, codec);
    inbox_statement!(delete_inbox_row, schema, codec);
    inbox_statement!(inbox_row, schema, codec, rows);
    inbox_statement!(inbox_rows, schema, rows);

    async fn bump_counter<F, C: crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        (consumer, event_id): Key<'_>,
        counter: Counter,
        by: i64,
        now: DateTime<Utc>,
    ) -> QueryResult<()> {
        use crate::sql::Run;
        let bucket = super::counter_bucket(now) + super::counter_stripe(event_id);
        BumpCounter {
            consumer: codec::key(consumer),
            counter,
            bucket: codec::time(bucket),
            by,
        }
        .execute_on(conn)
        .await
        .map(drop)
    }
}

impl FailureSql for Mysql {
    failure_statement!(
        record_failure,
        schema,
        codec,
        conflict = diesel::dsl::DuplicatedKeys
    );
    failure_statement!(failure, schema, codec, rows, lock = for_update);
    failure_statement!(failures, schema, codec, rows);
    failure_statement!(set_failure_state, schema, codec);
    failure_statement!(reset_attempts, schema, codec);
    failure_statement!(append_history, schema, codec);
    failure_statement!(history, schema, codec, rows);
}

impl RetentionSql for Mysql {
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
    retention_statement!(leases, schema, codec, insert = plain);

    async fn try_prune_lock<F, C: Db<F, Backend = Self>>(conn: &mut C) -> QueryResult<bool> {
        // A named lock of the session, so it outlives the batches' transactions; a timeout
        // of 0, so a second runner is told at once.
        named_lock(conn, PRUNE_LOCK_NAME, Duration::ZERO).await
    }

    async fn release_prune_lock<F, C: Db<F, Backend = Self>>(conn: &mut C) -> QueryResult<()> {
        release_named_lock(conn, PRUNE_LOCK_NAME).await
    }

    async fn prune_needs_lease<F, C: Db<F, Backend = Self>>(conn: &mut C) -> QueryResult<bool> {
        // `GET_LOCK` is local to a Galera node, and the other nodes write the same tables.
        is_galera_node(conn).await
    }
}

crate::cursor::sql::cursor_statements!(
    Mysql,
    schema = schema,
    codec = codec,
    insert_cursor = insert_or_ignore,
    gap_id = last_insert_id,
    lock = for_update,
    begin_and_advance = compound,
);

crate::claim::sql::claim_statements!(
    Mysql,
    schema = schema,
    codec = codec,
    record_claim = update_then_read,
    lock = for_update,
);

impl ChainSql for Mysql {
    chain_statements!(
        schema,
        codec,
        reorg_id = last_insert_id,
        block_events = batch
    );
}

impl ReplaySql for Mysql {
    replay_statements!(schema, codec, replay_id = last_insert_id);
}

crate::outbox::sql::outbox_statements!(
    Mysql,
    schema = schema,
    codec = codec,
    insert = unique_error,
    order_lock = aggregate_row,
    lock = for_update,
    followers = false,
);

impl MigrationsSql for Mysql {
    const DIALECT: Dialect = Dialect::Mysql;

    async fn lock_migrations<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        timeout: Duration,
    ) -> Result<MigrationLock, crate::AdminError> {
        // The server waits up to the bound (MariaDB takes fractions of a second).
        let started = std::time::Instant::now();
        if !named_lock(conn, MIGRATION_LOCK_NAME, timeout).await? {
            return Err(crate::AdminError::MigrationLocked {
                waited: started.elapsed(),
            });
        }
        Ok(MigrationLock {
            sqlite: None,
            postgres: None,
        })
    }

    async fn unlock_migrations<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        _: MigrationLock,
        _: bool,
    ) -> QueryResult<()> {
        release_named_lock(conn, MIGRATION_LOCK_NAME).await
    }

    tracking_statements!();
}

impl DoctorSql for Mysql {
    catalogue_statement!(
        table_exists,
        catalogue = "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = "
    );
    catalogue_statement!(
        index_exists,
        catalogue = "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND INDEX_NAME = "
    );

    catalogue_statement!(
        column_exists,
        columns = (
            "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ",
            " AND COLUMN_NAME = "
        )
    );

    async fn backend_checks<F, C: Db<F, Backend = Self>>(conn: &mut C) -> QueryResult<Vec<Check>> {
        // The keys must compare byte for byte: under a collation, ids differing in case,
        // accents or trailing spaces would be one event.
        let columns = diesel::dsl::sql::<(Text, Text)>(
            "SELECT CONCAT(TABLE_NAME, '.', COLUMN_NAME), DATA_TYPE FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() \
             AND TABLE_NAME IN ('diesel_inbox_events', 'diesel_inbox_failures', 'diesel_inbox_failure_log', 'diesel_inbox_counters', 'diesel_inbox_claims') \
             AND COLUMN_NAME IN ('consumer', 'event_id') ORDER BY 1",
        )
        .load_on::<(String, String)>(conn)
        .await?;
        let textual: Vec<String> = columns
            .iter()
            .filter(|(_, data_type)| !data_type.eq_ignore_ascii_case("varbinary"))
            .map(|(column, data_type)| format!("{column} is {data_type}"))
            .collect();
        let detail = if columns.is_empty() {
            "no key columns found: apply the inbox migrations".to_owned()
        } else {
            format!("{}: ids differing only in case, accents or trailing spaces would be one event; apply the inbox's own migrations, which make them VARBINARY", textual.join(", "))
        };
        let mut checks = vec![Check::ok_if(
            "binary_keys",
            !columns.is_empty() && textual.is_empty(),
            format!("{} key columns are VARBINARY", columns.len()),
            (CheckStatus::Fail, detail),
        )];
        checks.extend(engine(conn).await?.checks());
        Ok(checks)
    }
}

/// A system variable as text; `None` where the server has no such variable (`wsrep_on` and
/// `idle_transaction_timeout` are MariaDB's).
async fn variable<F, C: Db<F, Backend = Mysql>>(
    conn: &mut C,
    name: &'static str,
) -> QueryResult<Option<String>> {
    let read = diesel::select(diesel::dsl::sql::<Nullable<Text>>(&format!(
        "CAST(@@{name} AS CHAR)"
    )))
    .get_result_on::<Option<String>>(conn)
    .await;
    match read {
        Err(diesel::result::Error::DatabaseError(_, info))
            if info.message().contains("Unknown system variable") =>
        {
            Ok(None)
        }
        read => read,
    }
}

/// Whether this server is a Galera node with replication on (`wsrep_on`).
async fn is_galera_node<F, C: Db<F, Backend = Mysql>>(conn: &mut C) -> QueryResult<bool> {
    let wsrep_on = variable(conn, "global.wsrep_on").await?;
    Ok(matches!(wsrep_on.as_deref(), Some("1" | "ON")))
}

/// What this server is: a Galera node or not, and what bounds a stalled transaction.
async fn engine<F, C: Db<F, Backend = Mysql>>(
    conn: &mut C,
) -> QueryResult<crate::capabilities::MysqlEngine> {
    let number = |value: Option<String>| value.and_then(|value| value.parse::<u64>().ok());
    Ok(crate::capabilities::MysqlEngine {
        galera: is_galera_node(conn).await?,
        auto_increment_increment: number(variable(conn, "auto_increment_increment").await?)
            .unwrap_or(1),
        idle_transaction_timeout: number(variable(conn, "idle_transaction_timeout").await?),
        wait_timeout: number(variable(conn, "wait_timeout").await?).unwrap_or(28_800),
    })
}
