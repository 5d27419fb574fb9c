//! Throwaway databases with the inbox schema applied, one per test.

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

#[cfg(any(feature = "postgres", feature = "mysql"))]
use diesel::connection::SimpleConnection;
use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool, R2D2Connection};
use diesel::{Connection, QueryResult};

use crate::InboxConnection;

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
/// use diesel_inbox::testing::TestDatabase;
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
    drop: Option<DropWith>,
    dir: Option<tempfile::TempDir>,
    _connection: PhantomData<fn() -> C>,
}

/// How to drop a server-side test database: the admin URL and the statement.
struct DropWith {
    admin_url: String,
    name: String,
    drop: fn(&str, &str) -> QueryResult<()>,
}

impl<C> fmt::Debug for TestDatabase<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestDatabase")
            .field("url", &crate::redact(&self.url))
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
        let mut conn = C::establish(&self.url).unwrap_or_else(|e| {
            panic!(
                "{}",
                crate::redact(&format!(
                    "cannot connect to test database {}: {e}",
                    self.url
                ))
            )
        });
        (self.setup)(&mut conn).unwrap_or_else(|e| {
            panic!(
                "{}",
                crate::redact(&format!("cannot set up {}: {e}", self.url))
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
                    crate::redact(&format!("cannot build a pool for {}: {e}", self.url))
                )
            })
    }

    #[track_caller]
    fn migrated(self) -> Self {
        let mut conn = self.connect();
        crate::run_pending_migrations(&mut conn).unwrap_or_else(|e| {
            panic!(
                "{}",
                crate::redact(&format!("cannot migrate {}: {e}", self.url))
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
                crate::redact(&self.url)
            );
            return;
        }
        if let Some(DropWith {
            admin_url,
            name,
            drop,
        }) = &self.drop
        {
            if let Err(e) = drop(admin_url, name) {
                eprintln!("could not drop test database {name}: {e}");
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
        (self.0)(conn).map_err(diesel::r2d2::Error::QueryError)
    }
}

/// A database name unique to this process and call: `diesel_inbox_test_<pid>_<n>_<random>`.
fn unique_name() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!(
        "diesel_inbox_test_{}_{}_{:08x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        fastrand::u32(..)
    )
}

/// `url` with its database (the path after the host) replaced by `name`; query kept.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    let mut out = format!("{}/{name}", &base[..path_start]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

#[cfg(feature = "sqlite")]
impl TestDatabase<diesel::SqliteConnection> {
    /// A new SQLite database in a temporary file, in WAL mode with a busy timeout
    /// ([`SqliteSetup`](crate::SqliteSetup)), so several connections and threads can share it.
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
            setup: |conn| crate::SqliteSetup::default().apply(conn),
            drop: None,
            dir: Some(dir),
            _connection: PhantomData,
        }
        .migrated()
    }
}

#[cfg(feature = "postgres")]
impl TestDatabase<diesel::PgConnection> {
    /// A new PostgreSQL database, created through `admin_url` (any database the user can
    /// connect to and create databases from) and dropped when the test passes.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or refuses `CREATE DATABASE`.
    #[track_caller]
    pub fn postgres(admin_url: &str) -> Self {
        fn drop(admin_url: &str, name: &str) -> QueryResult<()> {
            admin::<diesel::PgConnection>(admin_url)?
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        }
        Self::on_server(admin_url, drop)
    }
}

#[cfg(feature = "mysql")]
impl TestDatabase<diesel::MysqlConnection> {
    /// A new MySQL/MariaDB database, created through `admin_url` and dropped when the test
    /// passes.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or refuses `CREATE DATABASE`.
    #[track_caller]
    pub fn mysql(admin_url: &str) -> Self {
        fn drop(admin_url: &str, name: &str) -> QueryResult<()> {
            admin::<diesel::MysqlConnection>(admin_url)?
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        }
        Self::on_server(admin_url, drop)
    }
}

impl<C> TestDatabase<C>
where
    C: InboxConnection + R2D2Connection + Send + 'static,
{
    #[track_caller]
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    fn on_server(admin_url: &str, drop: fn(&str, &str) -> QueryResult<()>) -> Self {
        let name = unique_name();
        admin::<C>(admin_url)
            .and_then(|mut conn| conn.batch_execute(&format!("CREATE DATABASE {name}")))
            .unwrap_or_else(|e| {
                panic!("{}", crate::redact(&format!("cannot create test database {name} through {admin_url}: {e}; is the server running?")))
            });
        Self {
            url: with_database(admin_url, &name),
            setup: |_| Ok(()),
            drop: Some(DropWith {
                admin_url: admin_url.to_owned(),
                name,
                drop,
            }),
            dir: None,
            _connection: PhantomData,
        }
        .migrated()
    }
}

fn admin<C: Connection>(admin_url: &str) -> QueryResult<C> {
    C::establish(admin_url).map_err(|e| {
        diesel::result::Error::QueryBuilderError(
            crate::redact(&format!("cannot connect to {admin_url}: {e}")).into(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_only_the_path() {
        assert_eq!(
            with_database("postgres://root@127.0.0.1:5432/test", "t1"),
            "postgres://root@127.0.0.1:5432/t1"
        );
        assert_eq!(
            with_database("mysql://root@localhost:3306/test?ssl_mode=disabled", "t1"),
            "mysql://root@localhost:3306/t1?ssl_mode=disabled"
        );
        assert_eq!(with_database("postgres://host", "t1"), "postgres://host/t1");
    }

    #[test]
    fn unique_names_differ_and_are_plain_identifiers() {
        let (a, b) = (unique_name(), unique_name());
        assert_ne!(a, b);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    }
}
