//! MySQL and MariaDB (InnoDB): `INSERT .. ON DUPLICATE KEY UPDATE`, never `INSERT IGNORE`,
//! which would also hide truncation and conversion errors.

use std::time::Duration;

use diesel::mysql::{Mysql, MysqlConnection};
use diesel::prelude::*;
use diesel::sql_types::Text;

use super::sealed::HasInboxSql;
use crate::check::{Check, CheckStatus};
use crate::dialect::Dialect;
use crate::sql::{Db, DoctorSql, MigrationLock, MigrationsSql, Run};
use crate::tables::mysql as schema;

pub(crate) mod codec;
pub(crate) mod server;
use server::variable;
pub(crate) use server::{is_galera_node, named_lock, release_named_lock};

/// The named lock that lets one process at a time apply the inbox migrations, before the
/// database name.
const MIGRATION_LOCK_NAME: &str = "diesel_inbox.migrations";

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
