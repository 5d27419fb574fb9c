//! [`Db`] for diesel-async connections: `AsyncPgConnection`, `AsyncMysqlConnection`,
//! `SyncConnectionWrapper<SqliteConnection>`, and the pooled connections of diesel-async's
//! pools, which pass every call on to the connection inside.

use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::time::Duration;

use diesel::connection::TransactionDepthChange;
use diesel::deserialize::FromSqlRow;
use diesel::expression::QueryMetadata;
use diesel::query_builder::{Query, QueryFragment, QueryId};
use diesel::query_dsl::CompatibleType;
use diesel::QueryResult;
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection, TransactionManager};

use super::db::{count_level_in, depth_of, Db, Stmt};

/// The async flavour: diesel-async's connections, awaited on a tokio runtime. An
/// [`Inbox<Async>`](crate::flavour::Inbox), which is [`crate::asynch::Inbox`], awaits its
/// deliveries on them.
#[derive(Debug, Clone, Copy)]
pub enum Async {}

/// The connection's own transaction manager.
type Manager<C> = <C as AsyncConnection>::TransactionManager;

impl<C: AsyncConnection<Backend: 'static>> Db<Async> for C {
    type Backend = C::Backend;
    const SEES_TRANSACTION_END: bool = false;

    async fn execute<Q>(&mut self, query: Q) -> QueryResult<usize>
    where
        Q: QueryFragment<C::Backend> + QueryId + Send,
    {
        Stmt(query).execute(self).await
    }

    async fn load<Q, ST, U>(&mut self, query: Q) -> QueryResult<Vec<U>>
    where
        Q: Query + QueryFragment<C::Backend> + QueryId + Send,
        Q::SqlType: CompatibleType<U, C::Backend, SqlType = ST>,
        U: FromSqlRow<ST, C::Backend> + Send + 'static,
        ST: 'static,
        C::Backend: QueryMetadata<Q::SqlType>,
    {
        Stmt(query).load(self).await
    }

    fn batch_execute(&mut self, sql: &str) -> impl Future<Output = QueryResult<()>> + Send {
        SimpleAsyncConnection::batch_execute(self, sql)
    }

    fn depth(&mut self) -> QueryResult<u32> {
        depth_of(Manager::<C>::transaction_manager_status_mut(self))
    }

    fn count_level(&mut self, change: TransactionDepthChange) -> QueryResult<()> {
        count_level_in(Manager::<C>::transaction_manager_status_mut(self), change)
    }

    fn begin_level(&mut self) -> impl Future<Output = QueryResult<()>> + Send {
        Manager::<C>::begin_transaction(self)
    }

    async fn commit_level(&mut self) -> QueryResult<()> {
        let before = self.depth()?;
        let Err(error) = Manager::<C>::commit_transaction(self).await else {
            return Ok(());
        };
        // A savepoint whose release failed (PostgreSQL refuses it in an aborted transaction)
        // is still open on the server, but diesel-async counts it released unless it saw the
        // transaction abort, which it learns from serialization failures only. Count it again
        // and roll it back, as sync Diesel does, so that the level is gone either way.
        if before > 1 && self.depth() == Ok(before - 1) {
            self.count_level(TransactionDepthChange::IncreaseDepth)?;
            if let Err(rollback) = Manager::<C>::rollback_transaction(self).await {
                tracing::warn!(%rollback, "rolling back a savepoint that failed to release");
            }
        }
        Err(error)
    }

    fn rollback_level(&mut self) -> impl Future<Output = QueryResult<()>> + Send {
        Manager::<C>::rollback_transaction(self)
    }

    fn poison(&mut self) {
        // `SyncConnectionWrapper` panics when its state is read while a statement of a
        // dropped future still runs on the blocking pool; a destructor must not panic.
        let _ = panic::catch_unwind(AssertUnwindSafe(|| {
            Manager::<C>::transaction_manager_status_mut(self).set_in_error();
        }));
    }

    fn sleep(delay: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(delay)
    }
}
