-- Folds the stripes back into one row per counter and hour.
CREATE TEMPORARY TABLE diesel_inbox_counters_folded AS
    SELECT consumer, counter, bucket, CAST(SUM(total) AS SIGNED) AS total
    FROM diesel_inbox_counters GROUP BY consumer, counter, bucket;
DELETE FROM diesel_inbox_counters;
ALTER TABLE diesel_inbox_counters
    DROP PRIMARY KEY,
    DROP COLUMN stripe,
    ADD PRIMARY KEY (consumer, counter, bucket);
INSERT INTO diesel_inbox_counters (consumer, counter, bucket, total)
    SELECT consumer, counter, bucket, total FROM diesel_inbox_counters_folded;
DROP TEMPORARY TABLE diesel_inbox_counters_folded;
