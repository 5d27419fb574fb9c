-- Drops the inbox table and every record of which events were processed.
DROP TABLE IF EXISTS diesel_inbox_events;
