-- Drops the chain cursors' blocks, their events, the fork ledger and the orphaned side effects.
DROP TABLE IF EXISTS diesel_inbox_orphaned_effects;
DROP TABLE IF EXISTS diesel_inbox_reorgs;
DROP TABLE IF EXISTS diesel_inbox_block_events;
DROP TABLE IF EXISTS diesel_inbox_blocks;
