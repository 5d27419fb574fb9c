-- Drops the cluster-wide holds.
DROP TABLE IF EXISTS diesel_inbox_leases;
