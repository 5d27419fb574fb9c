-- The inbox: one row per (consumer, event id) that has taken effect.
-- VARBINARY keys compare byte for byte: no collation folds case, accents or trailing spaces.
-- Times are UTC.
CREATE TABLE IF NOT EXISTS diesel_inbox (
    consumer     VARBINARY(128) NOT NULL,
    event_id     VARBINARY(255) NOT NULL,
    processed_at DATETIME(6) NOT NULL,
    last_seen_at DATETIME(6) NOT NULL,
    deliveries   BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (consumer, event_id)
) ENGINE = InnoDB;
