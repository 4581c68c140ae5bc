/* idempotency--1.0--1.1.sql: ALTER EXTENSION idempotency UPDATE TO '1.1' */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.1'" to load this file. \quit

-------------------------------------------------------------------------------
-- idem_claim gains wait_for_outcome.  A new parameter needs a new function;
-- the new one gets the privileges granted on the old one.  The update fails,
-- changing nothing, while a user's view or SQL-standard function body
-- depends on the old one; settings attached to it (ALTER FUNCTION ... SET)
-- are not carried over.
-------------------------------------------------------------------------------

-- One block, so that the old privileges need no temporary table (Citus
-- cannot prepare a transaction that touched one).  GRANT keeps the roles'
-- dependencies (DROP ROLE refuses while they hold the privilege); inside an
-- update script it also records the grants as the extension's initial
-- privileges, which pg_dump would leave out, so that record goes: a fresh
-- install has none for idem_claim either.
DO $$
DECLARE
    acl aclitem[] := (SELECT proacl FROM pg_catalog.pg_proc
                       WHERE oid = '@extschema@.idem_claim(text, text, bytea, interval, boolean, interval)'::pg_catalog.regprocedure);
    fn  text := '@extschema@.idem_claim(text, text, bytea, interval, boolean, interval, interval)';
    g   record;
BEGIN
    DROP FUNCTION @extschema@.idem_claim(text, text, bytea, interval, boolean, interval);
    -- 1.0's arguments, then wait_for_outcome
    CREATE FUNCTION @extschema@.idem_claim(key text, scope text DEFAULT '',
        fingerprint bytea DEFAULT NULL, ttl interval DEFAULT NULL,
        wait boolean DEFAULT true, lease interval DEFAULT NULL,
        wait_for_outcome interval DEFAULT NULL)
    RETURNS @extschema@.idem_claim_result
    AS 'MODULE_PATHNAME', 'idem_claim'
    LANGUAGE C VOLATILE PARALLEL UNSAFE;

    IF acl IS NULL THEN
        RETURN;
    END IF;
    EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn);
    FOR g IN SELECT e.grantee, e.is_grantable FROM pg_catalog.aclexplode(acl) AS e
              WHERE e.privilege_type = 'EXECUTE'
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s%s', fn,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC'
                            ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    DELETE FROM pg_catalog.pg_init_privs
     WHERE objoid = fn::pg_catalog.regprocedure
       AND classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass;
END $$;

-------------------------------------------------------------------------------
-- Citus: idem_pending ordered across shards, the wait => false probe of a
-- shard, idem_transition on keys of several columns
-------------------------------------------------------------------------------

-- The view reads the records through a C function, which the planner
-- cannot inline: on a Citus table the function's query runs on every shard
-- and the view then sorts the merged rows, where a sorted subquery pushed
-- down to the shards would lose its order.  The function also does the work
-- of a role without privileges on the table, in its granted scopes.  The
-- clock is read once, in the view.
CREATE FUNCTION @extschema@.idem_pending_at(at timestamptz)
RETURNS TABLE (scope text, key text, status @extschema@.idem_status,
               fence bigint, recovery_point text, detail jsonb,
               locked_until timestamptz, created_at timestamptz,
               updated_at timestamptz, expires_at timestamptz)
AS 'MODULE_PATHNAME', 'idem_pending_at'
LANGUAGE C STABLE;

CREATE OR REPLACE VIEW @extschema@.idem_pending WITH (security_invoker = true) AS
SELECT p.scope, p.key, p.status, p.fence, p.recovery_point, p.detail,
       p.locked_until, p.created_at, p.updated_at, p.expires_at
  FROM @extschema@.idem_pending_at(pg_catalog.clock_timestamp()) AS p
 ORDER BY p.created_at, p.scope, p.key;

CREATE FUNCTION @extschema@.idem_shard_probe(shard bigint, scope text, key text)
RETURNS bytea[]
AS 'MODULE_PATHNAME', 'idem_shard_probe'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- (No statement for the outcomes that are HOT updates in 1.1: the table's
-- layout is unchanged, and the library reads 1.0's records and 1.1's alike.
-- A final outcome no longer moves expires_at (indexed); it is kept at least
-- its retention (expires_at - created_at) after it was recorded
-- (updated_at), so records that 1.0 finished are kept at least as long.)

