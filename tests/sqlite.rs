//! The inbox scenarios against Sqlite.

#[macro_use]
mod scenarios;
mod support;

backend_tests!(support::Sqlite);
