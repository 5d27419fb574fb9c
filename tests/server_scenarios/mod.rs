//! Scenarios that need a database server, run against PostgreSQL and MySQL/MariaDB by
//! `server_backend_tests!`: an embedded SQLite has no session to kill, and no isolation level
//! to raise.

mod lost_connection;
pub(crate) use lost_connection::*;

use crate::scenarios::deliver_concurrently;
use crate::support::ServerBackend;

/// At the strictest isolation level, conflicts come back as serialization failures (40001 on
/// PostgreSQL) or deadlocks (MySQL), which the inbox retries. (SQLite is serializable always.)
pub(crate) fn concurrent_deliveries_at_serializable_isolation_take_effect_once_per_id<
    B: ServerBackend,
>() {
    deliver_concurrently::<B>(B::serializable);
}

/// Generates one `#[test]` per server scenario for the backend `$backend`.
macro_rules! server_backend_tests {
    ($backend:ty) => {
        backend_tests!(@in server_scenarios, $backend;
            concurrent_deliveries_at_serializable_isolation_take_effect_once_per_id,
            a_handler_whose_session_dies_gets_its_own_error_back,
            a_handler_returning_the_dead_sessions_diesel_error_gets_that_error_back,
            a_session_killed_before_commit_commits_nothing_and_asks_for_redelivery,
            a_connection_lost_at_commit_is_an_unknown_outcome_that_redelivery_settles,
        );
    };
}
