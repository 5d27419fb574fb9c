//! A health check of the inbox's database: is the schema applied and current, is every table,
//! column and index that the migrations create there, are the backend's settings the ones the
//! inbox relies on.
//!
//! The objects checked are the migrations' own list (held against their SQL by a test), and a
//! missing one's check names the SQL that recreates it ([`Check::remedy`]): the `CREATE INDEX`,
//! `CREATE TABLE` or `ALTER TABLE .. ADD COLUMN` statement of its migration, for the backend.
//!
//! [`check`] reads only. Run it from the application, on one of its own connections (so the
//! connection settings it reports are the application's), or through `diesel-inbox doctor`.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_inbox::doctor::{self, CheckStatus};
//!
//! let dir = tempfile::tempdir()?;
//! let mut conn = SqliteConnection::establish(&dir.path().join("app.db").display().to_string())?;
//! diesel_inbox::SqliteSetup::default().apply(&mut conn)?;
//! diesel_inbox::run_pending_migrations(&mut conn)?;
//!
//! for check in doctor::check(&mut conn)? {
//!     assert_eq!(check.status, CheckStatus::Ok, "{}: {}", check.name, check.detail);
//! }
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What `doctor` reports beyond a single server (a Galera node, a primary's replication, a
//! pooler in front of PostgreSQL) is there because of what follows.
//!
//! # Beyond one server
//!
//! **Bounded waits.** No delivery, relay pass or prune waits without end on a server that
//! stopped answering. Every transaction the crate opens is bounded by
//! [`RetryPolicy::idle_timeout`](crate::RetryPolicy::idle_timeout) (default one minute;
//! [`Inbox::retry`](crate::Inbox::retry) sets it for deliveries and prunes,
//! [`Relay::retry`](crate::outbox::Relay::retry) for relay passes): past it the server ends
//! the session, and what was waiting gets `Error::ConnectionLost` (or `Error::CommitUnknown` at
//! the commit), so `Ack::Redeliver`, nothing committed, and a connection the pool discards as
//! broken.
//!
//! - PostgreSQL: `SET LOCAL idle_in_transaction_session_timeout`, sent in the `BEGIN`'s own
//!   message, so it costs no round trip.
//! - MariaDB has no variable that lasts one transaction, and a session variable set per
//!   delivery would cost a round trip each. There the bound is the server's:
//!   `idle_transaction_timeout` for a session idle inside a transaction, and, on Galera,
//!   `wait_timeout` (below). Set them in the server's configuration
//!   (`SET GLOBAL idle_transaction_timeout = 60`), or per session in your pool's connection
//!   setup. `doctor` warns when `idle_transaction_timeout` is 0, and on a Galera node when
//!   `wait_timeout` is above 600 s. Oracle MySQL has no `idle_transaction_timeout`.
//! - Why not a watchdog thread that kills a stuck session from a second connection? It needs
//!   the session's id, which Diesel does not expose without a round trip per delivery, and it
//!   reaches a hung server no better than the stuck connection does. Diesel's MySQL connection
//!   has no read-timeout option: adding `MYSQL_OPT_READ_TIMEOUT` to Diesel upstream is the
//!   client-side complement.
//! - A host that vanished (no reset, no reply) is a TCP matter: on PostgreSQL, add
//!   `keepalives_idle=10&tcp_user_timeout=30000` (libpq) to the URL.
//!
//! **Lost connections, always recognised.** Every message libpq, tokio-postgres, the MariaDB
//! client and `mysql_async` give for a dead connection is `ConnectionLost`, TLS ones included
//! (`SSL SYSCALL error: EOF detected`). So is any later call on a connection that died: Diesel
//! reports those as `UnableToSendCommand` or a broken transaction manager, and the inbox treats
//! both as a lost connection. Reconnect on `ConnectionLost`.
//!
//! **MariaDB Galera Cluster.** Exactly once holds on a Galera cluster: a duplicate delivered to
//! two nodes at once conflicts at certification, and the loser's commit fails with a deadlock
//! (1213), which the inbox retries as contention. What differs, and what `doctor` reports on a
//! node (`wsrep_on`):
//!
//! - `GET_LOCK`, `FOR UPDATE` and `SKIP LOCKED` are local to a node; what the crate does
//!   instead is guarded by certification, so prune and the relay may run on any nodes. A prune
//!   on a Galera node holds a lease row as well (`diesel_inbox_leases`, name `prune`): taken in
//!   a transaction of its own, renewed by each batch, deleted at the end; two nodes taking it at
//!   once conflict at certification, and the loser is told a prune is running. A prune that
//!   died leaves it for at most [`PRUNE_LEASE_TERM`](crate::retention::PRUNE_LEASE_TERM) (one
//!   minute); its times are the clients' clocks, so keep them in sync (NTP). Relays on two nodes
//!   that take the same rows both write those rows' leases: one fails certification, retries,
//!   and finds them leased, so each takes disjoint rows, and each aggregate's order holds.
//! - Positions (`auto_increment`) step by `auto_increment_increment`, one per node, so outbox
//!   positions are increasing but not consecutive.
//! - A brute-force abort (another node's commit of the same row) ends a local transaction
//!   between two of its statements, and the statements after it would autocommit one by one.
//!   So the inbox's own transactions on MariaDB are fenced: they run with `autocommit` off and
//!   begin with a savepoint, `diesel_inbox_open`. A statement after such an end opens a
//!   transaction of its own, without that savepoint; the inbox's `COMMIT` finds the savepoint
//!   gone, rolls that transaction back and retries the delivery as a deadlock. The same holds
//!   for a deadlock that a handler swallows, on a single server too. (Oracle MySQL, without
//!   compound statements, gets no fence: the check before its `COMMIT` refuses to report
//!   success, but what autocommitted stays.)
//! - `KILL CONNECTION` of a session inside a transaction may *commit* that transaction on
//!   Galera.
//! - Nodes that leave the primary component answer `WSREP has not yet prepared node for
//!   application use`, which the inbox reports as a lost connection: reconnect, to another node.
//! - A delivery can stall: now and then a brute-force abort swallows the reply to a statement.
//!   The client waits while the server shows the session `Sleep`, outside any transaction, so
//!   `idle_transaction_timeout` does not apply; only `wait_timeout` ends the session, and with
//!   it the wait, as a lost connection (`Ack::Redeliver`). Keep it short on Galera (the test bed
//!   uses 10 s) and let the pool reconnect idle connections.
//!
//! Measured by the repository's `diesel-inbox-tests/tests/cluster.rs` (3 nodes on one 2-core
//! machine, 6 workers, every id delivered by all of them at once, a worker reconnecting to the
//! next node on a lost connection; run with 300 and 400 ids and `wait_timeout` 20 s):
//!
//! | scenario | deliveries | ids = effects | lost | doubled | stalls ended by `wait_timeout` | errors (all `Redeliver`) |
//! |---|---|---|---|---|---|---|
//! | every id on every node at once | 1,853 | 300 | 0 | 0 | 10 | 53 lost connections |
//! | node 3 killed (`SIGKILL`) mid-run, then rejoined | 2,441 | 400 | 0 | 0 | 8 | 41 lost connections |
//!
//! Two prunes of 2,000 old rows started together on nodes 1 and 2, five rounds: in every round
//! one deleted all 2,000 rows and the other was told a prune is running (with `GET_LOCK` alone
//! both ran, every round). Two relays on nodes 1 and 2 over 300 messages of 20 aggregates: each
//! message published once, each aggregate's in order, the rows shared between them.
//!
//! **PostgreSQL failover.** A standby promoted after the primary fails has every commit the
//! primary acknowledged only if the primary waited for it:
//!
//! - with asynchronous streaming replication (the default), effects answered `Processed`, and
//!   acked to the broker, can vanish at the promotion with their inbox rows, and their events
//!   are then never redelivered, or processed again if they are;
//! - exactly once across a failover needs `synchronous_standby_names` naming the standby and
//!   `synchronous_commit` of `on` (or `remote_apply`); `doctor` checks both on the primary;
//! - connect with a multi-host URL and `target_session_attrs=read-write`
//!   (`postgres://app@db1,db2/app?target_session_attrs=read-write`): a pool's new connections
//!   then find the promoted primary. Deliveries in flight at the failover get `ConnectionLost`
//!   or `CommitUnknown`, so `Ack::Redeliver`, and the redelivery settles them.
//!
//! Measured by the same file: 2 workers deliver each of 1,500 ids through the multi-host URL;
//! two thirds of the way in the primary is killed (`SIGKILL`) and the standby promoted:
//!
//! | replication | deliveries | effects on the new primary | acknowledged effects lost | doubled | errors (all `Redeliver`) |
//! |---|---|---|---|---|---|
//! | synchronous (`synchronous_standby_names`, `synchronous_commit = on`) | 3,002 | 1,500 | 0 | 0 | 2 lost connections |
//! | asynchronous, the standby lagging from a third of the way in | 3,002 | 1,004 | 496 | 0 | 2 lost connections |
//!
//! **Further engines, on paper** (not tested here). CockroachDB and YugabyteDB would take the
//! PostgreSQL path, TiDB and Vitess the MySQL one. Where advisory locks are missing or lock
//! nothing (CockroachDB; YugabyteDB before v2025.1), one prune at a time needs the prune lease
//! row, as on Galera; TiDB has no `SKIP LOCKED`; none of them gives consecutive positions.
//! The crate detects Galera, not these engines: where a statement is missing the engine refuses
//! it and the crate reports that error, but CockroachDB's advisory locks succeed and lock
//! nothing, so there run prune and migrations from one process at a time.
//!
//! # Behind a connection pooler
//!
//! With PgBouncer in transaction pooling mode each transaction may run on another server
//! connection, and whatever a session keeps between transactions goes elsewhere. What that
//! needs:
//!
//! - **Diesel's statement cache off**, on every connection the application opens:
//!   `conn.set_prepared_statement_cache_size(diesel::connection::CacheSize::Disabled)` (in a
//!   pool's connection customizer). With the cache on, a statement prepared on one server
//!   connection is executed on another, and deliveries fail with
//!   `prepared statement "__diesel_stmt_1" already exists`. Without it, Diesel sends each
//!   statement with its binds in one unnamed `Parse`/`Bind`/`Execute`: no round trip is added,
//!   but the server plans every statement anew. The bench's row
//!   `inbox, statement cache off / inbox` measures it: 1.00 on PostgreSQL 15 (1,803 against
//!   1,817 deliveries a second, `--backends postgres --events 1000 --rounds 6`): the inbox's
//!   own `BEGIN`, first insert and `COMMIT` travel as simple-protocol text either way.
//! - **Or PgBouncer 1.21 or later with `max_prepared_statements`** set above zero: it tracks
//!   prepared statements per client and the cache may stay on.
//!
//! What the crate does there, with nothing to configure:
//!
//! - **No lock of a session.** [`run_pending_migrations`](crate::run_pending_migrations)
//!   applies every pending migration in one transaction, which takes the transaction-scoped
//!   `pg_advisory_xact_lock` first, so the lock never outlives its holder. A prune spans many
//!   transactions: its lock is the lease row `prune` of `diesel_inbox_leases`, renewed by every
//!   batch and deleted at the end. The outbox's per-aggregate ordering lock is
//!   transaction-scoped.
//! - **Nothing set on a session.** Every setting is `SET LOCAL` (the idle bound, the commit
//!   that does not wait for the disk) and ends with its transaction.
//! - **`doctor` says so.** It asks the URL's host and port for PgBouncer's own database
//!   `pgbouncer` and warns when PgBouncer answers (its `pooler` check), with what to do. The
//!   CLI itself runs with Diesel's statement cache off on PostgreSQL, so every command works
//!   through such a pooler.
//!
//! The repository's `scripts/test` runs the PostgreSQL suite behind PgBouncer
//! (`scripts/pgbouncer`), and a fleet of six replicas in processes of their own, three rounds
//! on a fresh database: every replica migrates, no advisory lock is left on the server after
//! they exit, and prunes and migrations then run one after another.

pub use crate::check::{Check, CheckStatus};
use crate::engine::run_ready;
use crate::migrations::objects::{Index, Table, INDEXES, TABLES};
use crate::migrations::{created_table, version_of_migration, TRACKING_TABLE};
use crate::sql::{Blocking, Db, DoctorSql, MigrationsSql, Sql};
use crate::{Error, InboxConnection};

/// Checks `conn`'s database: every inbox migration applied; every table, column and index
/// the migrations create present (a missing one's check says which statement recreates it);
/// and the backend's settings (PostgreSQL: a UTF8 server encoding; SQLite: WAL journal and a
/// busy timeout on this connection; MySQL/MariaDB: binary key columns). Reads only.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::doctor::CheckStatus;
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let checks = diesel_inbox::doctor::check(&mut conn)?;
/// assert!(checks.iter().all(|check| check.status != CheckStatus::Fail), "{checks:?}");
/// // A connection without `SqliteSetup` applied: no WAL journal, no busy timeout.
/// let warned: Vec<_> = checks.iter().filter(|c| c.status == CheckStatus::Warn).map(|c| c.name).collect();
/// assert!(warned.contains(&"busy_timeout"), "{warned:?}");
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`Error::Database`] when a check's query fails for another reason than what it checks (a
/// lost connection, missing permissions on the catalog).
pub fn check<C: InboxConnection>(conn: &mut C) -> Result<Vec<Check>, Error> {
    run_ready(check_in::<Blocking, _>(conn))
}

