-- Order per aggregate with concurrent producers. SQLite needs no lock for it: one writer at a
-- time holds the database from its first write to its commit, so outbox rows commit in
-- position order. This table is where MySQL/MariaDB hold a per-aggregate lock instead; it
-- stays empty here, and exists so that every backend has the same schema.
CREATE TABLE IF NOT EXISTS diesel_inbox_outbox_aggregates (
    aggregate_type TEXT NOT NULL,
    aggregate_id   TEXT NOT NULL,
    enqueued_at    TIMESTAMP NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
CREATE INDEX IF NOT EXISTS diesel_inbox_outbox_aggregates_idle ON diesel_inbox_outbox_aggregates (enqueued_at);
