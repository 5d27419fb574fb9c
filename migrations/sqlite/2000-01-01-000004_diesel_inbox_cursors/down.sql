-- Drops the sequence cursors, the gap ledger and the id-to-sequence map.
DROP TABLE IF EXISTS diesel_inbox_event_sequences;
DROP TABLE IF EXISTS diesel_inbox_gaps;
DROP TABLE IF EXISTS diesel_inbox_cursors;
