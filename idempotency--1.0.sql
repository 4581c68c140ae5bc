/* idempotency--1.0.sql — objects of version 1.0 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

-------------------------------------------------------------------------------
-- Types and tables
-------------------------------------------------------------------------------

CREATE TYPE @extschema@.idem_status AS ENUM
    ('in_progress', 'succeeded', 'failed', 'unknown');

COMMENT ON TYPE @extschema@.idem_status IS
'status of an idempotent_record: in_progress (claimed, no outcome yet), succeeded and failed (final outcomes, replayed to duplicates), unknown (outcome of an external call unknown, awaiting reconciliation)';

CREATE TABLE @extschema@.idempotent_record (
    scope          text                   NOT NULL DEFAULT '',
    key            text                   NOT NULL,
    status         @extschema@.idem_status NOT NULL DEFAULT 'in_progress',
    fingerprint    bytea,
    result         jsonb,
    recovery_point text,
    fence          bigint                 NOT NULL DEFAULT 1,
    locked_until   timestamptz,
    created_at     timestamptz            NOT NULL,
    updated_at     timestamptz            NOT NULL,
    expires_at     timestamptz            NOT NULL,
    CONSTRAINT idempotent_record_pkey PRIMARY KEY (scope, key),
    CONSTRAINT idempotent_record_key_check CHECK (key OPERATOR(pg_catalog.<>) ''),
    CONSTRAINT idempotent_record_fence_check CHECK (fence OPERATOR(pg_catalog.>) 0)
);

COMMENT ON TABLE @extschema@.idempotent_record IS
'one row per (scope, key): the claim of an idempotency key, its status, request fingerprint and stored result; written by idem_claim, idem_finish and idem_fail';
COMMENT ON COLUMN @extschema@.idempotent_record.scope IS
'namespace of the key (tenant, account, consumer name); '''' by default';
COMMENT ON COLUMN @extschema@.idempotent_record.key IS
'idempotency key as sent by the client (for example the Idempotency-Key HTTP header)';
COMMENT ON COLUMN @extschema@.idempotent_record.status IS
'in_progress, succeeded, failed or unknown';
COMMENT ON COLUMN @extschema@.idempotent_record.fingerprint IS
'fingerprint of the request that claimed the key (usually idem_fingerprint(body), 32 bytes); NULL when none was given';
COMMENT ON COLUMN @extschema@.idempotent_record.result IS
'stored outcome replayed to duplicates: the result of idem_finish or the error of a final idem_fail';
COMMENT ON COLUMN @extschema@.idempotent_record.recovery_point IS
'last saved recovery point of a multi-phase request; NULL when none';
COMMENT ON COLUMN @extschema@.idempotent_record.fence IS
'fencing token: 1 at the first claim, +1 each time the key is claimed again (expired record reclaimed, abandoned claim taken over)';
COMMENT ON COLUMN @extschema@.idempotent_record.locked_until IS
'end of the lease of a leased claim; NULL for in-transaction claims and finished records';
COMMENT ON COLUMN @extschema@.idempotent_record.created_at IS
'server time (clock_timestamp) of the claim';
COMMENT ON COLUMN @extschema@.idempotent_record.updated_at IS
'server time (clock_timestamp) of the last change';
COMMENT ON COLUMN @extschema@.idempotent_record.expires_at IS
'claim time + ttl: from then on claims treat the record as absent';

-- purge finds expired records by expires_at
CREATE INDEX idempotent_record_expires_at_idx
    ON @extschema@.idempotent_record (expires_at);

-- pg_dump keeps the records (DESIGN §5.6)
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idempotent_record', '');

-------------------------------------------------------------------------------
-- Functions
-------------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_claim(
    key            text,
    scope          text        DEFAULT '',
    fingerprint    bytea       DEFAULT NULL,
    ttl            interval    DEFAULT NULL,
    wait           boolean     DEFAULT true,
    lease          interval    DEFAULT NULL,
    OUT outcome        text,
    OUT status         @extschema@.idem_status,
    OUT result         jsonb,
    OUT fence          bigint,
    OUT recovery_point text,
    OUT retry_after    interval)
RETURNS record
AS 'MODULE_PATHNAME', 'idem_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, interval, boolean, interval) IS
'claim an idempotency key or learn what to replay. Returns one row (outcome text: claimed | replay | in_progress, status idem_status, result jsonb, fence bigint, recovery_point text, retry_after interval). ttl interval (NULL = idempotency.default_ttl) is how long the record answers duplicates; wait => false answers in_progress instead of waiting for another transaction; lease interval (NULL = in-transaction claim) makes a leased claim that commits on its own and holds the key until server time + lease, after which the next claim takes it over (fence + 1, recovery point kept). Errors: IK001 fingerprint differs from the stored one, 22004 NULL key/scope/wait, 22023 empty or over-long key or scope, non-positive ttl or lease, 22008 interval out of range, 40001 duplicate committed after this REPEATABLE READ/SERIALIZABLE snapshot, 40P01 deadlock';

CREATE FUNCTION @extschema@.idem_finish(
    key    text,
    result jsonb,
    scope  text   DEFAULT '',
    fence  bigint DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_finish'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_finish(text, jsonb, text, bigint) IS
'record success: status succeeded, result jsonb stored and replayed to every duplicate. The transaction holding an in-transaction claim needs no fence; a leased claim or an unknown outcome needs fence bigint = the current fence. Returns void. Errors: IK002 no claim held (never claimed, expired, or already has an outcome), IK003 missing or stale fence (the lease was taken over), 22004 NULL key, result or scope';

CREATE FUNCTION @extschema@.idem_fail(
    key       text,
    error     jsonb,
    retryable boolean DEFAULT true,
    scope     text    DEFAULT '',
    fence     bigint  DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_fail'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_fail(text, jsonb, boolean, text, bigint) IS
'record failure. retryable => true (default) releases the key: the record is deleted and the next claim is claimed; retryable => false stores error jsonb with status failed and replays it. Fence as for idem_finish. Returns void. Errors: IK002, IK003 as for idem_finish, 22004 NULL key, error, retryable or scope';

CREATE FUNCTION @extschema@.idem_mark_unknown(
    key    text,
    detail jsonb,
    scope  text   DEFAULT '',
    fence  bigint DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_mark_unknown'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_mark_unknown(text, jsonb, text, bigint) IS
'the outcome of an external call is unknown: status unknown, detail jsonb stored in result, lease dropped. Claims answer in_progress and the record does not expire until a reconciler records the outcome with idem_finish or idem_fail and the same fence (see idem_pending). Returns void. Errors: IK002, IK003 as for idem_finish, 22004 NULL key, detail or scope';

CREATE FUNCTION @extschema@.idem_checkpoint(
    key            text,
    recovery_point text,
    scope          text   DEFAULT '',
    fence          bigint DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_checkpoint'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_checkpoint(text, text, text, bigint) IS
'save the recovery point text of a multi-phase request in the caller''s transaction (a phase''s writes and its recovery point commit together); a takeover returns it. Fence as for idem_finish. Returns void. Errors: IK002 no claim in progress held, IK003 missing or stale fence, 22004 NULL key, recovery_point or scope';

CREATE FUNCTION @extschema@.idem_extend_lease(
    key   text,
    lease interval,
    scope text   DEFAULT '',
    fence bigint DEFAULT NULL)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'idem_extend_lease'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_extend_lease(text, interval, text, bigint) IS
'heartbeat of a leased claim: its lease now ends at server time + lease interval; returns that timestamptz. Errors: IK003 missing or stale fence (the key was taken over), IK002 no leased claim in progress, 22004 NULL key, lease or scope, 22023 non-positive lease';

CREATE FUNCTION @extschema@.idem_lookup(
    key   text,
    scope text DEFAULT '')
RETURNS SETOF @extschema@.idempotent_record
AS 'MODULE_PATHNAME', 'idem_lookup'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_lookup(text, text) IS
'read the record of (scope, key) without claiming it: zero rows when there is none or it has expired, else one idempotent_record row (as visible to the caller''s snapshot and row level security). Errors: 22004 NULL argument, 22023 empty or over-long key or scope';

CREATE FUNCTION @extschema@.idem_fingerprint(body jsonb)
RETURNS bytea
AS 'MODULE_PATHNAME', 'idem_fingerprint'
LANGUAGE C IMMUTABLE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_fingerprint(jsonb) IS
'canonical SHA-256 (32 bytes) of a request body: object key order, white space, duplicate keys (last wins, as in jsonb) and numeric spelling (1, 1.0, 1e0) do not change it; types, array order and string content do. Errors: 22004 NULL body';

-------------------------------------------------------------------------------
-- Reconciliation and retention
-------------------------------------------------------------------------------

CREATE VIEW @extschema@.idem_pending WITH (security_invoker = true) AS
SELECT scope, key, status, fence, recovery_point, result AS detail,
       locked_until, created_at, updated_at, expires_at
  FROM @extschema@.idempotent_record
 WHERE status = 'unknown'
    OR (status = 'in_progress'
        AND COALESCE(locked_until, created_at) <= pg_catalog.clock_timestamp())
 ORDER BY created_at, scope, key;

COMMENT ON VIEW @extschema@.idem_pending IS
'records a reconciliation job must look at, oldest first: status unknown (outcome of an external call unknown; record it with idem_finish or idem_fail and the fence shown) and in_progress records whose lease has ended (their worker is gone; the next claim takes them over). detail is the jsonb given to idem_mark_unknown. Runs with the caller''s privileges and row level security';

CREATE FUNCTION @extschema@.idem_purge(batch_size integer DEFAULT 10000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idem_purge'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_purge(integer) IS
'delete one batch of at most batch_size expired records (expires_at passed; never one under a live lease, awaiting reconciliation, or being written by a claim: SKIP LOCKED); returns how many were deleted (bigint). Errors: 22004 NULL batch_size, 22023 batch_size < 1. Revoked from PUBLIC';

CREATE PROCEDURE @extschema@.idem_purge_all(batch_size integer DEFAULT 10000)
LANGUAGE plpgsql
AS $$
DECLARE
    purged bigint;
BEGIN
    -- names are schema-qualified: a procedure that COMMITs cannot pin its
    -- search_path with SET
    LOOP
        purged := @extschema@.idem_purge(batch_size);
        COMMIT;
        EXIT WHEN purged OPERATOR(pg_catalog.<) batch_size;
    END LOOP;
END
$$;

COMMENT ON PROCEDURE @extschema@.idem_purge_all(integer) IS
'delete every expired record, one idem_purge batch of batch_size rows per transaction, committing after each batch; run it with CALL outside a transaction block (for example from pg_cron). Errors as for idem_purge. Revoked from PUBLIC';

REVOKE ALL ON FUNCTION @extschema@.idem_purge(integer) FROM PUBLIC;
REVOKE ALL ON PROCEDURE @extschema@.idem_purge_all(integer) FROM PUBLIC;
