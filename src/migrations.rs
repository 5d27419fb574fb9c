//! The inbox schema, embedded per backend.
//!
//! The same migrations ship as SQL under `migrations/<backend>/` for the Diesel CLI. Their
//! versions (`20000101000001`, ...) sort before any application migration made with the CLI, and
//! Diesel keys applied migrations by version alone, so they share `__diesel_schema_migrations`
//! with the application's own without colliding.

use diesel::backend::Backend;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness};

use crate::backend::sealed::InboxBackend;
use crate::error::MigrationError;
use crate::{Error, InboxConnection};

#[cfg(feature = "postgres")]
pub(crate) const POSTGRES: EmbeddedMigrations =
    diesel_migrations::embed_migrations!("migrations/postgres");
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE: EmbeddedMigrations =
    diesel_migrations::embed_migrations!("migrations/sqlite");
#[cfg(feature = "mysql")]
pub(crate) const MYSQL: EmbeddedMigrations =
    diesel_migrations::embed_migrations!("migrations/mysql");

/// Applies the inbox migrations that `conn`'s database lacks; returns how many ran.
///
/// Safe to call at every start-up: applied migrations are skipped, and the SQL itself uses
/// `IF NOT EXISTS`, so a schema applied by hand is not an error either.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// assert_eq!(diesel_inbox::run_pending_migrations(&mut conn)?, 2);
/// assert_eq!(diesel_inbox::run_pending_migrations(&mut conn)?, 0);
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`Error::Migration`] when a migration fails; what it applied before stays applied.
pub fn run_pending_migrations<C: InboxConnection>(conn: &mut C) -> Result<usize, Error> {
    conn.backend().apply_migrations().map_err(Error::Migration)
}

pub(crate) fn apply<C, DB>(
    conn: &mut C,
    migrations: EmbeddedMigrations,
) -> Result<usize, MigrationError>
where
    C: MigrationHarness<DB>,
    DB: Backend,
{
    conn.run_pending_migrations(migrations)
        .map(|applied| applied.len())
}
