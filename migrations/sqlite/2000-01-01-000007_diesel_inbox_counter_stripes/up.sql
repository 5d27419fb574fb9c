-- Stripes the hourly counters: each count goes to one of a few rows per counter and hour,
-- picked by its event id, so that concurrent deliveries of different events no longer queue
-- on one row per consumer. Stats sum the stripes. Existing rows become stripe 0. SQLite
-- cannot change a primary key in place: the table is rebuilt. Safe to run again: a second
-- run folds the stripes into stripe 0, totals intact.
CREATE TABLE IF NOT EXISTS diesel_inbox_counters_striped (
    consumer TEXT NOT NULL,
    counter  TEXT NOT NULL,
    -- The start of the hour (UTC) the counts fall in.
    bucket   TIMESTAMP NOT NULL,
    total    BIGINT NOT NULL,
    -- Which of the counter's rows for the hour.
    stripe   SMALLINT NOT NULL DEFAULT 0,
    PRIMARY KEY (consumer, counter, bucket, stripe)
) WITHOUT ROWID;
INSERT INTO diesel_inbox_counters_striped (consumer, counter, bucket, total)
    SELECT consumer, counter, bucket, SUM(total) FROM diesel_inbox_counters
    GROUP BY consumer, counter, bucket;
DROP TABLE diesel_inbox_counters;
ALTER TABLE diesel_inbox_counters_striped RENAME TO diesel_inbox_counters;
