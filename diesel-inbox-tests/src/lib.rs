//! diesel-inbox's scenarios against real servers live in `tests/`: one binary per backend, the
//! scenarios written once over backends and flavours (`tests/scenarios`, `tests/support`), and
//! the test beds beyond one server (`tests/cluster.rs`, `tests/pooler.rs`). This library holds
//! only the README's examples, compiled and run as doc-tests with every backend.

/// The README's examples, compiled and run as doc-tests.
#[cfg(all(doctest, feature = "postgres", feature = "sqlite", feature = "mysql"))]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
