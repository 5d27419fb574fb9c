//! The inbox on an app's `#[derive(diesel::MultiConnection)]` enum: [`on_variant!`]
//! runs a call on the variant the connection holds, and the handler is given the app's own
//! enum to write through.
//!
//! The inbox's statements are written per backend, so a call cannot run on the enum itself.
//! [`Variant`] is the enum seen as the connection inside one variant: the inbox's statements
//! and transactions run on that inner connection, and the handler, given a `&mut Variant`,
//! reaches the enum through it (`Deref`), so the app's queries, written once against its
//! `MultiConnection`, run unchanged in the same transaction.
//!
//! ```
//! # #[cfg(all(feature = "sqlite", feature = "postgres"))]
//! # mod app {
//! use diesel::prelude::*;
//! use diesel_inbox::{multi::on_variant, Inbox};
//!
//! #[derive(diesel::MultiConnection)]
//! pub enum AnyConnection {
//!     Postgresql(diesel::PgConnection),
//!     Sqlite(diesel::SqliteConnection),
//! }
//!
//! /// The app's effect, written against its enum as usual.
//! fn credit(conn: &mut AnyConnection) -> QueryResult<usize> {
//!     diesel::sql_query("INSERT INTO credits (points) VALUES (5)").execute(conn)
//! }
//!
//! # pub fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut conn = AnyConnection::establish(":memory:")?;
//! diesel::sql_query("CREATE TABLE credits (points INTEGER)").execute(&mut conn)?;
//! on_variant!(&mut conn, AnyConnection { Postgresql, Sqlite }, |c| {
//!     diesel_inbox::run_pending_migrations(c)
//! })?;
//!
//! let rewards = Inbox::new("rewards")?;
//! for delivery in 1..=2 {
//!     let outcome = on_variant!(&mut conn, AnyConnection { Postgresql, Sqlite }, |c| {
//!         rewards.process(c, "evt-1", |tx| credit(tx))
//!     })?;
//!     assert_eq!(outcome.is_processed(), delivery == 1);
//! }
//! # Ok(()) }
//! # }
//! # fn main() {
//! #     #[cfg(all(feature = "sqlite", feature = "postgres"))]
//! #     app::main().unwrap();
//! # }
//! ```

use std::ops::{Deref, DerefMut};

use diesel::connection::{
    CacheSize, ConnectionSealed, Instrumentation, LoadConnection, SimpleConnection,
    TransactionManager, TransactionManagerStatus,
};
use diesel::expression::QueryMetadata;
use diesel::query_builder::{Query, QueryFragment, QueryId};
use diesel::{Connection, ConnectionError, ConnectionResult, QueryResult};

use crate::backend::sealed::HasInboxSql;
use crate::InboxConnection;

#[doc(inline)]
pub use crate::__on_variant as on_variant;

/// An app's multi-backend connection `M` (its `#[derive(diesel::MultiConnection)]` enum) while
/// it holds the variant `C`: an [`InboxConnection`] that runs the inbox's statements on the
/// `C` inside, and dereferences to `M` for the handler.
///
/// Made by [`on_variant!`], or by [`Variant::new`].
pub struct Variant<'a, M, C> {
    conn: &'a mut M,
    inner: fn(&mut M) -> Option<&mut C>,
}

impl<M, C> std::fmt::Debug for Variant<'_, M, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Variant")
            .field("of", &std::any::type_name::<M>())
            .field("inner", &std::any::type_name::<C>())
            .finish()
    }
}

impl<'a, M, C> Variant<'a, M, C> {
    /// `conn` as the connection `inner` finds in it; `None` when it holds another variant.
    /// `inner` is a match on the enum: `|c| match c { AnyConnection::Sqlite(c) => Some(c), _ => None }`.
    pub fn new(conn: &'a mut M, inner: fn(&mut M) -> Option<&mut C>) -> Option<Self> {
        inner(conn)?;
        Some(Self { conn, inner })
    }

    /// The connection inside the variant.
    ///
    /// # Panics
    ///
    /// When the handler put another variant in the enum's place while the delivery ran.
    pub fn inner(&mut self) -> &mut C {
        (self.inner)(self.conn).expect(
            "the MultiConnection was replaced by another variant while the inbox used it: \
             leave the connection in place inside a handler",
        )
    }
}

impl<M, C> Deref for Variant<'_, M, C> {
    type Target = M;

    fn deref(&self) -> &M {
        self.conn
    }
}

impl<M, C> DerefMut for Variant<'_, M, C> {
    fn deref_mut(&mut self) -> &mut M {
        self.conn
    }
}

impl<M, C: SimpleConnection> SimpleConnection for Variant<'_, M, C> {
    fn batch_execute(&mut self, query: &str) -> QueryResult<()> {
        self.inner().batch_execute(query)
    }
}

impl<M, C> ConnectionSealed for Variant<'_, M, C> {}

