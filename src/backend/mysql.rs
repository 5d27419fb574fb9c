//! MySQL and MariaDB (InnoDB): `INSERT .. ON DUPLICATE KEY UPDATE`, never `INSERT IGNORE`,
//! which would also hide truncation and conversion errors.

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::mysql::MysqlConnection;
use diesel::prelude::*;
use diesel::sql_types::BigInt;

use super::sealed::{InboxBackend, Recorded};
use crate::error::MigrationError;

diesel::table! {
    #[sql_name = "diesel_inbox"]
    inbox (consumer, event_id) {
        consumer -> Binary,
        event_id -> Binary,
        processed_at -> Datetime,
        last_seen_at -> Datetime,
        deliveries -> BigInt,
    }
}

impl InboxBackend for MysqlConnection {
    fn record_delivery(
        &mut self,
        consumer: &str,
        event_id: &str,
        now: DateTime<Utc>,
    ) -> QueryResult<Recorded> {
        use inbox::dsl as t;
        let key = (consumer.as_bytes(), event_id.as_bytes());
        let now = now.naive_utc();
        // Affected rows: 1 for an insert, 2 for an update that changed the row (and the update
        // always changes `deliveries`), whether or not the client asked for found rows.
        let affected = diesel::insert_into(t::inbox)
            .values((
                t::consumer.eq(key.0),
                t::event_id.eq(key.1),
                t::processed_at.eq(now),
                t::last_seen_at.eq(now),
                t::deliveries.eq(1),
            ))
            .on_conflict(diesel::dsl::DuplicatedKeys)
            .do_update()
            .set((t::deliveries.eq(t::deliveries + 1), t::last_seen_at.eq(now)))
            .execute(self)?;
        if affected == 1 {
            return Ok(Recorded::New);
        }
        // No RETURNING on MySQL: read the row this transaction now holds locked.
        let (processed_at, deliveries) = t::inbox
            .find(key)
            .select((t::processed_at, t::deliveries))
            .first::<(NaiveDateTime, i64)>(self)?;
        Ok(super::recorded(super::utc(processed_at), deliveries))
    }

    fn transaction_is_alive(&mut self) -> QueryResult<bool> {
        // A deadlock rolls back the whole transaction; later statements then autocommit one by
        // one and COMMIT succeeds on nothing. The session variable tells.
        diesel::select(diesel::dsl::sql::<BigInt>("@@in_transaction"))
            .get_result::<i64>(self)
            .map(|in_transaction| in_transaction == 1)
    }

    fn is_contention(error: &diesel::result::Error) -> bool {
        // 1213 (deadlock) arrives as SerializationFailure; 1205 only as its message.
        super::message_names_contention(error, &["Lock wait timeout exceeded"])
    }

    fn apply_migrations(&mut self) -> Result<usize, MigrationError> {
        crate::migrations::apply(self, crate::migrations::MYSQL)
    }
}
