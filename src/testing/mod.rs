//! Helpers for testing your handlers (cargo feature `testing`): prove in a unit test that a
//! handler takes effect once however often its event is delivered.
//!
//! - **Databases**: [`TestDatabase`] gives each test a database of its own with the inbox
//!   schema applied, on SQLite, PostgreSQL or MySQL/MariaDB.
//! - **Delivery harness**: [`assert_idempotent`] delivers one event several times through your
//!   handler, [`assert_idempotent_concurrently`] does it from several threads over a pool, and
//!   both assert exactly one effect, counted the way you say.

mod db;
mod harness;

pub use db::TestDatabase;
pub use harness::{assert_idempotent, assert_idempotent_concurrently, DeliveryReport};
