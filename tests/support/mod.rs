//! What the scenarios need from each backend, and helpers they share.
#![allow(dead_code, unreachable_pub)]

use diesel::connection::{SimpleConnection, TransactionManager};
use diesel::prelude::*;
use diesel::r2d2::{ManageConnection, PooledConnection, R2D2Connection};
use diesel_inbox::testing::TestDatabase;
use diesel_inbox::InboxConnection;

/// One backend under test.
pub trait Backend {
    type Conn: TestConn + R2D2Connection;

    /// A fresh, migrated database of this backend's own.
    fn database() -> TestDatabase<Self::Conn>;

    /// DDL for the table the scenarios' effects write to.
    const EFFECTS_DDL: &'static str;

    /// Does the database abort the whole transaction when one statement fails?
    const FAILED_STATEMENT_ABORTS_TRANSACTION: bool;

    /// Makes lock waits on `conn` give up at once (or as soon as the server allows).
    fn fail_fast_on_locks(conn: &mut Self::Conn);

    /// Runs every later transaction on `conn` at the strictest isolation level.
    fn serializable(conn: &mut Self::Conn);

    /// The connection's commit durability setting, where the backend has one per transaction.
    fn commit_durability(_conn: &mut Self::Conn) -> Option<String> {
        None
    }
}

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

#[cfg(feature = "postgres")]
pub struct Postgres;

#[cfg(feature = "postgres")]
#[derive(QueryableByName)]
struct Setting {
    #[diesel(sql_type = diesel::sql_types::Text)]
    synchronous_commit: String,
}

#[cfg(feature = "postgres")]
impl Backend for Postgres {
    type Conn = PgConnection;
    const EFFECTS_DDL: &'static str = "CREATE TABLE effects (event_id TEXT NOT NULL)";
    const FAILED_STATEMENT_ABORTS_TRANSACTION: bool = true;

    fn database() -> TestDatabase<PgConnection> {
        TestDatabase::postgres(&env_or(
            "DIESEL_INBOX_POSTGRES_URL",
            "postgres://root@127.0.0.1:5432/test",
        ))
    }

    fn fail_fast_on_locks(conn: &mut PgConnection) {
        conn.batch_execute("SET lock_timeout = '20ms'").unwrap();
    }

    fn serializable(conn: &mut PgConnection) {
        conn.batch_execute(
            "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        )
        .unwrap();
    }
}

#[cfg(feature = "mysql")]
pub struct Mysql;

#[cfg(feature = "mysql")]
impl Backend for Mysql {
    type Conn = MysqlConnection;
    const EFFECTS_DDL: &'static str =
        "CREATE TABLE effects (event_id VARBINARY(255) NOT NULL) ENGINE = InnoDB";
    const FAILED_STATEMENT_ABORTS_TRANSACTION: bool = false;

    fn database() -> TestDatabase<MysqlConnection> {
        TestDatabase::mysql(&env_or(
            "DIESEL_INBOX_MYSQL_URL",
            "mysql://root@127.0.0.1:3306/test",
        ))
    }

    fn fail_fast_on_locks(conn: &mut MysqlConnection) {
        // InnoDB's minimum is one second.
        conn.batch_execute("SET SESSION innodb_lock_wait_timeout = 1")
            .unwrap();
    }

    fn serializable(conn: &mut MysqlConnection) {
        conn.batch_execute("SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE")
            .unwrap();
    }
}

#[cfg(feature = "sqlite")]
pub struct Sqlite;

#[cfg(feature = "sqlite")]
impl Backend for Sqlite {
    type Conn = SqliteConnection;
    const EFFECTS_DDL: &'static str = "CREATE TABLE effects (event_id TEXT NOT NULL)";
    const FAILED_STATEMENT_ABORTS_TRANSACTION: bool = false;

    fn database() -> TestDatabase<SqliteConnection> {
        TestDatabase::sqlite()
    }

    fn fail_fast_on_locks(conn: &mut SqliteConnection) {
        conn.batch_execute("PRAGMA busy_timeout = 0").unwrap();
    }

    fn serializable(_: &mut SqliteConnection) {
        // SQLite transactions are serializable already.
    }
}

diesel::table! {
    effects (event_id) {
        event_id -> Text,
    }
}

diesel::table! {
    #[sql_name = "diesel_inbox"]
    inbox (consumer, event_id) {
        consumer -> Text,
        event_id -> Text,
        deliveries -> BigInt,
        payload_conflicts -> BigInt,
    }
}

/// A connection the scenarios can observe: the effect they count and the inbox table.
pub trait TestConn: InboxConnection + Send + 'static {
    /// The effect every scenario counts: one row in `effects` per run.
    fn record_effect(&mut self, event_id: &str) -> QueryResult<()>;
    fn effect_count(&mut self) -> usize;
    fn inbox_rows(&mut self) -> usize;
    fn total_deliveries(&mut self) -> usize;
    fn payload_conflicts(&mut self, event_id: &str) -> usize;
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

            fn effect_count(&mut self) -> usize {
                count(effects::table.count().get_result(self))
            }

            fn inbox_rows(&mut self) -> usize {
                count(inbox::table.count().get_result(self))
            }

            fn total_deliveries(&mut self) -> usize {
                let deliveries = inbox::table.select(inbox::deliveries).load::<i64>(self);
                deliveries.unwrap().into_iter().map(|n| count(Ok(n))).sum()
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

impl<M> TestConn for PooledConnection<M>
where
    M: ManageConnection,
    M::Connection: TestConn + R2D2Connection,
{
    fn record_effect(&mut self, event_id: &str) -> QueryResult<()> {
        (**self).record_effect(event_id)
    }

    fn effect_count(&mut self) -> usize {
        (**self).effect_count()
    }

    fn inbox_rows(&mut self) -> usize {
        (**self).inbox_rows()
    }

    fn total_deliveries(&mut self) -> usize {
        (**self).total_deliveries()
    }

    fn payload_conflicts(&mut self, event_id: &str) -> usize {
        (**self).payload_conflicts(event_id)
    }
}

fn count(n: QueryResult<i64>) -> usize {
    usize::try_from(n.unwrap()).unwrap()
}

/// A database with the effects table, and a first connection to it.
pub fn setup<B: Backend>() -> (TestDatabase<B::Conn>, B::Conn) {
    let db = B::database();
    let mut conn = db.connect();
    conn.batch_execute(B::EFFECTS_DDL).unwrap();
    (db, conn)
}

/// Runs `work(thread, conn)` on `threads` threads at once, each on a pooled connection of its
/// own, released together; returns what each returned, in thread order.
pub fn concurrently<C, R>(
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

pub fn transaction_depth<C: Connection>(conn: &mut C) -> u32 {
    C::TransactionManager::transaction_manager_status_mut(conn)
        .transaction_depth()
        .unwrap()
        .map_or(0, std::num::NonZeroU32::get)
}
