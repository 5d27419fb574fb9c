-- Drops the claims on side effects.
DROP TABLE IF EXISTS diesel_inbox_claims;
