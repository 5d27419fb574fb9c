//! Every table, column and index that the inbox migrations create: the one list that the
//! doctor checks, and that a unit test holds against the migrations' SQL in every dialect, so
//! the two cannot drift apart.
//!
//! Adding a migration: list its tables (with every column) in [`TABLES`] and its indexes in
//! [`INDEXES`], naming the migration; the test `the_object_list_is_what_the_migrations_create`
//! fails until the list and the SQL agree. Imports nothing of the crate's.

/// A table a migration creates, with every column it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Table {
    /// Its name.
    pub(crate) name: &'static str,
    /// The doctor's name for its check: `table <name>`.
    pub(crate) check: &'static str,
    /// The migration that creates it, by name (`diesel_inbox_create`).
    pub(crate) migration: &'static str,
    /// Its columns, in order.
    pub(crate) columns: &'static [&'static str],
}

/// An index a migration creates, by `CREATE INDEX`, inside `CREATE TABLE` (MySQL), or as a
/// unique constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Index {
    /// Its name.
    pub(crate) name: &'static str,
    /// The doctor's name for its check: `index <name>`.
    pub(crate) check: &'static str,
    /// The table it indexes.
    pub(crate) table: &'static str,
    /// The columns it indexes, in order.
    pub(crate) columns: &'static [&'static str],
    /// Whether it is unique (a unique constraint).
    pub(crate) unique: bool,
    /// The migration that creates it, by name.
    pub(crate) migration: &'static str,
}

impl Index {
    /// The statement that creates it again, the same on PostgreSQL, SQLite and MariaDB (Oracle
    /// MySQL 8 has no `IF NOT EXISTS` on an index: drop those words there).
    pub(crate) fn create_statement(&self) -> String {
        format!(
            "CREATE {}INDEX IF NOT EXISTS {} ON {} ({})",
            if self.unique { "UNIQUE " } else { "" },
            self.name,
            self.table,
            self.columns.join(", ")
        )
    }
}

macro_rules! table {
    ($migration:literal, $name:literal, [$($column:literal),+ $(,)?]) => {
        Table {
            name: $name,
            check: concat!("table ", $name),
            migration: $migration,
            columns: &[$($column),+],
        }
    };
}

macro_rules! index {
    ($migration:literal, $name:literal ON $table:literal [$($column:literal),+] $(, $unique:ident)?) => {
        Index {
            name: $name,
            check: concat!("index ", $name),
            table: $table,
            columns: &[$($column),+],
            unique: index!(@unique $($unique)?),
            migration: $migration,
        }
    };
    (@unique) => { false };
    (@unique unique) => { true };
}

