//! [`Db`] for sync Diesel connections: every future is complete when it is made.

use std::future::{ready, Future};
use std::time::Duration;

use diesel::connection::{LoadConnection, TransactionDepthChange, TransactionManager};
use diesel::deserialize::FromSqlRow;
use diesel::expression::QueryMetadata;
use diesel::query_builder::{Query, QueryFragment, QueryId};
use diesel::query_dsl::CompatibleType;
use diesel::{Connection, QueryResult, RunQueryDsl};

use super::db::{count_level_in, depth_of, Db, Stmt};

/// The sync flavour: Diesel's connections, driven by the calling thread. An
/// [`Inbox<Blocking>`](crate::flavour::Inbox), which is [`crate::Inbox`], runs its deliveries
/// on them.
#[derive(Debug, Clone, Copy)]
pub enum Blocking {}

/// The connection's own transaction manager: Diesel's `AnsiTransactionManager`, or an r2d2
/// pooled connection's, which hands every call to the one of the connection inside.
type Manager<C> = <C as Connection>::TransactionManager;

impl<C: Connection<Backend: 'static> + LoadConnection> Db<Blocking> for C {
    type Backend = C::Backend;
    const SEES_TRANSACTION_END: bool = true;

    fn execute<Q>(&mut self, query: Q) -> impl Future<Output = QueryResult<usize>> + Send
    where
        Q: QueryFragment<C::Backend> + QueryId + Send,
    {
        ready(Stmt(query).execute(self))
    }

    fn load<Q, ST, U>(&mut self, query: Q) -> impl Future<Output = QueryResult<Vec<U>>> + Send
    where
        Q: Query + QueryFragment<C::Backend> + QueryId + Send,
        Q::SqlType: CompatibleType<U, C::Backend, SqlType = ST>,
        U: FromSqlRow<ST, C::Backend> + Send + 'static,
        ST: 'static,
        C::Backend: QueryMetadata<Q::SqlType>,
    {
        ready(Stmt(query).load(self))
    }

    fn batch_execute(&mut self, sql: &str) -> impl Future<Output = QueryResult<()>> + Send {
        ready(diesel::connection::SimpleConnection::batch_execute(
            self, sql,
        ))
    }

    fn depth(&mut self) -> QueryResult<u32> {
        depth_of(Manager::<C>::transaction_manager_status_mut(self))
    }

    fn count_level(&mut self, change: TransactionDepthChange) -> QueryResult<()> {
        count_level_in(Manager::<C>::transaction_manager_status_mut(self), change)
    }

    fn begin_level(&mut self) -> impl Future<Output = QueryResult<()>> + Send {
        ready(Manager::<C>::begin_transaction(self))
    }

    fn commit_level(&mut self) -> impl Future<Output = QueryResult<()>> + Send {
        ready(Manager::<C>::commit_transaction(self))
    }

    fn rollback_level(&mut self) -> impl Future<Output = QueryResult<()>> + Send {
        ready(Manager::<C>::rollback_transaction(self))
    }

    fn poison(&mut self) {
        Manager::<C>::transaction_manager_status_mut(self).set_in_error();
    }

    fn sleep(delay: Duration) -> impl Future<Output = ()> + Send {
        std::thread::sleep(delay);
        ready(())
    }
}
