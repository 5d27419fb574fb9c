//! Helpers for testing your handlers (cargo feature `testing`): prove in a unit test that a
//! handler takes effect once however often its event is delivered.
//!
//! - **Databases**: [`TestDatabase`] gives each test a database of its own with the inbox
//!   schema applied, on SQLite, PostgreSQL or MySQL/MariaDB.

mod db;

pub use db::TestDatabase;
