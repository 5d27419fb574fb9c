//! The inbox schema, and the two supported ways to apply it.
//!
//! The inbox keeps its state in its own tables, all named `diesel_inbox_*`: the events
//! (`diesel_inbox_events`, one row per processed event), the failures and their log, hourly
//! counters for stats, for cursors the cursors, the gap ledger and the sequence of each id a
//! cursor kept, for chains their blocks, reorgs and reverted events, the claims on side
//! effects, the outbox, governed replays with their transitions and notes, and the leases that
//! span a cluster. Pick **one** of these routes per database:
//!
//! - **Embedded**: call [`run_pending_migrations`] at start-up. It applies what is missing and
//!   records the inbox's versions in a table of its own, `diesel_inbox_migrations`, never in
//!   Diesel's `__diesel_schema_migrations`, so every Diesel CLI command
//!   (`diesel migration run`, `revert --all`, `redo`, `list`) keeps working on the
//!   application's own migrations folder, which knows nothing of the inbox. On diesel-async,
//!   `asynch::run_pending_migrations` (feature `async`) runs the same code.
//! - **Installed**: call [`install`] once (from a build script, a test or an ops tool) to write
//!   the inbox's SQL into the application's migrations folder as ordinary Diesel CLI
//!   migrations (`<timestamp>_diesel_inbox_create/{up,down}.sql`, ...). From then on they are
//!   the application's migrations: the Diesel CLI, or `embed_migrations!` in the application,
//!   applies and reverts them with the rest, and `run_pending_migrations` is not called.
//!
//! Mixing the routes on one database does no harm to the schema (every `CREATE` is
//! `IF NOT EXISTS`), but then each route believes it owns the tables, and reverting one drops
//! tables the other still counts as applied.
//!
//! The same SQL is available as text through [`sql`] (to print, review or run by hand), and,
//! with the default feature `diesel-migrations`, as `diesel_migrations`' `EmbeddedMigrations`
//! (`POSTGRES`, `SQLITE`, `MYSQL`) for an application that runs them through its own
//! `MigrationHarness`. Neither [`run_pending_migrations`] nor [`install`] needs that feature:
//! an app that turns it off compiles neither `diesel_migrations` nor its macros.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_inbox::migrations::{install, Dialect};
//!
//! // Embedded: at start-up, on every start.
//! let mut conn = SqliteConnection::establish(":memory:")?;
//! assert_eq!(diesel_inbox::run_pending_migrations(&mut conn)?, 11);
//!
//! // Installed: once, into the application's migrations folder (a temporary one here).
//! let app_migrations = tempfile::tempdir()?;
//! assert_eq!(install(app_migrations.path(), Dialect::Sqlite)?.len(), 11);
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Embedded, in detail.** [`run_pending_migrations`] is fleet-safe: replicas starting
//! together may all call it; one at a time applies what is missing under a lock on the
//! database (a PostgreSQL transaction-scoped advisory lock, MySQL/MariaDB `GET_LOCK`, SQLite's
//! immediate transaction) and the others find nothing left. A wait longer than 60 s
//! ([`run_pending_migrations_with`] and [`MigrationOptions::lock_timeout`]) is refused as
//! locked: another process is migrating, retry. A database that diesel-inbox 0.1 migrated (its
//! events table was `diesel_inbox`, its versions in `__diesel_schema_migrations`) is taken over
//! on the first call: the table is renamed, so every event it processed stays processed, and
//! the versions move to `diesel_inbox_migrations`.
//!
//! **Installed, in detail.** [`install`] writes
//! `migrations/<UTC timestamp>_diesel_inbox_create/{up,down}.sql` and the rest after your
//! existing migrations; then `diesel migration run` applies your tables and the inbox's, and
//! `diesel migration revert --all` drops them all again. It skips the inbox migrations the
//! folder already holds (whatever their timestamp), so after upgrading the crate, run it again:
//! it writes only what is new. A folder that is missing or not writable is refused, and nothing
//! is left half-written.
//!
//! Handing `POSTGRES`, `SQLITE` or `MYSQL` to a harness of your own records their
//! versions (`20000101000001`, ...) in your `__diesel_schema_migrations`, and
//! `diesel migration revert` on your folder then fails with `Unable to find migration version
//! 20000101000002`; prefer one of the two routes. (The repository's `diesel.toml` points the
//! Diesel CLI at `migrations/postgres` for work on the crate itself, to check that `down.sql`
//! reverts `up.sql`; it is not a way to migrate an application.)
//!
//! **Querying the inbox tables.** [`crate::schema`] holds the tables as Diesel `table!`s per
//! backend, with each backend's key and time types, for joins and reports in your own queries;
//! the state columns read as [`DeadLetterState`](crate::dead_letter::DeadLetterState),
//! [`HistoryKind`](crate::dead_letter::HistoryKind), [`GapCause`](crate::cursor::GapCause) and
//! [`GapState`](crate::cursor::GapState).
//!
//! **Keeping the inbox out of `schema.rs`.** `diesel print-schema` (and `diesel migration run`
//! when `[print_schema] file` is set) writes a `table!` for every table it finds, the inbox's
//! included. To leave them out, filter them in your `diesel.toml`:
//!
//! ```toml
//! [print_schema]
//! file = "src/schema.rs"
//! filter = { except_tables = ["^diesel_inbox_"] }
//! ```
//!
//! or once, `diesel print-schema --except-tables '^diesel_inbox_'`. The patterns are regular
//! expressions matched anywhere in a table name, hence the `^`; this one also leaves out
//! `diesel_inbox_migrations`.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use diesel::QueryResult;
#[cfg(feature = "diesel-migrations")]
use diesel_migrations::EmbeddedMigrations;

