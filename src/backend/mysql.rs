//! MySQL and MariaDB (InnoDB): `INSERT .. ON DUPLICATE KEY UPDATE`, never `INSERT IGNORE`,
//! which would also hide truncation and conversion errors.

use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, NaiveDateTime, Utc};
use diesel::mysql::MysqlConnection;
use diesel::prelude::*;
use diesel::result::DatabaseErrorKind;
use diesel::sql_types::BigInt;

use super::sealed::{Existing, FailureRow, HasBackend, InboxBackend, LogRow, Recorded};
use super::Key;
use crate::error::MigrationError;

inbox_tables!(key = Binary, time = Datetime);
row_mappings!();

type Time = NaiveDateTime;
type KeyOwned = Vec<u8>;

fn ts(time: DateTime<Utc>) -> Time {
    time.naive_utc()
}

fn utc(time: Time) -> DateTime<Utc> {
    time.and_utc()
}

/// Keys are VARBINARY: bound as bytes, so no collation or charset conversion touches them.
fn k(part: &str) -> &[u8] {
    part.as_bytes()
}

fn key_string(key: KeyOwned) -> String {
    // Only ever written from validated `&str`s.
    String::from_utf8(key).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

impl HasBackend for MysqlConnection {
    type Sql = Self;

    fn backend(&mut self) -> &mut Self {
        self
    }
}

/// `INSERT .. ON DUPLICATE KEY UPDATE deliveries = deliveries + 1` reports 1 affected row for an
/// insert and 2 for an update that changed the row (the update always changes `deliveries`),
/// with or without the client's found-rows flag.
const INSERTED: usize = 1;

/// Whether the server has MariaDB's `@@in_transaction`; cleared at the first server without.
static HAS_IN_TRANSACTION: AtomicBool = AtomicBool::new(true);

impl InboxBackend for MysqlConnection {
    const STATEMENT_ERRORS_CAN_END_TRANSACTION: bool = true;
    const CONTENTION_ENDS_TRANSACTION: bool = true;

    fn record_delivery(
        &mut self,
        key: Key<'_>,
        now: DateTime<Utc>,
        payload_hash: Option<&[u8]>,
    ) -> QueryResult<Recorded> {
        use inbox::dsl as t;
        let now = ts(now);
        let affected = diesel::insert_into(t::inbox)
            .values(new_inbox_row!(key.0, key.1, now, payload_hash))
            .on_conflict(diesel::dsl::DuplicatedKeys)
            .do_update()
            .set((t::deliveries.eq(t::deliveries + 1), t::last_seen_at.eq(now)))
            .execute(self)?;
        if affected == INSERTED {
            return Ok(Recorded::New);
        }
        // No RETURNING on MySQL: read the row this transaction now holds locked.
        let row = t::inbox
            .find((k(key.0), k(key.1)))
            .select(existing_columns())
            .first::<ExistingColumns>(self)?;
        Ok(super::recorded(existing(row)))
    }

    fn record_deliveries(
        &mut self,
        consumer: &str,
        items: &[(&str, Option<&[u8]>)],
        now: DateTime<Utc>,
    ) -> QueryResult<Vec<Recorded>> {
        use inbox::dsl as t;
        let when = ts(now);
        let mut found = std::collections::HashMap::with_capacity(items.len());
        for chunk in items.chunks(super::ROWS_PER_STATEMENT) {
            let rows: Vec<_> = chunk
                .iter()
                .map(|&(event_id, hash)| new_inbox_row!(consumer, event_id, when, hash))
                .collect();
            diesel::insert_into(t::inbox)
                .values(rows)
                .on_conflict(diesel::dsl::DuplicatedKeys)
                .do_update()
                .set((
                    t::deliveries.eq(t::deliveries + 1),
                    t::last_seen_at.eq(when),
                ))
                .execute(self)?;
            // The affected-row total cannot say which rows are new, but the rows can: every
            // one is locked by this transaction now, and only a fresh insert has 1 delivery.
            let ids: Vec<&[u8]> = chunk.iter().map(|&(event_id, _)| k(event_id)).collect();
            let rows = t::inbox
                .filter(t::consumer.eq(k(consumer)).and(t::event_id.eq_any(ids)))
                .select((t::event_id, existing_columns()))
                .load::<(KeyOwned, ExistingColumns)>(self)?;
            found.extend(
                rows.into_iter()
                    .map(|(id, row)| (key_string(id), existing(row))),
            );
        }
        super::in_order(items, found)
    }

    fn transaction_is_alive(&mut self) -> QueryResult<bool> {
        // A deadlock rolls back the whole transaction; later statements then autocommit one by
        // one and COMMIT succeeds on nothing. MariaDB's session variable tells; Oracle MySQL
        // has none, so there the check is skipped (once told so, for the whole process).
        if !HAS_IN_TRANSACTION.load(Ordering::Relaxed) {
            return Ok(true);
        }
        match diesel::select(diesel::dsl::sql::<BigInt>("@@in_transaction")).get_result::<i64>(self)
        {
            Ok(in_transaction) => Ok(in_transaction == 1),
            Err(diesel::result::Error::DatabaseError(_, info))
                if info.message().contains("Unknown system variable") =>
            {
                HAS_IN_TRANSACTION.store(false, Ordering::Relaxed);
                tracing::warn!("this server has no @@in_transaction (MySQL, not MariaDB): the inbox cannot tell when a deadlock the handler swallowed ended its transaction");
                Ok(true)
            }
            Err(error) => Err(error),
        }
    }

    fn is_contention(error: &diesel::result::Error) -> bool {
        // 1213 (deadlock) arrives as SerializationFailure from prepared statements but only as
        // its message from simple ones (COMMIT among them); 1205 only as its message.
        super::message_names_contention(error, &["Deadlock found", "Lock wait timeout exceeded"])
    }

    fn apply_migrations(&mut self) -> Result<usize, MigrationError> {
        crate::migrations::apply(self, crate::migrations::MYSQL)
    }

    fn settle(&mut self, key: Key<'_>, now: DateTime<Utc>, state: &str) -> QueryResult<bool> {
        use inbox::dsl as t;
        let now = ts(now);
        // A plain insert, as `ON CONFLICT DO NOTHING` elsewhere: a duplicate key fails this
        // statement alone (InnoDB keeps the transaction) and leaves the existing row as it is.
        let inserted = diesel::insert_into(t::inbox)
            .values((
                t::consumer.eq(k(key.0)),
                t::event_id.eq(k(key.1)),
                t::state.eq(state),
                t::processed_at.eq(now),
                t::last_seen_at.eq(now),
                t::deliveries.eq(1),
            ))
            .execute(self);
        match inserted {
            Ok(_) => Ok(true),
            Err(diesel::result::Error::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    portable_statements!(
        failures_conflict = diesel::dsl::DuplicatedKeys,
        lock = for_update
    );
}
