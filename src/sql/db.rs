//! The connection the statements and the transaction engine run on, for either flavour.
//!
//! [`Db<F>`] is what a statement needs of a connection: run a query, load its rows, send SQL
//! text, and read or change the transaction manager's depth. `F` is the flavour, a marker that
//! only keeps the blanket impls apart: [`Blocking`](super::Blocking) for sync Diesel
//! connections, whose futures are complete when they are made. Statements and transaction
//! bodies are written once, as `async` code over `Db<F>`; the sync front runs them to the end
//! in one poll.
//!
//! Queries go through [`Run`], so that a statement reads as it would in sync Diesel, with
//! `.await`: `query.execute_on(conn).await`, `query.get_result_on::<T>(conn).await`.

use std::future::Future;
use std::time::Duration;

use diesel::backend::Backend;
use diesel::connection::{TransactionDepthChange, TransactionManagerStatus};
use diesel::deserialize::FromSqlRow;
use diesel::expression::QueryMetadata;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::query_dsl::CompatibleType;
use diesel::{QueryResult, RunQueryDsl};

/// A connection the inbox's statements run on, in flavour `F`.
///
/// Every future it returns is `Send`, so that an async delivery can move between threads; for
/// [`Blocking`] connections they are complete when made.
pub trait Db<F>: Send + Sized {
    /// The database the connection talks to.
    type Backend: Backend;

    /// Whether the transaction manager learns that the server ended the transaction under
    /// it (user code that ran `ROLLBACK` or `COMMIT` itself), so that [`depth`](Self::depth)
    /// says so. Sync Diesel's PostgreSQL connection reads the status from every reply;
    /// diesel-async's connections do not. Consulted only where a failed statement aborts the
    /// transaction (PostgreSQL), the one backend whose check after user code trusts the
    /// depth.
    const SEES_TRANSACTION_END: bool;

    /// Runs a statement; returns the rows it changed.
    fn execute<Q>(&mut self, query: Q) -> impl Future<Output = QueryResult<usize>> + Send
    where
        Q: QueryFragment<Self::Backend> + QueryId + Send;

    /// Runs a query and reads every row it returns.
    fn load<Q, ST, U>(&mut self, query: Q) -> impl Future<Output = QueryResult<Vec<U>>> + Send
    where
        Q: Query + QueryFragment<Self::Backend> + QueryId + Send,
        Q::SqlType: CompatibleType<U, Self::Backend, SqlType = ST>,
        U: FromSqlRow<ST, Self::Backend> + Send + 'static,
        ST: 'static,
        Self::Backend: QueryMetadata<Q::SqlType>;

    /// Sends SQL text as it is, one or more statements, in one round trip where the backend
    /// allows.
    fn batch_execute(&mut self, sql: &str) -> impl Future<Output = QueryResult<()>> + Send;

    /// The transaction depth: 0 outside a transaction. An error means the transaction manager
    /// is broken (a rollback failed, a delivery was dropped mid-transaction).
    fn depth(&mut self) -> QueryResult<u32>;

    /// Counts a top-level `BEGIN` or `COMMIT` sent as text in the transaction manager, as its
    /// own would; a commit finds nothing to count when the connection counted it already
    /// (PostgreSQL's resets the count whenever the server reports no open transaction).
    fn count_level(&mut self, change: TransactionDepthChange) -> QueryResult<()>;

    /// Opens a level through the transaction manager: a savepoint inside an open transaction.
    fn begin_level(&mut self) -> impl Future<Output = QueryResult<()>> + Send;

    /// Commits the innermost level through the transaction manager (releases a savepoint).
    fn commit_level(&mut self) -> impl Future<Output = QueryResult<()>> + Send;

    /// Rolls back the innermost level through the transaction manager.
    fn rollback_level(&mut self) -> impl Future<Output = QueryResult<()>> + Send;

    /// Marks the transaction manager broken, so that the connection refuses the next
    /// transaction and a pool discards it: for a delivery dropped while its transaction was
    /// open. Never panics.
    fn poison(&mut self);

    /// Waits `delay` before a contention retry: the thread sleeps for `Blocking`, the
    /// runtime's timer waits for async.
    fn sleep(delay: Duration) -> impl Future<Output = ()> + Send;
}

/// [`Db::depth`] read off a transaction manager's status, for either flavour.
pub(super) fn depth_of(status: &mut TransactionManagerStatus) -> QueryResult<u32> {
    Ok(status
        .transaction_depth()?
        .map_or(0, std::num::NonZeroU32::get))
}

