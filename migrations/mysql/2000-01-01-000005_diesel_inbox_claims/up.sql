-- Claims on side effects outside the database (an email, a card charge): committed before the
-- effect runs, completed with its result after. state: 'in_progress' -> 'completed', or
-- 'released' (did not happen: run again), 'abandoned' (never run), 'in_doubt' (unknown: ops
-- resolve it). An 'in_progress' row past its lease is in doubt too.
CREATE TABLE IF NOT EXISTS diesel_inbox_claims (
    consumer     VARBINARY(128) NOT NULL,
    event_id     VARBINARY(255) NOT NULL,
    state        VARCHAR(16) CHARACTER SET ascii NOT NULL,
    -- The fencing token: bumped by every acquisition, checked by every write of the holder.
    attempt      BIGINT NOT NULL,
    deliveries   BIGINT NOT NULL,
    lease_until  DATETIME(6) NOT NULL,
    claimed_at   DATETIME(6) NOT NULL,
    updated_at   DATETIME(6) NOT NULL,
    completed_at DATETIME(6),
    -- SHA-256 of the first delivery's payload, and the payload itself, when one was given.
    payload_hash VARBINARY(32),
    payload      LONGBLOB,
    payload_kind VARCHAR(8) CHARACTER SET ascii,
    -- The side effect's result as JSON, once completed.
    result       LONGTEXT CHARACTER SET utf8mb4,
    last_error   TEXT CHARACTER SET utf8mb4,
    resolved_by  TEXT CHARACTER SET utf8mb4,
    resolution   TEXT CHARACTER SET utf8mb4,
    PRIMARY KEY (consumer, event_id),
    INDEX diesel_inbox_claims_open (consumer, state, lease_until)
) ENGINE = InnoDB;
