//! What the scenarios need from each backend, and helpers they share.

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::connection::{InstrumentationEvent, SimpleConnection, TransactionManager};
use diesel::prelude::*;
use diesel::r2d2::{ManageConnection, PooledConnection, R2D2Connection};
use diesel_inbox::InboxConnection;
use diesel_inbox_test::{Placement, TestDatabase};

mod fake_service;
mod flavour;
mod tables;
#[allow(
    dead_code,
    reason = "the server backends' binaries use it; SQLite's has no wire"
)]
mod wire;
pub(crate) use fake_service::{call, FakeService, Keys};
pub(crate) use flavour::*;
#[allow(
    unused_imports,
    reason = "the server backends' binaries use it; SQLite's has no wire"
)]
pub(crate) use wire::Wire;

/// [`Backend::Deadpool`] and [`Backend::deadpool`] for the connection `$conn`.
#[cfg(feature = "deadpool")]
macro_rules! deadpool {
    ($conn:ty) => {
        type Deadpool = deadpool_diesel::Pool<deadpool_diesel::Manager<$conn>>;

        fn deadpool(url: &str, max_size: usize) -> Self::Deadpool {
            let runtime = deadpool_diesel::Runtime::Tokio1;
            deadpool_diesel::Pool::builder(deadpool_diesel::Manager::new(url, runtime))
                .max_size(max_size)
                .runtime(runtime)
                .build()
                .unwrap()
        }
    };
}

/// One backend under test. Each test binary uses one; the others are compiled in all of them.
pub(crate) trait Backend {
    type Conn: TestConn + R2D2Connection;

    /// A fresh, migrated database of this backend's own.
    fn database() -> TestDatabase<Self::Conn>;

    /// A connection to the database at `url`, set up as [`TestDatabase::connect`] sets one up:
    /// for a process that did not create the database, such as a test's child process.
    fn connect_to(url: &str) -> Self::Conn {
        let conn =
            Self::Conn::establish(url).unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
        diesel_inbox_test::without_statement_cache(conn)
    }

    /// A deadpool-diesel pool of this backend's connections.
    #[cfg(feature = "deadpool")]
    type Deadpool: diesel_inbox::pool::BlockingPool<Connection = Self::Conn>;

    /// A deadpool-diesel pool of at most `max_size` connections to `url`, on tokio.
    #[cfg(feature = "deadpool")]
    fn deadpool(url: &str, max_size: usize) -> Self::Deadpool;

    /// DDL for the table the scenarios' effects write to.
    const EFFECTS_DDL: &'static str;

    /// Does one writer at a time hold the whole database (SQLite), rather than row locks?
    /// Writers then queue, and two handlers cannot deadlock.
    const SINGLE_WRITER: bool = false;

    /// Drops the inbox's index `diesel_inbox_events_settled`.
    const DROP_SETTLED_INDEX: &'static str = "DROP INDEX diesel_inbox_events_settled";

    /// Does the database abort the whole transaction when one statement fails?
    const FAILED_STATEMENT_ABORTS_TRANSACTION: bool;

    /// What a processed delivery, whose effect is one insert into `effects`, sends: the start
    /// of each statement's SQL, without quotes. Pinned, so that no round trip creeps back in.
    const PROCESSED_PATH: &'static [&'static str];

    /// What a duplicate delivery sends, as [`PROCESSED_PATH`](Self::PROCESSED_PATH).
    const DUPLICATE_PATH: &'static [&'static str];

    /// What a cursor's sequence in order, without event id, sends, as
    /// [`PROCESSED_PATH`](Self::PROCESSED_PATH).
    const CURSOR_PATH: &'static [&'static str];

    /// Does the inbox take a transaction that ended under the handler for a deadlock, which
    /// is contention, rather than for an aborted transaction? MySQL/MariaDB: a deadlock is
    /// what ends a transaction there while the session goes on.
    const DEADLOCK_ENDS_TRANSACTION: bool;

    /// How long a lock wait lasts on a connection after
    /// [`FAIL_FAST_ON_LOCKS`](Self::FAIL_FAST_ON_LOCKS).
    const LOCK_WAIT: Duration;

    /// SQL that makes a session's lock waits give up at once, or as soon as the server
    /// allows: after [`LOCK_WAIT`](Self::LOCK_WAIT).
    const FAIL_FAST_ON_LOCKS: &'static str;

    /// Takes the lock that `run_pending_migrations` serialises on, as another process
    /// applying the migrations holds it, until `conn` is dropped.
    fn hold_migration_lock(conn: &mut Self::Conn);

    /// Drops the index `index` of `table`.
    fn drop_index(conn: &mut Self::Conn, table: &str, index: &str) {
        let _ = table;
        conn.batch_execute(&format!("DROP INDEX {index}")).unwrap();
    }

    /// A statement that fails inside a transaction and takes the whole transaction with it
    /// (aborted, or rolled back), after preparing on `conn` what it needs; `None` where a
    /// failed statement only undoes itself (MySQL/MariaDB, short of a deadlock).
    fn transaction_ending_statement(conn: &mut Self::Conn) -> Option<&'static str>;

    /// The connection's commit durability setting, where the backend has one per transaction.
    fn commit_durability(_conn: &mut Self::Conn) -> Option<String> {
        None
    }

    /// SQL that takes and that releases the prune lock on a session, as `Inbox::prune` does;
    /// `None` where the backend has no such lock (SQLite, and PostgreSQL, whose prune holds a
    /// lease row instead).
    const PRUNE_LOCK: Option<(&'static str, &'static str)>;

    /// Sets `processed_at` and `last_seen_at` of the consumer's rows of `event_ids`.
    fn backdate(
        conn: &mut Self::Conn,
        consumer: &str,
        event_ids: &[&str],
        processed_at: DateTime<Utc>,
        last_seen_at: DateTime<Utc>,
    );

    /// Sets `updated_at` of the consumer's claim of `event_id`.
    fn backdate_claim(conn: &mut Self::Conn, consumer: &str, event_id: &str, at: DateTime<Utc>);

    /// Adds an hourly counter row of the consumer for the hour starting at `bucket`.
    fn insert_counter(conn: &mut Self::Conn, consumer: &str, bucket: DateTime<Utc>);

    /// The consumer's counter rows.
    fn counters(conn: &mut Self::Conn, consumer: &str) -> usize;

    /// Gives the prune lease to `holder` until `until`, as a prune on another node would.
    fn hold_prune_lease(conn: &mut Self::Conn, holder: &str, until: DateTime<Utc>);

    /// The holder of the prune lease, if there is a lease row.
    fn prune_lease_holder(conn: &mut Self::Conn) -> Option<String>;

    /// Whether the server is a Galera node (`wsrep_on`).
    fn is_galera_node(conn: &mut Self::Conn) -> bool {
        let _ = conn;
        false
    }

    /// Does every prune hold the lease row, as its lock (PostgreSQL)?
    const PRUNE_HOLDS_LEASE: bool = false;

    /// Whether a prune on `conn` holds the lease row: on PostgreSQL, and on a Galera node.
    fn prune_holds_lease(conn: &mut Self::Conn) -> bool {
        Self::PRUNE_HOLDS_LEASE || Self::is_galera_node(conn)
    }

    /// One statement that inserts `rows` processed rows of the consumer, ids `{prefix}1` to
    /// `{prefix}{rows}`, settled and last seen a millisecond apart from `at` on, as a steady
    /// stream of deliveries would leave them.
    fn fill_sql(consumer: &str, prefix: &str, rows: usize, at: DateTime<Utc>) -> String;
}

