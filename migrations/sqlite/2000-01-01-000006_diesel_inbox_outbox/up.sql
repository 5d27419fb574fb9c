-- The transactional outbox: events enqueued in the business transaction, published after it
-- commits by a relay. position is enqueue order, and so publish order per aggregate. state:
-- 'pending' -> 'published', or 'failed' (kept, with its reason, until ops retry it). A
-- pending row is due at available_at (the relay's backoff) and taken while lease_until lasts
-- by the relay holding lease_token. headers: the message headers as a JSON object.
CREATE TABLE IF NOT EXISTS diesel_inbox_outbox (
    position       INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id       TEXT NOT NULL,
    topic          TEXT NOT NULL,
    aggregate_type TEXT NOT NULL,
    aggregate_id   TEXT NOT NULL,
    event_type     TEXT NOT NULL,
    headers        TEXT NOT NULL,
    body           BLOB NOT NULL,
    state          TEXT NOT NULL,
    attempts       BIGINT NOT NULL,
    available_at   TIMESTAMP NOT NULL,
    lease_token    TEXT,
    lease_until    TIMESTAMP,
    last_error     TEXT,
    enqueued_at    TIMESTAMP NOT NULL,
    published_at   TIMESTAMP,
    CONSTRAINT diesel_inbox_outbox_event UNIQUE (event_id)
);
CREATE INDEX IF NOT EXISTS diesel_inbox_outbox_state ON diesel_inbox_outbox (state, position);
CREATE INDEX IF NOT EXISTS diesel_inbox_outbox_aggregate ON diesel_inbox_outbox (aggregate_type, aggregate_id, state, position);
CREATE INDEX IF NOT EXISTS diesel_inbox_outbox_published ON diesel_inbox_outbox (state, published_at);
