//! The statements that frame an inbox transaction, per backend: how a top-level transaction
//! begins and commits, how the engine tells it is still alive after user code, and what an
//! error means. Written for the backend, so that every connection of a database, sync or
//! async, takes the same ones.
//!
//! The engine counts the levels these statements open and close in the connection's
//! transaction manager, as Diesel's own `BEGIN` and `COMMIT` would be counted.

use std::future::{ready, Future};
use std::time::Duration;

use diesel::backend::Backend;
use diesel::QueryResult;

use super::Db;
use crate::class::{ErrorClass, FailedStatement};

/// How one database frames the inbox's transactions. Sealed: implemented for Diesel's
/// `Pg`, `Mysql` and `Sqlite` backends, with the matching cargo features.
pub trait TransactionSql: Backend + Sized + 'static {
    /// What a failed statement does to the transaction.
    const FAILED_STATEMENT: FailedStatement;

    /// What kind of failure `error` is: contention a retry cures, a lost connection, or
    /// anything else.
    fn classify(error: &diesel::result::Error) -> ErrorClass;

    /// Opens a top-level transaction that the server ends, with its session, once it has sat
    /// idle for `idle_timeout`, where the backend can bound one transaction
    /// ([`RetryPolicy::idle_timeout`](crate::RetryPolicy::idle_timeout)).
    fn begin_top<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        idle_timeout: Option<Duration>,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        let _ = idle_timeout;
        conn.batch_execute("BEGIN")
    }

    /// Commits the top-level transaction the inbox opened, and never one the database has
    /// already aborted: PostgreSQL turns that COMMIT into a silent ROLLBACK, so there the
    /// same round trip first runs a statement an aborted transaction refuses. Where a failed
    /// statement ends the transaction instead, the check after user code covers it.
    fn commit_top<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        conn.batch_execute("COMMIT")
    }

    /// Rolls back the top-level transaction the inbox opened, and counts the level closed in
    /// the transaction manager, as [`Db::rollback_level`] does: undoing with it whatever
    /// [`begin_top`](Self::begin_top) set on the session for the transaction.
    fn rollback_top<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        conn.rollback_level()
    }

    /// [`rollback_top`](Self::rollback_top) for a transaction whose level the engine has not
    /// counted yet: its first statement, sent with the `BEGIN`, failed after it.
    fn rollback_uncounted<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        conn.batch_execute("ROLLBACK")
    }

    /// `Ok(true)` while the transaction opened by the inbox can still commit what it did.
    /// `Ok(false)` means the database already aborted or rolled it back; an error, that the
    /// check itself failed (a lost connection, say).
    fn transaction_is_alive<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Called before a transaction whose locking reads must lock only the rows they return
    /// (a prune batch, a relay's take). MySQL/MariaDB run the next transaction at READ
    /// COMMITTED, so the read locks neither the index gaps around those rows, which
    /// redeliveries and enqueues would wait on, nor the rows its filter rejects.
    fn next_transaction_read_committed<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        let _ = conn;
        ready(Ok(()))
    }

    /// Called before a contention retry.
    fn before_contention_retry<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = ()> + Send {
        let _ = conn;
        ready(())
    }
}

/// What libpq and tokio-postgres say of a connection that died: the server ended the session
/// (`57P01` and its kin), the socket closed or failed under TLS, or the call was made on a
/// connection already dead.
#[cfg(feature = "postgres")]
const LOST_POSTGRES: &[&str] = &[
    "terminating connection",
    "server closed the connection",
    "no connection to the server",
    "connection to server",
    "could not receive data from server",
    "could not send data to server",
    "lost synchronization with server",
    "SSL SYSCALL error",
    "SSL error",
    "SSL connection has been closed unexpectedly",
    "connection closed",
    "error communicating with the server",
];

