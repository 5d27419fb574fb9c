-- Holds that must span a whole cluster, where the server's own locks (advisory locks,
-- GET_LOCK) are local to one node: on a Galera node, one prune at a time. A hold is a row:
-- its holder (a random token) keeps it until held_until, renews it in each of its
-- transactions, and deletes it when done. Two nodes writing the row at once conflict at
-- certification, so one of them fails and finds the other's hold when it retries.
CREATE TABLE IF NOT EXISTS diesel_inbox_leases (
    name       TEXT NOT NULL PRIMARY KEY,
    holder     TEXT NOT NULL,
    held_until TIMESTAMP NOT NULL
);
