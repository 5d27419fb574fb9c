-- Drops the outbox's per-aggregate order locks.
DROP TABLE IF EXISTS diesel_inbox_outbox_aggregates;
