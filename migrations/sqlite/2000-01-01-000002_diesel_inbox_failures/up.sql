-- Failed events: one row per (consumer, event id) whose effect failed, counting the attempts.
-- state: 'retrying' -> 'dead_lettered' at max_attempts -> 'redriven' or 'discarded'.
CREATE TABLE IF NOT EXISTS diesel_inbox_failures (
    consumer         TEXT NOT NULL,
    event_id         TEXT NOT NULL,
    state            TEXT NOT NULL,
    attempts         BIGINT NOT NULL,
    last_error       TEXT NOT NULL,
    first_failed_at  TIMESTAMP NOT NULL,
    last_failed_at   TIMESTAMP NOT NULL,
    -- The payload as delivered, byte for byte, and its kind ('json' or 'bytes').
    payload          BLOB,
    payload_kind     TEXT,
    updated_at       TIMESTAMP NOT NULL,
    PRIMARY KEY (consumer, event_id)
) WITHOUT ROWID;

-- Append-only history: every failed attempt and every state transition, with who and why.
CREATE TABLE IF NOT EXISTS diesel_inbox_failure_log (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer  TEXT NOT NULL,
    event_id  TEXT NOT NULL,
    -- 'failed', 'dead_lettered', 'redriven', 'discarded'
    entry     TEXT NOT NULL,
    attempt   BIGINT,
    error     TEXT,
    actor     TEXT,
    reason    TEXT,
    at        TIMESTAMP NOT NULL
);
CREATE INDEX IF NOT EXISTS diesel_inbox_failure_log_event ON diesel_inbox_failure_log (consumer, event_id, id);
