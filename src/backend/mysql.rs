//! MySQL and MariaDB (InnoDB): `INSERT .. ON DUPLICATE KEY UPDATE`, never `INSERT IGNORE`,
//! which would also hide truncation and conversion errors.

use std::time::Duration;

use diesel::mysql::{Mysql, MysqlConnection};
use diesel::prelude::*;
use diesel::sql_types::{Integer, Nullable, Text};

use super::sealed::HasInboxSql;
use crate::check::{Check, CheckStatus};
use crate::dialect::Dialect;
use crate::sql::{Db, DoctorSql, MigrationLock, MigrationsSql, Run};
use crate::tables::mysql as schema;

/// How MySQL binds keys (`VARBINARY`, as bytes, so no collation or charset conversion touches
/// them) and times (UTC `DATETIME(6)`).
pub(crate) mod codec {
    use chrono::{DateTime, NaiveDateTime, Utc};

    pub(crate) type Time = NaiveDateTime;
    pub(crate) type KeyOwned = Vec<u8>;

    pub(crate) fn key(part: &str) -> &[u8] {
        part.as_bytes()
    }

    pub(crate) fn key_string(key: KeyOwned) -> String {
        // Only ever written from validated `&str`s.
        String::from_utf8(key)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    pub(crate) fn time(time: DateTime<Utc>) -> Time {
        time.naive_utc()
    }

    pub(crate) fn utc(time: Time) -> DateTime<Utc> {
        time.and_utc()
    }

    /// `SUM(expr)` of an integer expression, as a `BIGINT`: MySQL sums integers as `DECIMAL`,
    /// and casts to a 64-bit integer as `SIGNED`.
    /// `expr` is SQL text, always a literal of the inbox's own.
    pub(crate) fn sum_i64(
        expr: &'static str,
    ) -> diesel::expression::SqlLiteral<diesel::sql_types::Nullable<diesel::sql_types::BigInt>>
    {
        diesel::dsl::sql(&format!("CAST(SUM({expr}) AS SIGNED)"))
    }
}

/// The named lock that lets one process at a time apply the inbox migrations, before the
/// database name.
const MIGRATION_LOCK_NAME: &str = "diesel_inbox.migrations";

/// Takes the session's named lock `name` (`GET_LOCK`), waiting up to `timeout`: `false`
/// when another session held it all that time. Named after the database too, as
/// PostgreSQL's advisory locks are per database, since `GET_LOCK`'s names are server-wide.
/// 1: taken, 0: timed out, NULL: an error took it.
pub(crate) async fn named_lock<F, C: Db<F, Backend = Mysql>>(
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
pub(crate) async fn release_named_lock<F, C: Db<F, Backend = Mysql>>(
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

impl crate::sql::Sql for Mysql {}

crate::inbox::sql::inbox_statements!(Mysql, schema = schema, codec = codec, dialect = mysql);

crate::dead_letter::sql::failure_statements!(
    Mysql,
    schema = schema,
    codec = codec,
    conflict = duplicated_keys,
    lock = for_update,
);

crate::retention::sql::retention_statements!(
    Mysql,
    schema = schema,
    codec = codec,
    lease_insert = plain,
    prune_lock = named_lock,
    lock = for_update,
);

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

crate::chain::sql::chain_statements!(
    Mysql,
    schema = schema,
    codec = codec,
    reorg_id = last_insert_id,
    block_events = batch,
);

crate::replay::sql::replay_statements!(
    Mysql,
    schema = schema,
    codec = codec,
    replay_id = last_insert_id,
);

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
pub(crate) async fn is_galera_node<F, C: Db<F, Backend = Mysql>>(
    conn: &mut C,
) -> QueryResult<bool> {
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
