//! The claims area's statements: the trait a backend implements, the rows it reads and
//! writes, and its statements for every backend, written once.
//!
//! Each backend's file stamps the whole area with one line,
//! `claim_statements!(Pg, schema = schema, codec = codec, ..)`: the backend type, its module
//! of [`crate::tables`] and its codec (how it binds keys and times) are explicit arguments,
//! and the options name the variants a backend needs (`record_claim = upsert_returning`
//! where the backend has `INSERT .. RETURNING`, `update_then_read` on MySQL; `lock =
//! for_update` where it has row locks). Adding a statement touches this file alone: the
//! trait's method and its arm below.

use std::future::Future;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use crate::audit::Audit;
use crate::delivery::Payload;
use crate::rows::{Key, Listed};
use crate::sql::{Db, TransactionSql};

use super::outcome::{Abandoned, Completed, InDoubt};
use super::state::ClaimState;

/// A row of `diesel_inbox_claims` (a listing's rows hold no payload, hash or kind).
#[derive(Debug, Clone)]
pub struct ClaimRow {
    pub event_id: String,
    pub state: ClaimState,
    pub attempt: i64,
    pub deliveries: i64,
    pub lease_until: DateTime<Utc>,
    pub claimed_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub payload_hash: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub payload_kind: Option<String>,
    pub result: Option<String>,
    pub last_error: Option<String>,
    pub resolved_by: Option<String>,
    pub resolution: Option<String>,
}

/// A claim as its first delivery inserts it: in progress, attempt 1, one delivery.
#[derive(Debug)]
pub struct NewClaim<'a> {
    pub lease_until: DateTime<Utc>,
    pub now: DateTime<Utc>,
    pub payload_hash: Option<&'a [u8]>,
    pub payload: Option<&'a Payload>,
}

/// A change of a claim's state, by its holder or by ops. Fields left `None` (or `false`)
/// keep the row's value.
#[derive(Debug)]
pub struct ClaimChange<'a> {
    pub state: ClaimState,
    /// Bump the attempt and clear the reason: a new holder acquires the claim.
    pub acquire: bool,
    pub lease_until: Option<DateTime<Utc>>,
    /// The side effect's result (JSON); `completed_at` is set with it.
    pub result: Option<&'a str>,
    /// Why (kept as `last_error`).
    pub note: Option<&'a str>,
    pub audit: Option<&'a Audit>,
    pub now: DateTime<Utc>,
}

/// The outcomes' readings of a claim row.
impl Completed {
    pub(crate) fn from_row(row: &ClaimRow) -> Self {
        Self {
            result: row.result.clone(),
            at: row.completed_at,
        }
    }
}

impl InDoubt {
    /// The claim `row`, which is in doubt. It is so since the end of its holder's lease: a
    /// holder that cannot tell what its side effect did ends the lease there and then.
    pub(crate) fn from_row(row: &ClaimRow) -> Self {
        Self {
            attempt: row.attempt.unsigned_abs(),
            since: row.lease_until,
            reason: reason_in_doubt(row),
        }
    }
}

impl Abandoned {
    pub(crate) fn from_row(row: &ClaimRow) -> Self {
        Self {
            reason: row.last_error.clone(),
        }
    }
}

/// Why the claim `row`, in doubt, is: the reason stored with it, or, for a lapse no delivery
/// has recorded yet, the one a delivery would record.
pub(crate) fn reason_in_doubt(row: &ClaimRow) -> String {
    if let (Some(reason), super::state::ClaimState::InDoubt) = (&row.last_error, row.state) {
        return reason.clone();
    }
    let at = row.lease_until.format("%Y-%m-%d %H:%M:%S UTC");
    format!("the holder's lease ran out at {at} before it completed the claim (it crashed, hung or lost its connection)")
}

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