/// The retention helpers of [`Backend`], for one backend's schema module and key binding.
macro_rules! retention_helpers {
    ($schema:ident, $key:path, $time:path) => {
        fn backdate(
            conn: &mut Self::Conn,
            consumer: &str,
            event_ids: &[&str],
            processed_at: DateTime<Utc>,
            last_seen_at: DateTime<Utc>,
        ) {
            use diesel_inbox::schema::$schema::diesel_inbox_events as t;
            let ids: Vec<_> = event_ids.iter().map(|id| $key(id)).collect();
            let changed = diesel::update(
                t::table
                    .filter(t::consumer.eq($key(consumer)))
                    .filter(t::event_id.eq_any(ids)),
            )
            .set((
                t::processed_at.eq($time(processed_at)),
                t::last_seen_at.eq($time(last_seen_at)),
            ))
            .execute(conn)
            .unwrap();
            assert_eq!(changed, event_ids.len(), "rows backdated");
        }

        fn backdate_claim(
            conn: &mut Self::Conn,
            consumer: &str,
            event_id: &str,
            at: DateTime<Utc>,
        ) {
            use diesel_inbox::schema::$schema::diesel_inbox_claims as k;
            let changed = diesel::update(
                k::table
                    .filter(k::consumer.eq($key(consumer)))
                    .filter(k::event_id.eq($key(event_id))),
            )
            .set(k::updated_at.eq($time(at)))
            .execute(conn)
            .unwrap();
            assert_eq!(changed, 1, "claim backdated");
        }

        fn insert_counter(conn: &mut Self::Conn, consumer: &str, bucket: DateTime<Utc>) {
            use crate::support::tables::$schema::diesel_inbox_counters as c;
            diesel::insert_into(c::table)
                .values((
                    c::consumer.eq($key(consumer)),
                    c::counter.eq("duplicate"),
                    c::bucket.eq($time(bucket)),
                    c::total.eq(1_i64),
                ))
                .execute(conn)
                .unwrap();
        }

        fn counters(conn: &mut Self::Conn, consumer: &str) -> usize {
            use crate::support::tables::$schema::diesel_inbox_counters as c;
            count(
                c::table
                    .filter(c::consumer.eq($key(consumer)))
                    .count()
                    .get_result(conn),
            )
        }

        fn hold_prune_lease(conn: &mut Self::Conn, holder: &str, until: DateTime<Utc>) {
            use crate::support::tables::$schema::diesel_inbox_leases as h;
            diesel::delete(h::table.filter(h::name.eq("prune")))
                .execute(conn)
                .unwrap();
            diesel::insert_into(h::table)
                .values((
                    h::name.eq("prune"),
                    h::holder.eq(holder),
                    h::held_until.eq($time(until)),
                ))
                .execute(conn)
                .unwrap();
        }

        fn prune_lease_holder(conn: &mut Self::Conn) -> Option<String> {
            use crate::support::tables::$schema::diesel_inbox_leases as h;
            h::table
                .filter(h::name.eq("prune"))
                .select(h::holder)
                .get_result(conn)
                .optional()
                .unwrap()
        }
    };
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn same_key(key: &str) -> &str {
    key
}

#[allow(dead_code, reason = "only the MySQL test binary uses it")]
fn key_bytes(key: &str) -> &[u8] {
    key.as_bytes()
}

#[cfg(feature = "postgres")]
fn same_time(time: DateTime<Utc>) -> DateTime<Utc> {
    time
}

#[allow(dead_code, reason = "only the SQLite and MySQL test binaries use it")]
fn naive_time(time: DateTime<Utc>) -> chrono::NaiveDateTime {
    time.naive_utc()
}

/// `at` as SQL text, to the second, UTC.
fn sql_time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// A backend with a server, whose sessions can be killed as a crash, a restart or a failover
/// would kill them.
#[allow(
    dead_code,
    reason = "tests/sqlite.rs compiles it too, and has no use for it"
)]
pub(crate) trait ServerBackend: Backend {
    /// Runs every later transaction on `conn` at the strictest isolation level.
    fn serializable(conn: &mut Self::Conn);

