//! Throwaway databases with the inbox schema applied, one per test.

use std::fmt;
use std::marker::PhantomData;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use std::sync::atomic::{AtomicU32, Ordering};

#[cfg(any(feature = "postgres", feature = "mysql"))]
use diesel::connection::SimpleConnection;
use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool, R2D2Connection};
use diesel::{Connection, QueryResult};

use diesel_inbox::InboxConnection;

/// A database of its own for one test, with the inbox migrations applied.
///
/// Each one is its own database (a temporary file on SQLite, a fresh database on PostgreSQL and
/// MySQL/MariaDB), so tests run in parallel without seeing each other's rows. It is dropped when
/// the test passes and kept, with its name printed, when the test panics, so a failure leaves
/// its state to inspect.
///
/// [`connect`](Self::connect) gives a connection for [`assert_idempotent`](super::assert_idempotent),
/// [`run_schedule`](super::run_schedule) and the inbox assertions; [`pool`](Self::pool) gives the
/// pool [`assert_idempotent_concurrently`](super::assert_idempotent_concurrently) delivers from.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox_test::TestDatabase;
///
/// let db = TestDatabase::sqlite();
/// let mut conn: SqliteConnection = db.connect();
/// let outcome = diesel_inbox::with_inbox(&mut conn, "evt-1", |_tx| Ok::<_, diesel::result::Error>(()))?;
/// assert!(outcome.is_processed());
/// # }
/// # Ok::<(), diesel::result::Error>(())
/// ```
pub struct TestDatabase<C> {
    url: String,
    setup: fn(&mut C) -> QueryResult<()>,
    cleanup: Option<Cleanup>,
    dir: Option<tempfile::TempDir>,
    _connection: PhantomData<fn() -> C>,
}

/// Where [`TestDatabase::postgres_at`] and [`TestDatabase::mysql_at`] put a test's inbox
/// schema on a server, and so what they remove when the test passes: only what they created.
///
/// ```
/// use diesel_inbox_test::Placement;
///
/// // A fresh database per test, named by the team's rule: `team_ci_<pid>_<n>_<random>`.
/// let _ = Placement::Database { prefix: "team_ci" };
/// // PostgreSQL, without CREATE DATABASE: a fresh schema per test inside the URL's database.
/// let _ = Placement::Schema { prefix: "team_ci" };
/// // The URL's database as it is, for a server where nothing else may be created.
/// let _ = Placement::Existing;
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement<'a> {
    /// A database of its own, `<prefix>_<pid>_<n>_<random>`, created through the URL (any
    /// database the user can connect to and create databases from) and dropped when the test
    /// passes. Needs `CREATE DATABASE`.
    Database {
        /// The name's start: ASCII letters, digits and `_`, starting with a letter or `_`,
        /// at most [`MAX_PREFIX_BYTES`] bytes.
        prefix: &'a str,
    },
    /// PostgreSQL only: a schema of its own, `<prefix>_<pid>_<n>_<random>`, created in the
    /// URL's database and dropped (`CASCADE`) when the test passes; its connections find the
    /// inbox's tables there through `search_path`, which the URL carries (`options`). Needs
    /// `CREATE` on that database only. Not behind a pooler that drops `options` (PgBouncer in
    /// transaction mode): use [`Placement::Database`] there.
    Schema {
        /// As for [`Placement::Database`].
        prefix: &'a str,
    },
    /// The URL's database as it is: the inbox migrations are applied to it, and when the test
    /// passes the inbox's tables are dropped only if this test database created them. Tests
    /// sharing it see each other's rows: give them consumers of their own, or run them one at
    /// a time.
    Existing,
}

/// The longest [`Placement`] prefix, in bytes: the generated suffix needs the rest of the
/// servers' 63-byte (PostgreSQL) and 64-byte (MySQL) identifiers.
pub const MAX_PREFIX_BYTES: usize = 36;

