//! The async flavour beside the sync one: the same credit through diesel-async, bare and
//! through `asynch::with_inbox`, on one connection; and 16 deliveries at once as 16 tasks on
//! one current-thread runtime, each on a connection of diesel-async's deadpool pool, against
//! the sync phase's 16 threads.

use std::future::Future;
use std::ops::DerefMut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use diesel::prelude::*;
use diesel::sqlite::SqliteConnection;
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
use diesel_async::{AsyncConnection, AsyncMysqlConnection, AsyncPgConnection, RunQueryDsl};
use diesel_inbox::asynch::{self, AsyncInboxConnection};
use diesel_inbox::SqliteSetup;

use super::{account, ids, rate, schema::accounts};

/// A backend's async connection, as the bench uses it.
pub(crate) trait AsyncBench: AsyncInboxConnection + Sized {
    /// A connection to `url`, set up as the sync phase's are.
    fn connect(url: &str) -> impl Future<Output = QueryResult<Self>> + Send;

    /// A deadpool pool of such connections.
    type Pool: Sync;

    /// A pool of `size` connections to `url`.
    fn pool(url: &str, size: usize) -> Self::Pool;

    /// A connection from the pool.
    fn get(pool: &Self::Pool) -> impl Future<Output = Pooled<Self>> + Send;

    /// Credits `account` by 1, as the sync phase's `credit` does.
    fn credit(&mut self, account: i32) -> impl Future<Output = QueryResult<()>> + Send;
}

/// A pooled connection.
pub(crate) type Pooled<C> = Box<dyn DerefMut<Target = C> + Send>;

/// [`AsyncBench`]'s pool and credit, whose bounds only a concrete connection type meets.
macro_rules! pool_and_credit {
    () => {
        type Pool = Pool<Self>;

        async fn get(pool: &Self::Pool) -> Pooled<Self> {
            Box::new(pool.get().await.unwrap())
        }

        fn pool(url: &str, size: usize) -> Self::Pool {
            let mut config = ManagerConfig::default();
            config.custom_setup = Box::new(|url| {
                let url = url.to_owned();
                Box::pin(async move {
                    Self::connect(&url)
                        .await
                        .map_err(|e| ConnectionError::BadConnection(e.to_string()))
                })
            });
            let manager = AsyncDieselConnectionManager::new_with_config(url, config);
            Pool::builder(manager).max_size(size).build().unwrap()
        }

        async fn credit(&mut self, account: i32) -> QueryResult<()> {
            diesel::update(accounts::table.find(account))
                .set(accounts::balance.eq(accounts::balance + 1))
                .execute(self)
                .await
                .map(drop)
        }
    };
}

impl AsyncBench for AsyncPgConnection {
    async fn connect(url: &str) -> QueryResult<Self> {
        Self::establish(url).await.map_err(connection_error)
    }

    pool_and_credit!();
}

impl AsyncBench for AsyncMysqlConnection {
    async fn connect(url: &str) -> QueryResult<Self> {
        Self::establish(url).await.map_err(connection_error)
    }

    pool_and_credit!();
}

impl AsyncBench for SyncConnectionWrapper<SqliteConnection> {
    async fn connect(url: &str) -> QueryResult<Self> {
        let mut conn = Self::establish(url).await.map_err(connection_error)?;
        let setup = |conn: &mut SqliteConnection| SqliteSetup::default().apply(conn);
        conn.spawn_blocking(setup).await?;
        Ok(conn)
    }

    pool_and_credit!();
}

fn connection_error(error: ConnectionError) -> diesel::result::Error {
    diesel::result::Error::QueryBuilderError(error.into())
}

/// One delivery: the credit in a diesel-async transaction (bare), or through the async inbox.
async fn deliver<C: AsyncBench>(conn: &mut C, inbox: bool, id: &str, account: i32) -> bool {
    if inbox {
        let effect = async |tx: &mut C| tx.credit(account).await;
        return asynch::with_inbox(conn, id, effect)
            .await
            .unwrap()
            .is_processed();
    }
    conn.transaction(async |tx| tx.credit(account).await)
        .await
        .unwrap();
    true
}

/// The single-connection rounds: async bare and async inbox, interleaved; each one's rate per
/// round.
pub(crate) fn single<C: AsyncBench>(url: &str, events: usize, rounds: usize) -> [Vec<f64>; 2] {
    let runtime = runtime();
    runtime.block_on(async {
        let mut conn = C::connect(url).await.unwrap();
        // Warm the prepared statements.
        for (i, id) in ids(200, false).iter().enumerate() {
            deliver(&mut conn, i % 2 == 0, id, account(i)).await;
        }
        let mut rates = [Vec::new(), Vec::new()];
        for _ in 0..rounds {
            for (inbox, rates) in [false, true].into_iter().zip(&mut rates) {
                let ids = ids(events, false);
                let start = Instant::now();
                for (i, id) in ids.iter().enumerate() {
                    assert!(deliver(&mut conn, inbox, id, account(i)).await);
                }
                rates.push(rate(events, start.elapsed().as_secs_f64()));
            }
        }
        rates
    })
}

/// The concurrent rounds: `tasks` tasks on one current-thread runtime, each on a pooled
/// connection, taking deliveries (every id new) from a shared counter; bare and inbox,
/// interleaved; each one's rate per round.
pub(crate) fn concurrent<C: AsyncBench>(
    url: &str,
    tasks: usize,
    events: usize,
    rounds: usize,
) -> [Vec<f64>; 2] {
    let runtime = runtime();
    runtime.block_on(async {
        let pool = C::pool(url, tasks);
        let mut rates = [Vec::new(), Vec::new()];
        // The first round warms every pooled connection; it is not counted.
        for round in 0..=rounds {
            for (inbox, rates) in [false, true].into_iter().zip(&mut rates) {
                let ids = ids(events.max(tasks), false);
                let next = AtomicUsize::new(0);
                let start = Instant::now();
                let workers = (0..tasks).map(|_| async {
                    let mut conn = C::get(&pool).await;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(id) = ids.get(i) else { break };
                        assert!(deliver(&mut **conn, inbox, id, account(i)).await);
                    }
                });
                futures_util::future::join_all(workers).await;
                if round > 0 {
                    rates.push(rate(ids.len(), start.elapsed().as_secs_f64()));
                }
            }
        }
        rates
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
