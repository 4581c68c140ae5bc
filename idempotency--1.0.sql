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
    OUT outcome        text,
    OUT status         @extschema@.idem_status,
    OUT result         jsonb,
    OUT fence          bigint,
    OUT recovery_point text,
    OUT retry_after    interval)
RETURNS record
AS 'MODULE_PATHNAME', 'idem_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, interval, boolean) IS
'claim an idempotency key in this transaction or learn what to replay. Returns one row (outcome text: claimed | replay | in_progress, status idem_status, result jsonb, fence bigint, recovery_point text, retry_after interval). ttl interval (NULL = idempotency.default_ttl) is how long the record is kept; wait => false answers in_progress instead of waiting for an uncommitted duplicate. Errors: IK001 fingerprint differs from the stored one, 22004 NULL key/scope/wait, 22023 empty or over-long key or scope, non-positive ttl, 40001 duplicate committed after this REPEATABLE READ/SERIALIZABLE snapshot, 40P01 deadlock';

CREATE FUNCTION @extschema@.idem_finish(
    key    text,
    result jsonb,
    scope  text DEFAULT '')
RETURNS void
AS 'MODULE_PATHNAME', 'idem_finish'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_finish(text, jsonb, text) IS
'record the success of a key claimed in this transaction: status succeeded, result jsonb stored and replayed to every duplicate. Returns void. Errors: IK002 the key is not claimed (or already finished) by this transaction, 22004 NULL argument';

CREATE FUNCTION @extschema@.idem_fail(
    key       text,
    error     jsonb,
    retryable boolean DEFAULT true,
    scope     text    DEFAULT '')
RETURNS void
AS 'MODULE_PATHNAME', 'idem_fail'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_fail(text, jsonb, boolean, text) IS
'record the failure of a key claimed in this transaction. retryable => true (default) releases the key: the record is deleted and the next claim is claimed; retryable => false stores error jsonb with status failed and replays it. Returns void. Errors: IK002 the key is not claimed (or already finished) by this transaction, 22004 NULL argument';

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