    /// SQL that ends the session it runs in.
    const KILL_OWN_SESSION: &'static str;

    /// SQL that makes the server end this session once it sits idle in a transaction for a
    /// second, where only the server can bound it (MariaDB's `idle_transaction_timeout`);
    /// `None` where the inbox's `RetryPolicy::idle_timeout` does (PostgreSQL).
    const SERVER_IDLE_TIMEOUT_OF_ONE_SECOND: Option<&'static str>;

    /// The server's id of `conn`'s session.
    fn session_id(conn: &mut Self::Conn) -> i64;

    /// Kills session `id` from `killer`, another connection, and waits until it is gone.
    fn kill_session(killer: &mut Self::Conn, id: i64);

    /// The server the suite runs on: `DIESEL_INBOX_POSTGRES_URL` or `DIESEL_INBOX_MYSQL_URL`,
    /// else the local default.
    fn server_url() -> String;

    /// A test database placed through `url` as `placement` says.
    fn placed(url: &str, placement: Placement<'_>) -> TestDatabase<Self::Conn>;

    /// Whether [`Placement::Schema`] applies: PostgreSQL's schemas live inside a database,
    /// MySQL's are its databases.
    const HAS_SCHEMAS: bool;
}

#[cfg(feature = "postgres")]
#[allow(dead_code, reason = "the other test binaries compile it too, unused")]
pub(crate) struct Postgres;

#[cfg(feature = "postgres")]
impl Backend for Postgres {
    type Conn = PgConnection;
    #[cfg(feature = "deadpool")]
    deadpool!(PgConnection);
    const EFFECTS_DDL: &'static str = "CREATE TABLE effects (event_id TEXT NOT NULL)";
    const FAILED_STATEMENT_ABORTS_TRANSACTION: bool = true;
    // The idle bound travels with the BEGIN, the check that the transaction is not aborted
    // with the COMMIT.
    // The insert travels with the BEGIN; the unique key refuses a duplicate's, and a second
    // transaction records the delivery on the row.
    const PROCESSED_PATH: &'static [&'static str] = &[
        "BEGIN; SET LOCAL idle_in_transaction_session_timeout = 60000; INSERT INTO diesel_inbox_events",
        "INSERT INTO effects",
        "SAVEPOINT diesel_inbox_commit; COMMIT",
    ];
    const DUPLICATE_PATH: &'static [&'static str] = &[
        "BEGIN; SET LOCAL idle_in_transaction_session_timeout = 60000; INSERT INTO diesel_inbox_events",
        "ROLLBACK; BEGIN; SET LOCAL idle_in_transaction_session_timeout = 60000; SET LOCAL synchronous_commit = off",
        "INSERT INTO diesel_inbox_events",
        "INSERT INTO diesel_inbox_counters",
        "SAVEPOINT diesel_inbox_commit; COMMIT",
    ];
    const CURSOR_PATH: &'static [&'static str] = &[
        "BEGIN; SET LOCAL idle_in_transaction_session_timeout = 60000",
        "UPDATE diesel_inbox_cursors",
        "INSERT INTO effects",
        "SAVEPOINT diesel_inbox_commit; COMMIT",
    ];
    const DEADLOCK_ENDS_TRANSACTION: bool = false;
    const LOCK_WAIT: Duration = Duration::from_millis(20);

    fn database() -> TestDatabase<PgConnection> {
        TestDatabase::postgres(&Self::server_url())
    }

    fn hold_migration_lock(conn: &mut PgConnection) {
        // The bytes of `inbxmigr`, as the crate's key; in a transaction left open, as a process
        // applying the migrations holds it, and as a pooler in transaction mode keeps it on
        // one server connection.
        conn.batch_execute("BEGIN; SELECT pg_advisory_xact_lock(7597117890791827314)")
            .unwrap();
    }

    fn drop_index(conn: &mut PgConnection, table: &str, index: &str) {
        // A unique constraint's index goes with the constraint.
        let constraint = format!("ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {index}");
        conn.batch_execute(&format!("{constraint}; DROP INDEX IF EXISTS {index}"))
            .unwrap();
    }

    const FAIL_FAST_ON_LOCKS: &'static str = "SET lock_timeout = '20ms'";

    fn transaction_ending_statement(_: &mut PgConnection) -> Option<&'static str> {
        // Any failed statement aborts the transaction; COMMIT would then roll it back.
        Some("INSERT INTO no_such_table VALUES (1)")
    }

    fn commit_durability(conn: &mut PgConnection) -> Option<String> {
        let setting =
            diesel::dsl::sql::<diesel::sql_types::Text>("current_setting('synchronous_commit')");
        Some(diesel::select(setting).get_result(conn).unwrap())
    }

    // The prune's lock is its lease row.
    const PRUNE_LOCK: Option<(&'static str, &'static str)> = None;
    const PRUNE_HOLDS_LEASE: bool = true;

    retention_helpers!(postgres, same_key, same_time);

    fn fill_sql(consumer: &str, prefix: &str, rows: usize, at: DateTime<Utc>) -> String {
        let at = sql_time(at);
        format!(
            "INSERT INTO diesel_inbox_events (consumer, event_id, processed_at, last_seen_at) \
             SELECT '{consumer}', '{prefix}' || g, t, t FROM generate_series(1, {rows}) AS g, \
             LATERAL (SELECT TIMESTAMPTZ '{at}+00' + g * INTERVAL '1 millisecond') AS s (t)"
        )
    }
}

