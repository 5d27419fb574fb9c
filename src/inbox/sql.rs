//! The inbox's own statements: the row an event's deliveries are recorded on, its state, its
//! stored result, and the hourly counters the deliveries add to.
//!
//! Each backend's file stamps them all with one line, `inbox_statements!(Pg, schema = schema,
//! codec = codec, dialect = postgres)`: the backend type, its module of [`crate::tables`] and
//! its codec (how it binds keys and times) are explicit arguments. The statements that read
//! the same on every backend are written once below; `dialect` picks, for the few that differ,
//! the backend's own: PostgreSQL sends a delivery's insert with its `BEGIN` (the statement text
//! is `postgres.rs`), MySQL has no `RETURNING` and writes its upserts out (their builders are
//! `mysql.rs`), SQLite records a batch
//! one row at a time. Adding a statement touches this file alone: the trait's method and its
//! body in the macro.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use crate::rows::{InboxRow, Key, Listed, Recorded};
use crate::sql::{Db, TransactionSql};
use crate::state::{Counter, InboxState};

/// What [`InboxSql::begin_and_record_delivery`] did.
#[derive(Debug)]
pub struct Began {
    /// What recording the delivery found.
    pub recorded: Recorded,
    /// Whether the transaction already commits without waiting for the disk, as
    /// [`InboxSql::commit_without_waiting_for_disk`] would have it: a duplicate's, which
    /// records bookkeeping alone.
    pub without_waiting_for_disk: bool,
}

impl Began {
    /// A transaction that recorded the delivery and commits as any other.
    pub(crate) fn recorded(recorded: Recorded) -> Self {
        Self {
            recorded,
            without_waiting_for_disk: false,
        }
    }
}

/// The inbox area's statements for one database, on a connection of either flavour. Sealed.
pub trait InboxSql: TransactionSql {
    /// Whether [`begin_and_record_delivery`](Self::begin_and_record_delivery) records a
    /// duplicate by way of an insert the unique key refuses, which
    /// [`Inbox::expect_duplicates`](crate::Inbox::expect_duplicates) avoids.
    const RECORD_WITH_BEGIN_REFUSES_DUPLICATES: bool = false;

    /// Inserts the inbox row, or counts one more delivery on the existing one. The database's
    /// unique key decides which, in one statement where the backend allows.
    fn record_delivery<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        now: DateTime<Utc>,
        payload_hash: Option<&[u8]>,
    ) -> impl Future<Output = QueryResult<Recorded>> + Send;

    /// Opens the top-level transaction and records the delivery in it, as
    /// [`begin_top`](TransactionSql::begin_top) and then
    /// [`record_delivery`](Self::record_delivery) would, with the record in the `BEGIN`'s
    /// round trip: `None`, having sent nothing, where the backend cannot send both as one. A
    /// failure leaves no transaction open.
    fn begin_and_record_delivery<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        idle_timeout: Option<Duration>,
        key: Key<'_>,
        now: DateTime<Utc>,
        payload_hash: Option<&[u8]>,
    ) -> impl Future<Output = Option<QueryResult<Began>>> + Send {
        let _ = (conn, idle_timeout, key, now, payload_hash);
        std::future::ready(None)
    }

    /// [`record_delivery`](Self::record_delivery) for many distinct event ids of one
    /// consumer, in as few statements as the backend allows; results in the order given.
    fn record_deliveries<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        consumer: &str,
        items: &[(&str, Option<&[u8]>)],
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<Vec<Listed<Recorded>>>> + Send;

    /// Lets the open top-level transaction commit without waiting for the disk, where the
    /// backend can do that per transaction. Only for transactions that record bookkeeping
    /// alone (a duplicate's delivery count): a crash may lose the count, never an effect.
    fn commit_without_waiting_for_disk<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> impl Future<Output = QueryResult<()>> + Send {
        let _ = conn;
        std::future::ready(Ok(()))
    }

    /// Counts a delivery that reused the id with a different payload as a conflict, and
    /// takes it off the row's deliveries, which `record_delivery` had counted it in.
    fn note_payload_conflict<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Stores the effect's result (JSON) on the inbox row.
    fn store_result<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        json: &str,
    ) -> impl Future<Output = QueryResult<()>> + Send;

    /// Inserts an inbox row in `state` (dead-lettered, discarded) so that deliveries skip the
    /// effect. `false` when the event already has an inbox row.
    fn insert_held_row<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        now: DateTime<Utc>,
        state: InboxState,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Changes the inbox row's state from `from` to `to`; `false` when it was not in `from`.
    fn set_inbox_state<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        from: InboxState,
        to: InboxState,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// Deletes the inbox row if it is in `state`; `false` when it was not.
    fn delete_inbox_row<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        state: InboxState,
    ) -> impl Future<Output = QueryResult<bool>> + Send;

    /// The inbox row of `key`, if there is one.
    fn inbox_row<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
    ) -> impl Future<Output = QueryResult<Option<InboxRow>>> + Send;

    /// Up to `limit` inbox rows in key order.
    fn inbox_rows<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        limit: i64,
    ) -> impl Future<Output = QueryResult<Vec<InboxRow>>> + Send;

    /// Adds `by` to the consumer's `counter` for the hour `now` falls in, on the stripe of the
    /// key's event (see `backend::counter_stripe`).
    fn bump_counter<F, C: Db<F, Backend = Self>>(
        conn: &mut C,
        key: Key<'_>,
        counter: Counter,
        by: i64,
        now: DateTime<Utc>,
    ) -> impl Future<Output = QueryResult<()>> + Send;
}

