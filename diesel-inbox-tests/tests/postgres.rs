//! The inbox scenarios against Postgres.

#[macro_use]
mod scenarios;
#[macro_use]
mod server_scenarios;
mod support;

backend_tests!(support::Postgres);
server_backend_tests!(support::Postgres);
