-- Order per aggregate with concurrent producers. An enqueue first upserts its aggregate's row
-- here, in the producer's transaction, and so holds that row's lock until the transaction
-- ends: a second producer of the same aggregate waits before its outbox row takes a position,
-- so the positions of one aggregate commit in position order, and the relay never publishes a
-- later row while an earlier one is still uncommitted. (PostgreSQL takes a transaction-scoped
-- advisory lock instead, SQLite serialises writers: there the table stays empty.) enqueued_at: the aggregate's last
-- enqueue, by which the outbox prune deletes idle rows.
CREATE TABLE IF NOT EXISTS diesel_inbox_outbox_aggregates (
    aggregate_type VARBINARY(255) NOT NULL,
    aggregate_id   VARBINARY(255) NOT NULL,
    enqueued_at    DATETIME(6) NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
) ENGINE = InnoDB;
CREATE INDEX IF NOT EXISTS diesel_inbox_outbox_aggregates_idle ON diesel_inbox_outbox_aggregates (enqueued_at);
