-- Chain cursors. A chain stream's row in diesel_inbox_cursors holds its head height (high)
-- and its finalized height (watermark); these tables hold the rest.

-- The blocks a chain stream processed on its current branch, down to its finalized height:
-- what a new block's parent hash is checked against, and where a fork's ancestor is found.
CREATE TABLE IF NOT EXISTS diesel_inbox_blocks (
    consumer     VARBINARY(128) NOT NULL,
    stream       VARBINARY(255) NOT NULL,
    height       BIGINT NOT NULL,
    hash         VARBINARY(255) NOT NULL,
    parent_hash  VARBINARY(255) NOT NULL,
    processed_at DATETIME(6) NOT NULL,
    PRIMARY KEY (consumer, stream, height)
) ENGINE = InnoDB;

-- The events each of those blocks took effect for, in order: what a reorg reverts.
CREATE TABLE IF NOT EXISTS diesel_inbox_block_events (
    consumer VARBINARY(128) NOT NULL,
    stream   VARBINARY(255) NOT NULL,
    height   BIGINT NOT NULL,
    position BIGINT NOT NULL,
    event_id VARBINARY(255) NOT NULL,
    PRIMARY KEY (consumer, stream, height, position)
) ENGINE = InnoDB;

-- The fork ledger: one row per reorg a chain stream went through.
CREATE TABLE IF NOT EXISTS diesel_inbox_reorgs (
    id               BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    consumer         VARBINARY(128) NOT NULL,
    stream           VARBINARY(255) NOT NULL,
    ancestor_height  BIGINT NOT NULL,
    old_head_height  BIGINT NOT NULL,
    old_head_hash    VARBINARY(255) NOT NULL,
    new_head_height  BIGINT NOT NULL,
    new_head_hash    VARBINARY(255) NOT NULL,
    events_reverted  BIGINT NOT NULL,
    -- Reverted events that took effect again on the new branch, counted as its blocks come.
    events_reapplied BIGINT NOT NULL DEFAULT 0,
    happened_at      DATETIME(6) NOT NULL,
    INDEX diesel_inbox_reorgs_stream (consumer, stream, id)
) ENGINE = InnoDB;

-- Side effects outside the database made for events a reorg orphaned: a claim that completed,
-- is in progress or is in doubt. They cannot be undone; ops see them here.
CREATE TABLE IF NOT EXISTS diesel_inbox_orphaned_effects (
    reorg_id    BIGINT NOT NULL,
    consumer    VARBINARY(128) NOT NULL,
    event_id    VARBINARY(255) NOT NULL,
    stream      VARBINARY(255) NOT NULL,
    height      BIGINT NOT NULL,
    block_hash  VARBINARY(255) NOT NULL,
    claim_state VARCHAR(16) CHARACTER SET ascii NOT NULL,
    found_at    DATETIME(6) NOT NULL,
    PRIMARY KEY (reorg_id, event_id)
) ENGINE = InnoDB;
