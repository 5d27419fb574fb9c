-- Nothing to drop: SQLite serialises writers.
SELECT 1;
