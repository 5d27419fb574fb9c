-- Order per aggregate with concurrent producers. On PostgreSQL an enqueue takes a
-- transaction-scoped advisory lock on its aggregate (pg_advisory_xact_lock, keyed by a hash of
-- the aggregate's type and id) before its outbox row takes a position, so a second producer of
-- the same aggregate waits until the first commits or rolls back. This table is where
-- MySQL/MariaDB hold that lock instead (a row lock, which a Galera cluster certifies too); it
-- stays empty here, and exists so that every backend has the same schema.
CREATE TABLE IF NOT EXISTS diesel_inbox_outbox_aggregates (
    aggregate_type TEXT COLLATE "C" NOT NULL,
    aggregate_id   TEXT COLLATE "C" NOT NULL,
    enqueued_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
CREATE INDEX IF NOT EXISTS diesel_inbox_outbox_aggregates_idle ON diesel_inbox_outbox_aggregates (enqueued_at);
