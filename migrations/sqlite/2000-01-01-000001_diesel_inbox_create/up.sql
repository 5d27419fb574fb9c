-- The inbox: one row per (consumer, event id) the consumer has settled.
-- TEXT compares with SQLite's BINARY collation (memcmp); WITHOUT ROWID clusters rows on the key.
-- Times are UTC, as 'YYYY-MM-DD HH:MM:SS.ffffff'.
CREATE TABLE IF NOT EXISTS diesel_inbox_events (
    consumer          TEXT NOT NULL,
    event_id          TEXT NOT NULL,
    -- 'processed', or 'dead_lettered' / 'discarded' when the failure policy gave up on it.
    state             TEXT NOT NULL DEFAULT 'processed',
    processed_at      TIMESTAMP NOT NULL,
    last_seen_at      TIMESTAMP NOT NULL,
    deliveries        BIGINT NOT NULL DEFAULT 1 CHECK (deliveries >= 1),
    -- SHA-256 of the first delivery's payload, when one was given.
    payload_hash      BLOB,
    -- Deliveries that reused this id with a different payload.
    payload_conflicts BIGINT NOT NULL DEFAULT 0,
    -- The effect's return value as JSON, when result storage is on.
    result            TEXT,
    PRIMARY KEY (consumer, event_id)
) WITHOUT ROWID;
