-- The transactional outbox: events enqueued in the business transaction, published after it
-- commits by a relay. position is enqueue order, and so publish order per aggregate. state:
-- 'pending' -> 'published', or 'failed' (kept, with its reason, until ops retry it). A
-- pending row is due at available_at (the relay's backoff) and taken while lease_until lasts
-- by the relay holding lease_token. headers: the message headers as a JSON object.
CREATE TABLE IF NOT EXISTS diesel_inbox_outbox (
    position       BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event_id       VARBINARY(255) NOT NULL,
    topic          TEXT CHARACTER SET utf8mb4 NOT NULL,
    aggregate_type VARBINARY(255) NOT NULL,
    aggregate_id   VARBINARY(255) NOT NULL,
    event_type     TEXT CHARACTER SET utf8mb4 NOT NULL,
    headers        LONGTEXT CHARACTER SET utf8mb4 NOT NULL,
    body           LONGBLOB NOT NULL,
    state          VARCHAR(16) CHARACTER SET ascii NOT NULL,
    attempts       BIGINT NOT NULL,
    available_at   DATETIME(6) NOT NULL,
    lease_token    VARCHAR(36) CHARACTER SET ascii,
    lease_until    DATETIME(6),
    last_error     TEXT CHARACTER SET utf8mb4,
    enqueued_at    DATETIME(6) NOT NULL,
    published_at   DATETIME(6),
    UNIQUE KEY diesel_inbox_outbox_event (event_id),
    INDEX diesel_inbox_outbox_state (state, position),
    INDEX diesel_inbox_outbox_aggregate (aggregate_type, aggregate_id, state, position),
    INDEX diesel_inbox_outbox_published (state, published_at)
) ENGINE = InnoDB;
