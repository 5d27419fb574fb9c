-- Stripes the hourly counters: each count goes to one of a few rows per counter and hour,
-- picked by its event id, so that concurrent deliveries of different events no longer queue
-- on one row per consumer. Stats sum the stripes. Existing rows become stripe 0.
-- Safe to run again.
ALTER TABLE diesel_inbox_counters ADD COLUMN IF NOT EXISTS stripe SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE diesel_inbox_counters DROP CONSTRAINT IF EXISTS diesel_inbox_counters_pkey;
ALTER TABLE diesel_inbox_counters
    ADD CONSTRAINT diesel_inbox_counters_pkey PRIMARY KEY (consumer, counter, bucket, stripe);