/// [`check`] in either flavour.
pub(crate) async fn check_in<F, C: Db<F, Backend: Sql>>(conn: &mut C) -> Result<Vec<Check>, Error> {
    let mut checks = vec![schema(conn).await?];
    let mut missing_tables = Vec::new();
    for table in TABLES {
        let check = table_check(conn, table).await?;
        if check.status == CheckStatus::Fail && !C::Backend::table_exists(conn, table.name).await? {
            missing_tables.push(table.name);
        }
        checks.push(check);
    }
    for index in INDEXES {
        checks.push(index_check(conn, index, &missing_tables).await?);
    }
    checks.extend(C::Backend::backend_checks(conn).await?);
    Ok(checks)
}

/// Whether `table` exists with every column; if not, the statement that recreates what is
/// missing, from its migration's SQL.
async fn table_check<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    table: &Table,
) -> diesel::QueryResult<Check> {
    let created = created_table(<C::Backend as MigrationsSql>::DIALECT, table.name);
    if !C::Backend::table_exists(conn, table.name).await? {
        let found = format!(
            "missing, though created by migration {} ({})",
            version_of_migration(table.migration).unwrap_or_default(),
            table.migration
        );
        return Ok(match created {
            Some(created) => Check::fixed_by(table.check, &found, created.statement),
            None => Check::new(table.check, CheckStatus::Fail, found),
        });
    }
    let mut missing = Vec::new();
    for column in table.columns {
        if !C::Backend::column_exists(conn, table.name, column).await? {
            missing.push(*column);
        }
    }
    if missing.is_empty() {
        return Ok(Check::new(
            table.check,
            CheckStatus::Ok,
            format!("present, with its {} columns", table.columns.len()),
        ));
    }
    let definitions: Vec<String> = missing
        .iter()
        .filter_map(|column| {
            let created = created.as_ref()?;
            let (_, definition) = created.columns.iter().find(|(name, _)| name == column)?;
            Some(format!(
                "ALTER TABLE {} ADD COLUMN {definition}",
                table.name
            ))
        })
        .collect();
    let found = format!("missing the columns {}", missing.join(", "));
    Ok(Check::fixed_by(table.check, &found, definitions.join("; ")))
}

