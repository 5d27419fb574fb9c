//! The inbox in the apps people already have: a handler generic over the connection, async
//! services on sync Diesel's pools (r2d2, deadpool-diesel), and a `#[derive(MultiConnection)]`
//! enum.

use diesel::prelude::*;
use diesel_inbox::{with_inbox, InboxConnection, Outcome};

use crate::support::{setup, Backend, TestConn};

/// A handler generic over the connection, as the crate docs write it: one bound, a real query.
/// (The ids here are the tests' own constants; an app binds its values.)
fn credit<C: InboxConnection>(tx: &mut C, event_id: &str) -> QueryResult<usize> {
    diesel::sql_query(format!(
        "INSERT INTO effects (event_id) VALUES ('{event_id}')"
    ))
    .execute(tx)
}

pub fn a_handler_generic_over_the_connection_runs_its_query_once_per_event<B: Backend>() {
    let (_db, mut conn) = setup::<B>();

    let first = with_inbox(&mut conn, "evt-1", |tx| credit(tx, "evt-1")).unwrap();
    let again = with_inbox(&mut conn, "evt-1", |tx| credit(tx, "evt-1")).unwrap();

    assert_eq!(first, Outcome::Processed(1));
    assert!(again.is_duplicate());
    assert_eq!(conn.effects_of("evt-1"), 1);
}

#[cfg(feature = "tokio")]
pub use pools::*;

#[cfg(feature = "tokio")]
mod pools {
    use std::panic::AssertUnwindSafe;

    use diesel_inbox::pool::BlockingPool;
    use diesel_inbox::{outbox::BlockingPublisher, Error, Inbox, Outcome};
    use futures_util::FutureExt;

    use super::credit;
    use crate::scenarios::outbox::{outbox, placed, relay};
    use crate::scenarios::Recorder;
    use crate::support::{runtime, setup, Backend, TestConn};

    /// Deliveries handed to `pool` take effect once and enqueue their follow-up once; the
    /// relay publishes over the same pool, awaiting its publisher, and a blocking relay pass
    /// inside a step publishes through a `BlockingPublisher`; a panicking step is resumed in
    /// the caller and the pool serves on.
    async fn delivered_and_relayed_through<P: BlockingPool>(pool: &P, recorder: &Recorder) {
        let inbox = Inbox::new("pooled").unwrap();
        for id in ["evt-1", "evt-1", "evt-2", "evt-1"] {
            let inbox = inbox.clone();
            let outcome = pool
                .run(move |conn| {
                    inbox.process(conn, id, |tx| {
                        credit(tx, id)?;
                        outbox().enqueue(tx, "orders", &placed(id, 1))
                    })
                })
                .await
                .unwrap();
            assert!(matches!(
                outcome,
                Outcome::Processed(()) | Outcome::Duplicate(_)
            ));
        }

        let pass = relay().run_once_async(pool, recorder).await.unwrap();
        assert_eq!((pass.published, pass.failed), (2, 0));
        assert_eq!(recorder.ids(), ["evt-1-1", "evt-2-1"]);

        pool.run(|conn| outbox().enqueue(conn, "orders", &placed("evt-3", 1)))
            .await
            .unwrap();
        let mut blocking =
            BlockingPublisher::new(recorder.clone(), tokio::runtime::Handle::current());
        let pass = pool
            .run(move |conn| relay().run_once(conn, &mut blocking))
            .await
            .unwrap();
        assert_eq!(pass.published, 1);
        assert_eq!(recorder.ids(), ["evt-1-1", "evt-2-1", "evt-3-1"]);

        let panicked = AssertUnwindSafe(
            pool.run(|_conn| -> Result<(), Error> { panic!("the step panicked") }),
        )
        .catch_unwind()
        .await;
        let panic = panicked.expect_err("the step's panic is resumed in the caller");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"the step panicked"));
        let pass = relay().run_once_async(pool, recorder).await.unwrap();
        assert!(pass.is_idle(), "the pool serves on after a panicking step");
    }

    pub fn an_r2d2_pool_runs_deliveries_and_the_relay_from_an_async_service<B: Backend>() {
        let (db, mut conn) = setup::<B>();
        let pool = db.pool(2);

        runtime().block_on(delivered_and_relayed_through(&pool, &Recorder::default()));

        assert_eq!((conn.effects_of("evt-1"), conn.effects_of("evt-2")), (1, 1));
    }

    #[cfg(feature = "deadpool")]
    pub fn a_deadpool_diesel_pool_runs_deliveries_and_the_relay_from_an_async_service<
        B: Backend,
    >() {
        let (db, mut conn) = setup::<B>();

        // The pool is dropped inside the runtime: deadpool-diesel closes its connections there.
        runtime().block_on(async {
            let pool = B::deadpool(db.url(), 2);
            delivered_and_relayed_through(&pool, &Recorder::default()).await;
        });

        assert_eq!((conn.effects_of("evt-1"), conn.effects_of("evt-2")), (1, 1));
    }
}

