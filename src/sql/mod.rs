//! What the inbox's statements run on, in either flavour, and the statements that frame its
//! transactions.
//!
//! - [`Db`] (`db.rs`): a connection as the statements and the engine see it: run a query, load
//!   rows, send SQL text, count and open transaction levels. Written against it, a statement or
//!   a transaction body serves sync Diesel and diesel-async alike.
//! - [`Blocking`] (`blocking.rs`): `Db` for every sync Diesel connection, whose futures are
//!   complete when they are made.
//! - [`TransactionSql`] (`transaction.rs`): per backend, how a top-level transaction begins
//!   and commits, how to tell it is still alive, and what an error means.

mod blocking;
mod db;
mod transaction;

pub(crate) use blocking::Blocking;
pub(crate) use db::{Cached, Db};
pub(crate) use transaction::TransactionSql;
