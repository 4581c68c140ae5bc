/* idempotency--1.2--1.3.sql: ALTER EXTENSION idempotency UPDATE TO '1.3' */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.3'" to load this file. \quit

-------------------------------------------------------------------------------
-- idempotency_stats: the current database's counters, for the owner and
-- pg_monitor
-------------------------------------------------------------------------------

-- The library keeps the counters per database (idempotency.stats_databases
-- of them) and the view shows the current database's; they still tell
-- tenants' traffic, so the view and the functions behind it are no longer
-- PUBLIC's: a role reads them as a member of pg_monitor, or with the grants
-- a monitoring role is given (README).  Grants to other roles are kept.
REVOKE SELECT ON @extschema@.idempotency_stats FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.idem_stats() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION @extschema@.idem_wait_stats() FROM PUBLIC;
GRANT SELECT ON @extschema@.idempotency_stats TO pg_monitor;
GRANT EXECUTE ON FUNCTION @extschema@.idem_stats() TO pg_monitor;
GRANT EXECUTE ON FUNCTION @extschema@.idem_wait_stats() TO pg_monitor;

COMMENT ON VIEW @extschema@.idempotency_stats IS 'counters and the wait-time histogram of the current database since stats_reset (needs shared_preload_libraries); for pg_monitor';
COMMENT ON FUNCTION @extschema@.idem_stats() IS 'the current database''s counters behind idempotency_stats';
COMMENT ON FUNCTION @extschema@.idem_wait_stats() IS 'the current database''s wait-time histogram behind the last columns of idempotency_stats';
COMMENT ON FUNCTION @extschema@.idem_stats_reset() IS 'reset the current database''s counters of idempotency_stats to zero';
COMMENT ON COLUMN @extschema@.idempotency_stats.stats_reset IS 'when the database''s counters were last reset by idem_stats_reset, or began (its first count or read since the server started)';
