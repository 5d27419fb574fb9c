-- Drops the transactional outbox.
DROP TABLE IF EXISTS diesel_inbox_outbox;
