//! What each backend is: its connection types, how it binds keys and times, its migrations' lock
//! and the doctor's catalogue reads.
//!
//! Each backend file (`postgres.rs`, `sqlite.rs`, `mysql.rs`) says how its backend binds keys
//! and times (`mod codec`) and stamps every area's statements for it, one line an area
//! (`crate::claim::sql::claim_statements!(Pg, schema = schema, codec = codec, ..)`): the
//! statements themselves, for every backend, are in the area's folder (`<area>/sql.rs`). How a
//! backend begins and commits a transaction, checks that it is alive, and classifies its errors
//! is [`crate::sql::TransactionSql`].
//!
//! Here besides: the migrations' lock and record ([`crate::sql::MigrationsSql`]): the record's
//! statements are `tracking.rs`, and the wait for a lock the database cannot wait for itself
//! (PostgreSQL's) is `lock.rs`; the doctor's catalogue reads ([`crate::sql::DoctorSql`]), with
//! the shapes every backend shares in `portable.rs`. What every backend's statements share (counter
//! buckets, the rows per statement, the readings of a listed row) is `shared.rs`, below them. Adding a backend touches this folder and
//! one line per area in its file.

use diesel::connection::LoadConnection;
use diesel::Connection;

use crate::sql::Sql;

#[macro_use]
mod portable;
mod shared;
#[macro_use]
pub(crate) mod tracking;
#[cfg(feature = "postgres")]
mod lock;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
mod pooled;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "sqlite")]
pub use sqlite::SqliteSetup;

/// A Diesel connection the inbox can run on: `PgConnection`, `SqliteConnection`,
/// `MysqlConnection` (with the matching cargo feature), and r2d2 `PooledConnection`s of them.
///
/// The trait is sealed: its methods are the inbox's per-backend SQL, not an extension point.
pub trait InboxConnection: Connection<Backend: Sql> + LoadConnection + sealed::HasInboxSql {}

impl<C> InboxConnection for C where
    C: Connection<Backend: Sql> + LoadConnection + sealed::HasInboxSql
{
}

pub(crate) use crate::rows::StreamKey;
pub(crate) use shared::{counter_bucket, counter_stripe, in_order, known, readable, recorded};
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) use shared::{roll_back_uncounted, ROWS_PER_STATEMENT};

pub(crate) mod sealed {
    /// The sync connections the inbox runs on: the three backends' own, and r2d2's pooled
    /// ones of them.
    pub trait HasInboxSql {}
}