/// [`Db::count_level`] on a transaction manager's status, for either flavour.
pub(super) fn count_level_in(
    status: &mut TransactionManagerStatus,
    change: TransactionDepthChange,
) -> QueryResult<()> {
    match status {
        TransactionManagerStatus::Valid(status) => match (change, status.transaction_depth()) {
            (TransactionDepthChange::DecreaseDepth, None) => Ok(()),
            _ => status.change_transaction_depth(change),
        },
        TransactionManagerStatus::InError => Err(diesel::result::Error::BrokenTransactionManager),
    }
}

/// A query passed on as it is, so that generic code can run it with Diesel's `RunQueryDsl`,
/// which it implements for every connection. Its statement-cache key is the query's own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stmt<Q>(pub(crate) Q);

impl<Q: QueryFragment<DB>, DB: Backend> QueryFragment<DB> for Stmt<Q> {
    fn walk_ast<'b>(&'b self, pass: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.0.walk_ast(pass)
    }

    fn is_safe_to_cache_prepared(&self, backend: &DB) -> QueryResult<bool> {
        self.0.is_safe_to_cache_prepared(backend)
    }
}

impl<Q: QueryId> QueryId for Stmt<Q> {
    type QueryId = Q::QueryId;
    const HAS_STATIC_QUERY_ID: bool = Q::HAS_STATIC_QUERY_ID;
}

impl<Q: Query> Query for Stmt<Q> {
    type SqlType = Q::SqlType;
}

impl<Q, Conn> RunQueryDsl<Conn> for Stmt<Q> {}

/// Runs a query on a [`Db`] connection, as `RunQueryDsl` does on a sync one: a statement reads
/// `query.execute_on(conn).await` where sync Diesel reads `query.execute(conn)`.
pub(crate) trait Run<F, C: Db<F>>: Sized + Send {
    /// [`Db::execute`].
    fn execute_on(self, conn: &mut C) -> impl Future<Output = QueryResult<usize>> + Send
    where
        Self: QueryFragment<C::Backend> + QueryId,
    {
        conn.execute(self)
    }

    /// [`Db::load`].
    fn load_on<U>(self, conn: &mut C) -> impl Future<Output = QueryResult<Vec<U>>> + Send
    where
        Self: Query + QueryFragment<C::Backend> + QueryId,
        Self::SqlType: CompatibleType<U, C::Backend>,
        U: FromSqlRow<<Self::SqlType as CompatibleType<U, C::Backend>>::SqlType, C::Backend>
            + Send
            + 'static,
        <Self::SqlType as CompatibleType<U, C::Backend>>::SqlType: 'static,
        C::Backend: QueryMetadata<Self::SqlType>,
    {
        conn.load(self)
    }

    /// The first row, or `NotFound`: Diesel's `get_result` (and `first` after a `limit(1)`).
    fn get_result_on<U>(self, conn: &mut C) -> impl Future<Output = QueryResult<U>> + Send
    where
        Self: Query + QueryFragment<C::Backend> + QueryId,
        Self::SqlType: CompatibleType<U, C::Backend>,
        U: FromSqlRow<<Self::SqlType as CompatibleType<U, C::Backend>>::SqlType, C::Backend>
            + Send
            + 'static,
        <Self::SqlType as CompatibleType<U, C::Backend>>::SqlType: 'static,
        C::Backend: QueryMetadata<Self::SqlType>,
    {
        let rows = conn.load(self);
        async move {
            rows.await?
                .into_iter()
                .next()
                .ok_or(diesel::result::Error::NotFound)
        }
    }
}

impl<F, C: Db<F>, Q: Send> Run<F, C> for Q {}

/// A query of a fixed shape that Diesel keeps prepared, keyed by its SQL text. Diesel 2.3
/// prepares every `UPDATE` and upsert anew, since their SQL can vary with the values given and
/// its cache is keyed by type; that costs a round trip more on the servers (and a parse on
/// SQLite) each time. Keyed by the text, a statement cannot be mistaken for another, so the
/// inbox's hot statements are wrapped in this. Only for statements whose text takes a bounded
/// number of shapes (each stays prepared for the connection's life), and only for statements
/// run with `get_result` or `load`: `execute` passes the statement on by reference, and
/// Diesel's impl for references asks the statement inside, which says no.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cached<Q>(pub(crate) Q);

impl<Q: QueryFragment<DB>, DB: Backend> QueryFragment<DB> for Cached<Q> {
    fn walk_ast<'b>(&'b self, pass: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.0.walk_ast(pass)
    }

    fn is_safe_to_cache_prepared(&self, _backend: &DB) -> QueryResult<bool> {
        Ok(true)
    }
}

/// Cached by the SQL text, never by the type.
impl<Q> QueryId for Cached<Q> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q: Query> Query for Cached<Q> {
    type SqlType = Q::SqlType;
}

impl<Q, Conn> RunQueryDsl<Conn> for Cached<Q> {}