#[cfg(feature = "postgres")]
impl ServerBackend for Postgres {
    fn server_url() -> String {
        std::env::var("DIESEL_INBOX_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".to_owned())
    }

    fn placed(url: &str, placement: Placement<'_>) -> TestDatabase<PgConnection> {
        TestDatabase::postgres_at(url, placement)
    }

    const HAS_SCHEMAS: bool = true;

    fn serializable(conn: &mut PgConnection) {
        conn.batch_execute(
            "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        )
        .unwrap();
    }

    const KILL_OWN_SESSION: &'static str = "SELECT pg_terminate_backend(pg_backend_pid())";
    const SERVER_IDLE_TIMEOUT_OF_ONE_SECOND: Option<&'static str> = None;

    fn session_id(conn: &mut PgConnection) -> i64 {
        diesel::select(diesel::dsl::sql::<diesel::sql_types::Integer>(
            "pg_backend_pid()",
        ))
        .get_result::<i32>(conn)
        .unwrap()
        .into()
    }

    fn kill_session(killer: &mut PgConnection, id: i64) {
        // The second argument makes it wait (up to 5 s) until the session is gone.
        let terminated = diesel::select(diesel::dsl::sql::<diesel::sql_types::Bool>(&format!(
            "pg_terminate_backend({id}, 5000)"
        )))
        .get_result::<bool>(killer)
        .unwrap();
        assert!(terminated, "session {id} was not terminated");
    }
}

#[cfg(feature = "mysql")]
#[allow(dead_code, reason = "the other test binaries compile it too, unused")]
pub(crate) struct Mysql;

#[cfg(feature = "mysql")]
impl ServerBackend for Mysql {
    fn server_url() -> String {
        std::env::var("DIESEL_INBOX_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
    }

    fn placed(url: &str, placement: Placement<'_>) -> TestDatabase<MysqlConnection> {
        TestDatabase::mysql_at(url, placement)
    }

    const HAS_SCHEMAS: bool = false;

    fn serializable(conn: &mut MysqlConnection) {
        conn.batch_execute("SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE")
            .unwrap();
    }

    const KILL_OWN_SESSION: &'static str = "KILL CONNECTION CONNECTION_ID()";
    const SERVER_IDLE_TIMEOUT_OF_ONE_SECOND: Option<&'static str> =
        Some("SET SESSION idle_transaction_timeout = 1");

    fn session_id(conn: &mut MysqlConnection) -> i64 {
        let id = diesel::select(diesel::dsl::sql::<
            diesel::sql_types::Unsigned<diesel::sql_types::BigInt>,
        >("CONNECTION_ID()"))
        .get_result::<u64>(conn)
        .unwrap();
        i64::try_from(id).unwrap()
    }

    fn kill_session(killer: &mut MysqlConnection, id: i64) {
        killer
            .batch_execute(&format!("KILL CONNECTION {id}"))
            .unwrap();
        // KILL only flags the session; wait (up to 5 s) until the server has ended it.
        let alive = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id}");
        for _ in 0..100 {
            let count = diesel::dsl::sql::<diesel::sql_types::BigInt>(&alive)
                .get_result::<i64>(killer)
                .unwrap();
            if count == 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("session {id} outlived KILL CONNECTION by 5 s");
    }
}

/// How every top-level transaction of the inbox's begins on MariaDB: the fence (autocommit
/// off, the savepoint its commit checks for), in one compound statement with what follows.
macro_rules! mysql_fenced_begin {
    () => {
        "BEGIN NOT ATOMIC DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; SET autocommit = 1; RESIGNAL; END; SET autocommit = 0; START TRANSACTION; SAVEPOINT diesel_inbox_open; "
    };
}

/// MariaDB's top-level `BEGIN`, where nothing travels with it.
#[allow(dead_code, reason = "only the server backends' test binaries use it")]
pub(crate) const MYSQL_BEGIN: &str = concat!(mysql_fenced_begin!(), "END");

/// MariaDB's first statement of a delivery: the fenced `BEGIN` and the inbox row's upsert, as
/// one compound statement.
const MYSQL_BEGIN_THEN_RECORD: &str =
    concat!(mysql_fenced_begin!(), "INSERT INTO diesel_inbox_events");

/// MariaDB's commit, which refuses a transaction that lacks the fence's savepoint, in one
/// compound statement.
const MYSQL_COMMIT: &str = "BEGIN NOT ATOMIC DECLARE EXIT HANDLER FOR 1305";

impl Backend for Mysql {
    type Conn = MysqlConnection;
    #[cfg(feature = "deadpool")]
    deadpool!(MysqlConnection);
    const EFFECTS_DDL: &'static str =
        "CREATE TABLE effects (event_id VARBINARY(255) NOT NULL) ENGINE = InnoDB";
    const DROP_SETTLED_INDEX: &'static str =
        "DROP INDEX diesel_inbox_events_settled ON diesel_inbox_events";
    const FAILED_STATEMENT_ABORTS_TRANSACTION: bool = false;
    // Every one a prepared statement (`-- binds`), one round trip: Diesel sends text ones,
    // its `BEGIN` and `COMMIT` among them, as three. Without RETURNING through Diesel (MariaDB
    // sends no result metadata when preparing `INSERT .. RETURNING`), a duplicate reads its
    // row with a second statement.
    const PROCESSED_PATH: &'static [&'static str] =
        &[MYSQL_BEGIN_THEN_RECORD, "INSERT INTO effects", MYSQL_COMMIT];
    const DUPLICATE_PATH: &'static [&'static str] = &[
        MYSQL_BEGIN_THEN_RECORD,
        "SELECT diesel_inbox_events.processed_at",
        "INSERT INTO diesel_inbox_counters",
        MYSQL_COMMIT,
    ];
    const CURSOR_PATH: &'static [&'static str] = &[
        concat!(mysql_fenced_begin!(), "UPDATE diesel_inbox_cursors"),
        "INSERT INTO effects",
        MYSQL_COMMIT,
    ];
    const DEADLOCK_ENDS_TRANSACTION: bool = true;
    const LOCK_WAIT: Duration = Duration::from_secs(1);

    fn database() -> TestDatabase<MysqlConnection> {
        TestDatabase::mysql(&Self::server_url())
    }

    fn hold_migration_lock(conn: &mut MysqlConnection) {
        conn.batch_execute(
            "DO GET_LOCK(LEFT(CONCAT('diesel_inbox.migrations', ':', DATABASE()), 64), 0)",
        )
        .unwrap();
    }

    fn drop_index(conn: &mut MysqlConnection, table: &str, index: &str) {
        conn.batch_execute(&format!("DROP INDEX {index} ON {table}"))
            .unwrap();
    }

    // InnoDB's minimum is one second.
    const FAIL_FAST_ON_LOCKS: &'static str = "SET SESSION innodb_lock_wait_timeout = 1";

    fn transaction_ending_statement(_: &mut MysqlConnection) -> Option<&'static str> {
        // A failed statement (lock-wait timeouts included, by default) undoes only itself.
        None
    }

    const PRUNE_LOCK: Option<(&'static str, &'static str)> = Some((
        "SELECT GET_LOCK(LEFT(CONCAT('diesel_inbox.prune', ':', DATABASE()), 64), 0)",
        "SELECT RELEASE_LOCK(LEFT(CONCAT('diesel_inbox.prune', ':', DATABASE()), 64))",
    ));

    retention_helpers!(mysql, key_bytes, naive_time);

    fn is_galera_node(conn: &mut MysqlConnection) -> bool {
        #[derive(QueryableByName)]
        struct Variable {
            #[diesel(sql_type = diesel::sql_types::Text, column_name = "Value")]
            value: String,
        }
        diesel::sql_query("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'")
            .get_results::<Variable>(conn)
            .unwrap()
            .iter()
            .any(|variable| variable.value == "ON")
    }

    fn fill_sql(consumer: &str, prefix: &str, rows: usize, at: DateTime<Utc>) -> String {
        // MariaDB's sequence engine: a recursive CTE stops at max_recursive_iterations (1000).
        let at = sql_time(at);
        format!(
            "INSERT INTO diesel_inbox_events (consumer, event_id, processed_at, last_seen_at) \
             SELECT '{consumer}', CONCAT('{prefix}', seq), TIMESTAMP '{at}' + INTERVAL seq * 1000 MICROSECOND, \
             TIMESTAMP '{at}' + INTERVAL seq * 1000 MICROSECOND FROM seq_1_to_{rows}"
        )
    }
}

