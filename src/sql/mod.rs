//! What the inbox's statements run on, in either flavour, and the statements that frame its
//! transactions.
//!
//! - [`Db`] (`db.rs`): a connection as the statements and the engine see it: run a query, load
//!   rows, send SQL text, count and open transaction levels. Written against it, a statement or
//!   a transaction body serves sync Diesel and diesel-async alike.
//! - [`Blocking`] (`blocking.rs`): `Db` for every sync Diesel connection, whose futures are
//!   complete when they are made.
//! - `Async` (`asynch.rs`, feature `async`): `Db` for every diesel-async connection, pooled
//!   ones included.
//! - [`TransactionSql`] (`transaction.rs`): per backend, how a top-level transaction begins
//!   and commits, how to tell it is still alive, and what an error means.
//! - One trait per area for its statements, implemented on Diesel's backend types and generic
//!   over the connection, in the area's folder (`sql.rs`, with the macro that implements it
//!   for a backend): [`InboxSql`] (`inbox/`), [`FailureSql`] (`dead_letter/`),
//!   [`RetentionSql`] (`retention/`), [`CursorSql`] (`cursor/`), [`ClaimSql`] (`claim/`),
//!   [`OutboxSql`] (`outbox/`), [`ChainSql`] (`chain/`), [`ReplaySql`] (`replay/`); and here,
//!   the migrations' lock and record, [`MigrationsSql`] (`migrations.rs`), and the doctor's
//!   catalogue reads, [`DoctorSql`] (`doctor.rs`). [`Sql`] names them all.

#[cfg(feature = "async")]
mod asynch;
mod blocking;
mod db;
mod doctor;
mod migrations;
mod transaction;

pub(crate) use crate::chain::sql::ChainSql;
pub(crate) use crate::claim::sql::ClaimSql;
pub(crate) use crate::cursor::sql::CursorSql;
pub(crate) use crate::dead_letter::sql::FailureSql;
pub(crate) use crate::inbox::sql::{Began, InboxSql};
pub(crate) use crate::outbox::sql::OutboxSql;
pub(crate) use crate::replay::sql::ReplaySql;
pub(crate) use crate::retention::sql::RetentionSql;
#[cfg(feature = "async")]
pub use asynch::Async;
pub use blocking::Blocking;
pub(crate) use db::{Cached, Db, Run};
pub(crate) use doctor::DoctorSql;
pub(crate) use migrations::{MigrationLock, MigrationsSql};
#[cfg(feature = "mysql")]
pub(crate) use transaction::mysql::{compound, BeginThen};
#[cfg(feature = "postgres")]
pub(crate) use transaction::postgres_begin;
pub(crate) use transaction::TransactionSql;

/// Every area's statements for one database: what a connection's backend must implement for
/// the inbox to run on it. Sealed.
///
/// It also names what Diesel asks of a backend for `sql_query` and the query DSL, so that a
/// handler generic over [`InboxConnection`](crate::InboxConnection) runs them with that one
/// bound. The list is written once: each backend's file says `impl Sql for Pg {}`, which
/// compiles only when every area's statements are stamped for it.
pub trait Sql:
    'static
    + diesel::backend::DieselReserveSpecialization
    + InboxSql
    + FailureSql
    + RetentionSql
    + CursorSql
    + ClaimSql
    + OutboxSql
    + ChainSql
    + ReplaySql
    + MigrationsSql
    + DoctorSql
{
}
