//! What the areas' MySQL statements ask the server: its named locks, and whether it is a
//! Galera node. Below the statements: it names none of them.

use std::time::Duration;

use diesel::mysql::Mysql;
use diesel::prelude::*;
use diesel::sql_types::{Integer, Nullable, Text};

use crate::sql::{Db, Run};

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

/// A system variable as text; `None` where the server has no such variable (`wsrep_on` and
/// `idle_transaction_timeout` are MariaDB's).
pub(crate) async fn variable<F, C: Db<F, Backend = Mysql>>(
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
