-- The inbox: one row per (consumer, event id) that has taken effect.
-- COLLATE "C" makes equality and ordering byte for byte, whatever the database's default collation.
CREATE TABLE IF NOT EXISTS diesel_inbox (
    consumer     TEXT COLLATE "C" NOT NULL,
    event_id     TEXT COLLATE "C" NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL,
    last_seen_at TIMESTAMPTZ NOT NULL,
    deliveries   BIGINT NOT NULL DEFAULT 1 CHECK (deliveries >= 1),
    PRIMARY KEY (consumer, event_id)
);
