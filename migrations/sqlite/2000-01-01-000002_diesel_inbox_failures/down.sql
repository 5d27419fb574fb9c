-- Drops the failure records, dead letters and their history.
DROP TABLE IF EXISTS diesel_inbox_failure_log;
DROP TABLE IF EXISTS diesel_inbox_failures;
