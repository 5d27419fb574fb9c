//! Sync Diesel connections for async services: a [`BlockingPool`] lends one to a closure that
//! runs on a thread allowed to block, and resolves to what the closure returned.
//!
//! For an app on tokio without diesel-async. Implemented for r2d2's pool (each step on
//! tokio's blocking pool, feature `tokio`) and deadpool-diesel's (each step through its
//! `interact`, feature `deadpool`). The outbox's [`Relay::run_once_async`](crate::outbox::Relay::run_once_async)
//! takes either, and a consumer loop hands its delivery over the same way:
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::r2d2::{ConnectionManager, Pool};
//! use diesel::SqliteConnection;
//! use diesel_inbox::pool::BlockingPool;
//! use diesel_inbox::{Error, Inbox, Outcome};
//!
//! # let file = tempfile::NamedTempFile::new()?;
//! # let url = file.path().to_str().unwrap().to_owned();
//! let pool = Pool::builder().max_size(1).build(ConnectionManager::<SqliteConnection>::new(url))?;
//! # let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! # runtime.block_on(async {
//! pool.run(diesel_inbox::run_pending_migrations).await?;
//!
//! let billing = Inbox::new("billing")?;
//! let outcome = pool
//!     .run(move |conn| billing.process(conn, "evt-1", |_tx| Ok::<_, Error>(42)))
//!     .await?;
//! assert_eq!(outcome, Outcome::Processed(42));
//! # Ok::<(), Box<dyn std::error::Error>>(()) })?;
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A panic in the closure is resumed in the caller; a pool that has no connection to give is
//! `Error::Pool`, its text redacted (`?` converts both pools' errors). Ask
//! [`Ack::of`](crate::Ack::of) about the result as on a sync connection. A relay pass that runs
//! whole on a blocking thread takes a blocking [`Publisher`](crate::outbox::Publisher):
//! [`BlockingPublisher::new(publisher, Handle::current())`](crate::outbox::BlockingPublisher::new)
//! runs an [`AsyncPublisher`](crate::outbox::AsyncPublisher)'s publishes on the runtime.

use std::future::Future;

use crate::{Error, InboxConnection};

/// A pool of sync Diesel connections whose steps run where blocking is allowed: r2d2's (on
/// tokio's blocking pool) and deadpool-diesel's (through `interact`).
///
/// A panic in a step is resumed in the caller, as if the step had run in place.
pub trait BlockingPool: Send + Sync {
    /// The connection a step is lent: an r2d2 `PooledConnection`, or deadpool-diesel's
    /// plain `PgConnection`, `MysqlConnection` or `SqliteConnection`.
    type Connection: InboxConnection;

    /// Runs `step` with a connection from the pool, on a thread that may block; resolves to
    /// what it returned. Nothing starts until the future is first polled; dropped after that,
    /// the step still runs to its end on its thread.
    ///
    /// # Errors
    ///
    /// [`Error::Pool`] (converted into `E`) when the pool has no connection to give or the
    /// step was cancelled before it ran; otherwise the step's own error.
    fn run<R, E>(
        &self,
        step: impl FnOnce(&mut Self::Connection) -> Result<R, E> + Send + 'static,
    ) -> impl Future<Output = Result<R, E>> + Send
    where
        R: Send + 'static,
        E: From<Error> + Send + 'static;
}

/// A step that never ran because its task was cancelled (the runtime shutting down).
#[cfg(feature = "tokio")]
fn cancelled(error: &impl std::fmt::Display) -> Error {
    Error::Pool(format!("the blocking task was cancelled: {error}"))
}

#[cfg(feature = "tokio")]
mod r2d2 {
    use std::future::Future;

    use diesel::r2d2::{ConnectionManager, Pool, PooledConnection, R2D2Connection};

    use super::BlockingPool;
    use crate::{Error, InboxConnection};

    /// Each step on tokio's blocking pool, with a connection taken there (`Pool::get` blocks).
    impl<C> BlockingPool for Pool<ConnectionManager<C>>
    where
        C: InboxConnection + R2D2Connection + Send + 'static,
    {
        type Connection = PooledConnection<ConnectionManager<C>>;

        fn run<R, E>(
            &self,
            step: impl FnOnce(&mut Self::Connection) -> Result<R, E> + Send + 'static,
        ) -> impl Future<Output = Result<R, E>> + Send
        where
            R: Send + 'static,
            E: From<Error> + Send + 'static,
        {
            let pool = self.clone();
            async move {
                let task = tokio::task::spawn_blocking(move || {
                    step(&mut pool.get().map_err(Error::from)?)
                });
                match task.await {
                    Ok(result) => result,
                    Err(error) => match error.try_into_panic() {
                        Ok(panic) => std::panic::resume_unwind(panic),
                        Err(error) => Err(super::cancelled(&error).into()),
                    },
                }
            }
        }
    }
}

#[cfg(feature = "deadpool")]
mod deadpool {
    use deadpool_diesel::{InteractError, Manager, Pool};

    use super::BlockingPool;
    use crate::Error;

    /// Each step through the pooled object's `interact`, on deadpool's blocking thread, for
    /// each backend's connection.
    macro_rules! deadpool_pool {
        ($($feature:literal => $conn:ty),+ $(,)?) => {$(
            #[cfg(feature = $feature)]
            impl BlockingPool for Pool<Manager<$conn>> {
                type Connection = $conn;

                async fn run<R, E>(
                    &self,
                    step: impl FnOnce(&mut $conn) -> Result<R, E> + Send + 'static,
                ) -> Result<R, E>
                where
                    R: Send + 'static,
                    E: From<Error> + Send + 'static,
                {
                    let object = self.get().await.map_err(Error::from)?;
                    match object.interact(step).await {
                        Ok(result) => result,
                        Err(InteractError::Panic(panic)) => std::panic::resume_unwind(panic),
                        Err(error @ InteractError::Cancelled) => {
                            Err(super::cancelled(&error).into())
                        }
                    }
                }
            }
        )+};
    }

    deadpool_pool!(
        "postgres" => diesel::PgConnection,
        "mysql" => diesel::MysqlConnection,
        "sqlite" => diesel::SqliteConnection,
    );
}