impl<M: Send, C: Connection> Connection for Variant<'_, M, C> {
    type Backend = C::Backend;
    type TransactionManager = Inside<C>;

    fn establish(_database_url: &str) -> ConnectionResult<Self> {
        Err(ConnectionError::BadConnection(
            "a Variant borrows an app's connection: establish the app's MultiConnection".into(),
        ))
    }

    fn execute_returning_count<T>(&mut self, source: &T) -> QueryResult<usize>
    where
        T: QueryFragment<Self::Backend> + QueryId,
    {
        self.inner().execute_returning_count(source)
    }

    fn transaction_state(
        &mut self,
    ) -> &mut <Self::TransactionManager as TransactionManager<Self>>::TransactionStateData {
        self.inner().transaction_state()
    }

    fn instrumentation(&mut self) -> &mut dyn Instrumentation {
        self.inner().instrumentation()
    }

    fn set_instrumentation(&mut self, instrumentation: impl Instrumentation) {
        self.inner().set_instrumentation(instrumentation);
    }

    fn set_prepared_statement_cache_size(&mut self, size: CacheSize) {
        self.inner().set_prepared_statement_cache_size(size);
    }
}

impl<M: Send, C: LoadConnection> LoadConnection for Variant<'_, M, C> {
    type Cursor<'conn, 'query>
        = C::Cursor<'conn, 'query>
    where
        Self: 'conn;
    type Row<'conn, 'query>
        = C::Row<'conn, 'query>
    where
        Self: 'conn;

    fn load<'conn, 'query, T>(
        &'conn mut self,
        source: T,
    ) -> QueryResult<Self::Cursor<'conn, 'query>>
    where
        T: Query + QueryFragment<Self::Backend> + QueryId + 'query,
        Self::Backend: QueryMetadata<T::SqlType>,
    {
        self.inner().load(source)
    }
}

impl<M: Send, C: InboxConnection> HasInboxSql for Variant<'_, M, C> {}

/// The transaction manager of the connection inside a [`Variant`]: the same one the app's
/// enum hands its own transactions to, so that both count the same levels.
#[derive(Debug)]
pub struct Inside<C>(std::marker::PhantomData<C>);

impl<'a, M: Send, C: Connection> TransactionManager<Variant<'a, M, C>> for Inside<C> {
    type TransactionStateData =
        <C::TransactionManager as TransactionManager<C>>::TransactionStateData;

    fn begin_transaction(conn: &mut Variant<'a, M, C>) -> QueryResult<()> {
        C::TransactionManager::begin_transaction(conn.inner())
    }

    fn rollback_transaction(conn: &mut Variant<'a, M, C>) -> QueryResult<()> {
        C::TransactionManager::rollback_transaction(conn.inner())
    }

    fn commit_transaction(conn: &mut Variant<'a, M, C>) -> QueryResult<()> {
        C::TransactionManager::commit_transaction(conn.inner())
    }

    fn transaction_manager_status_mut<'conn>(
        conn: &'conn mut Variant<'a, M, C>,
    ) -> &'conn mut TransactionManagerStatus {
        C::TransactionManager::transaction_manager_status_mut(conn.inner())
    }

    fn is_broken_transaction_manager(conn: &mut Variant<'a, M, C>) -> bool {
        C::TransactionManager::is_broken_transaction_manager(conn.inner())
    }
}

/// Runs `$call` on the variant an app's `#[derive(diesel::MultiConnection)]` enum holds, with
/// `$c` bound to a [`Variant`](crate::multi::Variant): an [`InboxConnection`](crate::InboxConnection)
/// for every inbox call, which dereferences to the enum for the handler's own queries.
///
/// List every variant: a missing one does not compile. `$call` is compiled once per variant,
/// so closures written inside it may be given each variant's connection.
///
/// ```
/// # #[cfg(all(feature = "sqlite", feature = "mysql"))]
/// # mod app {
/// use diesel::prelude::*;
/// use diesel_inbox::{multi::on_variant, with_inbox};
///
/// #[derive(diesel::MultiConnection)]
/// pub enum AnyConnection {
///     Mysql(diesel::MysqlConnection),
///     Sqlite(diesel::SqliteConnection),
/// }
///
/// # pub fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut conn = AnyConnection::establish(":memory:")?;
/// on_variant!(&mut conn, AnyConnection { Mysql, Sqlite }, |c| diesel_inbox::run_pending_migrations(c))?;
/// let outcome = on_variant!(&mut conn, AnyConnection { Mysql, Sqlite }, |c| {
///     with_inbox(c, "evt-1", |tx| {
///         let app: &mut AnyConnection = tx; // the app's own connection, inside the transaction
///         diesel::sql_query("SELECT 1").execute(app)
///     })
/// })?;
/// assert!(outcome.is_processed());
/// # Ok(()) }
/// # }
/// # fn main() {
/// #     #[cfg(all(feature = "sqlite", feature = "mysql"))]
/// #     app::main().unwrap();
/// # }
/// ```
#[doc(hidden)]
#[macro_export]
macro_rules! __on_variant {
    ($conn:expr, $enum:ident { $($variant:ident),+ $(,)? }, |$c:ident| $call:expr) => {{
        let conn: &mut $enum = $conn;
        match conn {
            $(
                $enum::$variant(_) => {
                    let mut variant = $crate::multi::Variant::new(conn, |conn| match conn {
                        $enum::$variant(inner) => ::std::option::Option::Some(inner),
                        #[allow(unreachable_patterns)]
                        _ => ::std::option::Option::None,
                    })
                    .expect("the variant just matched");
                    let $c = &mut variant;
                    $call
                }
            )+
        }
    }};
}
