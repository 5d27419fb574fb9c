-- Folds the stripes back into one row per counter and hour.
CREATE TEMPORARY TABLE diesel_inbox_counters_folded AS
    SELECT consumer, counter, bucket, SUM(total)::BIGINT AS total
    FROM diesel_inbox_counters GROUP BY consumer, counter, bucket;
DELETE FROM diesel_inbox_counters;
ALTER TABLE diesel_inbox_counters DROP CONSTRAINT diesel_inbox_counters_pkey;
ALTER TABLE diesel_inbox_counters DROP COLUMN stripe;
INSERT INTO diesel_inbox_counters (consumer, counter, bucket, total)
    SELECT consumer, counter, bucket, total FROM diesel_inbox_counters_folded;
DROP TABLE diesel_inbox_counters_folded;
ALTER TABLE diesel_inbox_counters ADD PRIMARY KEY (consumer, counter, bucket);