#[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub use multi::*;

#[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod multi {
    use diesel::prelude::*;
    use diesel_inbox::{multi::on_variant, Error, Inbox, Outcome};

    use crate::scenarios::outbox::{outbox, placed};
    use crate::support::{effects, setup, transaction_depth, Backend, TestConn};

    /// An app's connection over every backend.
    #[derive(diesel::MultiConnection)]
    pub enum AnyConnection {
        Postgresql(diesel::PgConnection),
        Mysql(diesel::MysqlConnection),
        Sqlite(diesel::SqliteConnection),
    }

    macro_rules! into_any {
        ($($variant:ident($conn:ty)),+) => {$(
            impl From<$conn> for AnyConnection {
                fn from(conn: $conn) -> Self {
                    AnyConnection::$variant(conn)
                }
            }
        )+};
    }
    into_any!(
        Postgresql(diesel::PgConnection),
        Mysql(diesel::MysqlConnection),
        Sqlite(diesel::SqliteConnection)
    );

    /// The app's effect, in Diesel's DSL against its own enum.
    fn record(conn: &mut AnyConnection, event_id: &str) -> QueryResult<()> {
        diesel::insert_into(effects::table)
            .values(effects::event_id.eq(event_id))
            .execute(conn)
            .map(drop)
    }

    pub fn a_multi_connection_app_takes_effect_once_writing_through_its_own_enum<B: Backend>()
    where
        B::Conn: Into<AnyConnection>,
    {
        let (db, mut check) = setup::<B>();
        let mut conn: AnyConnection = db.connect().into();
        let inbox = Inbox::new("multi").unwrap();
        let deliver = |conn: &mut AnyConnection, id: &'static str, fail: bool| {
            on_variant!(
                conn,
                AnyConnection {
                    Postgresql,
                    Mysql,
                    Sqlite
                },
                |c| {
                    inbox.process(c, id, |tx| {
                        record(tx, id)?;
                        // The app's own nested transaction on its enum counts the same levels.
                        tx.transaction(|app| record(app, &format!("{id}-nested")))?;
                        outbox().enqueue(tx, "orders", &placed(id, 1))?;
                        if fail {
                            return Err(Error::transient("the handler failed"));
                        }
                        Ok(())
                    })
                }
            )
        };

        let failed = deliver(&mut conn, "evt-1", true);
        let first = deliver(&mut conn, "evt-1", false).unwrap();
        let again = deliver(&mut conn, "evt-1", false).unwrap();

        assert!(failed.is_err());
        assert_eq!(first, Outcome::Processed(()));
        assert!(again.is_duplicate());
        assert_eq!(check.effects_of("evt-1"), 1);
        assert_eq!(check.effects_of("evt-1-nested"), 1);
        let outbox_rows: i64 = diesel::sql_query("SELECT COUNT(*) AS n FROM diesel_inbox_outbox")
            .get_result::<Count>(&mut conn)
            .unwrap()
            .n;
        assert_eq!(outbox_rows, 1);
        assert_eq!(transaction_depth(&mut conn), 0);
    }

    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
}
