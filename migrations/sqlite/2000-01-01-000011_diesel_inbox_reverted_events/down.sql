-- Drops which reorg reverted each event still reverted.
DROP TABLE IF EXISTS diesel_inbox_reverted_events;