/// The tables, in the order the migrations create them.
pub(crate) const TABLES: &[Table] = &[
    table!(
        "diesel_inbox_create",
        "diesel_inbox_events",
        [
            "consumer",
            "event_id",
            "state",
            "processed_at",
            "last_seen_at",
            "deliveries",
            "payload_hash",
            "payload_conflicts",
            "result",
        ]
    ),
    table!(
        "diesel_inbox_failures",
        "diesel_inbox_failures",
        [
            "consumer",
            "event_id",
            "state",
            "attempts",
            "last_error",
            "first_failed_at",
            "last_failed_at",
            "payload",
            "payload_kind",
            "updated_at",
        ]
    ),
    table!(
        "diesel_inbox_failures",
        "diesel_inbox_failure_log",
        ["id", "consumer", "event_id", "entry", "attempt", "error", "actor", "reason", "at",]
    ),
    table!(
        "diesel_inbox_operations",
        "diesel_inbox_counters",
        ["consumer", "counter", "bucket", "total",]
    ),
    table!(
        "diesel_inbox_cursors",
        "diesel_inbox_cursors",
        [
            "consumer",
            "stream",
            "watermark",
            "high",
            "epoch",
            "owner",
            "updated_at",
        ]
    ),
    table!(
        "diesel_inbox_cursors",
        "diesel_inbox_gaps",
        [
            "id",
            "consumer",
            "stream",
            "first_sequence",
            "last_sequence",
            "cause",
            "state",
            "detected_at",
            "closed_at",
            "resolved_by",
            "resolution",
        ]
    ),
    table!(
        "diesel_inbox_cursors",
        "diesel_inbox_event_sequences",
        ["consumer", "stream", "sequence", "event_id",]
    ),
    table!(
        "diesel_inbox_claims",
        "diesel_inbox_claims",
        [
            "consumer",
            "event_id",
            "state",
            "attempt",
            "deliveries",
            "lease_until",
            "claimed_at",
            "updated_at",
            "completed_at",
            "payload_hash",
            "payload",
            "payload_kind",
            "result",
            "last_error",
            "resolved_by",
            "resolution",
        ]
    ),
    table!(
        "diesel_inbox_outbox",
        "diesel_inbox_outbox",
        [
            "position",
            "event_id",
            "topic",
            "aggregate_type",
            "aggregate_id",
            "event_type",
            "headers",
            "body",
            "state",
            "attempts",
            "available_at",
            "lease_token",
            "lease_until",
            "last_error",
            "enqueued_at",
            "published_at",
        ]
    ),
    table!(
        "diesel_inbox_outbox_order",
        "diesel_inbox_outbox_aggregates",
        ["aggregate_type", "aggregate_id", "enqueued_at"]
    ),
    table!(
        "diesel_inbox_chains",
        "diesel_inbox_blocks",
        [
            "consumer",
            "stream",
            "height",
            "hash",
            "parent_hash",
            "processed_at"
        ]
    ),
    table!(
        "diesel_inbox_chains",
        "diesel_inbox_block_events",
        ["consumer", "stream", "height", "position", "event_id"]
    ),
    table!(
        "diesel_inbox_chains",
        "diesel_inbox_reorgs",
        [
            "id",
            "consumer",
            "stream",
            "ancestor_height",
            "old_head_height",
            "old_head_hash",
            "new_head_height",
            "new_head_hash",
            "events_reverted",
            "events_reapplied",
            "happened_at",
        ]
    ),
    table!(
        "diesel_inbox_chains",
        "diesel_inbox_orphaned_effects",
        [
            "reorg_id",
            "consumer",
            "event_id",
            "stream",
            "height",
            "block_hash",
            "claim_state",
            "found_at",
        ]
    ),
    table!(
        "diesel_inbox_replays",
        "diesel_inbox_replays",
        [
            "id",
            "consumer",
            "source",
            "range_first",
            "range_last",
            "plan",
            "reason",
            "requested_by",
            "state",
            "checkpoint",
            "counts",
            "digest",
            "fence",
            "lease_until",
            "evidence",
            "updated_at",
        ]
    ),
    table!(
        "diesel_inbox_replays",
        "diesel_inbox_replay_transitions",
        [
            "id",
            "replay_id",
            "from_state",
            "to_state",
            "actor",
            "reason",
            "at"
        ]
    ),
    table!(
        "diesel_inbox_replays",
        "diesel_inbox_replay_notes",
        ["replay_id", "position", "kind", "event_id", "detail"]
    ),
    table!(
        "diesel_inbox_leases",
        "diesel_inbox_leases",
        ["name", "holder", "held_until"]
    ),
    table!(
        "diesel_inbox_reverted_events",
        "diesel_inbox_reverted_events",
        ["consumer", "event_id", "reorg_id"]
    ),
];

/// The named indexes (primary keys are part of their tables), in the order the migrations
/// create them.
pub(crate) const INDEXES: &[Index] = &[
    index!("diesel_inbox_failures", "diesel_inbox_failure_log_event" ON "diesel_inbox_failure_log" ["consumer", "event_id", "id"]),
    index!("diesel_inbox_operations", "diesel_inbox_events_settled" ON "diesel_inbox_events" ["consumer", "state", "processed_at", "event_id"]),
    index!("diesel_inbox_operations", "diesel_inbox_failures_state" ON "diesel_inbox_failures" ["consumer", "state", "first_failed_at"]),
    index!("diesel_inbox_cursors", "diesel_inbox_gaps_open" ON "diesel_inbox_gaps" ["consumer", "stream", "state", "first_sequence"]),
    index!("diesel_inbox_claims", "diesel_inbox_claims_open" ON "diesel_inbox_claims" ["consumer", "state", "lease_until"]),
    index!("diesel_inbox_outbox", "diesel_inbox_outbox_event" ON "diesel_inbox_outbox" ["event_id"], unique),
    index!("diesel_inbox_outbox", "diesel_inbox_outbox_state" ON "diesel_inbox_outbox" ["state", "position"]),
    index!("diesel_inbox_outbox", "diesel_inbox_outbox_aggregate" ON "diesel_inbox_outbox" ["aggregate_type", "aggregate_id", "state", "position"]),
    index!("diesel_inbox_outbox", "diesel_inbox_outbox_published" ON "diesel_inbox_outbox" ["state", "published_at"]),
    index!("diesel_inbox_outbox_order", "diesel_inbox_outbox_aggregates_idle" ON "diesel_inbox_outbox_aggregates" ["enqueued_at"]),
    index!("diesel_inbox_chains", "diesel_inbox_reorgs_stream" ON "diesel_inbox_reorgs" ["consumer", "stream", "id"]),
    index!("diesel_inbox_replays", "diesel_inbox_replays_state" ON "diesel_inbox_replays" ["state", "updated_at"]),
    index!("diesel_inbox_replays", "diesel_inbox_replay_transitions_replay" ON "diesel_inbox_replay_transitions" ["replay_id", "id"]),
];
