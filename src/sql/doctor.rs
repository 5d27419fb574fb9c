//! The doctor's statements: reads of the database's catalogue (is this table, column, index
//! there) and of the backend's settings that the inbox relies on.
//!
//! Implemented for each backend in its file under `backend/`; the catalogue reads that take
//! the same shape on all three are `backend/portable.rs`'s `catalogue_statement!`.

use std::future::Future;

use diesel::QueryResult;

use super::{Db, TransactionSql};
use crate::check::Check;

/// The doctor's statements for one database, on a connection of either flavour. Sealed.
pub trait DoctorSql: TransactionSql {
    /// Whether the current database (schema) has a table called `name`.
    fn table_exists<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        name: &str,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Whether the index `name` exists on one of the current database's tables.
    fn index_exists<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        name: &str,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Whether the current database's table `table` has a column `column`.
    fn column_exists<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        table: &str,
        column: &str,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Whether the unique index (constraint) `name` on `table` exists. By name, except on
    /// SQLite, which names a constraint's index itself.
    fn unique_index_exists<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        table: &str,
        name: &str,
    ) -> impl Future<Output = QueryResult<bool>> + Send {
        let _ = table;
        Self::index_exists(conn, name)
    }

    /// The checks of this backend's settings.
    fn backend_checks<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<Vec<Check>>> + Send;
}
