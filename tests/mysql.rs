//! The inbox scenarios against Mysql.

#[macro_use]
mod scenarios;
mod support;

backend_tests!(support::Mysql);
