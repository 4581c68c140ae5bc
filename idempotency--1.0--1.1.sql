/* idempotency--1.0--1.1.sql: ALTER EXTENSION idempotency UPDATE TO '1.1' */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.1'" to load this file. \quit

-------------------------------------------------------------------------------
-- idem_claim gains wait_for_outcome.  A new parameter needs a new function;
-- the new one keeps the privileges granted on the old one.  The update
-- fails, changing nothing, if a user's object depends on the old one.
-------------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_claim_acl_1_0()
RETURNS aclitem[] LANGUAGE sql AS
$$SELECT proacl FROM pg_catalog.pg_proc
   WHERE oid = '@extschema@.idem_claim(text, text, bytea, interval, boolean, interval)'::pg_catalog.regprocedure$$;
CREATE TEMPORARY TABLE idem_claim_acl AS SELECT @extschema@.idem_claim_acl_1_0() AS acl;
DROP FUNCTION @extschema@.idem_claim_acl_1_0();

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

-- GRANT here would make the grants part of the extension's initial
-- privileges, which pg_dump leaves out; the catalog value does not
UPDATE pg_catalog.pg_proc SET proacl = (SELECT acl FROM idem_claim_acl)
 WHERE oid = '@extschema@.idem_claim(text, text, bytea, interval, boolean, interval, interval)'::pg_catalog.regprocedure;
DROP TABLE idem_claim_acl;

COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, interval, boolean, interval, interval) IS
'claim an idempotency key or learn what to replay. Returns one idem_claim_result row (outcome text: claimed | replay | in_progress, status idem_status, result jsonb, fence bigint, recovery_point text, retry_after interval). ttl interval (NULL = idempotency.default_ttl) is how long the record answers duplicates; wait => false answers in_progress instead of waiting for another transaction''s uncommitted claim; lease interval (NULL = in-transaction claim) makes a leased claim that commits on its own (a statement of its own in autocommit) and holds the key until server time + lease, after which the next claim takes it over (fence + 1, recovery point and the error of a retryable failure kept and returned); wait_for_outcome interval (NULL = none; needs the library preloaded) lets a claim of a key held by a live lease or awaiting reconciliation wait up to that long for the outcome, woken when it commits, and take the key over when the lease ends. Errors: IK001 fingerprint differs from the stored one, 25001 leased claim in a transaction block, subtransaction or pipeline, 22004 NULL key/scope/wait, 22023 empty or over-long key or scope, non-positive ttl, lease or wait_for_outcome (fixed durations: a day is 24 hours, a month 30 days, a year 365.25 days), 22008 one of them too long (server time + it past the timestamp range), 55000 wait_for_outcome without the library preloaded, 25006 read-only transaction or standby, 40001 duplicate committed after this REPEATABLE READ/SERIALIZABLE snapshot, 40P01 deadlock, 57014 canceled while waiting';

COMMENT ON TYPE @extschema@.idem_claim_result IS
'the row idem_claim returns: outcome (claimed | replay | in_progress), the record''s status, result (stored result or error of a replay), fence, recovery_point (kept on takeover), retry_after (set for every in_progress answer: the lease time left when shorter than idempotency.retry_after, else idempotency.retry_after; NULL otherwise)';