#[cfg(feature = "sqlite")]
#[allow(dead_code, reason = "the other test binaries compile it too, unused")]
pub(crate) struct Sqlite;

#[cfg(feature = "sqlite")]
impl Backend for Sqlite {
    type Conn = SqliteConnection;
    #[cfg(feature = "deadpool")]
    deadpool!(SqliteConnection);
    const EFFECTS_DDL: &'static str = "CREATE TABLE effects (event_id TEXT NOT NULL)";
    const SINGLE_WRITER: bool = true;
    const FAILED_STATEMENT_ABORTS_TRANSACTION: bool = false;
    // In process: no round trips. The `BEGIN` after the effect is the check that it left the
    // transaction open (it fails inside one).
    const PROCESSED_PATH: &'static [&'static str] = &[
        "BEGIN IMMEDIATE",
        "INSERT INTO diesel_inbox_events",
        "INSERT INTO effects",
        "BEGIN",
        "COMMIT",
    ];
    const DUPLICATE_PATH: &'static [&'static str] = &[
        "BEGIN IMMEDIATE",
        "INSERT INTO diesel_inbox_events",
        "INSERT INTO diesel_inbox_counters",
        "COMMIT",
    ];
    const CURSOR_PATH: &'static [&'static str] = &[
        "BEGIN IMMEDIATE",
        "UPDATE diesel_inbox_cursors",
        "INSERT INTO effects",
        "BEGIN",
        "COMMIT",
    ];
    const DEADLOCK_ENDS_TRANSACTION: bool = false;
    const LOCK_WAIT: Duration = Duration::ZERO;

    fn database() -> TestDatabase<SqliteConnection> {
        TestDatabase::sqlite()
    }

    fn connect_to(url: &str) -> SqliteConnection {
        let mut conn =
            SqliteConnection::establish(url).unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
        diesel_inbox::SqliteSetup::default()
            .apply(&mut conn)
            .unwrap();
        conn
    }

    fn hold_migration_lock(conn: &mut SqliteConnection) {
        // The write lock, until the connection closes.
        conn.batch_execute("BEGIN IMMEDIATE").unwrap();
    }

    const FAIL_FAST_ON_LOCKS: &'static str = "PRAGMA busy_timeout = 0";

    fn transaction_ending_statement(conn: &mut SqliteConnection) -> Option<&'static str> {
        // What an I/O error or a full disk does, on demand: SQLite rolls the whole
        // transaction back.
        conn.batch_execute(
            "CREATE TABLE doomed (x INT);
             CREATE TRIGGER doomed_rolls_back BEFORE INSERT ON doomed
             BEGIN SELECT RAISE(ROLLBACK, 'doomed'); END;",
        )
        .unwrap();
        Some("INSERT INTO doomed VALUES (1)")
    }

    const PRUNE_LOCK: Option<(&'static str, &'static str)> = None;

    retention_helpers!(sqlite, same_key, naive_time);

    fn fill_sql(consumer: &str, prefix: &str, rows: usize, at: DateTime<Utc>) -> String {
        let at = sql_time(at);
        format!(
            "WITH RECURSIVE seq (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < {rows}) \
             INSERT INTO diesel_inbox_events (consumer, event_id, processed_at, last_seen_at) \
             SELECT '{consumer}', '{prefix}' || n, t, t FROM \
             (SELECT n, strftime('%Y-%m-%d %H:%M:%f', '{at}', '+' || (n / 1000.0) || ' seconds') AS t FROM seq)"
        )
    }
}

