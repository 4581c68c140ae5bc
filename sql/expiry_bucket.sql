-- Purge finds expired records through the index on expires_at's minute
-- (1.2): oldest minute first, one batch at a time, on the direct path and
-- on planned SQL alike, and never a record whose expires_at is
-- still ahead (expires_at is checked in each row of a minute).  Time
-- passing is simulated by moving the records' times back.
TRUNCATE idempotent_record;
CREATE FUNCTION pg_temp.claims_aged() RETURNS SETOF text LANGUAGE sql AS $$
    SELECT count(*) FROM unnest(ARRAY['three-hours', 'two-hours', 'one-hour', 'live']) AS k, LATERAL idem_once(k, ttl => '1 hour');
    UPDATE idempotent_record
       SET created_at = created_at - back, updated_at = updated_at - back,
           expires_at = expires_at - back
      FROM (VALUES ('three-hours', interval '4 hours'), ('two-hours', '3 hours'),
                   ('one-hour', '2 hours'), ('live', '0')) AS a(k, back)
     WHERE key = a.k;
    SELECT key FROM idempotent_record ORDER BY expires_at $$;
-- (statistics reach the view when the backend goes idle after a flush
-- was forced)
CREATE FUNCTION pg_temp.expiry_index_scans() RETURNS bigint LANGUAGE sql AS $$
    SELECT idx_scan FROM pg_stat_user_indexes
     WHERE indexrelid = 'idempotent_record_expires_at_idx'::regclass $$;
SET stats_fetch_consistency = none;

-- (LOAD: the setting is defined when the library is loaded, which a server
-- without shared_preload_libraries has not done yet)
LOAD 'idempotency';
SELECT setting AS direct_access FROM pg_settings WHERE name = 'idempotency.direct_access';
\i sql/include/purge_oldest_first.sql

-- the same on planned SQL
TRUNCATE idempotent_record;
SET idempotency.direct_access = off;
-- (with a generic plan: a custom plan's estimate looks up the index's
-- first or last entry, which counts as a scan, once the table has
-- statistics, which autovacuum may make at any moment)
SET plan_cache_mode = force_generic_plan;
\i sql/include/purge_oldest_first.sql
