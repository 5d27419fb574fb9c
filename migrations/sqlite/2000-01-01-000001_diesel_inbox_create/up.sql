-- The inbox: one row per (consumer, event id) that has taken effect.
-- TEXT compares with SQLite's BINARY collation (memcmp); WITHOUT ROWID clusters rows on the key.
-- Times are UTC, as 'YYYY-MM-DD HH:MM:SS.ffffff'.
CREATE TABLE IF NOT EXISTS diesel_inbox (
    consumer     TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    processed_at TIMESTAMP NOT NULL,
    last_seen_at TIMESTAMP NOT NULL,
    deliveries   BIGINT NOT NULL DEFAULT 1 CHECK (deliveries >= 1),
    PRIMARY KEY (consumer, event_id)
) WITHOUT ROWID;