/// The environment variable that sets the prefix of [`TestDatabase::postgres`] and
/// [`TestDatabase::mysql`] databases (the crate's own suite's too); `diesel_inbox_test` without it.
pub const PREFIX_VARIABLE: &str = "DIESEL_INBOX_TEST_PREFIX";

/// The environment variable that says the test server is reached through a pooler in
/// transaction mode (PgBouncer): set to `1`, every connection a [`TestDatabase`] opens has
/// Diesel's prepared statement cache disabled, as such a pooler needs (see [`behind_pooler`]).
pub const POOLER_VARIABLE: &str = "DIESEL_INBOX_POOLER";

/// Whether [`POOLER_VARIABLE`] is set to `1`: the tests' connections then disable Diesel's
/// prepared statement cache ([`without_statement_cache`]), since a pooler in transaction mode
/// may run a statement on another server connection than the one that prepared it.
pub fn behind_pooler() -> bool {
    std::env::var(POOLER_VARIABLE).is_ok_and(|value| value == "1")
}

/// `conn` with Diesel's prepared statement cache disabled when [`behind_pooler`], as it is.
pub fn without_statement_cache<C: Connection>(mut conn: C) -> C {
    disable_statement_cache_behind_pooler(&mut conn);
    conn
}

/// Disables `conn`'s prepared statement cache when [`behind_pooler`].
fn disable_statement_cache_behind_pooler<C: Connection>(conn: &mut C) {
    if behind_pooler() {
        conn.set_prepared_statement_cache_size(diesel::connection::CacheSize::Disabled);
    }
}

/// What a server-side test database removes when its test passes: `what`, by `run`.
struct Cleanup {
    what: String,
    run: Box<dyn FnOnce() -> QueryResult<()> + Send + Sync>,
}

impl<C> fmt::Debug for TestDatabase<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestDatabase")
            .field("url", &diesel_inbox::redact::redact(&self.url))
            .finish_non_exhaustive()
    }
}

impl<C> TestDatabase<C>
where
    C: InboxConnection + R2D2Connection + Send + 'static,
{
    /// The database's URL (a file path on SQLite).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A new connection to the database, set up as the inbox expects.
    ///
    /// # Panics
    ///
    /// When the database cannot be reached.
    #[track_caller]
    pub fn connect(&self) -> C {
        let conn = C::establish(&self.url).unwrap_or_else(|e| {
            panic!(
                "{}",
                diesel_inbox::redact::redact(&format!(
                    "cannot connect to test database {}: {e}",
                    self.url
                ))
            )
        });
        let mut conn = without_statement_cache(conn);
        (self.setup)(&mut conn).unwrap_or_else(|e| {
            panic!(
                "{}",
                diesel_inbox::redact::redact(&format!("cannot set up {}: {e}", self.url))
            )
        });
        conn
    }

    /// A pool of up to `max_size` connections to the database.
    ///
    /// # Panics
    ///
    /// When the pool cannot open its first connection.
    #[track_caller]
    pub fn pool(&self, max_size: u32) -> Pool<ConnectionManager<C>> {
        Pool::builder()
            .max_size(max_size)
            .connection_customizer(Box::new(Setup(self.setup)))
            .build(ConnectionManager::new(self.url.clone()))
            .unwrap_or_else(|e| {
                panic!(
                    "{}",
                    diesel_inbox::redact::redact(&format!(
                        "cannot build a pool for {}: {e}",
                        self.url
                    ))
                )
            })
    }

    #[track_caller]
    fn migrated(self) -> Self {
        let mut conn = self.connect();
        diesel_inbox::run_pending_migrations(&mut conn).unwrap_or_else(|e| {
            panic!(
                "{}",
                diesel_inbox::redact::redact(&format!("cannot migrate {}: {e}", self.url))
            )
        });
        self
    }
}

