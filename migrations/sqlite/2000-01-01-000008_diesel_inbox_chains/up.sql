-- Chain cursors. A chain stream's row in diesel_inbox_cursors holds its head height (high)
-- and its finalized height (watermark); these tables hold the rest.

-- The blocks a chain stream processed on its current branch, down to its finalized height:
-- what a new block's parent hash is checked against, and where a fork's ancestor is found.
CREATE TABLE IF NOT EXISTS diesel_inbox_blocks (
    consumer     TEXT NOT NULL,
    stream       TEXT NOT NULL,
    height       BIGINT NOT NULL,
    hash         TEXT NOT NULL,
    parent_hash  TEXT NOT NULL,
    processed_at TIMESTAMP NOT NULL,
    PRIMARY KEY (consumer, stream, height)
) WITHOUT ROWID;

-- The events each of those blocks took effect for, in order: what a reorg reverts.
CREATE TABLE IF NOT EXISTS diesel_inbox_block_events (
    consumer TEXT NOT NULL,
    stream   TEXT NOT NULL,
    height   BIGINT NOT NULL,
    position BIGINT NOT NULL,
    event_id TEXT NOT NULL,
    PRIMARY KEY (consumer, stream, height, position)
) WITHOUT ROWID;

-- The fork ledger: one row per reorg a chain stream went through.
CREATE TABLE IF NOT EXISTS diesel_inbox_reorgs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer         TEXT NOT NULL,
    stream           TEXT NOT NULL,
    ancestor_height  BIGINT NOT NULL,
    old_head_height  BIGINT NOT NULL,
    old_head_hash    TEXT NOT NULL,
    new_head_height  BIGINT NOT NULL,
    new_head_hash    TEXT NOT NULL,
    events_reverted  BIGINT NOT NULL,
    -- Reverted events that took effect again on the new branch, counted as its blocks come.
    events_reapplied BIGINT NOT NULL DEFAULT 0,
    happened_at      TIMESTAMP NOT NULL
);
CREATE INDEX IF NOT EXISTS diesel_inbox_reorgs_stream ON diesel_inbox_reorgs (consumer, stream, id);

-- Side effects outside the database made for events a reorg orphaned: a claim that completed,
-- is in progress or is in doubt. They cannot be undone; ops see them here.
CREATE TABLE IF NOT EXISTS diesel_inbox_orphaned_effects (
    reorg_id    BIGINT NOT NULL,
    consumer    TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    stream      TEXT NOT NULL,
    height      BIGINT NOT NULL,
    block_hash  TEXT NOT NULL,
    claim_state TEXT NOT NULL,
    found_at    TIMESTAMP NOT NULL,
    PRIMARY KEY (reorg_id, event_id)
) WITHOUT ROWID;