/// Implements [`ClaimSql`] for a backend: `claim_statements!(Backend, schema = .., codec = ..,
/// record_claim = upsert_returning | update_then_read $(, lock = for_update)?)`.
///
/// `schema` is the backend's module of [`crate::tables`]; `codec` its module of key and time
/// conversions (`key`, `key_string`, `time`, `utc`, `Time`, `KeyOwned`). Nothing else is
/// taken from the caller's scope. Expands to the impl and, beside it, `mod claim_rows`: the
/// select lists and row conversions the statements share.
macro_rules! claim_statements {
    (
        $backend:ty,
        schema = $schema:ident,
        codec = $codec:ident,
        record_claim = $record:ident
        $(, lock = $lock:ident)? $(,)?
    ) => {
        /// The claims table's select lists and their conversion into rows.
        mod claim_rows {
            use super::{$codec, $schema};
            use $crate::claim::sql::ClaimRow;
            use $crate::rows::Listed;
            use $schema::diesel_inbox_claims as k;

            /// A claim's columns but its payload and the payload's hash: what a listing
            /// reads. The state is read as text, and parsed per row: see [`Listed`].
            pub(super) type SummaryColumns = (
                $codec::KeyOwned,
                String,
                i64,
                i64,
                $codec::Time,
                $codec::Time,
                $codec::Time,
                Option<$codec::Time>,
                Option<String>,
                Option<String>,
                Option<String>,
                Option<String>,
                Option<String>,
            );

            pub(super) type SummarySelect = (
                k::event_id,
                k::state,
                k::attempt,
                k::deliveries,
                k::lease_until,
                k::claimed_at,
                k::updated_at,
                k::completed_at,
                k::payload_kind,
                k::result,
                k::last_error,
                k::resolved_by,
                k::resolution,
            );

            pub(super) fn summary_columns() -> SummarySelect {
                (
                    k::event_id,
                    k::state,
                    k::attempt,
                    k::deliveries,
                    k::lease_until,
                    k::claimed_at,
                    k::updated_at,
                    k::completed_at,
                    k::payload_kind,
                    k::result,
                    k::last_error,
                    k::resolved_by,
                    k::resolution,
                )
            }

            pub(super) fn summary_row(row: SummaryColumns) -> Listed<ClaimRow> {
                let (
                    event_id,
                    state,
                    attempt,
                    deliveries,
                    lease_until,
                    claimed_at,
                    updated_at,
                    completed_at,
                    payload_kind,
                    result,
                    last_error,
                    resolved_by,
                    resolution,
                ) = row;
                let event_id = $codec::key_string(event_id);
                let state = $crate::rows::listed_column(&event_id, state.parse())?;
                Ok(ClaimRow {
                    event_id,
                    state,
                    attempt,
                    deliveries,
                    lease_until: $codec::utc(lease_until),
                    claimed_at: $codec::utc(claimed_at),
                    updated_at: $codec::utc(updated_at),
                    completed_at: completed_at.map($codec::utc),
                    payload_hash: None,
                    payload: None,
                    payload_kind,
                    result,
                    last_error,
                    resolved_by,
                    resolution,
                })
            }

            /// The whole claim: the summary, and the payload's hash and bytes.
            pub(super) type Columns = (SummaryColumns, (Option<Vec<u8>>, Option<Vec<u8>>));

            pub(super) fn columns() -> (SummarySelect, (k::payload_hash, k::payload)) {
                (summary_columns(), (k::payload_hash, k::payload))
            }

            pub(super) fn row((summary, payload): Columns) -> Listed<ClaimRow> {
                let (payload_hash, payload) = payload;
                Ok(ClaimRow {
                    payload_hash,
                    payload,
                    ..summary_row(summary)?
                })
            }
        }

        impl $crate::claim::sql::ClaimSql for $backend {
            $crate::claim::sql::claim_statements!(@record_claim $record, $schema, $codec);

            async fn claim<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
                lock: bool,
            ) -> diesel::QueryResult<Option<$crate::claim::sql::ClaimRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_claims::dsl as k;
                let row = k::diesel_inbox_claims
                    .find(($codec::key(key.0), $codec::key(key.1)))
                    .select(claim_rows::columns());
                $(
                    if lock {
                        return row
                            .$lock()
                            .limit(1)
                            .get_result_on::<claim_rows::Columns>(conn)
                            .await
                            .optional()?
                            .map(|row| $crate::backend::readable(claim_rows::row(row)))
                            .transpose();
                    }
                )?
                let _ = lock;
                row.limit(1)
                    .get_result_on::<claim_rows::Columns>(conn)
                    .await
                    .optional()?
                    .map(|row| $crate::backend::readable(claim_rows::row(row)))
                    .transpose()
            }

            async fn claims<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                consumer: &str,
                states: Option<&[$crate::claim::state::ClaimState]>,
                after: Option<&str>,
                limit: i64,
            ) -> diesel::QueryResult<Vec<$crate::rows::Listed<$crate::claim::sql::ClaimRow>>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_claims::dsl as k;
                let mut query = k::diesel_inbox_claims
                    .filter(k::consumer.eq($codec::key(consumer)))
                    .into_boxed();
                if let Some(states) = states {
                    query = query.filter(k::state.eq_any(states.to_vec()));
                }
                if let Some(after) = after {
                    query = query.filter(k::event_id.gt($codec::key(after)));
                }
                query
                    .order(k::event_id)
                    .limit(limit)
                    .select(claim_rows::summary_columns())
                    .load_on::<claim_rows::SummaryColumns>(conn)
                    .await
                    .map(|rows| rows.into_iter().map(claim_rows::summary_row).collect())
            }

            async fn update_claim<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
                attempt: i64,
                from: &[$crate::claim::state::ClaimState],
                change: &$crate::claim::sql::ClaimChange<'_>,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::claim::state::ClaimState;
                use $crate::sql::Run;
                use $schema::diesel_inbox_claims::dsl as k;
                let now = $codec::time(change.now);
                let row = k::diesel_inbox_claims
                    .find(($codec::key(key.0), $codec::key(key.1)))
                    .filter(k::attempt.eq(attempt))
                    .filter(k::state.eq_any(from.to_vec()));
                // `None` leaves a column as it is.
                diesel::update(row)
                    .set((
                        k::state.eq(change.state),
                        change.acquire.then(|| k::attempt.eq(k::attempt + 1)),
                        change.lease_until.map(|until| k::lease_until.eq($codec::time(until))),
                        change.result.map(|json| k::result.eq(Some(json))),
                        (change.state == ClaimState::Completed)
                            .then(|| k::completed_at.eq(Some(now))),
                        // A new holder starts without the last one's reason.
                        if change.acquire { Some(None) } else { change.note.map(Some) }
                            .map(|note| k::last_error.eq(note)),
                        change.audit.map(|audit| {
                            (
                                k::resolved_by.eq(Some(audit.actor())),
                                k::resolution.eq(Some(audit.reason())),
                            )
                        }),
                        k::updated_at.eq(now),
                    ))
                    .execute_on(conn)
                    .await
                    .map(|changed| changed == 1)
            }
        }
    };

    // Where the backend has `INSERT .. ON CONFLICT .. RETURNING` (PostgreSQL, SQLite).
    (@record_claim upsert_returning, $schema:ident, $codec:ident) => {
        async fn record_claim<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::rows::Key<'_>,
            claim: &$crate::claim::sql::NewClaim<'_>,
        ) -> diesel::QueryResult<Option<$crate::claim::sql::ClaimRow>> {
            use diesel::prelude::*;
            use $crate::sql::Run;
            use $schema::diesel_inbox_claims::dsl as k;
            // A second claimant of the same key blocks here until the first commits. A
            // delivery counts on the row and keeps it from retention.
            let row = diesel::insert_into(k::diesel_inbox_claims)
                .values($crate::claim::sql::claim_statements!(@new_row $schema, $codec, key, claim))
                .on_conflict((k::consumer, k::event_id))
                .do_update()
                .set((
                    k::deliveries.eq(k::deliveries + 1),
                    k::updated_at.eq($codec::time(claim.now)),
                ))
                .returning(claim_rows::columns())
                .get_result_on::<claim_rows::Columns>(conn)
                .await?;
            let row = $crate::backend::readable(claim_rows::row(row))?;
            Ok((row.deliveries > 1).then_some(row))
        }
    };

    // MySQL, without `RETURNING`: counting the delivery always changes the row, so the
    // affected rows tell an insert from an existing claim, as in `record_delivery`; the
    // update locks the row, which is then read.
    (@record_claim update_then_read, $schema:ident, $codec:ident) => {
        async fn record_claim<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::rows::Key<'_>,
            claim: &$crate::claim::sql::NewClaim<'_>,
        ) -> diesel::QueryResult<Option<$crate::claim::sql::ClaimRow>> {
            use diesel::prelude::*;
            use $crate::sql::Run;
            use $schema::diesel_inbox_claims::dsl as k;
            let affected = diesel::insert_into(k::diesel_inbox_claims)
                .values($crate::claim::sql::claim_statements!(@new_row $schema, $codec, key, claim))
                .on_conflict(diesel::dsl::DuplicatedKeys)
                .do_update()
                .set((
                    k::deliveries.eq(k::deliveries + 1),
                    k::updated_at.eq($codec::time(claim.now)),
                ))
                .execute_on(conn)
                .await?;
            // MySQL counts an inserted row as 1 and an updated one as 2.
            if affected == 1 {
                return Ok(None);
            }
            <Self as $crate::claim::sql::ClaimSql>::claim(conn, key, true).await
        }
    };
    // The values of a new claim: in progress, attempt 1, one delivery, with the payload and
    // its fingerprint if any.
    (@new_row $schema:ident, $codec:ident, $key:expr, $claim:expr) => {{
        use $schema::diesel_inbox_claims as k;
        let claim: &$crate::claim::sql::NewClaim<'_> = $claim;
        let now = $codec::time(claim.now);
        (
            k::consumer.eq($codec::key($key.0)),
            k::event_id.eq($codec::key($key.1)),
            k::state.eq($crate::claim::state::ClaimState::InProgress),
            k::attempt.eq(1_i64),
            k::deliveries.eq(1_i64),
            k::lease_until.eq($codec::time(claim.lease_until)),
            k::claimed_at.eq(now),
            k::updated_at.eq(now),
            k::payload_hash.eq(claim.payload_hash),
            k::payload.eq(claim.payload.map($crate::Payload::to_bytes)),
            k::payload_kind.eq(claim.payload.map($crate::Payload::kind)),
        )
    }};
}
pub(crate) use claim_statements;