impl<C> Drop for TestDatabase<C> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                let _ = dir.keep();
            }
            eprintln!(
                "test failed: keeping its database {} to inspect",
                diesel_inbox::redact::redact(&self.url)
            );
            return;
        }
        if let Some(Cleanup { what, run }) = self.cleanup.take() {
            if let Err(e) = run() {
                eprintln!("could not drop {what}: {e}");
            }
        }
    }
}

struct Setup<C>(fn(&mut C) -> QueryResult<()>);

impl<C> fmt::Debug for Setup<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Setup")
    }
}

impl<C: Connection + 'static> CustomizeConnection<C, diesel::r2d2::Error> for Setup<C> {
    fn on_acquire(&self, conn: &mut C) -> Result<(), diesel::r2d2::Error> {
        disable_statement_cache_behind_pooler(conn);
        (self.0)(conn).map_err(diesel::r2d2::Error::QueryError)
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// The prefix of [`TestDatabase::postgres`] and [`TestDatabase::mysql`] databases:
/// [`PREFIX_VARIABLE`]'s value, else `diesel_inbox_test`.
fn default_prefix() -> String {
    std::env::var(PREFIX_VARIABLE).unwrap_or_else(|_| "diesel_inbox_test".to_owned())
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// Why `prefix` cannot start a database or schema name, if it cannot.
fn invalid_prefix(prefix: &str) -> Option<&'static str> {
    let mut chars = prefix.chars();
    match chars.next() {
        None => Some("it is empty"),
        _ if prefix.len() > MAX_PREFIX_BYTES => Some("it is longer than MAX_PREFIX_BYTES"),
        Some(first) if !(first.is_ascii_alphabetic() || first == '_') => {
            Some("it must start with an ASCII letter or _")
        }
        Some(_) if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') => {
            Some("it may hold only ASCII letters, digits and _")
        }
        Some(_) => None,
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// A name unique to this process and call: `<prefix>_<pid>_<n>_<random>`.
fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}_{:08x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        fastrand::u32(..)
    )
}

/// `url` with its database (the path after the host) replaced by `name`; its query kept.
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority = base.find("://").map_or(0, |i| i + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    match query {
        Some(query) => format!("{}/{name}?{query}", &base[..path]),
        None => format!("{}/{name}", &base[..path]),
    }
}

#[cfg(feature = "sqlite")]
impl TestDatabase<diesel::SqliteConnection> {
    /// A new SQLite database in a temporary file, in WAL mode with a busy timeout
    /// ([`SqliteSetup`](diesel_inbox::SqliteSetup)), so several connections and threads can share it.
    ///
    /// # Panics
    ///
    /// When the temporary directory cannot be created.
    #[track_caller]
    pub fn sqlite() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("diesel-inbox-test-")
            .tempdir()
            .expect("cannot create a temporary directory for a SQLite test database");
        Self {
            url: dir.path().join("inbox.db").display().to_string(),
            setup: |conn| diesel_inbox::SqliteSetup::default().apply(conn),
            cleanup: None,
            dir: Some(dir),
            _connection: PhantomData,
        }
        .migrated()
    }
}

#[cfg(feature = "postgres")]
impl TestDatabase<diesel::PgConnection> {
    /// A new PostgreSQL database, created through `admin_url` (any database the user can
    /// connect to and create databases from) and dropped when the test passes: `postgres_at`
    /// with [`Placement::Database`], its prefix from [`PREFIX_VARIABLE`] or
    /// `diesel_inbox_test`.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or refuses `CREATE DATABASE`, or the prefix from the
    /// environment is not a valid one.
    #[track_caller]
    pub fn postgres(admin_url: &str) -> Self {
        Self::postgres_at(
            admin_url,
            Placement::Database {
                prefix: &default_prefix(),
            },
        )
    }

