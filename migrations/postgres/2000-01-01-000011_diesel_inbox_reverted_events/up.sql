-- Which reorg reverted each event still reverted: when a new branch includes the event again,
-- the fork ledger credits that reorg (events_reapplied), not the stream's latest one. A row
-- lives from the revert to the re-application. Events reverted before this migration have
-- none, and their re-application is credited to no reorg.
CREATE TABLE IF NOT EXISTS diesel_inbox_reverted_events (
    consumer TEXT COLLATE "C" NOT NULL,
    event_id TEXT COLLATE "C" NOT NULL,
    reorg_id BIGINT NOT NULL,
    PRIMARY KEY (consumer, event_id)
);
