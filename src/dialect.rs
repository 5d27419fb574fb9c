//! The SQL dialects the inbox speaks, and which one a database URL names.

/// The SQL dialect to [`install`](crate::migrations::install) or print the inbox migrations for.
///
/// Not tied to the crate's backend features, so an ops tool built with one can install for any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// SQLite.
    Sqlite,
    /// MySQL and MariaDB.
    Mysql,
}

impl Dialect {
    /// The dialect a database URL names, or `None` where [`parse_database_url`] gives an
    /// error.
    ///
    /// Changed in 0.1: the backend is decided by the scheme alone, so a URL with an unknown or
    /// malformed scheme (`postgres:/app@db`, one slash) is `None`, no longer a SQLite path.
    ///
    /// ```
    /// use diesel_inbox::migrations::Dialect;
    ///
    /// assert_eq!(Dialect::from_database_url("postgresql://app@db/orders"), Some(Dialect::Postgres));
    /// assert_eq!(Dialect::from_database_url("mariadb://root@127.0.0.1/app"), Some(Dialect::Mysql));
    /// assert_eq!(Dialect::from_database_url("/var/lib/app/inbox.db"), Some(Dialect::Sqlite));
    /// assert_eq!(Dialect::from_database_url("redis://cache"), None);
    /// assert_eq!(Dialect::from_database_url("postgres:/app@db/orders"), None);
    /// ```
    ///
    /// [`parse_database_url`]: Self::parse_database_url
    pub fn from_database_url(url: &str) -> Option<Self> {
        Self::parse_database_url(url).ok()
    }

    /// The dialect a database URL names, from its scheme alone:
    ///
    /// - `postgres://` and `postgresql://` are PostgreSQL; `mysql://` and `mariadb://` are
    ///   MySQL/MariaDB; `sqlite://` and `file:` (a SQLite URI) are SQLite. Schemes match in
    ///   any case (libpq itself takes lowercase only: lowercase the scheme before connecting).
    /// - The URL has a scheme when a `:` comes before its first `/` (or it has a `:` and no
    ///   `/`): the scheme is the text before that `:`. Any other scheme, or a known one not
    ///   followed by `//`, is an error.
    /// - Without a scheme it is a SQLite file path: `inbox.db`, `./data/inbox.db`,
    ///   `/var/lib/app/inbox.db`, `./inbox:2.db`. So is `:memory:`, and a Windows path
    ///   (`C:\data\inbox.db`).
    ///
    /// # Errors
    ///
    /// [`UnknownDatabaseUrl`] for an unknown scheme, or a known one not followed by `//`. It
    /// never holds the URL, which may carry a password; at most its scheme.
    ///
    /// ```
    /// use diesel_inbox::migrations::Dialect;
    ///
    /// assert_eq!(Dialect::parse_database_url("POSTGRES://app@db/orders"), Ok(Dialect::Postgres));
    /// assert_eq!(Dialect::parse_database_url("file:inbox.db?mode=ro"), Ok(Dialect::Sqlite));
    /// assert_eq!(Dialect::parse_database_url("./inbox.db"), Ok(Dialect::Sqlite));
    /// let error = Dialect::parse_database_url("postgres:/app:S3cret@db/orders").unwrap_err();
    /// assert!(!error.to_string().contains("S3cret"));
    /// assert!(Dialect::parse_database_url("app:S3cret@db/orders").is_err());
    /// ```
    pub fn parse_database_url(url: &str) -> Result<Self, UnknownDatabaseUrl> {
        if url == ":memory:" {
            return Ok(Self::Sqlite);
        }
        let Some(colon) = url.find(':') else {
            return Ok(Self::Sqlite);
        };
        if url.find('/').is_some_and(|slash| slash < colon) {
            return Ok(Self::Sqlite);
        }
        let (scheme, rest) = (&url[..colon], &url[colon + 1..]);
        let is_drive = scheme.len() == 1
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && rest.starts_with(['\\', '/']);
        if is_drive {
            return Ok(Self::Sqlite);
        }
        let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        let dialect = match scheme.to_ascii_lowercase().as_str() {
            "file" => return Ok(Self::Sqlite),
            "postgres" | "postgresql" => Some(Self::Postgres),
            "mysql" | "mariadb" => Some(Self::Mysql),
            "sqlite" => Some(Self::Sqlite),
            _ => None,
        };
        match dialect {
            Some(dialect) if rest.starts_with("//") => Ok(dialect),
            Some(_) => Err(UnknownDatabaseUrl {
                scheme: Some(scheme.to_owned()),
                malformed: true,
            }),
            None => Err(UnknownDatabaseUrl {
                scheme: valid.then(|| scheme.to_owned()),
                malformed: false,
            }),
        }
    }

    /// The dialect's name, as [`FromStr`](std::str::FromStr) reads it: `postgres`, `sqlite`,
    /// `mysql`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Sqlite => "sqlite",
            Self::Mysql => "mysql",
        }
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Reads `postgres`, `sqlite` or `mysql`, in any case; `postgresql` and `mariadb` too.
///
/// ```
/// use diesel_inbox::migrations::Dialect;
///
/// assert_eq!("PostgreSQL".parse(), Ok(Dialect::Postgres));
/// assert_eq!("mariadb".parse(), Ok(Dialect::Mysql));
/// assert!("oracle".parse::<Dialect>().is_err());
/// ```
impl std::str::FromStr for Dialect {
    type Err = UnknownDialect;

    fn from_str(name: &str) -> Result<Self, UnknownDialect> {
        match name.to_ascii_lowercase().as_str() {
            "postgres" | "postgresql" => Ok(Self::Postgres),
            "sqlite" => Ok(Self::Sqlite),
            "mysql" | "mariadb" => Ok(Self::Mysql),
            _ => Err(UnknownDialect {
                name: name.to_owned(),
            }),
        }
    }
}

/// A dialect name that is none of `postgres`, `sqlite`, `mysql` (nor `postgresql`, `mariadb`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown SQL dialect {name:?}: use postgres, sqlite or mysql")]
pub struct UnknownDialect {
    name: String,
}

impl UnknownDialect {
    /// The name that was given.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A database URL that names no backend: an unknown scheme, or a known one without `//`.
/// It keeps the scheme (when it is one), never the URL, which may carry a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}; write postgres://, postgresql://, mysql://, mariadb://, sqlite://, a file: URI, or a SQLite file path without a scheme (./inbox.db)", self.problem())]
pub struct UnknownDatabaseUrl {
    scheme: Option<String>,
    malformed: bool,
}

impl UnknownDatabaseUrl {
    /// The URL's scheme, when the text before its first `:` is one.
    pub fn scheme(&self) -> Option<&str> {
        self.scheme.as_deref()
    }

    fn problem(&self) -> String {
        match (&self.scheme, self.malformed) {
            (Some(scheme), true) => format!(
                "the database URL's scheme {scheme:?} must be followed by // (as in {}://)",
                scheme.to_ascii_lowercase()
            ),
            (Some(scheme), false) => {
                format!("the database URL's scheme {scheme:?} names no backend this tool knows")
            }
            (None, _) => {
                "the database URL has a `:` before any `/`, so it is no file path, but the text before it is no scheme".to_owned()
            }
        }
    }
}
