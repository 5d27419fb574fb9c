-- Sequence cursors: one row per (consumer, stream) holding the stream's watermark, so that a
-- redelivered sequence is rejected with one comparison, and the epoch that fences it.
CREATE TABLE IF NOT EXISTS diesel_inbox_cursors (
    consumer   VARBINARY(128) NOT NULL,
    stream     VARBINARY(255) NOT NULL,
    -- Every sequence at or below it is settled; NULL until the first sequence arrives.
    watermark  BIGINT,
    -- The highest sequence settled; above the watermark while a gap is open.
    high       BIGINT,
    -- Bumped by every acquire; a write from an older epoch is refused.
    epoch      BIGINT NOT NULL DEFAULT 0,
    owner      VARCHAR(255) CHARACTER SET utf8mb4,
    updated_at DATETIME(6) NOT NULL,
    PRIMARY KEY (consumer, stream)
) ENGINE = InnoDB;

-- The gap ledger: every range of sequences a cursor skipped, with its cause and its fate.
-- cause: 'skipped' (may still arrive) or 'evicted' (behind the broker's first available
-- sequence: never coming). state: 'open' -> 'filled' (late arrivals) or 'resolved' (by ops).
CREATE TABLE IF NOT EXISTS diesel_inbox_gaps (
    id             BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer       VARBINARY(128) NOT NULL,
    stream         VARBINARY(255) NOT NULL,
    first_sequence BIGINT NOT NULL,
    last_sequence  BIGINT NOT NULL,
    cause          VARCHAR(16) CHARACTER SET ascii NOT NULL,
    state          VARCHAR(16) CHARACTER SET ascii NOT NULL,
    detected_at    DATETIME(6) NOT NULL,
    closed_at      DATETIME(6),
    resolved_by    TEXT CHARACTER SET utf8mb4,
    resolution     TEXT CHARACTER SET utf8mb4,
    INDEX diesel_inbox_gaps_open (consumer, stream, state, first_sequence)
) ENGINE = InnoDB;

-- Where a consumer keeps both event ids and a cursor: the sequence each id row was settled
-- at, so that the rows at or below the watermark can be pruned by the cursor.
CREATE TABLE IF NOT EXISTS diesel_inbox_event_sequences (
    consumer VARBINARY(128) NOT NULL,
    stream   VARBINARY(255) NOT NULL,
    sequence BIGINT NOT NULL,
    event_id VARBINARY(255) NOT NULL,
    PRIMARY KEY (consumer, stream, sequence)
) ENGINE = InnoDB;
