//! Scenarios that need a database server, run against PostgreSQL and MySQL/MariaDB by
//! `server_backend_tests!`: an embedded SQLite has no session to kill, and no isolation level
//! to raise.

mod ended_transaction;
mod lost_connection;
mod placement;
pub(crate) use ended_transaction::*;
pub(crate) use lost_connection::*;
pub(crate) use placement::*;

use crate::scenarios::deliver_concurrently;
#[cfg(feature = "deadpool")]
use diesel_inbox::{pool::BlockingPool, Error};

use crate::support::ServerBackend;

/// At the strictest isolation level, conflicts come back as serialization failures (40001 on
/// PostgreSQL) or deadlocks (MySQL), which the inbox retries. (SQLite is serializable always.)
pub(crate) fn concurrent_deliveries_at_serializable_isolation_take_effect_once_per_id<
    B: ServerBackend,
>() {
    deliver_concurrently::<B>(B::serializable);
}

/// deadpool-diesel's error when it cannot connect comes back as `Error::Pool`, with the
/// URL's password redacted. (A server's URL: SQLite's is a file.)
#[cfg(feature = "deadpool")]
pub(crate) fn a_deadpool_diesel_pool_that_cannot_connect_is_a_pool_error_without_the_password<
    B: ServerBackend,
>() {
    let server = B::server_url();
    let scheme = server.split("://").next().unwrap();
    let url = format!("{scheme}://app:hunter2@127.0.0.1:1/app");

    let result = crate::support::runtime().block_on(async {
        let pool = B::deadpool(&url, 1);
        pool.run(|_conn| Ok::<_, Error>(())).await
    });

    let error = result.expect_err("nothing listens on port 1");
    assert!(matches!(error, Error::Pool(_)), "{error:?}");
    assert!(!error.to_string().contains("hunter2"), "{error}");
}

/// Generates one `#[test]` per server scenario for the backend `$backend`.
macro_rules! server_backend_tests {
    ($backend:ty) => {
        backend_tests!(@in server_scenarios, $backend;
            a_test_database_takes_the_teams_prefix_and_is_dropped_when_its_test_passes,
            a_schema_per_test_keeps_tests_apart_and_is_dropped_when_its_test_passes,
            a_given_database_keeps_its_own_tables_and_loses_only_the_inbox_tables_it_got,
            the_prefix_variable_names_the_suites_databases,
            concurrent_deliveries_at_serializable_isolation_take_effect_once_per_id,
            a_handler_that_swallows_a_deadlock_and_goes_on_takes_effect_once,
            a_handler_whose_session_dies_gets_its_own_error_back,
            a_handler_returning_the_dead_sessions_diesel_error_gets_that_error_back,
            a_session_killed_before_commit_commits_nothing_and_asks_for_redelivery,
            a_connection_lost_at_commit_is_an_unknown_outcome_that_redelivery_settles,
            a_connection_cut_on_the_wire_is_a_lost_connection_and_so_is_every_later_call,
            a_server_that_stops_answering_ends_the_delivery_at_the_idle_timeout,
            the_doctor_reports_the_servers_replication_cluster_and_stall_bound,
            a_relay_pass_and_a_prune_bound_their_transactions_by_their_idle_timeout,
        );
        #[cfg(feature = "deadpool")]
        backend_tests!(@in server_scenarios, $backend;
            a_deadpool_diesel_pool_that_cannot_connect_is_a_pool_error_without_the_password,
        );
    };
}
