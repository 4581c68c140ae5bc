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

COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, interval, boolean, interval, interval) IS
'claim an idempotency key or learn what to replay. Returns one idem_claim_result row (outcome text: claimed | replay | in_progress, status idem_status, result jsonb, fence bigint, recovery_point text, retry_after interval). ttl interval (NULL = idempotency.default_ttl) is how long the record answers duplicates; wait => false answers in_progress instead of waiting for another transaction''s uncommitted claim; lease interval (NULL = in-transaction claim) makes a leased claim that commits on its own (a statement of its own in autocommit) and holds the key until server time + lease, after which the next claim takes it over (fence + 1, recovery point and the error of a retryable failure kept and returned); wait_for_outcome interval (NULL = none; needs the library preloaded) lets a claim of a key held by a live lease or awaiting reconciliation wait up to that long for the outcome, woken when it commits, and take the key over when the lease ends. Errors: IK001 fingerprint differs from the stored one, 25001 leased claim in a transaction block, subtransaction or pipeline, or wait_for_outcome in a transaction that has written or locked rows, 0A000 wait_for_outcome under REPEATABLE READ/SERIALIZABLE, 22004 NULL key/scope/wait, 22023 empty or over-long key or scope, non-positive ttl, lease or wait_for_outcome (fixed durations: a day is 24 hours, a month 30 days, a year 365.25 days), 22008 one of them too long (server time + it past the timestamp range), 55000 wait_for_outcome without the library preloaded, 25006 read-only transaction or standby, 40001 duplicate committed after this REPEATABLE READ/SERIALIZABLE snapshot, 40P01 deadlock, 57014 canceled while waiting';

COMMENT ON TYPE @extschema@.idem_claim_result IS
'the row idem_claim returns: outcome (claimed | replay | in_progress), the record''s status, result (stored result or error of a replay), fence, recovery_point (kept on takeover), retry_after (set for every in_progress answer: the lease time left when shorter than idempotency.retry_after, else idempotency.retry_after; NULL otherwise)';

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

COMMENT ON FUNCTION @extschema@.idem_pending_at(timestamptz) IS
'the rows of idem_pending as of time at (timestamptz; the view passes clock_timestamp()), unordered: unknown records and in_progress records whose lease (or, for an in-transaction claim, whose claim time) ended by at. Runs with the caller''s privileges and row level security, or, for a role without SELECT on idempotent_record, as its owner in the scopes idem_scope_grant grants the role. Errors: 22004 NULL at';

CREATE OR REPLACE VIEW @extschema@.idem_pending WITH (security_invoker = true) AS
SELECT p.scope, p.key, p.status, p.fence, p.recovery_point, p.detail,
       p.locked_until, p.created_at, p.updated_at, p.expires_at
  FROM @extschema@.idem_pending_at(pg_catalog.clock_timestamp()) AS p
 ORDER BY p.created_at, p.scope, p.key;

COMMENT ON VIEW @extschema@.idem_pending IS
'records a reconciliation job must look at, oldest first: status unknown (outcome of an external call unknown; record it with idem_finish or idem_fail and the fence shown) and in_progress records whose lease has ended (their worker is gone; the next claim takes them over). detail is the jsonb given to idem_mark_unknown, or the error of a retryable idem_fail. Runs with the caller''s privileges and row level security';

CREATE FUNCTION @extschema@.idem_shard_probe(shard bigint, scope text, key text)
RETURNS bytea[]
AS 'MODULE_PATHNAME', 'idem_shard_probe'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_shard_probe(bigint, text, text) IS
'internal to idem_claim(wait => false) on a Citus table, run by Citus on the node holding shard (bigint shard id of idempotent_record): {fingerprint} when another transaction, still in progress, writes the record of (scope, key), {} when none does, NULL when the caller may not read the shard directly (row level security). Errors: 22004 NULL argument, 42P01 no such shard on this node, 42501 no SELECT privilege on it';

COMMENT ON FUNCTION @extschema@.idem_transition(regclass, anycompatible, text, text[], name) IS
'compare-and-set of a status column: locks the row of table rel whose primary key equals id (SELECT ... FOR UPDATE; for a key of several columns, such as (scope, id) on a table distributed by scope, id is ROW(value, ...) in the key''s column order), then returns text applied (it was in one of from_states and is now in to_state), already (it is in to_state: nothing written), rejected (in another state: nothing written) or not_found. status_column (name, default status) is a text, varchar or enum column; id is of the key''s type, a type with an implicit cast to it, or text. Runs with the caller''s privileges and row level security. Errors: 22004 NULL argument or NULL in from_states, 42809 rel is not a table, 42703 no such column, 42804 status column not text/enum or id of another type (or not a row of as many values as the key has columns), 22004 NULL in such a row, 0A000 no primary key, 42501 no UPDATE privilege, 25006 read-only transaction or standby, 22P02 state not a value of the column''s type, 40001 row changed after a REPEATABLE READ/SERIALIZABLE snapshot';

-------------------------------------------------------------------------------
-- Outcomes that are HOT updates.  A final outcome no longer moves
-- expires_at (indexed): expires_at stays the claim's (claim time + ttl),
-- and a final outcome is kept at least its retention (expires_at -
-- created_at) after it was recorded (updated_at).  Records finished
-- before the update had expires_at moved to outcome time + ttl; the same
-- rule keeps them at least that long (longer by the time from their claim
-- to their outcome).  The
-- table's layout is unchanged: the library reads 1.0's records and 1.1's
-- alike, before and after the update.
-------------------------------------------------------------------------------

COMMENT ON COLUMN @extschema@.idempotent_record.expires_at IS
'claim time + ttl, set by the claim (a final outcome does not move it, an unknown one moves it to its time + the same retention); a final outcome is kept until then and at least its retention (expires_at - created_at) after updated_at, the outcome''s time';
COMMENT ON COLUMN @extschema@.idempotent_record.updated_at IS
'server time (clock_timestamp) of the last change; of a final record, the time its outcome was recorded';

-------------------------------------------------------------------------------
-- Least privilege: scope grants for roles without table privileges
-------------------------------------------------------------------------------

CREATE TABLE @extschema@.idem_scope_grant (
    grantee regrole NOT NULL,
    pattern text    NOT NULL CHECK (pattern OPERATOR(pg_catalog.<>) ''),
    PRIMARY KEY (grantee, pattern)
);
REVOKE ALL ON @extschema@.idem_scope_grant FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_scope_grant', '');

COMMENT ON TABLE @extschema@.idem_scope_grant IS
'the scopes a role without privileges on idempotent_record and idempotency_token may use through the functions, which then work as the tables'' owner: grantee regrole (its members too), pattern text: an exact scope, a prefix ending in * (tenant_a:*), * for every scope, or {setting} for the scope named by a setting set for the current transaction only (SET LOCAL)';

CREATE FUNCTION @extschema@.idem_scope_grants_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idem_scope_grants_changed'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@.idem_scope_grants_changed() IS
'statement trigger of idem_scope_grant: every backend drops its cached scope grants when the change commits. Errors: 39P01 not called as a trigger';

CREATE TRIGGER idem_scope_grant_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.idem_scope_grant
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.idem_scope_grants_changed();

CREATE FUNCTION @extschema@.idem_scope_permitted(scope text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_scope_permitted'
LANGUAGE C STABLE;

COMMENT ON FUNCTION @extschema@.idem_scope_permitted(text) IS
'true when idem_scope_grant grants scope (text) to the current role or a role whose privileges it has, for views and policies. Errors: 22004 NULL scope';