/// What the MySQL and MariaDB client libraries (and `mysql_async`) say of a connection that died:
/// 2006 and 2013, 2055 for a socket error, 1927 for a killed session, 1053 for a server going
/// down, 4031 for one dropped as idle, 2026 for TLS, and 1047 from a Galera node that left the
/// cluster's primary component (reconnect, to another node if need be).
#[cfg(feature = "mysql")]
const LOST_MYSQL: &[&str] = &[
    "has gone away",
    "Lost connection",
    "Connection was killed",
    "Server shutdown in progress",
    "disconnected by the server because of inactivity",
    "SSL connection error",
    "Connection to the server is closed",
    "Input/output error: ",
    "WSREP has not yet prepared node",
];

/// PostgreSQL's top-level `BEGIN`, as text for a simple-protocol message, with the bound on how
/// long the transaction may sit idle in the same message: no round trip of its own. Past the
/// timeout the server ends the session (25P03) and the client reads a lost connection.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_begin(idle_timeout: Option<Duration>) -> String {
    match idle_timeout {
        None => "BEGIN".to_owned(),
        Some(timeout) => {
            let millis = timeout.as_millis().clamp(1, 2_147_483_647);
            format!("BEGIN; SET LOCAL idle_in_transaction_session_timeout = {millis}")
        }
    }
}

#[cfg(feature = "postgres")]
impl TransactionSql for diesel::pg::Pg {
    const FAILED_STATEMENT: FailedStatement = FailedStatement::AbortsTransaction;

    fn classify(error: &diesel::result::Error) -> ErrorClass {
        use crate::class::{classify_by_message, message_contains};
        // 40001 arrives as SerializationFailure, a dead session as ClosedConnection, a
        // statement that never reached the server (or whose reply never came) as
        // UnableToSendCommand; 40P01 and 55P03 only as their messages, and so does a session
        // terminated by an administrator while libpq still thinks the connection is fine, and
        // a connection libpq or tokio-postgres saw fail on the wire; and so do 25P02,
        // a statement refused because an earlier one aborted the transaction, and 25P01, the
        // commit's check finding no transaction open.
        if message_contains(
            error,
            &[
                "current transaction is aborted",
                "can only be used in transaction blocks",
            ],
        ) {
            return ErrorClass::Aborted;
        }
        classify_by_message(
            error,
            &["deadlock detected", "due to lock timeout"],
            LOST_POSTGRES,
        )
    }

    async fn begin_top<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        idle_timeout: Option<Duration>,
    ) -> QueryResult<()> {
        conn.batch_execute(&postgres_begin(idle_timeout)).await
    }

    fn commit_top<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        // In an aborted transaction PostgreSQL refuses every statement, while COMMIT
        // "succeeds" as a silent ROLLBACK; and with no transaction open (a handler's own
        // ROLLBACK or COMMIT ended it) COMMIT only warns. A SAVEPOINT refuses both: 25P02 in an
        // aborted transaction, 25P01 outside one. In one simple-protocol message the server
        // stops at the first error, so the COMMIT after it never runs then: the check costs no
        // round trip of its own. Sync Diesel's `PgConnection` notices a transaction ended
        // under it from the server's replies; diesel-async's does not, and needs this.
        conn.batch_execute("SAVEPOINT diesel_inbox_commit; COMMIT")
    }

    async fn transaction_is_alive<F, C: Db<F, Backend = Self>>(conn: &mut C) -> QueryResult<bool> {
        // Asked after user code only where the connection cannot see a transaction the user
        // code ended itself and the inbox's own statements follow (diesel-async's): the commit
        // checks otherwise. As the commit's check, a savepoint is refused in an aborted
        // transaction (25P02) and outside one (25P01).
        conn.batch_execute("SAVEPOINT diesel_inbox_alive; RELEASE SAVEPOINT diesel_inbox_alive")
            .await
            .map(|()| true)
    }
}

#[cfg(feature = "mysql")]
impl TransactionSql for diesel::mysql::Mysql {
    const FAILED_STATEMENT: FailedStatement = FailedStatement::DeadlockEndsTransaction;