diesel::table! {
    effects (event_id) {
        event_id -> Text,
    }
}

diesel::table! {
    #[sql_name = "diesel_inbox_events"]
    inbox (consumer, event_id) {
        consumer -> Text,
        event_id -> Text,
        deliveries -> BigInt,
        payload_conflicts -> BigInt,
    }
}

diesel::table! {
    #[sql_name = "diesel_inbox_migrations"]
    migrations_table (version) {
        version -> Text,
    }
}

diesel::table! {
    #[sql_name = "diesel_inbox_failures"]
    failures (consumer, event_id) {
        consumer -> Text,
        event_id -> Text,
    }
}

diesel::table! {
    #[sql_name = "diesel_inbox_failure_log"]
    failure_log (id) {
        id -> BigInt,
        consumer -> Text,
        event_id -> Text,
    }
}

/// A connection the scenarios can observe: the effect they count and the inbox table.
pub(crate) trait TestConn: InboxConnection + Send + 'static {
    /// The effect every scenario counts: one row in `effects` per run.
    fn record_effect(&mut self, event_id: &str) -> QueryResult<()>;
    /// Inserts one row into `effects` per id, in one statement.
    fn record_effects(&mut self, event_ids: &[&str]) -> QueryResult<()>;
    /// Rows in `effects`.
    fn effect_count(&mut self) -> usize;
    /// Rows in the inbox table, of every consumer.
    fn inbox_rows(&mut self) -> usize;
    /// The deliveries the inbox rows count, summed over every row.
    fn total_deliveries(&mut self) -> usize;
    /// The payload conflicts counted on `event_id`'s row.
    fn payload_conflicts(&mut self, event_id: &str) -> usize;
    /// Whether the consumer has an inbox row for `event_id`.
    fn has_inbox_row(&mut self, consumer: &str, event_id: &str) -> bool;
    /// The consumer's inbox rows whose id starts with `prefix`.
    fn inbox_rows_like(&mut self, consumer: &str, prefix: &str) -> usize;
    /// The consumer's failure rows and history entries of `event_id`.
    fn failure_rows(&mut self, consumer: &str, event_id: &str) -> (usize, usize);
    /// Rows in `effects` for `event_id`.
    fn effects_of(&mut self, event_id: &str) -> usize;
    /// Every row of `effects`, in no particular order.
    fn effect_rows(&mut self) -> Vec<String>;
    /// The versions `diesel_inbox_migrations` records, in order.
    fn migration_versions(&mut self) -> Vec<String>;
}

