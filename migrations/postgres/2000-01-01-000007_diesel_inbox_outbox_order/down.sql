-- Nothing to drop: PostgreSQL orders producers with advisory locks.
SELECT 1;