/// Whether `index` exists; if not, the statement that recreates it (after its table, when
/// that is missing too).
async fn index_check<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    index: &Index,
    missing_tables: &[&str],
) -> diesel::QueryResult<Check> {
    if missing_tables.contains(&index.table) {
        return Ok(Check::fixed_by(
            index.check,
            &format!(
                "missing with its table {} (recreate that first)",
                index.table
            ),
            index.create_statement(),
        ));
    }
    let exists = if index.unique {
        C::Backend::unique_index_exists(conn, index.table, index.name).await?
    } else {
        C::Backend::index_exists(conn, index.name).await?
    };
    Ok(if exists {
        Check::new(index.check, CheckStatus::Ok, "present")
    } else {
        Check::fixed_by(index.check, "missing", index.create_statement())
    })
}

/// Whether every embedded migration is recorded as applied; where the tables exist but no
/// migration is recorded, the schema came another way (installed into the application's
/// migrations), which this cannot see into. Missing tables are the tables' own checks.
async fn schema<F, C: Db<F, Backend: Sql>>(conn: &mut C) -> diesel::QueryResult<Check> {
    const NAME: &str = "schema";
    let mut none = true;
    for table in TABLES {
        none &= !C::Backend::table_exists(conn, table.name).await?;
    }
    let tracked = C::Backend::table_exists(conn, TRACKING_TABLE).await?;
    if none && !tracked {
        return Ok(Check::new(
            NAME,
            CheckStatus::Fail,
            "no inbox table and no inbox migration applied: call diesel_inbox::run_pending_migrations at the application's start-up, or install them into its migrations folder with `diesel-inbox migration install` and run them with the Diesel CLI",
        ));
    }
    let installed = "diesel_inbox_migrations records no inbox migration (installed into the app's migrations?): cannot tell whether the schema is current; the table, column and index checks below still apply";
    if !tracked {
        return Ok(Check::new(NAME, CheckStatus::Warn, installed));
    }
    let pending = crate::migrations::pending(conn).await?;
    Ok(match pending.len() {
        0 => Check::new(NAME, CheckStatus::Ok, "every inbox migration is applied"),
        n if n == crate::migrations::COUNT => Check::new(NAME, CheckStatus::Warn, installed),
        _ => Check::new(
            NAME,
            CheckStatus::Fail,
            format!(
                "inbox migrations not applied: {}; call diesel_inbox::run_pending_migrations at the application's start-up (or print their SQL with `diesel-inbox migration print` and run it)",
                pending.join(", ")
            ),
        ),
    })
}