pub use crate::dialect::{Dialect, UnknownDatabaseUrl, UnknownDialect};
use crate::engine::{run_ready, Open};
use crate::sql::{Blocking, Db, DoctorSql, MigrationsSql, Sql};
use crate::{AdminError, InboxConnection};

// Only PostgreSQL polls for its migration lock: MySQL's GET_LOCK waits by itself.
pub(crate) mod objects;
mod sql_text;

/// The inbox migrations for PostgreSQL, for an application's own
/// [`MigrationHarness`](diesel_migrations::MigrationHarness).
///
/// Running them that way records their versions (`20000101000001`, `20000101000002`) in the
/// application's `__diesel_schema_migrations`, beside its own. The Diesel CLI then knows
/// versions that its migrations folder lacks, and `diesel migration revert` fails on them
/// (`Unable to find migration version 20000101000002`), unless the folder holds the inbox
/// migrations too. Prefer [`run_pending_migrations`], which keeps its versions in a table of
/// its own, or [`install`], which makes them ordinary migrations of the application. See
/// [`SQLITE`] for an example.
#[cfg(all(feature = "postgres", feature = "diesel-migrations"))]
pub const POSTGRES: EmbeddedMigrations =
    diesel_migrations::embed_migrations!("migrations/postgres");

/// The inbox migrations for SQLite, for an application's own
/// [`MigrationHarness`](diesel_migrations::MigrationHarness).
///
/// Running them that way records their versions (`20000101000001`, `20000101000002`) in the
/// application's `__diesel_schema_migrations`, beside its own. The Diesel CLI then knows
/// versions that its migrations folder lacks, and `diesel migration revert` fails on them
/// (`Unable to find migration version 20000101000002`), unless the folder holds the inbox
/// migrations too. Prefer [`run_pending_migrations`], which keeps its versions in a table of
/// its own, or [`install`], which makes them ordinary migrations of the application.
///
/// ```
/// use diesel::prelude::*;
/// use diesel_migrations::MigrationHarness;
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// let applied = conn.run_pending_migrations(diesel_inbox::migrations::SQLITE)?;
/// assert_eq!(applied.len(), 11); // now in __diesel_schema_migrations
/// let noop = |_tx: &mut SqliteConnection| Ok::<_, diesel_inbox::Error>(());
/// assert!(diesel_inbox::with_inbox(&mut conn, "evt-1", noop)?.is_processed());
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[cfg(all(feature = "sqlite", feature = "diesel-migrations"))]
pub const SQLITE: EmbeddedMigrations = diesel_migrations::embed_migrations!("migrations/sqlite");

/// The inbox migrations for MySQL and MariaDB, for an application's own
/// [`MigrationHarness`](diesel_migrations::MigrationHarness).
///
/// Running them that way records their versions (`20000101000001`, `20000101000002`) in the
/// application's `__diesel_schema_migrations`, beside its own. The Diesel CLI then knows
/// versions that its migrations folder lacks, and `diesel migration revert` fails on them
/// (`Unable to find migration version 20000101000002`), unless the folder holds the inbox
/// migrations too. Prefer [`run_pending_migrations`], which keeps its versions in a table of
/// its own, or [`install`], which makes them ordinary migrations of the application. See
/// [`SQLITE`] for an example.
#[cfg(all(feature = "mysql", feature = "diesel-migrations"))]
pub const MYSQL: EmbeddedMigrations = diesel_migrations::embed_migrations!("migrations/mysql");

