-- `IF NOT EXISTS` on an index is MariaDB syntax; on Oracle MySQL 8 drop those two words.
-- Retention and stats select settled events by consumer, state and age through this index,
-- never by scanning the table; event_id makes its order the order retention pages in, so no
-- batch sorts. processed_at never changes after the insert.
CREATE INDEX IF NOT EXISTS diesel_inbox_events_settled ON diesel_inbox_events (consumer, state, processed_at, event_id);
-- Dead letters and the oldest unresolved failure, per consumer, oldest first.
CREATE INDEX IF NOT EXISTS diesel_inbox_failures_state ON diesel_inbox_failures (consumer, state, first_failed_at);

-- Counts per consumer and hour of what is rare and worth watching (duplicate deliveries,
-- payload conflicts, failed attempts, dead letters, transitions), so that stats over a recent
-- window sum a few rows instead of scanning the inbox.
CREATE TABLE IF NOT EXISTS diesel_inbox_counters (
    consumer VARBINARY(128) NOT NULL,
    counter  VARCHAR(32) CHARACTER SET ascii NOT NULL,
    -- The start of the hour (UTC) the counts fall in.
    bucket   DATETIME(6) NOT NULL,
    total    BIGINT NOT NULL,
    PRIMARY KEY (consumer, counter, bucket)
) ENGINE = InnoDB;
