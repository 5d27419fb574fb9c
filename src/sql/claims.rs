//! The claims area's statements: the row a side effect that cannot be rolled back is claimed,
//! fenced and settled on.
//!
//! Implemented for each backend in its file under `backend/`; the bodies shared by all three
//! are `backend/claims.rs`, and MySQL's own (no `RETURNING`) are in `backend/mysql.rs`.

use std::future::Future;

use diesel::QueryResult;

use super::{Db, TransactionSql};
use crate::rows::{ClaimChange, ClaimRow, Key, Listed, NewClaim};
use crate::state::ClaimState;

/// The claims area's statements for one database, on a connection of either flavour. Sealed.
pub trait ClaimSql: TransactionSql {
    /// Inserts the claim of `key` as `claim` says, or counts one more delivery on the
    /// existing row and returns it, locked for the rest of the transaction where the
    /// backend has row locks (SQLite's immediate transaction holds the whole database).
    /// `None` when it inserted.
    fn record_claim<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        claim: &NewClaim<'_>,
    ) -> impl Future<Output = QueryResult<Option<ClaimRow>>> + Send;

    /// The claim of `key`; with `lock`, locked as [`record_claim`](Self::record_claim)
    /// locks it.
    fn claim<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        lock: bool,
    ) -> impl Future<Output = QueryResult<Option<ClaimRow>>> + Send;

    /// Up to `limit` of the consumer's claims, in the stored states given (all where
    /// `None`), after event id `after` where given, in event id order.
    fn claims<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        states: Option<&[ClaimState]>,
        after: Option<&str>,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<Listed<ClaimRow>>>> + Send;

    /// Applies `change` to the claim if its attempt is `attempt` and its stored state one
    /// of `from`; `false` when it is not (fenced).
    fn update_claim<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        attempt: i64,
        from: &[ClaimState],
        change: &ClaimChange<'_>,
    ) -> impl Future<Output = QueryResult<bool>> + Send;
}