/// Applies the inbox migrations that `conn`'s database lacks; returns how many ran.
///
/// Safe to call at every start-up: applied migrations are skipped, and the SQL itself uses
/// `IF NOT EXISTS`, so a schema applied by hand is not an error either. Applied versions are
/// recorded in the table `diesel_inbox_migrations` (created if missing), never in Diesel's
/// `__diesel_schema_migrations`, so the Diesel CLI can run and revert the application's own
/// migrations as if the inbox were not there. On PostgreSQL and SQLite they all run in one
/// transaction, which holds the migration lock; on MySQL/MariaDB each runs in a transaction of
/// its own (MySQL commits DDL at once, so there a failed migration may leave part of its work).
///
/// A database that diesel-inbox 0.1 migrated (its events table named `diesel_inbox`, its
/// versions in `__diesel_schema_migrations`) is taken over on the first call: the table is
/// renamed, keeping every event it processed, and the versions move to
/// `diesel_inbox_migrations`.
///
/// Do not also [`install`] the migrations into the application's folder for the same
/// database: pick one route.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// assert_eq!(diesel_inbox::run_pending_migrations(&mut conn)?, 11);
/// assert_eq!(diesel_inbox::run_pending_migrations(&mut conn)?, 0);
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Safe in a fleet: any number of processes (replicas starting together) may call it at once.
/// One at a time applies what is missing, under a lock on the database (PostgreSQL: the
/// transaction-scoped advisory lock `7597117890791827314`, taken before anything is created
/// and held by the transaction that applies them, so it holds behind a pooler in transaction
/// mode such as PgBouncer's, and never outlives it; MySQL/MariaDB: `GET_LOCK` on
/// `diesel_inbox.migrations:<database>`; SQLite: an immediate transaction around them all);
/// the others wait for it, then find nothing left to apply. A wait is bounded, by 60 seconds
/// here; see [`run_pending_migrations_with`] to choose the bound.
///
/// # Errors
///
/// [`AdminError::Migration`] when a migration fails; what it applied before stays applied on
/// MySQL/MariaDB (on PostgreSQL and SQLite, where all of them run in one transaction, nothing
/// does).
/// [`AdminError::MigrationLocked`] when another process held the lock for longer than the bound:
/// nothing was applied by this call; retry.
pub fn run_pending_migrations<C: InboxConnection>(conn: &mut C) -> Result<usize, AdminError> {
    run_pending_migrations_with(conn, MigrationOptions::default())
}

/// [`run_pending_migrations`], waiting for the migration lock at most as long as `options`
/// says.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use std::time::Duration;
/// use diesel::prelude::*;
/// use diesel_inbox::migrations::MigrationOptions;
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// let options = MigrationOptions::default().lock_timeout(Duration::from_secs(5));
/// assert_eq!(diesel_inbox::migrations::run_pending_migrations_with(&mut conn, options)?, 11);
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`run_pending_migrations`].
pub fn run_pending_migrations_with<C: InboxConnection>(
    conn: &mut C,
    options: MigrationOptions,
) -> Result<usize, AdminError> {
    run_ready(migrate::<Blocking, _>(conn, options))
}

/// Whether this database holds the inbox's record of applied migrations (the table
/// `diesel_inbox_migrations`): whether [`run_pending_migrations`] ever ran on it. Migrations
/// [`install`]ed into the app's own folder and run by the Diesel CLI leave no such record: for
/// them this answers `false`; [`crate::doctor::check`] tells what the schema holds.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// assert!(!diesel_inbox::migrations::is_installed(&mut conn)?);
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// assert!(diesel_inbox::migrations::is_installed(&mut conn)?);
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`AdminError::Inbox`] when the catalog cannot be read.
pub fn is_installed<C: InboxConnection>(conn: &mut C) -> Result<bool, AdminError> {
    let tracked = run_ready(C::Backend::table_exists(conn, TRACKING_TABLE));
    tracked.map_err(|error| AdminError::Inbox(error.into()))
}

/// The tables the inbox migrations create, in the order they create them (drop them in
/// reverse, then `diesel_inbox_migrations`, their record).
///
/// ```
/// let tables: Vec<_> = diesel_inbox::migrations::tables().collect();
/// assert_eq!(tables[0], "diesel_inbox_events");
/// ```
pub fn tables() -> impl DoubleEndedIterator<Item = &'static str> {
    objects::TABLES.iter().map(|table| table.name)
}

/// The table that records which inbox migrations are applied.
pub(crate) const TRACKING_TABLE: &str = "diesel_inbox_migrations";

