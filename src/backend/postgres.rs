//! PostgreSQL: a delivery's plain `INSERT` of the inbox row travels with the `BEGIN`, and the
//! unique key refuses a duplicate's, whose delivery `INSERT .. ON CONFLICT DO UPDATE ..
//! RETURNING` then records on the row.

use std::time::Duration;

use diesel::pg::{Pg, PgConnection};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};

use super::sealed::HasInboxSql;
use crate::check::{Check, CheckStatus};
use crate::dialect::Dialect;
use crate::sql::{Db, DoctorSql, MigrationLock, MigrationsSql, Run};
use crate::tables::postgres as schema;

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

impl crate::sql::Sql for Pg {}

crate::inbox::sql::inbox_statements!(Pg, schema = schema, codec = codec, dialect = postgres);

crate::dead_letter::sql::failure_statements!(
    Pg,
    schema = schema,
    codec = codec,
    conflict = key_columns,
    lock = for_update,
);

crate::retention::sql::retention_statements!(
    Pg,
    schema = schema,
    codec = codec,
    lease_insert = do_nothing,
    prune_lock = lease_row,
    lock = for_update,
);

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

crate::chain::sql::chain_statements!(
    Pg,
    schema = schema,
    codec = codec,
    reorg_id = returning,
    block_events = batch,
);

crate::replay::sql::replay_statements!(Pg, schema = schema, codec = codec, replay_id = returning,);

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
