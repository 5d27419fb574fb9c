-- Failed events: one row per (consumer, event id) whose effect failed, counting the attempts.
-- state: 'retrying' -> 'dead_lettered' at max_attempts -> 'redriven' or 'discarded'.
CREATE TABLE IF NOT EXISTS diesel_inbox_failures (
    consumer         TEXT COLLATE "C" NOT NULL,
    event_id         TEXT COLLATE "C" NOT NULL,
    state            TEXT NOT NULL,
    attempts         BIGINT NOT NULL,
    last_error       TEXT NOT NULL,
    first_failed_at  TIMESTAMPTZ NOT NULL,
    last_failed_at   TIMESTAMPTZ NOT NULL,
    -- The payload as delivered, byte for byte, and its kind ('json' or 'bytes').
    payload          BYTEA,
    payload_kind     TEXT,
    updated_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (consumer, event_id)
);

-- Append-only history: every failed attempt and every state transition, with who and why.
CREATE TABLE IF NOT EXISTS diesel_inbox_failure_log (
    id        BIGSERIAL PRIMARY KEY,
    consumer  TEXT COLLATE "C" NOT NULL,
    event_id  TEXT COLLATE "C" NOT NULL,
    -- 'failed', 'dead_lettered', 'redriven', 'discarded'
    entry     TEXT NOT NULL,
    attempt   BIGINT,
    error     TEXT,
    actor     TEXT,
    reason    TEXT,
    at        TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS diesel_inbox_failure_log_event ON diesel_inbox_failure_log (consumer, event_id, id);