/// [`run_pending_migrations_with`] in either flavour: the migrations not applied yet, in
/// order, each in a transaction of its own (a savepoint where the lock holds a transaction),
/// under the backend's migration lock.
pub(crate) async fn migrate<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    options: MigrationOptions,
) -> Result<usize, AdminError> {
    // Dropped while it holds the lock, the connection is marked broken, so that no pool hands
    // the lock out again: the server frees it with the session.
    let mut held = Open::holding(conn, "the migration lock");
    let lock = match C::Backend::lock_migrations(held.conn(), options.lock_timeout).await {
        Ok(lock) => lock,
        Err(error) => {
            held.close();
            return Err(error);
        }
    };
    let applied = apply(held.conn()).await;
    let released = C::Backend::unlock_migrations(held.conn(), lock, applied.is_ok()).await;
    if released.is_ok() {
        held.close();
    }
    let applied = applied.map_err(|error| AdminError::Migration(Box::new(error)))?;
    released.map_err(|error| AdminError::Migration(Box::new(error)))?;
    Ok(applied)
}

/// How [`run_pending_migrations_with`] applies the inbox migrations.
///
/// ```
/// use std::time::Duration;
/// use diesel_inbox::migrations::MigrationOptions;
///
/// let options = MigrationOptions::default();
/// assert_eq!(options.lock_timeout_value(), Duration::from_secs(60));
/// let options = options.lock_timeout(Duration::from_secs(10));
/// assert_eq!(options.lock_timeout_value(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MigrationOptions {
    lock_timeout: Duration,
}

impl Default for MigrationOptions {
    /// A lock timeout of 60 seconds.
    fn default() -> Self {
        Self {
            lock_timeout: Duration::from_secs(60),
        }
    }
}

impl MigrationOptions {
    /// How long to wait for another process that is applying the migrations (it holds the
    /// migration lock) before giving up with [`AdminError::MigrationLocked`]. Defaults to 60
    /// seconds. On MySQL/MariaDB it is rounded to the microsecond, on SQLite to the
    /// millisecond (as a busy timeout).
    #[must_use]
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// The lock timeout set.
    pub fn lock_timeout_value(&self) -> Duration {
        self.lock_timeout
    }
}

/// One inbox migration as SQL text: what [`install`] writes into a migration folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct MigrationSql {
    /// The migration's name, without a version: `diesel_inbox_create`, `diesel_inbox_failures`.
    /// Installed folders are named `<version>_<name>`.
    pub name: &'static str,
    /// Its version, as `diesel_inbox_migrations` records it: `20000101000001`.
    pub version: &'static str,
    /// The SQL that applies it (`up.sql`).
    pub up: &'static str,
    /// The SQL that reverts it (`down.sql`); it drops the tables and every row in them.
    pub down: &'static str,
}

/// The inbox migration `$name`, number `$n` of the folder `migrations/$dialect`, as text.
/// Every inbox migration is dated 2000-01-01: its folder is `2000-01-01-<n>_<name>`, its
/// version `20000101<n>`.
macro_rules! migration_sql {
    ($dialect:literal, $n:literal, $name:literal) => {
        MigrationSql {
            name: $name,
            version: concat!("20000101", $n),
            up: include_str!(concat!(
                "../migrations/",
                $dialect,
                "/2000-01-01-",
                $n,
                "_",
                $name,
                "/up.sql"
            )),
            down: include_str!(concat!(
                "../migrations/",
                $dialect,
                "/2000-01-01-",
                $n,
                "_",
                $name,
                "/down.sql"
            )),
        }
    };
}

/// The inbox migrations of `$dialect`, in the order they apply.
macro_rules! migrations_sql {
    ($dialect:literal) => {
        &[
            migration_sql!($dialect, "000001", "diesel_inbox_create"),
            migration_sql!($dialect, "000002", "diesel_inbox_failures"),
            migration_sql!($dialect, "000003", "diesel_inbox_operations"),
            migration_sql!($dialect, "000004", "diesel_inbox_cursors"),
            migration_sql!($dialect, "000005", "diesel_inbox_claims"),
            migration_sql!($dialect, "000006", "diesel_inbox_outbox"),
            migration_sql!($dialect, "000007", "diesel_inbox_outbox_order"),
            migration_sql!($dialect, "000008", "diesel_inbox_chains"),
            migration_sql!($dialect, "000009", "diesel_inbox_replays"),
            migration_sql!($dialect, "000010", "diesel_inbox_leases"),
            migration_sql!($dialect, "000011", "diesel_inbox_reverted_events"),
        ]
    };
}

/// How many inbox migrations there are, in every dialect.
pub(crate) const COUNT: usize = POSTGRES_SQL.len();

const POSTGRES_SQL: &[MigrationSql] = migrations_sql!("postgres");
const SQLITE_SQL: &[MigrationSql] = migrations_sql!("sqlite");
const MYSQL_SQL: &[MigrationSql] = migrations_sql!("mysql");

