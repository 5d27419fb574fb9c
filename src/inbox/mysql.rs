//! MySQL's own statements for recording a delivery and counting it: the upserts Diesel's builder
//! makes, written out, since Diesel prepares a built upsert anew each time (a round trip more)
//! and keeps these prepared.

use chrono::{DateTime, Utc};
use diesel::mysql::Mysql;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Binary, Datetime, Nullable, Text};

use crate::backend::mysql::codec;
use crate::rows::Key;
use crate::state::Counter;

/// `INSERT .. ON DUPLICATE KEY UPDATE deliveries = deliveries + 1` reports 1 affected row for an
/// insert and 2 for an update that changed the row (the update always changes `deliveries`),
/// with or without the client's found-rows flag.
pub(crate) const INSERTED: usize = 1;

/// Inserts an inbox row, or counts one more delivery on the existing one: the statement
/// Diesel's upsert builder makes, written out, since Diesel prepares a built upsert anew each
/// time, a round trip more, and keeps this one.
pub(crate) struct RecordDelivery<'a> {
    consumer: &'a [u8],
    event_id: &'a [u8],
    now: codec::Time,
    payload_hash: Option<&'a [u8]>,
}

impl QueryFragment<Mysql> for RecordDelivery<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
        out.push_sql(
            "INSERT INTO diesel_inbox_events \
             (consumer, event_id, processed_at, last_seen_at, deliveries, payload_hash) VALUES (",
        );
        out.push_bind_param::<Binary, _>(&self.consumer)?;
        out.push_sql(", ");
        out.push_bind_param::<Binary, _>(&self.event_id)?;
        out.push_sql(", ");
        out.push_bind_param::<Datetime, _>(&self.now)?;
        out.push_sql(", ");
        out.push_bind_param::<Datetime, _>(&self.now)?;
        out.push_sql(", 1, ");
        out.push_bind_param::<Nullable<Binary>, _>(&self.payload_hash)?;
        out.push_sql(") ON DUPLICATE KEY UPDATE deliveries = deliveries + 1, last_seen_at = ");
        out.push_bind_param::<Datetime, _>(&self.now)
    }
}

impl<'a> RecordDelivery<'a> {
    pub(crate) fn new(key: Key<'a>, now: DateTime<Utc>, payload_hash: Option<&'a [u8]>) -> Self {
        Self {
            consumer: codec::key(key.0),
            event_id: codec::key(key.1),
            now: codec::time(now),
            payload_hash,
        }
    }
}

impl QueryId for RecordDelivery<'_> {
    type QueryId = RecordDelivery<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> RunQueryDsl<Conn> for RecordDelivery<'_> {}

/// Adds to a counter row, or inserts it: written out for the same reason as `RecordDelivery`.
pub(crate) struct BumpCounter<'a> {
    pub(crate) consumer: &'a [u8],
    pub(crate) counter: Counter,
    pub(crate) bucket: codec::Time,
    pub(crate) by: i64,
}

impl QueryFragment<Mysql> for BumpCounter<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
        out.push_sql(
            "INSERT INTO diesel_inbox_counters (consumer, counter, bucket, total) VALUES (",
        );
        out.push_bind_param::<Binary, _>(&self.consumer)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&self.counter)?;
        out.push_sql(", ");
        out.push_bind_param::<Datetime, _>(&self.bucket)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&self.by)?;
        out.push_sql(") ON DUPLICATE KEY UPDATE total = total + ");
        out.push_bind_param::<BigInt, _>(&self.by)
    }
}

impl QueryId for BumpCounter<'_> {
    type QueryId = BumpCounter<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> RunQueryDsl<Conn> for BumpCounter<'_> {}
