//! PostgreSQL: `INSERT .. ON CONFLICT DO UPDATE .. RETURNING`, one round trip per delivery.

use chrono::{DateTime, Utc};
use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::prelude::*;

use super::sealed::{Existing, FailureRow, HasBackend, InboxBackend, LogRow, Recorded};
use crate::error::MigrationError;

inbox_tables!(key = Text, time = Timestamptz);
row_mappings!();

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
    const STATEMENT_ERRORS_CAN_END_TRANSACTION: bool = false;
    const CONTENTION_ENDS_TRANSACTION: bool = false;

    upsert_returning!();

    fn commit_without_waiting_for_disk(&mut self) -> QueryResult<()> {
        // One round trip saves the WAL flush at commit, which costs several.
        self.batch_execute("SET LOCAL synchronous_commit = off")
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

    portable_statements!(
        failures_conflict = (failures::consumer, failures::event_id),
        lock = for_update
    );
}