/// The inbox migrations for `dialect` as SQL text, in the order they apply.
///
/// The same SQL as the embedded migrations and [`install`]; to print, review, or run by hand
/// (`psql`, `mariadb`, `sqlite3`) where neither route fits.
///
/// ```
/// use diesel_inbox::migrations::{sql, Dialect};
///
/// for migration in sql(Dialect::Postgres) {
///     println!("-- {}\n{}", migration.name, migration.up);
/// }
/// assert!(sql(Dialect::Mysql)[0].up.contains("CREATE TABLE IF NOT EXISTS diesel_inbox_events"));
/// ```
pub fn sql(dialect: Dialect) -> &'static [MigrationSql] {
    match dialect {
        Dialect::Postgres => POSTGRES_SQL,
        Dialect::Sqlite => SQLITE_SQL,
        Dialect::Mysql => MYSQL_SQL,
    }
}

/// The table `name` as the migrations of `dialect` create it: its columns' definitions and
/// its `CREATE TABLE` statement, read from their SQL.
pub(crate) fn created_table(dialect: Dialect, name: &str) -> Option<sql_text::CreatedTable> {
    sql(dialect)
        .iter()
        .flat_map(|m| sql_text::created(m.up).0)
        .find(|table| table.name == name)
}

/// The version of the inbox migration called `name` (`20000101000002` for
/// `diesel_inbox_failures`).
pub(crate) fn version_of_migration(name: &str) -> Option<String> {
    POSTGRES_SQL
        .iter()
        .find(|m| m.name == name)
        .map(|m| m.version.to_owned())
}

/// Writes the inbox migrations into an application's Diesel migrations folder `dir`, as
/// ordinary Diesel CLI migrations; returns the folders it created, in order.
///
/// Each migration becomes a folder `YYYY-MM-DD-HHMMSS_<name>` (for instance
/// `2025-06-01-120000_diesel_inbox_create`) holding `up.sql` and `down.sql`, stamped with the
/// current UTC time and one second apart, so they sort in order after the application's
/// existing migrations (a second already taken by a migration in `dir` is skipped). From then
/// on the Diesel CLI (`diesel migration run`, `revert`, `redo`) and `embed_migrations!` treat
/// them as the application's own. Do not also call [`run_pending_migrations`] on that
/// database: pick one route.
///
/// Installing again is safe: a migration already in `dir` (a folder named `<version>_<name>`,
/// whatever its version) is skipped, so a second call returns an empty list.
///
/// ```
/// use diesel_inbox::migrations::{install, Dialect};
///
/// let app_migrations = tempfile::tempdir()?; // your project's `migrations/`
/// let written = install(app_migrations.path(), Dialect::Postgres)?;
/// assert_eq!(written.len(), 11);
/// assert!(written[0].to_string_lossy().ends_with("_diesel_inbox_create"));
/// assert!(written[1].join("down.sql").is_file());
/// assert!(install(app_migrations.path(), Dialect::Postgres)?.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`AdminError::MigrationInstall`] when `dir` does not exist, is not a directory, or a folder or
/// file cannot be written in it. What this call had created is removed again.
pub fn install(dir: &Path, dialect: Dialect) -> Result<Vec<PathBuf>, AdminError> {
    install_at(dir, dialect, Utc::now())
}

