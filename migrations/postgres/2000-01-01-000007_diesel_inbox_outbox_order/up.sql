-- Order per aggregate with concurrent producers. PostgreSQL needs no table for it: an enqueue
-- takes a transaction-scoped advisory lock on its aggregate (pg_advisory_xact_lock, keyed by a
-- hash of the aggregate's type and id) before its outbox row takes a position, so a second
-- producer of the same aggregate waits until the first commits or rolls back. The migration
-- exists so that every backend has the same versions.
SELECT 1;
