-- Sequence cursors: one row per (consumer, stream) holding the stream's watermark, so that a
-- redelivered sequence is rejected with one comparison, and the epoch that fences it.
CREATE TABLE IF NOT EXISTS diesel_inbox_cursors (
    consumer   TEXT NOT NULL,
    stream     TEXT NOT NULL,
    -- Every sequence at or below it is settled; NULL until the first sequence arrives.
    watermark  BIGINT,
    -- The highest sequence settled; above the watermark while a gap is open.
    high       BIGINT,
    -- Bumped by every acquire; a write from an older epoch is refused.
    epoch      BIGINT NOT NULL DEFAULT 0,
    owner      TEXT,
    updated_at TIMESTAMP NOT NULL,
    PRIMARY KEY (consumer, stream)
) WITHOUT ROWID;

-- The gap ledger: every range of sequences a cursor skipped, with its cause and its fate.
-- cause: 'skipped' (may still arrive) or 'evicted' (behind the broker's first available
-- sequence: never coming). state: 'open' -> 'filled' (late arrivals) or 'resolved' (by ops).
CREATE TABLE IF NOT EXISTS diesel_inbox_gaps (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer       TEXT NOT NULL,
    stream         TEXT NOT NULL,
    first_sequence BIGINT NOT NULL,
    last_sequence  BIGINT NOT NULL,
    cause          TEXT NOT NULL,
    state          TEXT NOT NULL,
    detected_at    TIMESTAMP NOT NULL,
    closed_at      TIMESTAMP,
    resolved_by    TEXT,
    resolution     TEXT,
    CHECK (first_sequence <= last_sequence)
);
CREATE INDEX IF NOT EXISTS diesel_inbox_gaps_open ON diesel_inbox_gaps (consumer, stream, state, first_sequence);

-- Where a consumer keeps both event ids and a cursor: the sequence each id row was settled
-- at, so that the rows at or below the watermark can be pruned by the cursor.
CREATE TABLE IF NOT EXISTS diesel_inbox_event_sequences (
    consumer TEXT NOT NULL,
    stream   TEXT NOT NULL,
    sequence BIGINT NOT NULL,
    event_id TEXT NOT NULL,
    PRIMARY KEY (consumer, stream, sequence)
) WITHOUT ROWID;
