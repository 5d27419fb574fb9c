-- The inbox: one row per (consumer, event id) the consumer has settled.
-- VARBINARY keys compare byte for byte: no collation folds case, accents or trailing spaces.
-- Times are UTC.
CREATE TABLE IF NOT EXISTS diesel_inbox_events (
    consumer          VARBINARY(128) NOT NULL,
    event_id          VARBINARY(255) NOT NULL,
    -- 'processed', or 'dead_lettered' / 'discarded' when the failure policy gave up on it.
    state             VARCHAR(16) CHARACTER SET ascii NOT NULL DEFAULT 'processed',
    processed_at      DATETIME(6) NOT NULL,
    last_seen_at      DATETIME(6) NOT NULL,
    deliveries        BIGINT NOT NULL DEFAULT 1,
    -- SHA-256 of the first delivery's payload, when one was given.
    payload_hash      VARBINARY(32),
    -- Deliveries that reused this id with a different payload.
    payload_conflicts BIGINT NOT NULL DEFAULT 0,
    -- The effect's return value as JSON, when result storage is on.
    result            LONGTEXT CHARACTER SET utf8mb4,
    PRIMARY KEY (consumer, event_id)
) ENGINE = InnoDB;
