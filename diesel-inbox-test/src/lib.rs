//! Helpers for testing diesel-inbox handlers: prove in a unit test that a handler takes
//! effect once however often its event is delivered. Add it as a dev-dependency, with the
//! features of the backends your tests use (`postgres`, `sqlite`, `mysql`) and `async` for
//! diesel-async connections.
//!
//! - **Databases**: [`TestDatabase`] gives each test a database of its own with the inbox
//!   schema applied, on SQLite, PostgreSQL or MySQL/MariaDB.
//! - **Inbox assertions**: [`assert_processed_once`], [`assert_deliveries`],
//!   [`assert_not_processed`] and [`assert_dead_lettered`] check what the inbox recorded, and
//!   show the row when they fail; [`Inbox::record`](diesel_inbox::Inbox::record) reads it.
//! - **Delivery harness**: [`assert_idempotent`] delivers one event several times through your
//!   handler, [`assert_idempotent_concurrently`] does it from several threads over a pool, and
//!   both assert exactly one effect, counted the way you say.
//! - **Fault injection**: [`Faults`] makes a handler fail, by an error or a panic, on chosen
//!   attempts or at random from a seed, to test your retry path.
//! - **Schema fixtures**: [`check_schema_fixtures`] checks that a fixture of every schema
//!   version a consumer accepts decodes; [`write_schema_fixture`] writes one.
//! - **Schedules**: [`run_schedule`] plays a [`Schedule`] of duplicates, reorderings and
//!   injected failures and checks one effect per distinct event; [`ScheduleOptions`] makes
//!   random ones from a seed, or a proptest strategy.
//! - **Async**: [`asynch`] (feature `async`) has the inbox assertions, the
//!   delivery harnesses (one delivery after another, and many futures at once) and
//!   [`run_schedule`] for diesel-async connections and async handlers; an async handler takes
//!   faults from [`Faults::inject`].
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::connection::SimpleConnection;
//! use diesel::dsl::sql;
//! use diesel::prelude::*;
//! use diesel::sql_types::BigInt;
//! use diesel_inbox_test::{assert_deliveries, assert_idempotent, TestDatabase};
//! use diesel_inbox::{with_inbox, Inbox, Outcome};
//!
//! /// The handler under test: credits a wallet once per payment event.
//! fn on_payment(conn: &mut SqliteConnection, event_id: &str) -> QueryResult<Outcome<usize>> {
//!     with_inbox(conn, event_id, |tx| {
//!         diesel::sql_query("UPDATE wallet SET cents = cents + 250").execute(tx)
//!     })
//! }
//!
//! let db = TestDatabase::sqlite();
//! let mut conn = db.connect();
//! conn.batch_execute("CREATE TABLE wallet (cents BIGINT NOT NULL); INSERT INTO wallet VALUES (0);")?;
//!
//! assert_idempotent(
//!     &mut conn,
//!     3,
//!     |conn| on_payment(conn, "payment-1"),
//!     |conn| sql::<BigInt>("SELECT cents / 250 FROM wallet").get_result(conn),
//! );
//! assert_deliveries(&mut conn, &Inbox::default(), "payment-1", 3);
//! # }
//! # Ok::<(), diesel::result::Error>(())
//! ```
//!
//! A broker's worst day, from a seed: redeliveries, reorderings, failing and panicking
//! attempts, and one effect per distinct event checked at the end (a failing schedule shrinks
//! under proptest through [`ScheduleOptions::strategy`]):
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::connection::SimpleConnection;
//! use diesel::dsl::sql;
//! use diesel::prelude::*;
//! use diesel::sql_types::BigInt;
//! use diesel_inbox::Inbox;
//! use diesel_inbox_test::{run_schedule, Schedule, TestDatabase};
//!
//! /// The effect under test: one ledger line per payment event.
//! fn record_payment(tx: &mut SqliteConnection, event_id: &str) -> QueryResult<usize> {
//!     diesel::sql_query("INSERT INTO ledger VALUES (?)")
//!         .bind::<diesel::sql_types::Text, _>(event_id)
//!         .execute(tx)
//! }
//!
//! fn ledger_lines(conn: &mut SqliteConnection) -> QueryResult<i64> {
//!     sql::<BigInt>("SELECT COUNT(*) FROM ledger").get_result(conn)
//! }
//!
//! let db = TestDatabase::sqlite(); // a database of its own, schema applied
//! let mut conn = db.connect();
//! conn.batch_execute("CREATE TABLE ledger (event_id TEXT NOT NULL)")?;
//! let schedule = Schedule::random(7);
//! run_schedule(
//!     &mut conn,
//!     &Inbox::new("ledger")?,
//!     &schedule,
//!     |tx, id| record_payment(tx, id.as_str()),
//!     ledger_lines,
//! );
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! On a shared or managed server, place the test databases by the team's rules with
//! [`TestDatabase::postgres_at`] and [`TestDatabase::mysql_at`] and a [`Placement`]: a
//! database per test under a prefix, a schema per test inside one database (PostgreSQL, no
//! `CREATE DATABASE` needed), or an existing database used as it is. Each removes only what it
//! created, and only when the test passes. `DIESEL_INBOX_TEST_PREFIX` sets the prefix of
//! [`TestDatabase::postgres`] and [`TestDatabase::mysql`].
//!
//! The repository's `diesel-inbox-tests/tests/user_handler.rs` is a complete example to copy:
//! a wallet credited by payment events, tested all of these ways.

mod assert;
#[cfg(feature = "async")]
pub mod asynch;
mod db;
mod faults;
mod fixtures;
mod harness;
mod reach;
mod schedule;

pub use assert::{
    assert_dead_lettered, assert_deliveries, assert_not_processed, assert_processed_once,
};
pub use db::{
    behind_pooler, without_statement_cache, Placement, TestDatabase, MAX_PREFIX_BYTES,
    POOLER_VARIABLE, PREFIX_VARIABLE,
};
pub use faults::{Fault, Faults, InjectedFault};
pub use fixtures::{check_schema_fixtures, write_schema_fixture, FixtureError, FixtureProblem};
pub use harness::{assert_idempotent, assert_idempotent_concurrently, DeliveryReport};

pub use schedule::{run_schedule, Schedule, ScheduleOptions, Step};
