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

CREATE TEMPORARY TABLE idem_claim_acl AS
SELECT proacl AS acl FROM pg_catalog.pg_proc
 WHERE oid = '@extschema@.idem_claim(text, text, bytea, interval, boolean, interval)'::pg_catalog.regprocedure;

DROP FUNCTION @extschema@.idem_claim(text, text, bytea, interval, boolean, interval);

CREATE FUNCTION @extschema@.idem_claim(
    key              text,
    scope            text        DEFAULT '',
    fingerprint      bytea       DEFAULT NULL,
    ttl              interval    DEFAULT NULL,
    wait             boolean     DEFAULT true,
    lease            interval    DEFAULT NULL,
    wait_for_outcome interval    DEFAULT NULL)
RETURNS @extschema@.idem_claim_result
AS 'MODULE_PATHNAME', 'idem_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- GRANT keeps the roles' dependencies (DROP ROLE refuses while they hold
-- the privilege); inside an update script it also records the grants as
-- the extension's initial privileges, which pg_dump would leave out, so
-- that record goes: a fresh install has none for idem_claim either
DO $$
DECLARE
    fn  text := '@extschema@.idem_claim(text, text, bytea, interval, boolean, interval, interval)';
    acl aclitem[] := (SELECT acl FROM idem_claim_acl);
    g   record;
BEGIN
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
DROP TABLE idem_claim_acl;

COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, interval, boolean, interval, interval) IS
'claim an idempotency key or learn what to replay. Returns one idem_claim_result row (outcome text: claimed | replay | in_progress, status idem_status, result jsonb, fence bigint, recovery_point text, retry_after interval). ttl interval (NULL = idempotency.default_ttl) is how long the record answers duplicates; wait => false answers in_progress instead of waiting for another transaction''s uncommitted claim; lease interval (NULL = in-transaction claim) makes a leased claim that commits on its own (a statement of its own in autocommit) and holds the key until server time + lease, after which the next claim takes it over (fence + 1, recovery point and the error of a retryable failure kept and returned); wait_for_outcome interval (NULL = none; needs the library preloaded) lets a claim of a key held by a live lease or awaiting reconciliation wait up to that long for the outcome, woken when it commits, and take the key over when the lease ends. Errors: IK001 fingerprint differs from the stored one, 25001 leased claim in a transaction block, subtransaction or pipeline, or wait_for_outcome in a transaction that has written or locked rows, 0A000 wait_for_outcome under REPEATABLE READ/SERIALIZABLE, 22004 NULL key/scope/wait, 22023 empty or over-long key or scope, non-positive ttl, lease or wait_for_outcome (fixed durations: a day is 24 hours, a month 30 days, a year 365.25 days), 22008 one of them too long (server time + it past the timestamp range), 55000 wait_for_outcome without the library preloaded, 25006 read-only transaction or standby, 40001 duplicate committed after this REPEATABLE READ/SERIALIZABLE snapshot, 40P01 deadlock, 57014 canceled while waiting';

COMMENT ON TYPE @extschema@.idem_claim_result IS
'the row idem_claim returns: outcome (claimed | replay | in_progress), the record''s status, result (stored result or error of a replay), fence, recovery_point (kept on takeover), retry_after (set for every in_progress answer: the lease time left when shorter than idempotency.retry_after, else idempotency.retry_after; NULL otherwise)';
