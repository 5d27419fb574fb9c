-- Order per aggregate with concurrent producers. SQLite needs no table for it: one writer at a
-- time holds the database's write lock from its first write to its commit, so outbox rows
-- commit in position order. The migration exists so that every backend has the same versions.
SELECT 1;