/// [`install`], stamping the first migration it writes with `now` (or the next free second).
fn install_at(
    dir: &Path,
    dialect: Dialect,
    now: DateTime<Utc>,
) -> Result<Vec<PathBuf>, AdminError> {
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source| AdminError::MigrationInstall { path, source }
    };
    if !fs::metadata(dir).map_err(failed(dir))?.is_dir() {
        return Err(failed(dir)(io::Error::new(
            io::ErrorKind::NotADirectory,
            "not a directory",
        )));
    }
    let mut existing = Vec::new();
    for entry in fs::read_dir(dir).map_err(failed(dir))? {
        let entry = entry.map_err(failed(dir))?;
        if entry.file_type().map_err(failed(&entry.path()))?.is_dir() {
            existing.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    let missing: Vec<&MigrationSql> = sql(dialect)
        .iter()
        .filter(|m| !in_folders(&existing, m.name))
        .collect();
    let taken: HashSet<String> = existing.iter().map(|name| version_of(name)).collect();
    let first = first_free_second(now, &taken, missing.len());

    let mut written = Vec::with_capacity(missing.len());
    for (at, migration) in (0..).map(|i| first + TimeDelta::seconds(i)).zip(missing) {
        let folder = dir.join(folder_name(at, migration.name));
        if let Err(error) = write_migration(&folder, migration, &mut written) {
            for done in written.iter().rev() {
                // Best effort: leave no half-installed migration for the Diesel CLI to trip on.
                let _ = fs::remove_dir_all(done);
            }
            return Err(error);
        }
    }
    Ok(written)
}

/// Creates `folder` (recorded in `written` as soon as it exists) with `up.sql` and `down.sql`.
fn write_migration(
    folder: &Path,
    migration: &MigrationSql,
    written: &mut Vec<PathBuf>,
) -> Result<(), AdminError> {
    let failed = |path: PathBuf| move |source| AdminError::MigrationInstall { path, source };
    fs::create_dir(folder).map_err(failed(folder.to_path_buf()))?;
    written.push(folder.to_path_buf());
    for (file, body) in [("up.sql", migration.up), ("down.sql", migration.down)] {
        let path = folder.join(file);
        let text = format!(
            "-- {}: an inbox migration, installed by diesel-inbox {}.\n{body}",
            migration.name,
            env!("CARGO_PKG_VERSION"),
        );
        fs::write(&path, text).map_err(failed(path))?;
    }
    Ok(())
}

/// Whether one of the folder names in `existing` is the inbox migration `name`, at any version.
fn in_folders(existing: &[String], name: &str) -> bool {
    existing
        .iter()
        .any(|folder| folder.split_once('_').is_some_and(|(_, rest)| rest == name))
}

/// A Diesel CLI migration folder name: `YYYY-MM-DD-HHMMSS_<name>`, in UTC.
fn folder_name(at: DateTime<Utc>, name: &str) -> String {
    format!("{}_{name}", at.format("%Y-%m-%d-%H%M%S"))
}

/// The version Diesel reads from a migration folder name: what precedes the first `_`,
/// without its dashes.
fn version_of(folder: &str) -> String {
    folder
        .split('_')
        .next()
        .unwrap_or_default()
        .replace('-', "")
}

/// The first whole second from `now` on that starts `count` consecutive seconds whose
/// versions no migration in `taken` uses.
fn first_free_second(now: DateTime<Utc>, taken: &HashSet<String>, count: usize) -> DateTime<Utc> {
    let mut first = DateTime::from_timestamp(now.timestamp(), 0).unwrap_or(now);
    while (0..count).any(|i| {
        let at = first + TimeDelta::seconds(i64::try_from(i).unwrap_or(i64::MAX));
        taken.contains(&version_of(&folder_name(at, "")))
    }) {
        first += TimeDelta::seconds(1);
    }
    first
}

/// The versions of the inbox's migrations that `diesel_inbox_migrations` does not record,
/// oldest first. Reads only: an error when the tracking table is missing (probed in a
/// transaction of its own, so a caller's PostgreSQL transaction is not left aborted).
pub(crate) async fn pending<F, C: Db<F, Backend: Sql>>(conn: &mut C) -> QueryResult<Vec<String>> {
    conn.begin_level().await?;
    let applied = C::Backend::applied_migrations(conn).await;
    end_level(conn, applied.is_ok()).await?;
    let applied: HashSet<String> = applied?.into_iter().collect();
    Ok(sql(C::Backend::DIALECT)
        .iter()
        .map(|migration| migration.version.to_owned())
        .filter(|version| !applied.contains(version))
        .collect())
}

/// Applies the migrations `diesel_inbox_migrations` does not record, in order, each in a
/// transaction of its own with its record; returns how many ran.
async fn apply<F, C: Db<F, Backend: Sql>>(conn: &mut C) -> Result<usize, FailedMigration> {
    let failed = |migration: &'static str| {
        move |error: diesel::result::Error| FailedMigration { migration, error }
    };
    adopt_pre_release_schema(conn)
        .await
        .map_err(failed("the takeover of diesel-inbox 0.1's schema"))?;
    let applied: HashSet<String> = C::Backend::applied_migrations(conn)
        .await
        .map_err(failed("reading diesel_inbox_migrations"))?
        .into_iter()
        .collect();
    let mut ran = 0;
    for migration in sql(C::Backend::DIALECT) {
        if applied.contains(migration.version) {
            continue;
        }
        conn.begin_level().await.map_err(failed(migration.name))?;
        let mut step = conn.batch_execute(migration.up).await;
        if step.is_ok() {
            step = C::Backend::record_migration(conn, migration.version).await;
        }
        end_level(conn, step.is_ok())
            .await
            .map_err(failed(migration.name))?;
        step.map_err(failed(migration.name))?;
        tracing::info!(
            migration = migration.name,
            version = migration.version,
            "applied the inbox migration"
        );
        ran += 1;
    }
    Ok(ran)
}

/// A migration that did not apply, and why: what [`AdminError::Migration`] carries.
#[derive(Debug, thiserror::Error)]
#[error("{migration}: {error}")]
struct FailedMigration {
    migration: &'static str,
    #[source]
    error: diesel::result::Error,
}

