//! PostgreSQL: `INSERT .. ON CONFLICT DO UPDATE .. RETURNING`, one round trip per delivery.

use chrono::{DateTime, Utc};
use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::prelude::*;

use super::sealed::{InboxBackend, Recorded};
use crate::error::MigrationError;

diesel::table! {
    #[sql_name = "diesel_inbox"]
    inbox (consumer, event_id) {
        consumer -> Text,
        event_id -> Text,
        processed_at -> Timestamptz,
        last_seen_at -> Timestamptz,
        deliveries -> BigInt,
    }
}

impl InboxBackend for PgConnection {
    fn record_delivery(
        &mut self,
        consumer: &str,
        event_id: &str,
        now: DateTime<Utc>,
    ) -> QueryResult<Recorded> {
        use inbox::dsl as t;
        // A second inserter of the same key blocks until the first commits (then it updates,
        // a duplicate) or rolls back (then it inserts, and runs the effect itself).
        let (processed_at, deliveries) = diesel::insert_into(t::inbox)
            .values((
                t::consumer.eq(consumer),
                t::event_id.eq(event_id),
                t::processed_at.eq(now),
                t::last_seen_at.eq(now),
                t::deliveries.eq(1),
            ))
            .on_conflict((t::consumer, t::event_id))
            .do_update()
            .set((t::deliveries.eq(t::deliveries + 1), t::last_seen_at.eq(now)))
            .returning((t::processed_at, t::deliveries))
            .get_result::<(DateTime<Utc>, i64)>(self)?;
        Ok(super::recorded(processed_at, deliveries))
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
}
