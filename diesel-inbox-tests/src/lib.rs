//! diesel-inbox's scenarios against real servers live in `tests/`: one binary per backend, the
//! scenarios written once over backends and flavours (`tests/scenarios`, `tests/support`), and
//! the test beds beyond one server (`tests/cluster.rs`, `tests/pooler.rs`). This library holds
//! only the README's example, compiled and run as a doc-test with every backend; each area's
//! examples are doc-tests of its module in the core crate.

/// The README's example, compiled and run as a doc-test.
#[cfg(all(doctest, feature = "postgres", feature = "sqlite", feature = "mysql"))]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