    /// A PostgreSQL test database placed as `placement` says, through `url`.
    ///
    /// ```no_run
    /// use diesel_inbox_test::{Placement, TestDatabase};
    ///
    /// // Only CREATE on the team's database: a schema per test, dropped when it passes.
    /// let db = TestDatabase::postgres_at(
    ///     "postgres://ci@db.internal/team_ci",
    ///     Placement::Schema { prefix: "inbox" },
    /// );
    /// let mut conn = db.connect(); // search_path is the test's schema
    /// # let _ = &mut conn;
    /// ```
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or refuses to create the database, schema or tables,
    /// or the prefix is not a valid one.
    #[track_caller]
    pub fn postgres_at(url: &str, placement: Placement<'_>) -> Self {
        fn drop_database(admin_url: &str, name: &str) -> QueryResult<()> {
            admin::<diesel::PgConnection>(admin_url)?
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        }
        fn drop_schema(url: &str, name: &str) -> QueryResult<()> {
            admin::<diesel::PgConnection>(url)?
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
        }
        match placement {
            Placement::Database { prefix } => {
                Self::created(url, prefix, "DATABASE", drop_database, with_database)
            }
            Placement::Schema { prefix } => {
                Self::created(url, prefix, "SCHEMA", drop_schema, with_search_path)
            }
            Placement::Existing => Self::existing(url),
        }
    }
}

#[cfg(feature = "mysql")]
impl TestDatabase<diesel::MysqlConnection> {
    /// A new MySQL/MariaDB database, created through `admin_url` and dropped when the test
    /// passes: `mysql_at` with [`Placement::Database`], its prefix from [`PREFIX_VARIABLE`] or
    /// `diesel_inbox_test`.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or refuses `CREATE DATABASE`, or the prefix from the
    /// environment is not a valid one.
    #[track_caller]
    pub fn mysql(admin_url: &str) -> Self {
        Self::mysql_at(
            admin_url,
            Placement::Database {
                prefix: &default_prefix(),
            },
        )
    }