    fn classify(error: &diesel::result::Error) -> ErrorClass {
        // 1213 (deadlock) arrives as SerializationFailure from prepared statements but only as
        // its message from simple ones (COMMIT among them); 1205 (lock-wait timeout) and the
        // client's lost-connection errors only as their messages.
        crate::class::classify_by_message(
            error,
            &["Deadlock found", "Lock wait timeout exceeded"],
            LOST_MYSQL,
        )
    }

    async fn begin_top<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        idle_timeout: Option<Duration>,
    ) -> QueryResult<()> {
        // No variable lasts one transaction here, and a session variable set per transaction
        // would cost a round trip each: the server's idle_transaction_timeout is the bound.
        let _ = idle_timeout;
        // MariaDB: the fenced transaction (see `mysql::BEGIN_FENCED`). A server without
        // compound statements outside stored programs (Oracle MySQL) gets a plain BEGIN.
        match mysql::compound(conn, mysql::Fixed(mysql::BEGIN_FENCED)).await {
            Some(begun) => begun.map(drop),
            None => mysql::prepared_or_text(conn, "BEGIN").await,
        }
    }

    async fn commit_top<F, C: Db<F, Backend = Self>>(conn: &mut C) -> QueryResult<()> {
        // A deadlock (or a Galera node's brute-force abort) rolls back the whole transaction,
        // and the statements after it would autocommit one by one. On MariaDB the fence keeps
        // them in a transaction of their own, which this commit refuses, in the same round
        // trip, as a deadlock (1213), which is what ended it (`mysql::COMMIT_FENCED`). A server
        // without compound statements outside stored programs (Oracle MySQL) gets the check on
        // its own and then COMMIT.
        match mysql::compound(conn, mysql::Fixed(mysql::COMMIT_FENCED)).await {
            Some(committed) => committed.map(drop),
            None if !Self::transaction_is_alive(conn).await? => Err(mysql::ended_before_commit()),
            None => mysql::prepared_or_text(conn, "COMMIT").await,
        }
    }

    async fn rollback_top<F, C: Db<F, Backend = Self>>(conn: &mut C) -> QueryResult<()> {
        Self::rollback_uncounted(conn).await?;
        conn.count_level(diesel::connection::TransactionDepthChange::DecreaseDepth)
    }

    async fn rollback_uncounted<F, C: Db<F, Backend = Self>>(conn: &mut C) -> QueryResult<()> {
        // The fenced transaction's way out: autocommit back on.
        match mysql::compound(conn, mysql::Fixed(mysql::ROLLBACK_FENCED)).await {
            Some(rolled_back) => rolled_back.map(drop),
            None => mysql::prepared_or_text(conn, "ROLLBACK").await,
        }
    }

    fn next_transaction_read_committed<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        // The next transaction only; the session's own level is left alone.
        conn.batch_execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    }

    async fn transaction_is_alive<F, C: Db<F, Backend = Self>>(conn: &mut C) -> QueryResult<bool> {
        use super::Run;
        // A deadlock rolls back the whole transaction; later statements then autocommit one by
        // one and COMMIT succeeds on nothing. MariaDB's session variable tells. Oracle MySQL
        // has none: there the check cannot tell, which is asked of each connection anew (one
        // process may talk to both servers) and said in a warning once per process.
        let in_transaction = diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
            "@@in_transaction",
        ));
        match super::Cached(in_transaction)
            .get_result_on::<i64>(conn)
            .await
        {
            Ok(in_transaction) => Ok(in_transaction == 1),
            Err(diesel::result::Error::DatabaseError(_, info))
                if info.message().contains("Unknown system variable") =>
            {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| tracing::warn!("this server has no @@in_transaction (MySQL, not MariaDB): the inbox cannot tell when a deadlock the handler swallowed ended its transaction"));
                Ok(true)
            }
            Err(error) => Err(error),
        }
    }
}

#[cfg(feature = "sqlite")]
impl TransactionSql for diesel::sqlite::Sqlite {
    const FAILED_STATEMENT: FailedStatement = FailedStatement::MayEndTransaction;

