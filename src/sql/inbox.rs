//! The inbox area's statements: the row an event's deliveries are recorded on, its state, its
//! stored result, and the hourly counters the deliveries add to.
//!
//! Implemented for each backend in its file under `backend/`; the bodies shared by all three
//! are `backend/inbox.rs`, and MySQL's own (no `RETURNING`) are in `backend/mysql.rs`.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use super::{Db, TransactionSql};
use crate::rows::{InboxRow, Key, Listed, Recorded};
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
