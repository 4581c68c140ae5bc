-- sql/expiry_bucket.sql, once per path: the aged records, purged one
-- batch at a time, and the scans of the expiry index that took
SELECT pg_temp.claims_aged();
SELECT pg_stat_force_next_flush() \gset
SELECT pg_temp.expiry_index_scans() AS scans_before \gset
-- one record per batch, oldest expiry first
SELECT idem_purge(1);
SELECT key FROM idempotent_record ORDER BY key;
SELECT idem_purge(1);
SELECT key FROM idempotent_record ORDER BY key;
-- the last expired one, and the live one stays
SELECT idem_purge(100);
SELECT key FROM idempotent_record ORDER BY key;
SELECT pg_stat_force_next_flush() \gset
SELECT pg_temp.expiry_index_scans() - :scans_before AS expiry_index_scans;