/// Ends the level [`Db::begin_level`] opened: commits it when `ok`, or when the commit fails
/// and always otherwise, rolls it back.
async fn end_level<F, C: Db<F>>(conn: &mut C, ok: bool) -> QueryResult<()> {
    if ok {
        let committed = conn.commit_level().await;
        if committed.is_ok() {
            return committed;
        }
        let _ = conn.rollback_level().await;
        return committed;
    }
    conn.rollback_level().await
}

/// Takes over a database that diesel-inbox 0.1 migrated, once: renames `diesel_inbox` to
/// `diesel_inbox_events`, so every event it processed stays processed, and moves the inbox's
/// versions from Diesel's table into `diesel_inbox_migrations`, so that neither the inbox runs
/// them again nor the Diesel CLI meets versions the application's folder lacks.
async fn adopt_pre_release_schema<F, C: Db<F, Backend: Sql>>(conn: &mut C) -> QueryResult<()> {
    C::Backend::create_tracking_table(conn).await?;
    if !C::Backend::applied_migrations(conn).await?.is_empty() {
        return Ok(());
    }
    // Probed in transactions of their own: a missing table is an error, which on PostgreSQL
    // would otherwise leave a caller's transaction aborted. Versions in Diesel's table beside
    // the new table names come from an application's own harness (see `POSTGRES`): its own.
    conn.begin_level().await?;
    let adopted = C::Backend::pre_release_versions(conn).await;
    end_level(conn, adopted.is_ok()).await?;
    let Ok(adopted) = adopted else {
        return Ok(());
    };
    conn.begin_level().await?;
    let probed = conn
        .batch_execute("SELECT 1 FROM diesel_inbox WHERE 1 = 0")
        .await;
    end_level(conn, probed.is_ok()).await?;
    if adopted.is_empty() || probed.is_err() {
        return Ok(());
    }
    conn.begin_level().await?;
    let mut took_over = conn
        .batch_execute("ALTER TABLE diesel_inbox RENAME TO diesel_inbox_events")
        .await;
    for version in &adopted {
        if took_over.is_ok() {
            took_over = C::Backend::record_migration(conn, version).await;
        }
        if took_over.is_ok() {
            took_over = C::Backend::forget_pre_release(conn, version).await;
        }
    }
    end_level(conn, took_over.is_ok()).await?;
    took_over?;
    tracing::warn!(
        versions = ?adopted,
        "took over the inbox schema of diesel-inbox 0.1: diesel_inbox is now diesel_inbox_events, and its versions moved from __diesel_schema_migrations to diesel_inbox_migrations"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn the_backend_is_decided_by_the_scheme_alone() {
        for (url, expected) in [
            ("postgres://h/db", Some(Dialect::Postgres)),
            ("POSTGRESQL://h/db", Some(Dialect::Postgres)),
            ("MySQL://h/db", Some(Dialect::Mysql)),
            ("mariadb://h/db", Some(Dialect::Mysql)),
            ("sqlite://inbox.db", Some(Dialect::Sqlite)),
            ("file:inbox.db?mode=ro", Some(Dialect::Sqlite)),
            ("FILE:/var/inbox.db", Some(Dialect::Sqlite)),
            (":memory:", Some(Dialect::Sqlite)),
            ("inbox.db", Some(Dialect::Sqlite)),
            ("./data/inbox:2.db", Some(Dialect::Sqlite)),
            ("/var/lib/a:b/inbox.db", Some(Dialect::Sqlite)),
            ("//app:S3cret@h/db", Some(Dialect::Sqlite)),
            ("C:\\data\\inbox.db", Some(Dialect::Sqlite)),
            ("postgres:/app:S3cret@h/db", None),
            ("postgres:app:S3cret@h/db", None),
            ("sqlite:inbox.db", None),
            ("app:S3cret@h/db", None),
            ("redis://h", None),
            ("a@b:S3cret", None),
        ] {
            assert_eq!(Dialect::from_database_url(url), expected, "{url}");
            if let Err(e) = Dialect::parse_database_url(url) {
                assert!(!e.to_string().contains("S3cret"), "{e}");
            }
        }
        assert_eq!(
            Dialect::parse_database_url("a@b:x").unwrap_err().scheme(),
            None
        );
    }

    #[test]
    fn installed_folders_are_named_and_versioned_as_the_diesel_cli_does() {
        let at = Utc.with_ymd_and_hms(2025, 3, 9, 7, 5, 3).unwrap();
        let folder = folder_name(at, "diesel_inbox_create");
        assert_eq!(folder, "2025-03-09-070503_diesel_inbox_create");
        assert_eq!(version_of(&folder), "20250309070503");
        assert_eq!(
            version_of("2000-01-01-000002_diesel_inbox_failures"),
            "20000101000002"
        );
    }

    #[test]
    fn installed_versions_are_consecutive_seconds_that_no_migration_uses() {
        let now = Utc.with_ymd_and_hms(2025, 3, 9, 7, 5, 3).unwrap() + TimeDelta::milliseconds(700);
        let none = HashSet::new();
        assert_eq!(
            first_free_second(now, &none, 2),
            now - TimeDelta::milliseconds(700)
        );

        // An application migration made in the second after: both move past it.
        let taken: HashSet<String> = ["20250309070504".to_owned()].into();
        assert_eq!(
            first_free_second(now, &taken, 2),
            Utc.with_ymd_and_hms(2025, 3, 9, 7, 5, 5).unwrap()
        );
    }

    #[test]
    fn an_inbox_migration_is_recognised_at_any_version_and_only_by_its_whole_name() {
        let existing = vec![
            "2024-01-01-000000_create_users".to_owned(),
            "2025-03-09-070503_diesel_inbox_create".to_owned(),
            "2025-03-09-070504_diesel_inbox_failures_v2".to_owned(),
        ];
        assert!(in_folders(&existing, "diesel_inbox_create"));
        assert!(!in_folders(&existing, "diesel_inbox_failures"));
    }

    #[test]
    fn a_failed_install_removes_the_migrations_it_had_written() {
        let dir = tempfile::tempdir().unwrap();
        let now = Utc.with_ymd_and_hms(2025, 3, 9, 7, 5, 3).unwrap();
        // A file where the second migration's folder goes: creating that folder fails.
        let blocker = dir.path().join("2025-03-09-070504_diesel_inbox_failures");
        fs::write(&blocker, "").unwrap();

        let error = install_at(dir.path(), Dialect::Sqlite, now).unwrap_err();

        assert!(
            matches!(&error, AdminError::MigrationInstall { path, .. } if *path == blocker),
            "{error:?}"
        );
        let left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        assert_eq!(left, [blocker]);
    }

    #[test]
    fn the_object_list_is_what_the_migrations_create() {
        for dialect in [Dialect::Postgres, Dialect::Sqlite, Dialect::Mysql] {
            let mut tables = Vec::new();
            let mut indexes = Vec::new();
            for migration in sql(dialect) {
                let (created, created_indexes) = sql_text::created(migration.up);
                for table in created {
                    let columns: Vec<String> = table.columns.into_iter().map(|c| c.0).collect();
                    tables.push((migration.name, table.name, columns));
                }
                for index in created_indexes {
                    let columns = index.columns.join(", ");
                    indexes.push((
                        migration.name,
                        index.name,
                        index.table,
                        columns,
                        index.unique,
                    ));
                }
            }
            let listed_tables: Vec<_> = objects::TABLES
                .iter()
                .map(|t| {
                    let columns: Vec<String> = t.columns.iter().map(|c| (*c).to_owned()).collect();
                    (t.migration, t.name.to_owned(), columns)
                })
                .collect();
            assert_eq!(tables, listed_tables, "{dialect}");
            let listed_indexes: Vec<_> = objects::INDEXES
                .iter()
                .map(|i| {
                    let (name, table) = (i.name.to_owned(), i.table.to_owned());
                    (i.migration, name, table, i.columns.join(", "), i.unique)
                })
                .collect();
            let (mut indexes, mut listed_indexes) = (indexes, listed_indexes);
            indexes.sort();
            listed_indexes.sort();
            assert_eq!(indexes, listed_indexes, "{dialect}");
        }
    }

    #[test]
    fn an_index_is_recreated_by_the_statement_its_migration_runs() {
        let settled = objects::INDEXES
            .iter()
            .find(|i| i.name == "diesel_inbox_events_settled")
            .unwrap();
        for dialect in [Dialect::Postgres, Dialect::Sqlite, Dialect::Mysql] {
            let up = sql(dialect)[2].up;
            assert!(up.contains(&settled.create_statement()), "{dialect}");
        }
        assert_eq!(
            version_of_migration("diesel_inbox_failures").as_deref(),
            Some("20000101000002")
        );
    }

    #[test]
    fn the_sql_lists_every_migration_folder_of_each_dialect_in_order() {
        for (dialect, folder) in [
            (Dialect::Postgres, "postgres"),
            (Dialect::Sqlite, "sqlite"),
            (Dialect::Mysql, "mysql"),
        ] {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(folder);
            let mut folders: Vec<String> = fs::read_dir(&dir)
                .unwrap()
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            folders.sort();
            let names: Vec<(&str, String)> = folders
                .iter()
                .map(|f| (f.split_once('_').unwrap().1, version_of(f)))
                .collect();
            let listed: Vec<(&str, String)> = sql(dialect)
                .iter()
                .map(|m| (m.name, m.version.to_owned()))
                .collect();
            assert_eq!(listed, names, "{folder}");
        }
    }
}