/// The same queries for each concrete connection type (Diesel's DSL is not generic over them).
macro_rules! test_conn {
    ($conn:ty) => {
        impl TestConn for $conn {
            fn record_effect(&mut self, event_id: &str) -> QueryResult<()> {
                diesel::insert_into(effects::table)
                    .values(effects::event_id.eq(event_id))
                    .execute(self)
                    .map(drop)
            }

            fn record_effects(&mut self, event_ids: &[&str]) -> QueryResult<()> {
                let rows: Vec<_> = event_ids
                    .iter()
                    .map(|id| effects::event_id.eq(*id))
                    .collect();
                diesel::insert_into(effects::table)
                    .values(rows)
                    .execute(self)
                    .map(drop)
            }

            fn effect_count(&mut self) -> usize {
                count(effects::table.count().get_result(self))
            }

            fn effect_rows(&mut self) -> Vec<String> {
                effects::table.select(effects::event_id).load(self).unwrap()
            }

            fn inbox_rows(&mut self) -> usize {
                count(inbox::table.count().get_result(self))
            }

            fn total_deliveries(&mut self) -> usize {
                let deliveries = inbox::table.select(inbox::deliveries).load::<i64>(self);
                deliveries.unwrap().into_iter().map(|n| count(Ok(n))).sum()
            }

            fn has_inbox_row(&mut self, consumer: &str, event_id: &str) -> bool {
                let found = inbox::table
                    .filter(
                        inbox::consumer
                            .eq(consumer)
                            .and(inbox::event_id.eq(event_id)),
                    )
                    .count()
                    .get_result(self);
                count(found) == 1
            }

            fn inbox_rows_like(&mut self, consumer: &str, prefix: &str) -> usize {
                count(
                    inbox::table
                        .filter(inbox::consumer.eq(consumer))
                        .filter(inbox::event_id.like(format!("{prefix}%")))
                        .count()
                        .get_result(self),
                )
            }

            fn failure_rows(&mut self, consumer: &str, event_id: &str) -> (usize, usize) {
                let failures = failures::table
                    .filter(failures::consumer.eq(consumer))
                    .filter(failures::event_id.eq(event_id))
                    .count()
                    .get_result(self);
                let history = failure_log::table
                    .filter(failure_log::consumer.eq(consumer))
                    .filter(failure_log::event_id.eq(event_id))
                    .count()
                    .get_result(self);
                (count(failures), count(history))
            }

            fn migration_versions(&mut self) -> Vec<String> {
                migrations_table::table
                    .select(migrations_table::version)
                    .order(migrations_table::version)
                    .load(self)
                    .unwrap()
            }

            fn effects_of(&mut self, event_id: &str) -> usize {
                count(
                    effects::table
                        .filter(effects::event_id.eq(event_id))
                        .count()
                        .get_result(self),
                )
            }

            fn payload_conflicts(&mut self, event_id: &str) -> usize {
                count(
                    inbox::table
                        .filter(inbox::event_id.eq(event_id))
                        .select(inbox::payload_conflicts)
                        .first(self),
                )
            }
        }
    };
}

#[cfg(feature = "postgres")]
test_conn!(PgConnection);
#[cfg(feature = "mysql")]
test_conn!(MysqlConnection);
#[cfg(feature = "sqlite")]
test_conn!(SqliteConnection);

/// A connection the scenarios' effect can be written through: any [`TestConn`], and a pooled
/// one, which the scenarios write through but observe through plain connections.
pub(crate) trait EffectConn: InboxConnection + Send + 'static {
    /// [`TestConn::record_effect`].
    fn write_effect(&mut self, event_id: &str) -> QueryResult<()>;
    /// [`TestConn::record_effects`].
    fn write_effects(&mut self, event_ids: &[&str]) -> QueryResult<()>;
}

impl<C: TestConn> EffectConn for C {
    fn write_effect(&mut self, event_id: &str) -> QueryResult<()> {
        self.record_effect(event_id)
    }

    fn write_effects(&mut self, event_ids: &[&str]) -> QueryResult<()> {
        self.record_effects(event_ids)
    }
}

impl<M> EffectConn for PooledConnection<M>
where
    M: ManageConnection,
    M::Connection: TestConn + R2D2Connection,
{
    fn write_effect(&mut self, event_id: &str) -> QueryResult<()> {
        (**self).record_effect(event_id)
    }

    fn write_effects(&mut self, event_ids: &[&str]) -> QueryResult<()> {
        (**self).record_effects(event_ids)
    }
}

fn count(n: QueryResult<i64>) -> usize {
    usize::try_from(n.unwrap()).unwrap()
}

/// A listing's rows, every one readable: a corrupt row fails the test, naming it.
#[track_caller]
pub(crate) fn readable<T>(rows: Vec<Result<T, diesel_inbox::CorruptRow>>) -> Vec<T> {
    rows.into_iter()
        .map(|row| row.unwrap_or_else(|corrupt| panic!("a listed row is unreadable: {corrupt}")))
        .collect()
}

/// A multi-threaded tokio runtime of two workers, for the scenarios of async services on sync
/// connections (the relay's blocking pools, the killed relays).
#[allow(dead_code, reason = "only the binaries with the tokio feature use it")]
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A database with the effects table, and a first connection to it.
pub(crate) fn setup<B: Backend>() -> (TestDatabase<B::Conn>, B::Conn) {
    let db = B::database();
    let mut conn = db.connect();
    conn.batch_execute(B::EFFECTS_DDL).unwrap();
    (db, conn)
}

/// The inbox's migrations per backend: the inbox table, failures and dead letters, then the
/// indexes and counters that retention and stats use.
pub(crate) const MIGRATIONS: usize = 11;

/// The inbox's tables, and the table where `run_pending_migrations` records its versions.
pub(crate) const INBOX_TABLES: [&str; 19] = [
    "diesel_inbox_block_events",
    "diesel_inbox_blocks",
    "diesel_inbox_claims",
    "diesel_inbox_counters",
    "diesel_inbox_cursors",
    "diesel_inbox_event_sequences",
    "diesel_inbox_events",
    "diesel_inbox_failure_log",
    "diesel_inbox_failures",
    "diesel_inbox_gaps",
    "diesel_inbox_leases",
    "diesel_inbox_orphaned_effects",
    "diesel_inbox_outbox",
    "diesel_inbox_outbox_aggregates",
    "diesel_inbox_reorgs",
    "diesel_inbox_replay_notes",
    "diesel_inbox_replay_transitions",
    "diesel_inbox_replays",
    "diesel_inbox_reverted_events",
];
pub(crate) const TRACKING_TABLE: &str = "diesel_inbox_migrations";

