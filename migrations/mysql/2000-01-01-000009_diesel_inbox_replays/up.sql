-- Governed replays: a bounded, recorded re-run of past events into a named target consumer,
-- reconciled before it is accepted. state: 'planned' -> 'running' -> 'finished' ->
-- 'accepted' or 'rejected'; or 'aborted'. plan: the rest of the plan as a JSON document (its
-- target, range, schema interpretation, expectation and side-effect policy). checkpoint: the
-- source position of the last event settled; the counts (a JSON object: read, processed,
-- duplicates, failed, dead-lettered, skipped, suppressed) and the input digest (a SHA-256
-- chain over ids and payload fingerprints, in order) commit with it. fence: raised by every
-- runner that takes the replay over, and by every decision, so that an earlier runner can no
-- longer write.
CREATE TABLE IF NOT EXISTS diesel_inbox_replays (
    id              BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer        VARBINARY(128) NOT NULL,
    source          TEXT CHARACTER SET utf8mb4 NOT NULL,
    range_first     BIGINT,
    range_last      BIGINT,
    plan            LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    reason          TEXT CHARACTER SET utf8mb4 NOT NULL,
    requested_by    TEXT CHARACTER SET utf8mb4 NOT NULL,
    state           VARCHAR(16) CHARACTER SET ascii NOT NULL,
    checkpoint      BIGINT,
    counts          TEXT CHARACTER SET ascii NOT NULL,
    digest          VARCHAR(64) CHARACTER SET ascii NOT NULL,
    fence           BIGINT NOT NULL DEFAULT 0,
    lease_until     DATETIME(6),
    evidence        LONGTEXT CHARACTER SET utf8mb4,
    updated_at      DATETIME(6) NOT NULL,
    INDEX diesel_inbox_replays_state (state, updated_at)
) ENGINE = InnoDB;

-- Every transition of a replay, with who made it and why: who planned, accepted, rejected
-- or aborted it is here.
CREATE TABLE IF NOT EXISTS diesel_inbox_replay_transitions (
    id         BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    replay_id  BIGINT NOT NULL,
    from_state VARCHAR(16) CHARACTER SET ascii,
    to_state   VARCHAR(16) CHARACTER SET ascii NOT NULL,
    actor      TEXT CHARACTER SET utf8mb4 NOT NULL,
    reason     TEXT CHARACTER SET utf8mb4 NOT NULL,
    at         DATETIME(6) NOT NULL,
    INDEX diesel_inbox_replay_transitions_replay (replay_id, id)
) ENGINE = InnoDB;

-- The events of a replay that did not simply take effect or come back as duplicates:
-- skipped by the schema interpretation, failed, dead-lettered, run where none was expected,
-- or whose side effects were suppressed. kind names which; detail says what.
CREATE TABLE IF NOT EXISTS diesel_inbox_replay_notes (
    replay_id BIGINT NOT NULL,
    position  BIGINT NOT NULL,
    kind      VARCHAR(16) CHARACTER SET ascii NOT NULL,
    event_id  VARBINARY(255) NOT NULL,
    detail    TEXT CHARACTER SET utf8mb4 NOT NULL,
    PRIMARY KEY (replay_id, position, kind)
) ENGINE = InnoDB;