#[cfg(feature = "postgres")]
/// A delivery whose insert found its key taken, the first transaction aborted: a duplicate, or
/// an event held back. A second transaction records the delivery on the row, and commits
/// without waiting for the disk, since it records bookkeeping alone.
pub(crate) async fn seen_after_conflict<F, C: Db<F, Backend = diesel::pg::Pg>>(
    conn: &mut C,
    begin: &str,
    key: Key<'_>,
    now: DateTime<Utc>,
    payload_hash: Option<&[u8]>,
) -> QueryResult<Began> {
    conn.batch_execute(&format!(
        "ROLLBACK; {begin}; {}",
        super::postgres::COMMIT_WITHOUT_WAITING
    ))
    .await?;
    let recorded =
        <diesel::pg::Pg as InboxSql>::record_delivery(conn, key, now, payload_hash).await;
    let error = match recorded {
        Ok(recorded @ Recorded::Seen(_)) => {
            return Ok(Began {
                recorded,
                without_waiting_for_disk: true,
            })
        }
        // The row went (a prune) between the two transactions, and this one must not run an
        // effect without waiting for the disk: run the delivery again.
        Ok(Recorded::New) => diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::SerializationFailure,
            Box::new(
                "the event's inbox row was deleted while its delivery was recorded; retrying"
                    .to_owned(),
            ),
        ),
        Err(error) => error,
    };
    crate::backend::roll_back_uncounted(conn).await;
    Err(error)
}