-------------------------------------------------------------------------------
-- Least privilege: scope grants for roles without table privileges
-------------------------------------------------------------------------------

-- grantee is a role name, not a regrole: on Citus each node gives a role
-- an OID of its own, and the table is replicated to every node
CREATE TABLE @extschema@.idem_scope_grant (
    grantee name    NOT NULL,
    pattern text    NOT NULL CHECK (pattern OPERATOR(pg_catalog.<>) ''),
    PRIMARY KEY (grantee, pattern)
);
REVOKE ALL ON @extschema@.idem_scope_grant FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_scope_grant', '');

CREATE FUNCTION @extschema@.idem_scope_grants_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idem_scope_grants_changed'
LANGUAGE C;

CREATE TRIGGER idem_scope_grant_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.idem_scope_grant
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.idem_scope_grants_changed();
-- also where session_replication_role = replica (a logical replication
-- subscriber's apply, pg_restore --disable-triggers): every change of the
-- grants must reach the backends' caches
ALTER TABLE @extschema@.idem_scope_grant ENABLE ALWAYS TRIGGER idem_scope_grant_changed;

CREATE FUNCTION @extschema@.idem_scope_permitted(scope text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_scope_permitted'
LANGUAGE C STABLE;

-------------------------------------------------------------------------------
-- idempotency_stats: the time duplicates waited, as a histogram
-------------------------------------------------------------------------------

-- A function of its own, appended to the view's columns: CREATE OR REPLACE
-- VIEW keeps the privileges granted on the view and the user's views that
-- read it, and idem_stats() keeps its 1.0 columns.
CREATE FUNCTION @extschema@.idem_wait_stats(
    OUT outcome_waits       bigint,
    OUT wait_seconds        float8[],
    OUT wait_seconds_bucket bigint[],
    OUT wait_seconds_sum    float8,
    OUT wait_seconds_count  bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'idem_wait_stats'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE OR REPLACE VIEW @extschema@.idempotency_stats AS
    SELECT s.*, w.*
      FROM @extschema@.idem_stats() AS s CROSS JOIN @extschema@.idem_wait_stats() AS w;

-- One line per object; the README reference gives the arguments, results,
-- errors and semantics of each.
COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, interval, boolean, interval, interval) IS 'claim an idempotency key, or learn the outcome to replay';
COMMENT ON TYPE @extschema@.idem_claim_result IS 'the row idem_claim returns: outcome, status, result, fence, recovery_point, retry_after';
COMMENT ON FUNCTION @extschema@.idem_finish(text, jsonb, text, bigint) IS 'record success: the result is stored and replayed to every duplicate';
COMMENT ON FUNCTION @extschema@.idem_fail(text, jsonb, boolean, text, bigint) IS 'record a failure: final (replayed to duplicates) or retryable (the key is released)';
COMMENT ON FUNCTION @extschema@.idem_mark_unknown(text, jsonb, text, bigint) IS 'record that the outcome of an external call is unknown, for a reconciler';
COMMENT ON FUNCTION @extschema@.idem_checkpoint(text, text, text, bigint) IS 'save the recovery point of a claim in progress; a takeover returns it';
COMMENT ON FUNCTION @extschema@.idem_extend_lease(text, interval, text, bigint) IS 'extend the lease of a leased claim; returns its new end';
COMMENT ON FUNCTION @extschema@.idem_lookup(text, text) IS 'read the record of an idempotency key without claiming it';
COMMENT ON FUNCTION @extschema@.idem_once(text, text, interval) IS 'message deduplication: true the first time a key is seen, false while its record exists';
COMMENT ON FUNCTION @extschema@.idem_fingerprint(jsonb) IS 'canonical SHA-256 of a JSON request body';
COMMENT ON FUNCTION @extschema@.idem_purge(integer) IS 'delete one batch of expired records and tokens; returns how many were deleted';
COMMENT ON PROCEDURE @extschema@.idem_purge_all(integer) IS 'delete every expired record and token, committing after each batch';
COMMENT ON VIEW @extschema@.idem_pending IS 'records a reconciler must look at: unknown outcomes and abandoned claims, oldest first';
COMMENT ON FUNCTION @extschema@.idem_pending_at(timestamptz) IS 'the rows of idem_pending as of a given time, unordered';
COMMENT ON FUNCTION @extschema@.idem_shard_probe(bigint, text, text) IS 'internal to idem_claim(wait => false) on Citus: is a running transaction writing the key';
COMMENT ON FUNCTION @extschema@.idem_transition(regclass, anycompatible, text, text[], name) IS 'compare-and-set of a status column: applied, already, rejected or not_found';
COMMENT ON FUNCTION @extschema@.idem_transition_guard() IS 'trigger function: a status column moves only along the listed transitions';
COMMENT ON FUNCTION @extschema@.idem_version_guard() IS 'trigger function: optimistic locking on a version column';
COMMENT ON FUNCTION @extschema@.idem_guard_declarations() IS 'event trigger function of idem_guard_declarations';
COMMENT ON EVENT TRIGGER idem_guard_declarations IS 'refuses idem_transition_guard triggers that would not see every write of their column';
COMMENT ON FUNCTION @extschema@.idem_token_issue(text, interval) IS 'issue a single-use token for a scope';
COMMENT ON FUNCTION @extschema@.idem_token_consume(text, text) IS 'consume a single-use token: true exactly once';
COMMENT ON FUNCTION @extschema@.idem_stats() IS 'the cluster-wide counters behind idempotency_stats';
COMMENT ON FUNCTION @extschema@.idem_stats_reset() IS 'reset the counters of idempotency_stats to zero';
COMMENT ON VIEW @extschema@.idempotency_stats IS 'cluster-wide counters and the wait-time histogram since stats_reset (needs shared_preload_libraries)';
COMMENT ON COLUMN @extschema@.idempotency_stats.claims IS 'claims answered claimed, and idem_once calls that returned true';
COMMENT ON COLUMN @extschema@.idempotency_stats.waits IS 'claim writes that waited for another transaction''s write of the same key';
COMMENT ON FUNCTION @extschema@.idem_wait_stats() IS 'the wait-time histogram behind the last columns of idempotency_stats';
COMMENT ON COLUMN @extschema@.idempotency_stats.outcome_waits IS 'claims that slept under wait_for_outcome';
COMMENT ON COLUMN @extschema@.idempotency_stats.wait_seconds IS 'upper bounds (le) of the wait-time buckets, in seconds; fixed';
COMMENT ON COLUMN @extschema@.idempotency_stats.wait_seconds_bucket IS 'waits (waits + outcome_waits) that lasted at most each bound, cumulative';
COMMENT ON COLUMN @extschema@.idempotency_stats.wait_seconds_sum IS 'seconds spent in all waits';
COMMENT ON COLUMN @extschema@.idempotency_stats.wait_seconds_count IS 'all waits: waits + outcome_waits';
COMMENT ON TYPE @extschema@.idem_status IS 'status of an idempotency record: in_progress, succeeded, failed or unknown';
COMMENT ON TABLE @extschema@.idempotent_record IS 'one row per idempotency key: its claim, status, fingerprint and stored result';
COMMENT ON COLUMN @extschema@.idempotent_record.expires_at IS 'claim time + ttl; a final outcome is kept at least its retention after updated_at';
COMMENT ON COLUMN @extschema@.idempotent_record.updated_at IS 'time of the last change; of a final record, the time of its outcome';
COMMENT ON COLUMN @extschema@.idempotent_record.fence IS 'fencing token: 1 at the first claim, + 1 at each reclaim or takeover';
COMMENT ON COLUMN @extschema@.idempotent_record.fingerprint IS 'fingerprint of the request that claimed the key; NULL when none was given';
COMMENT ON COLUMN @extschema@.idempotent_record.result IS 'result replayed to duplicates, or the detail of a failure or unknown outcome';
COMMENT ON TABLE @extschema@.idempotency_token IS 'single-use tokens against double submits, one row per token';
COMMENT ON TABLE @extschema@.idem_scope_grant IS 'scopes a role without privileges on the tables may use through the functions';
COMMENT ON FUNCTION @extschema@.idem_scope_grants_changed() IS 'trigger function: every backend drops its cached scope grants at commit';
COMMENT ON FUNCTION @extschema@.idem_scope_permitted(text) IS 'true when idem_scope_grant grants the scope to the current role';
