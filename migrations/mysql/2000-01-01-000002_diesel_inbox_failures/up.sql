-- Failed events: one row per (consumer, event id) whose effect failed, counting the attempts.
-- state: 'retrying' -> 'dead_lettered' at max_attempts -> 'redriven' or 'discarded'.
CREATE TABLE IF NOT EXISTS diesel_inbox_failures (
    consumer         VARBINARY(128) NOT NULL,
    event_id         VARBINARY(255) NOT NULL,
    state            VARCHAR(16) CHARACTER SET ascii NOT NULL,
    attempts         BIGINT NOT NULL,
    last_error       TEXT CHARACTER SET utf8mb4 NOT NULL,
    first_failed_at  DATETIME(6) NOT NULL,
    last_failed_at   DATETIME(6) NOT NULL,
    -- The payload as delivered, byte for byte, and its kind ('json' or 'bytes').
    payload          LONGBLOB,
    payload_kind     VARCHAR(8) CHARACTER SET ascii,
    updated_at       DATETIME(6) NOT NULL,
    PRIMARY KEY (consumer, event_id)
) ENGINE = InnoDB;

-- Append-only history: every failed attempt and every state transition, with who and why.
CREATE TABLE IF NOT EXISTS diesel_inbox_failure_log (
    id        BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer  VARBINARY(128) NOT NULL,
    event_id  VARBINARY(255) NOT NULL,
    -- 'failed', 'dead_lettered', 'redriven', 'discarded'
    entry     VARCHAR(16) CHARACTER SET ascii NOT NULL,
    attempt   BIGINT,
    error     TEXT CHARACTER SET utf8mb4,
    actor     VARCHAR(255) CHARACTER SET utf8mb4,
    reason    TEXT CHARACTER SET utf8mb4,
    at        DATETIME(6) NOT NULL,
    KEY diesel_inbox_failure_log_event (consumer, event_id, id)
) ENGINE = InnoDB;
