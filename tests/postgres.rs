//! The inbox scenarios against Postgres.

#[macro_use]
mod scenarios;
mod support;

backend_tests!(support::Postgres);