/// Whether the PostgreSQL URL `url` reaches PgBouncer rather than the server itself, as the
/// check `pooler`, and what follows. Opens a second connection, to the same host and port and
/// user, asking for PgBouncer's own database `pgbouncer`: PgBouncer's console answers there (it
/// refuses the prepared `SET` Diesel sends on connecting, `extended query protocol not
/// supported by admin console`, or a user that is not its admin with `not allowed`), where
/// PostgreSQL has no such database.
/// Anything else is taken for PostgreSQL itself.
///
/// Behind PgBouncer in transaction pooling mode, each transaction may run on another server
/// connection. The inbox takes no lock of a session there (its locks are transaction-scoped or
/// lease rows) and sets nothing on a session (`SET LOCAL` only); the application must disable
/// Diesel's prepared statement cache on every connection
/// (`set_prepared_statement_cache_size(CacheSize::Disabled)`), unless PgBouncer is 1.21 or
/// later with `max_prepared_statements` set. The check warns with that.
#[cfg(feature = "postgres")]
pub fn pooler(url: &str) -> Check {
    use diesel::connection::SimpleConnection;
    use diesel::Connection;

    let console = match diesel::PgConnection::establish(&with_database(url, "pgbouncer")) {
        Ok(mut conn) => SimpleConnection::batch_execute(&mut conn, "SHOW VERSION")
            .is_ok()
            .then_some("its console answers"),
        // Diesel sets the time zone when it connects, in a prepared statement, which the
        // console refuses (`extended query protocol not supported by admin console`); a user
        // that is not the console's is not allowed there.
        Err(error) => {
            let error = error.to_string();
            if error.contains("admin console") || error.contains("use SHOW HELP") {
                Some("its console answers")
            } else if error.contains("not allowed") {
                Some("its console refuses this user: not allowed")
            } else {
                None
            }
        }
    };
    match console {
        Some(how) => Check {
            name: "pooler",
            status: CheckStatus::Warn,
            detail: format!(
                "PgBouncer, not PostgreSQL, answers at this URL ({how}). In transaction pooling \
                 mode each transaction may run on another server connection: disable Diesel's \
                 statement cache on every connection (set_prepared_statement_cache_size(\
                 CacheSize::Disabled)), unless PgBouncer is 1.21 or later with \
                 max_prepared_statements; the inbox itself takes no session locks and sets \
                 nothing on the session"
            ),
            remedy: None,
        },
        None => Check {
            name: "pooler",
            status: CheckStatus::Ok,
            detail: "no PgBouncer answers at this URL".to_owned(),
            remedy: None,
        },
    }
}

/// `url` with its database (the path after the host) replaced by `name`; its query kept.
#[cfg(feature = "postgres")]
pub(crate) fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority = base.find("://").map_or(0, |i| i + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    match query {
        Some(query) => format!("{}/{name}?{query}", &base[..path]),
        None => format!("{}/{name}", &base[..path]),
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::with_database;

    #[test]
    fn with_database_replaces_only_the_path() {
        assert_eq!(
            with_database("postgres://root@127.0.0.1:5432/test", "t1"),
            "postgres://root@127.0.0.1:5432/t1"
        );
        assert_eq!(
            with_database("mysql://root@localhost:3306/test?ssl_mode=disabled", "t1"),
            "mysql://root@localhost:3306/t1?ssl_mode=disabled"
        );
        assert_eq!(with_database("postgres://host", "t1"), "postgres://host/t1");
    }
}
