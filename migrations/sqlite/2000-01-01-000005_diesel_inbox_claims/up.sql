-- Claims on side effects outside the database (an email, a card charge): committed before the
-- effect runs, completed with its result after. state: 'in_progress' -> 'completed', or
-- 'released' (did not happen: run again), 'abandoned' (never run), 'in_doubt' (unknown: ops
-- resolve it). An 'in_progress' row past its lease is in doubt too.
CREATE TABLE IF NOT EXISTS diesel_inbox_claims (
    consumer     TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    state        TEXT NOT NULL,
    -- The fencing token: bumped by every acquisition, checked by every write of the holder.
    attempt      BIGINT NOT NULL,
    deliveries   BIGINT NOT NULL,
    lease_until  TIMESTAMP NOT NULL,
    claimed_at   TIMESTAMP NOT NULL,
    updated_at   TIMESTAMP NOT NULL,
    completed_at TIMESTAMP,
    -- SHA-256 of the first delivery's payload, and the payload itself, when one was given.
    payload_hash BLOB,
    payload      BLOB,
    payload_kind TEXT,
    -- The side effect's result as JSON, once completed.
    result       TEXT,
    last_error   TEXT,
    resolved_by  TEXT,
    resolution   TEXT,
    PRIMARY KEY (consumer, event_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS diesel_inbox_claims_open ON diesel_inbox_claims (consumer, state, lease_until);
