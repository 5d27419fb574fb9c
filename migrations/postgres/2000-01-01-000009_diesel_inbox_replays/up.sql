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
    id              BIGSERIAL PRIMARY KEY,
    consumer        TEXT COLLATE "C" NOT NULL,
    source          TEXT NOT NULL,
    range_first     BIGINT,
    range_last      BIGINT,
    plan            TEXT NOT NULL,
    reason          TEXT NOT NULL,
    requested_by    TEXT NOT NULL,
    state           TEXT NOT NULL,
    checkpoint      BIGINT,
    counts          TEXT NOT NULL,
    digest          TEXT NOT NULL,
    fence           BIGINT NOT NULL DEFAULT 0,
    lease_until     TIMESTAMPTZ,
    evidence        TEXT,
    updated_at      TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS diesel_inbox_replays_state ON diesel_inbox_replays (state, updated_at);

-- Every transition of a replay, with who made it and why: who planned, accepted, rejected
-- or aborted it is here.
CREATE TABLE IF NOT EXISTS diesel_inbox_replay_transitions (
    id         BIGSERIAL PRIMARY KEY,
    replay_id  BIGINT NOT NULL,
    from_state TEXT,
    to_state   TEXT NOT NULL,
    actor      TEXT NOT NULL,
    reason     TEXT NOT NULL,
    at         TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS diesel_inbox_replay_transitions_replay ON diesel_inbox_replay_transitions (replay_id, id);

-- The events of a replay that did not simply take effect or come back as duplicates:
-- skipped by the schema interpretation, failed, dead-lettered, run where none was expected,
-- or whose side effects were suppressed. kind names which; detail says what.
CREATE TABLE IF NOT EXISTS diesel_inbox_replay_notes (
    replay_id BIGINT NOT NULL,
    position  BIGINT NOT NULL,
    kind      TEXT NOT NULL,
    event_id  TEXT COLLATE "C" NOT NULL,
    detail    TEXT NOT NULL,
    PRIMARY KEY (replay_id, position, kind)
);
