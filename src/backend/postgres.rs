//! PostgreSQL: `INSERT .. ON CONFLICT DO UPDATE .. RETURNING`, one round trip per delivery.

use chrono::{DateTime, Utc};
use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::prelude::*;

use super::sealed::{Existing, FailureRow, HasBackend, InboxBackend, LogRow, Recorded};
use super::Key;
use crate::error::MigrationError;

inbox_tables!(key = Text, time = Timestamptz);
failure_columns!();

type Time = DateTime<Utc>;
type KeyOwned = String;

fn ts(time: DateTime<Utc>) -> Time {
    time
}

fn utc(time: Time) -> DateTime<Utc> {
    time
}

fn k(part: &str) -> &str {
    part
}

fn key_string(key: KeyOwned) -> String {
    key
}

impl HasBackend for PgConnection {
    type Sql = Self;

    fn backend(&mut self) -> &mut Self {
        self
    }
}

impl InboxBackend for PgConnection {
    fn record_delivery(
        &mut self,
        key: Key<'_>,
        now: DateTime<Utc>,
        payload_hash: Option<&[u8]>,
    ) -> QueryResult<Recorded> {
        use inbox::dsl as t;
        // A second inserter of the same key blocks until the first commits (then it updates,
        // a duplicate) or rolls back (then it inserts, and runs the effect itself).
        let (processed_at, deliveries, state, payload_hash, result) = diesel::insert_into(t::inbox)
            .values((
                t::consumer.eq(key.0),
                t::event_id.eq(key.1),
                t::processed_at.eq(now),
                t::last_seen_at.eq(now),
                t::deliveries.eq(1),
                t::payload_hash.eq(payload_hash),
            ))
            .on_conflict((t::consumer, t::event_id))
            .do_update()
            .set((t::deliveries.eq(t::deliveries + 1), t::last_seen_at.eq(now)))
            .returning((
                t::processed_at,
                t::deliveries,
                t::state,
                t::payload_hash,
                t::result,
            ))
            .get_result(self)?;
        Ok(super::recorded(Existing {
            processed_at,
            deliveries,
            state,
            payload_hash,
            result,
        }))
    }

    fn transaction_is_alive(&mut self) -> QueryResult<bool> {
        // In an aborted transaction PostgreSQL refuses every statement, while COMMIT "succeeds"
        // as a silent ROLLBACK; one simple-protocol round trip tells the two apart.
        self.batch_execute("SELECT 1").map(|()| true)
    }

    fn is_contention(error: &diesel::result::Error) -> bool {
        // 40001 arrives as SerializationFailure; 40P01 and 55P03 only as their messages.
        super::message_names_contention(error, &["deadlock detected", "due to lock timeout"])
    }

    fn apply_migrations(&mut self) -> Result<usize, MigrationError> {
        crate::migrations::apply(self, crate::migrations::POSTGRES)
    }

    fn settle(&mut self, key: Key<'_>, now: DateTime<Utc>, state: &str) -> QueryResult<bool> {
        use inbox::dsl as t;
        diesel::insert_into(t::inbox)
            .values((
                t::consumer.eq(key.0),
                t::event_id.eq(key.1),
                t::state.eq(state),
                t::processed_at.eq(now),
                t::last_seen_at.eq(now),
                t::deliveries.eq(1),
            ))
            .on_conflict_do_nothing()
            .execute(self)
            .map(|inserted| inserted == 1)
    }

    portable_statements!(
        failures_conflict = (failures::consumer, failures::event_id),
        lock = for_update
    );
}