    /// A MySQL/MariaDB test database placed as `placement` says, through `url`.
    ///
    /// # Panics
    ///
    /// For [`Placement::Schema`]: MySQL's schemas are its databases, so ask for
    /// [`Placement::Database`]. When the server cannot be reached or refuses to create the
    /// database or tables, or the prefix is not a valid one.
    #[track_caller]
    pub fn mysql_at(url: &str, placement: Placement<'_>) -> Self {
        fn drop_database(admin_url: &str, name: &str) -> QueryResult<()> {
            admin::<diesel::MysqlConnection>(admin_url)?
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        }
        match placement {
            Placement::Database { prefix } => {
                Self::created(url, prefix, "DATABASE", drop_database, with_database)
            }
            Placement::Schema { .. } => panic!(
                "MySQL/MariaDB has no schemas apart from databases: use Placement::Database (a database per test) or Placement::Existing"
            ),
            Placement::Existing => Self::existing(url),
        }
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl<C> TestDatabase<C>
where
    C: InboxConnection + R2D2Connection + Send + 'static,
{
    /// A database or schema (`kind`) of its own, created through `url`; `located` gives the
    /// URL that reaches it, `drop` removes it.
    #[track_caller]
    fn created(
        url: &str,
        prefix: &str,
        kind: &str,
        drop: fn(&str, &str) -> QueryResult<()>,
        located: fn(&str, &str) -> String,
    ) -> Self {
        if let Some(why) = invalid_prefix(prefix) {
            panic!("the test database prefix {prefix:?} is not valid: {why} (set it with Placement or {PREFIX_VARIABLE})");
        }
        let name = unique_name(prefix);
        admin::<C>(url)
            .and_then(|mut conn| conn.batch_execute(&format!("CREATE {kind} {name}")))
            .unwrap_or_else(|e| {
                panic!("{}", diesel_inbox::redact::redact(&format!("cannot create test {} {name} through {url}: {e}; is the server running, and may this user create one?", kind.to_lowercase())))
            });
        let admin_url = url.to_owned();
        Self {
            url: located(url, &name),
            setup: |_| Ok(()),
            cleanup: Some(Cleanup {
                what: format!("test {} {name}", kind.to_lowercase()),
                run: Box::new(move || drop(&admin_url, &name)),
            }),
            dir: None,
            _connection: PhantomData,
        }
        .migrated()
    }

    /// The database at `url` as it is, with the inbox migrations applied; its inbox tables are
    /// dropped when the test passes only if this call created them.
    #[track_caller]
    fn existing(url: &str) -> Self {
        let mut db = Self {
            url: url.to_owned(),
            setup: |_| Ok(()),
            cleanup: None,
            dir: None,
            _connection: PhantomData,
        };
        let mut conn = db.connect();
        let had_inbox = diesel_inbox::migrations::is_installed(&mut conn).unwrap_or_else(|e| {
            panic!(
                "{}",
                diesel_inbox::redact::redact(&format!("cannot read {url}: {e}"))
            )
        });
        drop(conn);
        db = db.migrated();
        if !had_inbox {
            let url = url.to_owned();
            db.cleanup = Some(Cleanup {
                what: "the inbox's tables".to_owned(),
                run: Box::new(move || drop_inbox_tables::<C>(&url)),
            });
        }
        db
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
/// Drops every table the inbox migrations create, and their record, at `url`.
fn drop_inbox_tables<C: Connection>(url: &str) -> QueryResult<()> {
    let mut conn = admin::<C>(url)?;
    let tables = diesel_inbox::migrations::tables()
        .rev()
        .chain(["diesel_inbox_migrations"]);
    for table in tables {
        conn.batch_execute(&format!("DROP TABLE IF EXISTS {table}"))?;
    }
    Ok(())
}

/// `url` with `search_path` set to `schema` for every connection (libpq's `options`).
#[cfg(feature = "postgres")]
fn with_search_path(url: &str, schema: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-csearch_path%3D{schema}")
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn admin<C: Connection>(admin_url: &str) -> QueryResult<C> {
    C::establish(admin_url)
        .map(without_statement_cache)
        .map_err(|e| {
            diesel::result::Error::QueryBuilderError(
                diesel_inbox::redact::redact(&format!("cannot connect to {admin_url}: {e}")).into(),
            )
        })
}

#[cfg(all(test, any(feature = "postgres", feature = "mysql")))]
mod tests {
    use super::*;

    #[test]
    fn unique_names_differ_start_with_the_prefix_and_are_plain_identifiers() {
        let (a, b) = (unique_name("team_ci"), unique_name("team_ci"));
        assert_ne!(a, b);
        assert!(a.starts_with("team_ci_"), "{a}");
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        let longest = unique_name(&"p".repeat(MAX_PREFIX_BYTES));
        assert!(longest.len() <= 63, "{longest}: {} bytes", longest.len());
    }

    #[test]
    fn a_prefix_must_be_a_plain_identifier_start() {
        assert_eq!(invalid_prefix("team_ci"), None);
        assert_eq!(invalid_prefix("_x9"), None);
        assert!(invalid_prefix("").is_some());
        assert!(invalid_prefix("9lives").is_some());
        assert!(invalid_prefix("team-ci").is_some());
        assert!(invalid_prefix("x; DROP DATABASE test").is_some());
        assert!(invalid_prefix(&"p".repeat(MAX_PREFIX_BYTES + 1)).is_some());
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn the_search_path_rides_on_the_url() {
        assert_eq!(
            with_search_path("postgres://root@127.0.0.1:5432/test", "s1"),
            "postgres://root@127.0.0.1:5432/test?options=-csearch_path%3Ds1"
        );
        assert_eq!(
            with_search_path("postgres://h/test?sslmode=disable", "s1"),
            "postgres://h/test?sslmode=disable&options=-csearch_path%3Ds1"
        );
    }
}