    fn classify(error: &diesel::result::Error) -> ErrorClass {
        // SQLITE_BUSY and SQLITE_LOCKED arrive as Unknown with these messages; an embedded
        // database has no connection to lose.
        crate::class::classify_by_message(
            error,
            &["database is locked", "database table is locked"],
            &[],
        )
    }

    fn begin_top<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        idle_timeout: Option<Duration>,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        // In process: nothing to wait for but the busy timeout.
        let _ = idle_timeout;
        // The write lock at once, so that writers queue on the busy timeout instead of
        // failing to upgrade a read transaction.
        conn.batch_execute("BEGIN IMMEDIATE")
    }

    async fn transaction_is_alive<F, C: Db<F, Backend = Self>>(conn: &mut C) -> QueryResult<bool> {
        // Some errors (I/O, full disk, a trigger's RAISE(ROLLBACK)) make SQLite roll the whole
        // transaction back, and SQL cannot read the autocommit flag. `BEGIN` can: inside a
        // transaction it fails and changes nothing; outside, it opens one, which the inbox's
        // rollback then ends. In process, so it costs no round trip.
        Ok(conn.batch_execute("BEGIN").await.is_err())
    }

    async fn before_contention_retry<F, C: Db<F, Backend = Self>>(conn: &mut C) {
        use super::Run;
        // Without a busy timeout every concurrent writer fails at once and is retried here;
        // say so once, rather than in every retry.
        static WARNED: std::sync::Once = std::sync::Once::new();
        let timeout = diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
            "(SELECT timeout FROM pragma_busy_timeout())",
        ));
        let timeout = timeout.get_result_on::<i64>(conn).await;
        if timeout == Ok(0) {
            WARNED.call_once(|| {
                tracing::warn!("this SQLite connection has no busy timeout, so concurrent writers fail at once and the inbox retries them: apply diesel_inbox::SqliteSetup to each connection");
            });
        }
    }
}

/// MySQL's `BEGIN` and `COMMIT` as prepared statements, and MariaDB's compound statements,
/// which send several statements as one.
#[cfg(feature = "mysql")]
pub(crate) mod mysql {
    use std::sync::atomic::{AtomicBool, Ordering};

    use diesel::mysql::Mysql;
    use diesel::query_builder::{AstPass, QueryFragment, QueryId};
    use diesel::QueryResult;

    use crate::class::message_contains;
    use crate::sql::{Db, Run};

    /// Set once a server refused to prepare `BEGIN` or `COMMIT` (Oracle MySQL prepares no
    /// `BEGIN`); from then on this process sends them as Diesel does, correct on either
    /// server, at two round trips more each.
    static TEXT_BEGIN_AND_COMMIT: AtomicBool = AtomicBool::new(false);

    /// Set once a server refused a compound statement (`BEGIN NOT ATOMIC .. END`): Oracle
    /// MySQL has them only inside stored programs. From then on this process sends their
    /// parts one by one.
    static NO_COMPOUND_STATEMENTS: AtomicBool = AtomicBool::new(false);

    /// What a commit that found the transaction ended says, as a literal for `concat!`.
    macro_rules! ended_before_commit {
        () => {
            "Deadlock found: the transaction had ended before COMMIT"
        };
    }

    /// The start of every top-level transaction the inbox opens on MariaDB, as a literal for
    /// `concat!`: the fence. A deadlock, or a Galera node's brute-force abort, ends a
    /// transaction under the statements that follow, which then autocommit one by one: an
    /// effect would take place outside the inbox's transaction, and its redelivery would run
    /// it again. So the transaction runs with autocommit off, and those statements open a
    /// transaction of their own instead, which lacks the savepoint `diesel_inbox_open`: the
    /// commit refuses it ([`COMMIT_FENCED`]). Any error rolls back and restores autocommit
    /// before it is raised; so do the commit and [`ROLLBACK_FENCED`], the only ways out.
    macro_rules! begin_fenced {
        () => {
            "BEGIN NOT ATOMIC \
             DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; SET autocommit = 1; RESIGNAL; END; \
             SET autocommit = 0; START TRANSACTION; SAVEPOINT diesel_inbox_open; "
        };
    }

