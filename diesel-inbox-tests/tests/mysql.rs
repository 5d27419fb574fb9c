//! The inbox scenarios against Mysql.

#[macro_use]
mod scenarios;
#[macro_use]
mod server_scenarios;
mod support;

backend_tests!(support::Mysql);
server_backend_tests!(support::Mysql);
