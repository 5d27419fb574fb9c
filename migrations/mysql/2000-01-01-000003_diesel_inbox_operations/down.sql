-- Drops the hourly counters and the indexes retention and stats use.
DROP TABLE IF EXISTS diesel_inbox_counters;
DROP INDEX IF EXISTS diesel_inbox_failures_state ON diesel_inbox_failures;
DROP INDEX IF EXISTS diesel_inbox_events_settled ON diesel_inbox_events;