    /// The top-level `BEGIN`: see `begin_fenced!`.
    pub(super) const BEGIN_FENCED: &str = concat!(begin_fenced!(), "END");

    /// The top-level COMMIT: refused as a deadlock (1213, SQLSTATE 40001) and rolled back
    /// where the transaction that set the fence's savepoint has ended (1305, no such
    /// savepoint); autocommit restored either way.
    pub(super) const COMMIT_FENCED: &str = concat!(
        "BEGIN NOT ATOMIC ",
        "DECLARE EXIT HANDLER FOR 1305 BEGIN ROLLBACK; SET autocommit = 1; ",
        "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = '",
        ended_before_commit!(),
        "'; END; ",
        "DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; SET autocommit = 1; RESIGNAL; END; ",
        "RELEASE SAVEPOINT diesel_inbox_open; COMMIT; SET autocommit = 1; END"
    );

    /// The top-level ROLLBACK, which restores autocommit.
    pub(super) const ROLLBACK_FENCED: &str = "BEGIN NOT ATOMIC ROLLBACK; SET autocommit = 1; END";

    /// The error [`COMMIT_FENCED`] raises, where the check runs on its own (Oracle MySQL).
    pub(super) fn ended_before_commit() -> diesel::result::Error {
        diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::SerializationFailure,
            Box::new(ended_before_commit!().to_owned()),
        )
    }

    /// The fenced `BEGIN` (`begin_fenced!`) and then the statement `Q`, as one compound
    /// statement: an error in `Q` rolls the transaction back before it is raised, so that a
    /// failure never leaves a transaction open that the caller does not know of. It reports
    /// the rows `Q` changed.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct BeginThen<Q>(pub(crate) Q);

    impl<Q: QueryFragment<Mysql>> QueryFragment<Mysql> for BeginThen<Q> {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
            out.push_sql(begin_fenced!());
            self.0.walk_ast(out.reborrow())?;
            out.push_sql("; END");
            Ok(())
        }
    }

    impl<Q: QueryId> QueryId for BeginThen<Q> {
        type QueryId = BeginThen<Q::QueryId>;
        const HAS_STATIC_QUERY_ID: bool = Q::HAS_STATIC_QUERY_ID;
    }

    /// Runs `statement`, a compound statement, as a prepared statement Diesel keeps: `None`
    /// where the server has no compound statements, so that nothing ran and the caller sends
    /// the parts one by one.
    pub(crate) async fn compound<F, C, Q>(conn: &mut C, statement: Q) -> Option<QueryResult<usize>>
    where
        C: Db<F, Backend = Mysql>,
        Q: QueryFragment<Mysql> + QueryId + Send,
    {
        if NO_COMPOUND_STATEMENTS.load(Ordering::Relaxed) {
            return None;
        }
        match statement.execute_on(conn).await {
            Err(error) if message_contains(&error, &["near 'NOT ATOMIC"]) => {
                NO_COMPOUND_STATEMENTS.store(true, Ordering::Relaxed);
                tracing::warn!(%error, "this server has no compound statements (Oracle MySQL): the inbox sends their parts one by one, a round trip more each, and cannot tell when a deadlock a handler swallowed ended its transaction");
                None
            }
            result => Some(result),
        }
    }

    /// A statement of fixed text without binds, which Diesel prepares once per connection and
    /// keeps (by its text: every `Fixed` has the same type). `sql_query` it prepares anew each
    /// time.
    #[derive(Debug, Clone, Copy)]
    pub(super) struct Fixed(pub(super) &'static str);

    impl QueryFragment<Mysql> for Fixed {
        fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
            out.push_sql(self.0);
            Ok(())
        }
    }

    impl QueryId for Fixed {
        type QueryId = ();
        const HAS_STATIC_QUERY_ID: bool = false;
    }

    /// Runs `sql` as a prepared statement Diesel keeps, one round trip a run, or as text
    /// where the server refuses to prepare it (so that nothing ran). Diesel sends
    /// `batch_execute` (its own `BEGIN` and `COMMIT` included) as three round trips,
    /// switching multi-statement mode on and off around the text.
    pub(super) async fn prepared_or_text<F, C: Db<F, Backend = Mysql>>(
        conn: &mut C,
        sql: &'static str,
    ) -> QueryResult<()> {
        if !TEXT_BEGIN_AND_COMMIT.load(Ordering::Relaxed) {
            match Fixed(sql).execute_on(conn).await {
                Err(error)
                    if message_contains(
                        &error,
                        &["not supported in the prepared statement protocol"],
                    ) =>
                {
                    TEXT_BEGIN_AND_COMMIT.store(true, Ordering::Relaxed);
                    tracing::warn!(%error, "this server does not prepare BEGIN or COMMIT; the inbox sends them as text, at two round trips more each");
                }
                result => return result.map(drop),
            }
        }
        conn.batch_execute(sql).await
    }
}

