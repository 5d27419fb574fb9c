-- Folds the stripes back into one row per counter and hour.
CREATE TABLE diesel_inbox_counters_folded (
    consumer TEXT NOT NULL,
    counter  TEXT NOT NULL,
    -- The start of the hour (UTC) the counts fall in.
    bucket   TIMESTAMP NOT NULL,
    total    BIGINT NOT NULL,
    PRIMARY KEY (consumer, counter, bucket)
) WITHOUT ROWID;
INSERT INTO diesel_inbox_counters_folded (consumer, counter, bucket, total)
    SELECT consumer, counter, bucket, SUM(total) FROM diesel_inbox_counters
    GROUP BY consumer, counter, bucket;
DROP TABLE diesel_inbox_counters;
ALTER TABLE diesel_inbox_counters_folded RENAME TO diesel_inbox_counters;