/// `doctor`'s checks of the server the suite runs on rather than of the test's database: a
/// Galera node, standbys, a server-wide timeout. The suite does not own those settings, so
/// their status is the server's, not a test's result.
pub(crate) const SERVER_CHECKS: [&str; 4] = [
    "cluster",
    "replication",
    "idle_transaction_timeout",
    "wait_timeout",
];

/// A test database without the inbox schema: neither its tables nor its bookkeeping.
pub(crate) fn database_without_inbox_schema<B: Backend>() -> (TestDatabase<B::Conn>, B::Conn) {
    let db = B::database();
    let mut conn = db.connect();
    drop_inbox_schema(&mut conn);
    (db, conn)
}

pub(crate) fn drop_inbox_schema<C: Connection>(conn: &mut C) {
    for table in INBOX_TABLES.iter().chain([&TRACKING_TABLE]) {
        conn.batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
            .unwrap();
    }
}

/// Runs `work(thread, conn)` on `threads` threads at once, each on a pooled connection of its
/// own, released together; returns what each returned, in thread order.
pub(crate) fn concurrently<C, R>(
    db: &TestDatabase<C>,
    threads: usize,
    work: impl Fn(usize, &mut C) -> R + Sync,
) -> Vec<R>
where
    C: TestConn + R2D2Connection,
    R: Send,
{
    let pool = db.pool(u32::try_from(threads).unwrap());
    let start = std::sync::Barrier::new(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let (pool, start, work) = (&pool, &start, &work);
                scope.spawn(move || {
                    let mut conn = pool.get().unwrap();
                    start.wait();
                    work(thread, &mut conn)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    })
}

/// What a connection sent, in order: `BEGIN`, `COMMIT` and `ROLLBACK` for the transaction
/// manager's events (at any depth), and each statement's SQL.
#[derive(Clone, Default)]
pub(crate) struct StatementLog {
    sent: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// The SQL of each statement Diesel prepared and kept in its cache.
    kept: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl StatementLog {
    /// Starts logging what `conn` sends from now on.
    pub(crate) fn install<C: Connection>(conn: &mut C) -> Self {
        let log = Self::default();
        conn.set_instrumentation(log.clone().into_instrumentation());
        log
    }

    /// Starts logging what the diesel-async connection `conn` sends from now on.
    #[cfg(feature = "async")]
    #[allow(dead_code, reason = "the sync test binaries compile it too, unused")]
    pub(crate) fn install_async<C: diesel_async::AsyncConnection>(conn: &mut C) -> Self {
        let log = Self::default();
        conn.set_instrumentation(log.clone().into_instrumentation());
        log
    }

    fn into_instrumentation(self) -> impl FnMut(InstrumentationEvent<'_>) + Send + 'static {
        move |event: InstrumentationEvent<'_>| {
            let entry = match event {
                InstrumentationEvent::CacheQuery { sql, .. } => {
                    self.kept.lock().unwrap().push(sql.to_owned());
                    return;
                }
                InstrumentationEvent::BeginTransaction { .. } => "BEGIN".to_owned(),
                InstrumentationEvent::CommitTransaction { .. } => "COMMIT".to_owned(),
                InstrumentationEvent::RollbackTransaction { .. } => "ROLLBACK".to_owned(),
                InstrumentationEvent::StartQuery { query, .. } => query.to_string(),
                _ => return,
            };
            self.sent.lock().unwrap().push(entry);
        }
    }

    /// Takes what was logged so far, leaving the log empty.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.sent.lock().unwrap())
    }

    /// Takes the SQL of the statements Diesel prepared and kept so far.
    pub(crate) fn take_kept(&self) -> Vec<String> {
        std::mem::take(&mut self.kept.lock().unwrap())
    }
}

/// `conn`'s transaction depth as Diesel's transaction manager counts it: 0 outside a
/// transaction.
pub(crate) fn transaction_depth<C: Connection>(conn: &mut C) -> u32 {
    C::TransactionManager::transaction_manager_status_mut(conn)
        .transaction_depth()
        .unwrap()
        .map_or(0, std::num::NonZeroU32::get)
}

/// A copy of this test binary running one of its own tests, `test`, with `vars` set in its
/// environment: a process of the test's own, to kill as a crash would.
pub(crate) struct ChildTest {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ChildTest {
    /// Starts it.
    pub(crate) fn spawn(test: &str, vars: &[(&str, &str)]) -> Self {
        use std::io::BufRead;
        use std::process::{Command, Stdio};

        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .envs(vars.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// Waits until it prints a line ending with `marker` (the test harness may have started
    /// the line); panics, killing it, when it exits first or has not printed it within `within`.
    pub(crate) fn wait_for(&mut self, marker: &str, within: Duration) {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.ends_with(marker) => return,
                Ok(_) => {}
                Err(e) => {
                    panic!("the child test did not print {marker:?} ({e}): it failed or hung");
                }
            }
        }
    }

    /// The lines it printed that no [`wait_for`](Self::wait_for) read, once its output has
    /// ended (it exited or was killed); waits for that at most a few seconds.
    pub(crate) fn printed(&mut self) -> Vec<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut lines = Vec::new();
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
        {
            lines.push(line);
        }
        lines
    }

    /// Waits until it exits, at most `within`, and returns how; panics (and so kills it, on
    /// drop) when it is still running then.
    pub(crate) fn exit_status(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the child test did not exit within {within:?}: it hung"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills it, by its pid, and waits until it is gone.
    pub(crate) fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for ChildTest {
    /// A test that fails before killing its child kills it on the way out.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