#[cfg(test)]
mod tests {
    use diesel::result::{DatabaseErrorKind, Error};

    use super::*;

    fn error(kind: DatabaseErrorKind, message: &str) -> Error {
        Error::DatabaseError(kind, Box::new(message.to_owned()))
    }

    /// Every message a client gives for a dead connection, whichever kind Diesel reports it
    /// as, is a lost connection; the server's ordinary errors are not.
    fn assert_lost_connections<B: TransactionSql>(lost: &[&str], not_lost: &[&str]) {
        for message in lost {
            for kind in [
                DatabaseErrorKind::Unknown,
                DatabaseErrorKind::UnableToSendCommand,
                DatabaseErrorKind::ClosedConnection,
            ] {
                assert_eq!(
                    B::classify(&error(kind, message)),
                    ErrorClass::ConnectionLost,
                    "{message}"
                );
            }
        }
        for message in not_lost {
            assert_eq!(
                B::classify(&error(DatabaseErrorKind::Unknown, message)),
                ErrorClass::Other,
                "{message}"
            );
        }
        // Whatever its message, a statement the client could not send is a lost connection.
        assert_eq!(
            B::classify(&error(DatabaseErrorKind::UnableToSendCommand, "")),
            ErrorClass::ConnectionLost
        );
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn every_message_libpq_and_tokio_postgres_give_for_a_dead_connection_is_a_lost_connection() {
        assert_lost_connections::<diesel::pg::Pg>(
            &[
                "SSL SYSCALL error: EOF detected\n",
                "SSL error: unexpected eof while reading\n",
                "SSL connection has been closed unexpectedly\n",
                "server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally\n\tbefore or while processing the request.\n",
                "no connection to the server\n",
                "could not receive data from server: Connection reset by peer\n",
                "could not send data to server: Broken pipe\n",
                "terminating connection due to administrator command",
                "connection closed",
                "error communicating with the server: Connection reset by peer (os error 104)",
            ],
            &[
                "duplicate key value violates unique constraint \"diesel_inbox_events_pkey\"",
                "relation \"diesel_inbox_events\" does not exist",
                "canceling statement due to user request",
            ],
        );
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn every_message_the_mysql_clients_give_for_a_dead_connection_is_a_lost_connection() {
        assert_lost_connections::<diesel::mysql::Mysql>(
            &[
                "MySQL server has gone away",
                "Server has gone away",
                "Lost connection to server during query",
                "Lost connection to MySQL server at 'reading initial communication packet', system error: 104",
                "Connection was killed",
                "Server shutdown in progress",
                "The client was disconnected by the server because of inactivity. See wait_timeout and interactive_timeout for configuring this behavior.",
                "SSL connection error: unexpected eof while reading",
                "Connection to the server is closed.",
                "Input/output error: Connection reset by peer (os error 104)",
                "WSREP has not yet prepared node for application use",
            ],
            &[
                "Duplicate entry 'evt-1' for key 'PRIMARY'",
                "Got error 5 \"Input/output error\" from storage engine InnoDB",
                "Table 'test.diesel_inbox_events' doesn't exist",
            ],
        );
    }
}
