-- The inbox: one row per (consumer, event id) the consumer has settled.
-- COLLATE "C" makes equality and ordering byte for byte, whatever the database's default collation.
CREATE TABLE IF NOT EXISTS diesel_inbox_events (
    consumer          TEXT COLLATE "C" NOT NULL,
    event_id          TEXT COLLATE "C" NOT NULL,
    -- 'processed', or 'dead_lettered' / 'discarded' when the failure policy gave up on it.
    state             TEXT NOT NULL DEFAULT 'processed',
    processed_at      TIMESTAMPTZ NOT NULL,
    last_seen_at      TIMESTAMPTZ NOT NULL,
    deliveries        BIGINT NOT NULL DEFAULT 1 CHECK (deliveries >= 1),
    -- SHA-256 of the first delivery's payload, when one was given.
    payload_hash      BYTEA,
    -- Deliveries that reused this id with a different payload.
    payload_conflicts BIGINT NOT NULL DEFAULT 0,
    -- The effect's return value as JSON, when result storage is on.
    result            TEXT,
    PRIMARY KEY (consumer, event_id)
);