/// Implements [`InboxSql`] for a backend: `inbox_statements!(Backend, schema = ..,
/// codec = .., dialect = postgres | mysql | sqlite)`.
///
/// `schema` is the backend's module of [`crate::tables`]; `codec` its module of key and time
/// conversions (`key`, `key_string`, `time`, `utc`, `Time`, `KeyOwned`). Nothing else is
/// taken from the caller's scope. Expands to the impl and, beside it, `mod inbox_rows`: the
/// select lists and row conversions the statements share.
macro_rules! inbox_statements {
    ($backend:ty, schema = $schema:ident, codec = $codec:ident, dialect = $dialect:ident $(,)?) => {
        /// The inbox table's select lists and their conversion into rows.
        mod inbox_rows {
            use super::{$codec, $schema};
            use $crate::rows::{Existing, InboxRow};
            use $crate::state::{InboxState, UnknownState};
            use $schema::diesel_inbox_events as t;

            /// The state is read as text, and parsed per row: see [`Listed`](crate::rows::Listed).
            pub(super) type ExistingColumns =
                ($codec::Time, i64, String, Option<Vec<u8>>, Option<String>);

            pub(super) fn existing_columns() -> (
                t::processed_at,
                t::deliveries,
                t::state,
                t::payload_hash,
                t::result,
            ) {
                (
                    t::processed_at,
                    t::deliveries,
                    t::state,
                    t::payload_hash,
                    t::result,
                )
            }

            pub(super) fn existing(row: ExistingColumns) -> Result<Existing, UnknownState> {
                let (processed_at, deliveries, state, payload_hash, result) = row;
                Ok(Existing {
                    processed_at: $codec::utc(processed_at),
                    deliveries,
                    state: state.parse()?,
                    payload_hash,
                    result,
                })
            }

            pub(super) type InboxColumns = (
                $codec::KeyOwned,
                $codec::KeyOwned,
                InboxState,
                $codec::Time,
                $codec::Time,
                i64,
            );

            pub(super) fn inbox_columns() -> (
                t::consumer,
                t::event_id,
                t::state,
                t::processed_at,
                t::last_seen_at,
                t::deliveries,
            ) {
                (
                    t::consumer,
                    t::event_id,
                    t::state,
                    t::processed_at,
                    t::last_seen_at,
                    t::deliveries,
                )
            }

            pub(super) fn inbox_row(row: InboxColumns) -> InboxRow {
                let (consumer, event_id, state, processed_at, last_seen_at, deliveries) = row;
                InboxRow {
                    consumer: $codec::key_string(consumer),
                    event_id: $codec::key_string(event_id),
                    state,
                    processed_at: $codec::utc(processed_at),
                    last_seen_at: $codec::utc(last_seen_at),
                    deliveries,
                }
            }
        }

        impl $crate::inbox::sql::InboxSql for $backend {
            $crate::inbox::sql::inbox_statements!(@$dialect, $schema, $codec);

            async fn note_payload_conflict<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_events::dsl as t;
                diesel::update(
                    t::diesel_inbox_events.find(($codec::key(key.0), $codec::key(key.1))),
                )
                // `record_delivery` counted it as a delivery; it is a conflict instead, so
                // `deliveries` counts the deliveries of the first payload only.
                .set((
                    t::deliveries.eq(t::deliveries - 1),
                    t::payload_conflicts.eq(t::payload_conflicts + 1),
                ))
                .execute_on(conn)
                .await
                .map(drop)
            }

            async fn store_result<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
                json: &str,
            ) -> diesel::QueryResult<()> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_events::dsl as t;
                diesel::update(
                    t::diesel_inbox_events.find(($codec::key(key.0), $codec::key(key.1))),
                )
                .set(t::result.eq(json))
                .execute_on(conn)
                .await
                .map(drop)
            }

            async fn set_inbox_state<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
                from: $crate::state::InboxState,
                to: $crate::state::InboxState,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_events::dsl as t;
                let row = t::diesel_inbox_events
                    .find(($codec::key(key.0), $codec::key(key.1)))
                    .filter(t::state.eq(from));
                diesel::update(row)
                    .set(t::state.eq(to))
                    .execute_on(conn)
                    .await
                    .map(|changed| changed == 1)
            }

            async fn delete_inbox_row<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
                state: $crate::state::InboxState,
            ) -> diesel::QueryResult<bool> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_events::dsl as t;
                let row = t::diesel_inbox_events
                    .find(($codec::key(key.0), $codec::key(key.1)))
                    .filter(t::state.eq(state));
                diesel::delete(row)
                    .execute_on(conn)
                    .await
                    .map(|deleted| deleted == 1)
            }

            async fn inbox_row<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                key: $crate::rows::Key<'_>,
            ) -> diesel::QueryResult<Option<$crate::rows::InboxRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_events::dsl as t;
                t::diesel_inbox_events
                    .find(($codec::key(key.0), $codec::key(key.1)))
                    .select(inbox_rows::inbox_columns())
                    .limit(1)
                    .get_result_on::<inbox_rows::InboxColumns>(conn)
                    .await
                    .optional()
                    .map(|row| row.map(inbox_rows::inbox_row))
            }

            async fn inbox_rows<F, C: $crate::sql::Db<F, Backend = Self>>(
                conn: &mut C,
                limit: i64,
            ) -> diesel::QueryResult<Vec<$crate::rows::InboxRow>> {
                use diesel::prelude::*;
                use $crate::sql::Run;
                use $schema::diesel_inbox_events::dsl as t;
                t::diesel_inbox_events
                    .order((t::consumer, t::event_id))
                    .limit(limit)
                    .select(inbox_rows::inbox_columns())
                    .load_on::<inbox_rows::InboxColumns>(conn)
                    .await
                    .map(|rows| rows.into_iter().map(inbox_rows::inbox_row).collect())
            }
        }
    };

    // PostgreSQL: a delivery's plain insert travels with the `BEGIN`, and the unique key
    // refuses a duplicate's, which the upsert then records; a duplicate's transaction commits
    // without waiting for the disk.
    (@postgres, $schema:ident, $codec:ident) => {
        const RECORD_WITH_BEGIN_REFUSES_DUPLICATES: bool = true;

        $crate::inbox::sql::inbox_statements!(@record_delivery_upsert, $schema, $codec);
        $crate::inbox::sql::inbox_statements!(@record_deliveries_upsert, $schema, $codec);
        $crate::inbox::sql::inbox_statements!(@insert_held_row_on_conflict, $schema, $codec);
        $crate::inbox::sql::inbox_statements!(@bump_counter_upsert, $schema, $codec);

        async fn begin_and_record_delivery<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            idle_timeout: Option<std::time::Duration>,
            key: $crate::rows::Key<'_>,
            now: chrono::DateTime<chrono::Utc>,
            payload_hash: Option<&[u8]>,
        ) -> Option<diesel::QueryResult<$crate::inbox::sql::Began>> {
            use $crate::inbox::postgres as pg;
            // A plain insert, in the BEGIN's simple-protocol message: it goes in for a new
            // event, and the unique key refuses it otherwise. Nothing comes back from such a
            // message but success or the error.
            let begin = $crate::sql::postgres_begin(idle_timeout);
            let insert = pg::text::insert_delivery(key, now, payload_hash);
            Some(
                match conn.batch_execute(&format!("{begin}; {insert}")).await {
                    Ok(()) => Ok($crate::inbox::sql::Began::recorded($crate::rows::Recorded::New)),
                    Err(diesel::result::Error::DatabaseError(
                        diesel::result::DatabaseErrorKind::UniqueViolation,
                        _,
                    )) => $crate::inbox::sql::seen_after_conflict(conn, &begin, key, now, payload_hash).await,
                    Err(error) => {
                        $crate::backend::roll_back_uncounted(conn).await;
                        Err(error)
                    }
                },
            )
        }

        fn commit_without_waiting_for_disk<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
        ) -> impl std::future::Future<Output = diesel::QueryResult<()>> + Send {
            // One round trip saves the WAL flush at commit, which costs several.
            conn.batch_execute($crate::inbox::postgres::COMMIT_WITHOUT_WAITING)
        }
    };

    // SQLite: as PostgreSQL's upserts, but a batch one row at a time. Diesel sends a
    // multi-row insert with a nullable value (the payload hash) to SQLite as one statement
    // per row anyway, which has no `DEFAULT` keyword; one at a time, each stays prepared.
    (@sqlite, $schema:ident, $codec:ident) => {
        $crate::inbox::sql::inbox_statements!(@record_delivery_upsert, $schema, $codec);
        $crate::inbox::sql::inbox_statements!(@insert_held_row_on_conflict, $schema, $codec);
        $crate::inbox::sql::inbox_statements!(@bump_counter_upsert, $schema, $codec);

        async fn record_deliveries<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            items: &[(&str, Option<&[u8]>)],
            now: chrono::DateTime<chrono::Utc>,
        ) -> diesel::QueryResult<Vec<$crate::rows::Listed<$crate::rows::Recorded>>> {
            let when = $codec::time(now);
            let mut found = std::collections::HashMap::with_capacity(items.len());
            for &(event_id, hash) in items {
                let key = (consumer, event_id);
                let row = $crate::inbox::sql::inbox_statements!(
                    @upsert_delivery, $schema, $codec, conn, key, when, hash
                )
                .await?;
                found.insert(event_id.to_owned(), inbox_rows::existing(row));
            }
            $crate::backend::in_order(items, found)
        }
    };

    // MySQL, without `RETURNING`: its upserts are written out (`inbox/mysql.rs`), and tell an
    // insert from an update by the rows they changed. A delivery's insert travels with the
    // `BEGIN` in one multi-statement message.
    (@mysql, $schema:ident, $codec:ident) => {
        async fn record_delivery<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::rows::Key<'_>,
            now: chrono::DateTime<chrono::Utc>,
            payload_hash: Option<&[u8]>,
        ) -> diesel::QueryResult<$crate::rows::Recorded> {
            use $crate::sql::Run;
            let affected = $crate::inbox::mysql::RecordDelivery::new(key, now, payload_hash)
                .execute_on(conn)
                .await?;
            $crate::inbox::sql::inbox_statements!(
                @mysql_recorded, $schema, $codec, conn, key, affected
            )
        }

        async fn begin_and_record_delivery<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            idle_timeout: Option<std::time::Duration>,
            key: $crate::rows::Key<'_>,
            now: chrono::DateTime<chrono::Utc>,
            payload_hash: Option<&[u8]>,
        ) -> Option<diesel::QueryResult<$crate::inbox::sql::Began>> {
            // No variable lasts one transaction here: the idle bound is the server's
            // (`begin_top`).
            let _ = idle_timeout;
            let statement = $crate::sql::BeginThen($crate::inbox::mysql::RecordDelivery::new(
                key,
                now,
                payload_hash,
            ));
            let affected = match $crate::sql::compound(conn, statement).await? {
                Ok(affected) => affected,
                Err(error) => return Some(Err(error)),
            };
            let recorded: diesel::QueryResult<_> = async {
                $crate::inbox::sql::inbox_statements!(
                @mysql_recorded, $schema, $codec, conn, key, affected
            )
            }
            .await;
            if recorded.is_err() {
                $crate::backend::roll_back_uncounted(conn).await;
            }
            Some(recorded.map($crate::inbox::sql::Began::recorded))
        }

        async fn record_deliveries<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            items: &[(&str, Option<&[u8]>)],
            now: chrono::DateTime<chrono::Utc>,
        ) -> diesel::QueryResult<Vec<$crate::rows::Listed<$crate::rows::Recorded>>> {
            use diesel::prelude::*;
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            let when = $codec::time(now);
            let mut found = std::collections::HashMap::with_capacity(items.len());
            for chunk in items.chunks($crate::backend::ROWS_PER_STATEMENT) {
                let new_rows: Vec<_> = chunk
                    .iter()
                    .map(|&(event_id, hash)| {
                        $crate::inbox::sql::inbox_statements!(
                            @new_row, $schema, $codec, consumer, event_id, when, hash
                        )
                    })
                    .collect();
                diesel::insert_into(t::diesel_inbox_events)
                    .values(new_rows)
                    .on_conflict(diesel::dsl::DuplicatedKeys)
                    .do_update()
                    .set((
                        t::deliveries.eq(t::deliveries + 1),
                        t::last_seen_at.eq(when),
                    ))
                    .execute_on(conn)
                    .await?;
                // The affected-row total cannot say which rows are new, but the rows can:
                // every one is locked by this transaction now, and only a fresh insert has 1
                // delivery.
                let ids: Vec<_> = chunk
                    .iter()
                    .map(|&(event_id, _)| $codec::key(event_id))
                    .collect();
                let read = t::diesel_inbox_events
                    .filter(
                        t::consumer
                            .eq($codec::key(consumer))
                            .and(t::event_id.eq_any(ids)),
                    )
                    .select((t::event_id, inbox_rows::existing_columns()))
                    .load_on::<($codec::KeyOwned, inbox_rows::ExistingColumns)>(conn)
                    .await?;
                found.extend(
                    read.into_iter()
                        .map(|(id, row)| ($codec::key_string(id), inbox_rows::existing(row))),
                );
            }
            $crate::backend::in_order(items, found)
        }

        async fn insert_held_row<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::rows::Key<'_>,
            now: chrono::DateTime<chrono::Utc>,
            state: $crate::state::InboxState,
        ) -> diesel::QueryResult<bool> {
            use diesel::prelude::*;
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            let now = $codec::time(now);
            // A plain insert, as `ON CONFLICT DO NOTHING` elsewhere: a duplicate key fails
            // this statement alone (InnoDB keeps the transaction) and leaves the existing row
            // as it is.
            let inserted = diesel::insert_into(t::diesel_inbox_events)
                .values((
                    t::consumer.eq($codec::key(key.0)),
                    t::event_id.eq($codec::key(key.1)),
                    t::state.eq(state),
                    t::processed_at.eq(now),
                    t::last_seen_at.eq(now),
                    t::deliveries.eq(1),
                ))
                .execute_on(conn)
                .await;
            match inserted {
                Ok(_) => Ok(true),
                Err(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::UniqueViolation,
                    _,
                )) => Ok(false),
                Err(error) => Err(error),
            }
        }

        async fn bump_counter<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            (consumer, event_id): $crate::rows::Key<'_>,
            counter: $crate::state::Counter,
            by: i64,
            now: chrono::DateTime<chrono::Utc>,
        ) -> diesel::QueryResult<()> {
            use $crate::sql::Run;
            let bucket =
                $crate::backend::counter_bucket(now) + $crate::backend::counter_stripe(event_id);
            $crate::inbox::mysql::BumpCounter {
                consumer: $codec::key(consumer),
                counter,
                bucket: $codec::time(bucket),
                by,
            }
            .execute_on(conn)
            .await
            .map(drop)
        }
    };

    // What MySQL's `RecordDelivery` did, from the rows it changed: inserted the row (the event
    // is new), or counted a delivery on the existing one, which the transaction now holds
    // locked and reads, for want of `RETURNING`.
    (@mysql_recorded, $schema:ident, $codec:ident, $conn:ident, $key:ident, $affected:ident) => {{
        use diesel::prelude::*;
        use $crate::sql::Run;
        use $schema::diesel_inbox_events::dsl as t;
        if $affected == $crate::inbox::mysql::INSERTED {
            Ok($crate::rows::Recorded::New)
        } else {
            let row = t::diesel_inbox_events
                .find(($codec::key($key.0), $codec::key($key.1)))
                .select(inbox_rows::existing_columns())
                .limit(1)
                .get_result_on::<inbox_rows::ExistingColumns>($conn)
                .await?;
            Ok($crate::backend::recorded($crate::backend::known(inbox_rows::existing(row))?))
        }
    }};

    // Recording a delivery where the backend has `INSERT .. ON CONFLICT .. RETURNING`
    // (PostgreSQL, SQLite): one statement learns whether the key is new and what the row holds.
    (@record_delivery_upsert, $schema:ident, $codec:ident) => {
        async fn record_delivery<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::rows::Key<'_>,
            now: chrono::DateTime<chrono::Utc>,
            payload_hash: Option<&[u8]>,
        ) -> diesel::QueryResult<$crate::rows::Recorded> {
            let when = $codec::time(now);
            let row = $crate::inbox::sql::inbox_statements!(
                @upsert_delivery, $schema, $codec, conn, key, when, payload_hash
            )
            .await?;
            let row = $crate::backend::known(inbox_rows::existing(row))?;
            Ok($crate::backend::recorded(row))
        }
    };

    (@record_deliveries_upsert, $schema:ident, $codec:ident) => {
        async fn record_deliveries<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            items: &[(&str, Option<&[u8]>)],
            now: chrono::DateTime<chrono::Utc>,
        ) -> diesel::QueryResult<Vec<$crate::rows::Listed<$crate::rows::Recorded>>> {
            use diesel::prelude::*;
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            let when = $codec::time(now);
            let mut found = std::collections::HashMap::with_capacity(items.len());
            for chunk in items.chunks($crate::backend::ROWS_PER_STATEMENT) {
                let rows: Vec<_> = chunk
                    .iter()
                    .map(|&(event_id, hash)| {
                        $crate::inbox::sql::inbox_statements!(
                            @new_row, $schema, $codec, consumer, event_id, when, hash
                        )
                    })
                    .collect();
                // A second inserter of the same key blocks until the first commits (then it
                // updates: a duplicate) or rolls back (then it inserts and runs the effect).
                let returned = diesel::insert_into(t::diesel_inbox_events)
                    .values(rows)
                    .on_conflict((t::consumer, t::event_id))
                    .do_update()
                    .set((
                        t::deliveries.eq(t::deliveries + 1),
                        t::last_seen_at.eq(when),
                    ))
                    .returning((t::event_id, inbox_rows::existing_columns()))
                    .load_on::<(String, inbox_rows::ExistingColumns)>(conn)
                    .await?;
                found.extend(
                    returned
                        .into_iter()
                        .map(|(id, row)| (id, inbox_rows::existing(row))),
                );
            }
            $crate::backend::in_order(items, found)
        }
    };

    (@insert_held_row_on_conflict, $schema:ident, $codec:ident) => {
        async fn insert_held_row<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::rows::Key<'_>,
            now: chrono::DateTime<chrono::Utc>,
            state: $crate::state::InboxState,
        ) -> diesel::QueryResult<bool> {
            use diesel::prelude::*;
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            let when = $codec::time(now);
            diesel::insert_into(t::diesel_inbox_events)
                .values((
                    t::consumer.eq($codec::key(key.0)),
                    t::event_id.eq($codec::key(key.1)),
                    t::state.eq(state),
                    t::processed_at.eq(when),
                    t::last_seen_at.eq(when),
                    t::deliveries.eq(1),
                ))
                .on_conflict_do_nothing()
                .execute_on(conn)
                .await
                .map(|inserted| inserted == 1)
        }
    };

    // Where the backend has `RETURNING`: read back the total, so that Diesel keeps the upsert
    // prepared (see `Cached`).
    (@bump_counter_upsert, $schema:ident, $codec:ident) => {
        async fn bump_counter<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            (consumer, event_id): $crate::rows::Key<'_>,
            counter: $crate::state::Counter,
            by: i64,
            now: chrono::DateTime<chrono::Utc>,
        ) -> diesel::QueryResult<()> {
            use diesel::prelude::*;
            use $crate::sql::Run;
            use $schema::diesel_inbox_counters::dsl as c;
            let bucket =
                $crate::backend::counter_bucket(now) + $crate::backend::counter_stripe(event_id);
            let upsert = diesel::insert_into(c::diesel_inbox_counters)
                .values((
                    c::consumer.eq($codec::key(consumer)),
                    c::counter.eq(counter),
                    c::bucket.eq($codec::time(bucket)),
                    c::total.eq(by),
                ))
                .on_conflict((c::consumer, c::counter, c::bucket))
                .do_update()
                .set(c::total.eq(c::total + by))
                .returning(c::total);
            $crate::sql::Cached(upsert)
                .get_result_on::<i64>(conn)
                .await
                .map(drop)
        }
    };

    // The upsert that records one delivery of `$key` (`(consumer, event_id)`) and reads the
    // row back as it now is: a future of the row's columns on `$conn`. Diesel would prepare
    // the upsert anew each time; `Cached` keeps it prepared.
    (
        @upsert_delivery, $schema:ident, $codec:ident,
        $conn:expr, $key:expr, $when:expr, $hash:expr
    ) => {{
        use diesel::prelude::*;
        use $crate::sql::Run;
        use $schema::diesel_inbox_events::dsl as t;
        let (consumer, event_id) = $key;
        let upsert = diesel::insert_into(t::diesel_inbox_events)
            .values($crate::inbox::sql::inbox_statements!(
                @new_row, $schema, $codec, consumer, event_id, $when, $hash
            ))
            .on_conflict((t::consumer, t::event_id))
            .do_update()
            .set((
                t::deliveries.eq(t::deliveries + 1),
                t::last_seen_at.eq($when),
            ))
            .returning(inbox_rows::existing_columns());
        $crate::sql::Cached(upsert).get_result_on::<inbox_rows::ExistingColumns>($conn)
    }};

    // The values of a fresh inbox row, as every recording statement inserts it: one delivery,
    // processed and last seen `now`, with the payload's fingerprint if any.
    (
        @new_row, $schema:ident, $codec:ident,
        $consumer:expr, $event_id:expr, $now:expr, $hash:expr
    ) => {{
        use $schema::diesel_inbox_events as t;
        (
            t::consumer.eq($codec::key($consumer)),
            t::event_id.eq($codec::key($event_id)),
            t::processed_at.eq($now),
            t::last_seen_at.eq($now),
            t::deliveries.eq(1),
            t::payload_hash.eq($hash),
        )
    }};
}
pub(crate) use inbox_statements;
