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
'stored outcome replayed to duplicates: the result of idem_finish or the error of a final idem_fail; while in_progress or unknown, the error of the last retryable idem_fail or the detail of idem_mark_unknown';
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

-- pg_dump keeps the records
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idempotent_record', '');

-------------------------------------------------------------------------------
-- Functions
-------------------------------------------------------------------------------

-- idem_claim's row.  A named type rather than OUT parameters: a caller's
-- FROM idem_claim(...) then gets its row type from the type cache instead of
-- rebuilding it from pg_proc at every execution.
CREATE TYPE @extschema@.idem_claim_result AS (
    outcome        text,
    status         @extschema@.idem_status,
    result         jsonb,
    fence          bigint,
    recovery_point text,
    retry_after    interval
);

COMMENT ON TYPE @extschema@.idem_claim_result IS
'the row idem_claim returns: outcome (claimed | replay | in_progress), the record''s status, result (stored result or error of a replay), fence, recovery_point (kept on takeover), retry_after (lease time left of an in_progress answer, else NULL)';

CREATE FUNCTION @extschema@.idem_claim(
    key            text,
    scope          text        DEFAULT '',
    fingerprint    bytea       DEFAULT NULL,
    ttl            interval    DEFAULT NULL,
    wait           boolean     DEFAULT true,
    lease          interval    DEFAULT NULL)
RETURNS @extschema@.idem_claim_result
AS 'MODULE_PATHNAME', 'idem_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, interval, boolean, interval) IS
'claim an idempotency key or learn what to replay. Returns one idem_claim_result row (outcome text: claimed | replay | in_progress, status idem_status, result jsonb, fence bigint, recovery_point text, retry_after interval). ttl interval (NULL = idempotency.default_ttl) is how long the record answers duplicates; wait => false answers in_progress instead of waiting for another transaction; lease interval (NULL = in-transaction claim) makes a leased claim that commits on its own (a statement of its own in autocommit) and holds the key until server time + lease, after which the next claim takes it over (fence + 1, recovery point and the error of a retryable failure kept and returned). Errors: IK001 fingerprint differs from the stored one, 25001 leased claim in a transaction block, subtransaction or pipeline, 22004 NULL key/scope/wait, 22023 empty or over-long key or scope, non-positive ttl or lease (fixed durations: a day is 24 hours, a month 30 days, a year 365.25 days), 22008 ttl or lease too long (server time + it past the timestamp range), 25006 read-only transaction or standby, 40001 duplicate committed after this REPEATABLE READ/SERIALIZABLE snapshot, 40P01 deadlock';

CREATE FUNCTION @extschema@.idem_finish(
    key    text,
    result jsonb,
    scope  text   DEFAULT '',
    fence  bigint DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_finish'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_finish(text, jsonb, text, bigint) IS
'record success: status succeeded, result jsonb stored and replayed to every duplicate. The transaction holding an in-transaction claim needs no fence; a leased claim or an unknown outcome needs fence bigint = the current fence. A late write with the current fence (lease and ttl over, nobody claimed the key since) is recorded and retained for a ttl from then. Returns void. Errors: IK002 no claim held (never claimed, purged, or already has an outcome), IK003 missing fence, older fence (the key was taken over) or a fence the record never issued, 22004 NULL key, result or scope, 25006 read-only transaction or standby';

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
'record failure. retryable => true (default) releases the key for a retry: the record stays as a claim whose lease has ended with error jsonb as its result (seen by idem_lookup, idem_pending and the retry), and the next claim takes it over (claimed, fence + 1, recovery point and error returned), so the failed attempt''s fence can never write again; retryable => false stores error jsonb with status failed and replays it. Fence as for idem_finish. Returns void. Errors: IK002, IK003 as for idem_finish, 22004 NULL key, error, retryable or scope, 25006 read-only transaction or standby';

CREATE FUNCTION @extschema@.idem_mark_unknown(
    key    text,
    detail jsonb,
    scope  text   DEFAULT '',
    fence  bigint DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_mark_unknown'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_mark_unknown(text, jsonb, text, bigint) IS
'the outcome of an external call is unknown: status unknown, detail jsonb stored in result, lease dropped. Claims answer in_progress and the record does not expire until a reconciler records the outcome with idem_finish or idem_fail and the same fence (see idem_pending). Returns void. Errors: IK002, IK003 as for idem_finish, 22004 NULL key, detail or scope, 25006 read-only transaction or standby';

CREATE FUNCTION @extschema@.idem_checkpoint(
    key            text,
    recovery_point text,
    scope          text   DEFAULT '',
    fence          bigint DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_checkpoint'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_checkpoint(text, text, text, bigint) IS
'save the recovery point text of a multi-phase request in the caller''s transaction (a phase''s writes and its recovery point commit together); a takeover returns it. Fence as for idem_finish. Returns void. Errors: IK002 no claim in progress held, IK003 missing or stale fence, 22004 NULL key, recovery_point or scope, 25006 read-only transaction or standby';

CREATE FUNCTION @extschema@.idem_extend_lease(
    key   text,
    lease interval,
    scope text   DEFAULT '',
    fence bigint DEFAULT NULL)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'idem_extend_lease'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_extend_lease(text, interval, text, bigint) IS
'heartbeat of a leased claim: its lease now ends at server time + lease interval (a fixed duration, as idem_claim''s); returns that timestamptz. Errors: IK003 missing or stale fence (the key was taken over), IK002 no leased claim in progress, 22004 NULL key, lease or scope, 22023 non-positive lease, 22008 lease too long, 25006 read-only transaction or standby';

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

CREATE FUNCTION @extschema@.idem_once(
    key   text,
    scope text     DEFAULT '',
    ttl   interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_once'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_once(text, text, interval) IS
'message-consumer deduplication in the caller''s transaction: true the first time (scope, key) is seen, false while its record exists (claim time + ttl interval, NULL = idempotency.default_ttl); the mark commits or rolls back with the message''s effects, and a concurrent duplicate waits for it like a claim (false after its commit, true after its rollback). Errors: 22004 NULL key or scope, 22023 empty or over-long key or scope, non-positive ttl, 22008 ttl too long, 25006 read-only transaction or standby (also for a seen id), 40001 under REPEATABLE READ/SERIALIZABLE as for idem_claim';

-------------------------------------------------------------------------------
-- Reconciliation and retention
-------------------------------------------------------------------------------

-- The view reads the records through a PL/pgSQL function, which the
-- planner cannot inline: on a Citus table the function's query runs on every
-- shard and the view then sorts the merged rows, where a sorted subquery
-- pushed down to the shards would lose its order (and Citus refuses the
-- parameters of an SQL function).  The clock is read once, in the view.
CREATE FUNCTION @extschema@.idem_pending_at(at timestamptz)
RETURNS TABLE (scope text, key text, status @extschema@.idem_status,
               fence bigint, recovery_point text, detail jsonb,
               locked_until timestamptz, created_at timestamptz,
               updated_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT r.scope, r.key, r.status, r.fence, r.recovery_point, r.result,
           r.locked_until, r.created_at, r.updated_at, r.expires_at
      FROM ONLY @extschema@.idempotent_record AS r
     WHERE r.status OPERATOR(pg_catalog.=) 'unknown'::@extschema@.idem_status
        OR (r.status OPERATOR(pg_catalog.=) 'in_progress'::@extschema@.idem_status
            AND COALESCE(r.locked_until, r.created_at) OPERATOR(pg_catalog.<=) at);
END
$$;

COMMENT ON FUNCTION @extschema@.idem_pending_at(timestamptz) IS
'the rows of idem_pending as of time at (timestamptz; the view passes clock_timestamp()), unordered: unknown records and in_progress records whose lease (or, for an in-transaction claim, whose claim time) ended by at. Runs with the caller''s privileges and row level security; no errors of its own';

CREATE VIEW @extschema@.idem_pending WITH (security_invoker = true) AS
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

CREATE FUNCTION @extschema@.idem_purge(batch_size integer DEFAULT 10000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'idem_purge'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_purge(integer) IS
'delete one batch of at most batch_size expired rows of idempotent_record and idempotency_token themselves (not of tables inheriting from them): records (expires_at passed; never one under a live lease, awaiting reconciliation, or being written by a claim: SKIP LOCKED), then single-use tokens past their expires_at; returns how many were deleted (bigint). Errors: 22004 NULL batch_size, 22023 batch_size < 1, 25006 read-only transaction or standby. Revoked from PUBLIC';

CREATE PROCEDURE @extschema@.idem_purge_all(batch_size integer DEFAULT 10000)
LANGUAGE plpgsql
AS $$
DECLARE
    purged bigint;
BEGIN
    -- names are schema-qualified: a procedure that COMMITs cannot pin its
    -- search_path with SET
    LOOP
        -- a batch need not wait for its WAL flush: lost in a crash, its
        -- records are still expired (claims treat them as absent) and the
        -- next purge deletes them again
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
        purged := @extschema@.idem_purge(batch_size);
        COMMIT;
        EXIT WHEN purged OPERATOR(pg_catalog.<) batch_size;
    END LOOP;
END
$$;

COMMENT ON PROCEDURE @extschema@.idem_purge_all(integer) IS
'delete every expired record, one idem_purge batch of batch_size rows per transaction, committing after each batch with synchronous_commit off (a batch lost in a crash is purged again); run it with CALL outside a transaction block (for example from pg_cron). Errors as for idem_purge. Revoked from PUBLIC';

REVOKE ALL ON FUNCTION @extschema@.idem_purge(integer) FROM PUBLIC;
REVOKE ALL ON PROCEDURE @extschema@.idem_purge_all(integer) FROM PUBLIC;

-------------------------------------------------------------------------------
-- State machines, optimistic versions and single-use tokens
-------------------------------------------------------------------------------

CREATE FUNCTION @extschema@.idem_transition(
    rel           regclass,
    id            anycompatible,
    to_state      text,
    from_states   text[],
    status_column name DEFAULT 'status')
RETURNS text
AS 'MODULE_PATHNAME', 'idem_transition'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_transition(regclass, anycompatible, text, text[], name) IS
'compare-and-set of a status column: locks the row of table rel whose primary key equals id (SELECT ... FOR UPDATE; for a key of several columns, such as (scope, id) on a table distributed by scope, id is ROW(value, ...) in the key''s column order), then returns text applied (it was in one of from_states and is now in to_state), already (it is in to_state: nothing written), rejected (in another state: nothing written) or not_found. status_column (name, default status) is a text, varchar or enum column; id is of the key''s type, a type with an implicit cast to it, or text. Runs with the caller''s privileges and row level security. Errors: 22004 NULL argument or NULL in from_states, 42809 rel is not a table, 42703 no such column, 42804 status column not text/enum or id of another type (or not a row of as many values as the key has columns), 22004 NULL in such a row, 0A000 no primary key, 42501 no UPDATE privilege, 25006 read-only transaction or standby, 22P02 state not a value of the column''s type, 40001 row changed after a REPEATABLE READ/SERIALIZABLE snapshot';

CREATE FUNCTION @extschema@.idem_transition_guard()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idem_transition_guard'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@.idem_transition_guard() IS
'row trigger, BEFORE UPDATE or AFTER INSERT OR UPDATE (OR DELETE on a partitioned table, where it is declared on the partitioned table): idem_transition_guard(''column'', ''from>to'', ...) lets a status column move only along the listed transitions (compared as text), also across partitions and in upserts; an update keeping the value is allowed; ''>to'' entries (AFTER triggers only) restrict the states a row may be inserted with (INSERT is unrestricted without them). Errors: IK005 transition or initial state not allowed (errdetail: from, to, allowed list), 22023 bad trigger argument, 39P01 a declaration under which a write would escape the guard (both reported when the trigger first fires)';

CREATE FUNCTION @extschema@.idem_guard_declarations()
RETURNS event_trigger
AS 'MODULE_PATHNAME', 'idem_guard_declarations'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@.idem_guard_declarations() IS
'event trigger function of idem_guard_declarations: refuses (39P01) at CREATE TRIGGER an idem_transition_guard trigger that PostgreSQL would not fire for some write of its column (declared on a partition, or AFTER on a partitioned table without INSERT and DELETE)';

-- ... so that such a declaration cannot pass writes before it first fires
CREATE EVENT TRIGGER idem_guard_declarations ON ddl_command_end
    WHEN TAG IN ('CREATE TRIGGER')
    EXECUTE FUNCTION @extschema@.idem_guard_declarations();

COMMENT ON EVENT TRIGGER idem_guard_declarations IS
'refuses at CREATE TRIGGER the idem_transition_guard declarations that could not guard every write of their column';

CREATE FUNCTION @extschema@.idem_version_guard()
RETURNS trigger
AS 'MODULE_PATHNAME', 'idem_version_guard'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@.idem_version_guard() IS
'BEFORE UPDATE FOR EACH ROW trigger: idem_version_guard(''column'') (default column version, smallint/integer/bigint) refuses an update whose new version differs from the stored one, else increments the version by 1 (NULL counts as 0). Errors: IK006 stale version (errdetail: stored and given), 22003 version at the maximum of its type, 22023 bad trigger argument, 39P01 not fired BEFORE UPDATE FOR EACH ROW';

CREATE TABLE @extschema@.idempotency_token (
    scope       text        NOT NULL DEFAULT '',
    token       text        NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    consumed_at timestamptz,
    CONSTRAINT idempotency_token_pkey PRIMARY KEY (scope, token)
);

COMMENT ON TABLE @extschema@.idempotency_token IS
'single-use tokens against double submits: one row per token issued by idem_token_issue; idem_token_consume sets consumed_at once';
COMMENT ON COLUMN @extschema@.idempotency_token.scope IS
'namespace of the token (form, tenant, user); a token is consumed only in the scope it was issued for';
COMMENT ON COLUMN @extschema@.idempotency_token.token IS
'the token: 22 characters of base64url, 128 random bits';
COMMENT ON COLUMN @extschema@.idempotency_token.created_at IS
'server time (clock_timestamp) of issue';
COMMENT ON COLUMN @extschema@.idempotency_token.expires_at IS
'issue time + ttl: from then on the token cannot be consumed, and purge may delete it';
COMMENT ON COLUMN @extschema@.idempotency_token.consumed_at IS
'server time (clock_timestamp) of the consume that returned true; NULL while unused';

-- purge finds expired tokens by expires_at
CREATE INDEX idempotency_token_expires_at_idx
    ON @extschema@.idempotency_token (expires_at);

-- pg_dump keeps the tokens
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idempotency_token', '');

CREATE FUNCTION @extschema@.idem_token_issue(
    scope text     DEFAULT '',
    ttl   interval DEFAULT '10 minutes')
RETURNS text
AS 'MODULE_PATHNAME', 'idem_token_issue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_token_issue(text, interval) IS
'issue a single-use token for scope text, valid for ttl interval (default 10 minutes) from the server clock; returns it as text (22 URL-safe characters, 128 bits from pg_strong_random). Errors: 22004 NULL scope or ttl, 22023 over-long scope or ttl not positive, 22008 ttl too long, 25006 read-only transaction or standby, 42501 no INSERT privilege on idempotency_token';

CREATE FUNCTION @extschema@.idem_token_consume(
    token text,
    scope text DEFAULT '')
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_token_consume'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_token_consume(text, text) IS
'consume a token in the caller''s transaction: returns boolean true exactly once (a concurrent consumer waits for the first one''s transaction), false for an unknown, already consumed, expired or other-scope token. Errors: 22004 NULL token or scope, 25006 read-only transaction or standby, 40001 consumed by another transaction after a REPEATABLE READ/SERIALIZABLE snapshot, 42501 no UPDATE privilege on idempotency_token';

-------------------------------------------------------------------------------
-- Cluster-wide counters
-------------------------------------------------------------------------------

-- OUT columns in the order of IdemCounter (src/idempotency.h)
CREATE FUNCTION @extschema@.idem_stats(
    OUT claims                 bigint,
    OUT replays                bigint,
    OUT in_progress            bigint,
    OUT waits                  bigint,
    OUT fingerprint_mismatches bigint,
    OUT takeovers              bigint,
    OUT stale_fences           bigint,
    OUT failures               bigint,
    OUT tokens_issued          bigint,
    OUT tokens_consumed        bigint,
    OUT tokens_refused         bigint,
    OUT rows_purged            bigint,
    OUT stats_reset            timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'idem_stats'
LANGUAGE C VOLATILE PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.idem_stats() IS
'the cluster-wide counters behind the idempotency_stats view: one row of bigint counts since stats_reset timestamptz. Errors: 55000 the library is not in shared_preload_libraries';

CREATE VIEW @extschema@.idempotency_stats AS
    SELECT * FROM @extschema@.idem_stats();

COMMENT ON VIEW @extschema@.idempotency_stats IS
'cluster-wide counters (all databases) since stats_reset, kept in shared memory; needs idempotency in shared_preload_libraries (else 55000). One row of bigint counts: claims, replays, in_progress (idem_claim answers), waits (claim writes that waited for another transaction''s write of the same key), fingerprint_mismatches (IK001), takeovers, stale_fences (IK003), failures (idem_fail calls), tokens_issued, tokens_consumed, tokens_refused, rows_purged; not transactional';
COMMENT ON COLUMN @extschema@.idempotency_stats.claims IS
'idem_claim calls answered claimed (new keys, expired records reclaimed, takeovers), and idem_once calls that returned true';
COMMENT ON COLUMN @extschema@.idempotency_stats.replays IS
'idem_claim calls answered replay, and idem_once calls that returned false';
COMMENT ON COLUMN @extschema@.idempotency_stats.in_progress IS
'idem_claim calls answered in_progress';
COMMENT ON COLUMN @extschema@.idempotency_stats.waits IS
'claims (wait => true) whose write found the key just written by another transaction: they waited for it on the primary key or row lock, or lost the race to it by microseconds; waits that end in the other''s rollback are not counted';
COMMENT ON COLUMN @extschema@.idempotency_stats.fingerprint_mismatches IS
'IK001 errors: a key reused for a different request';
COMMENT ON COLUMN @extschema@.idempotency_stats.takeovers IS
'in-progress claims whose owner was gone (lease over, or no lease) taken over with fence + 1';
COMMENT ON COLUMN @extschema@.idempotency_stats.stale_fences IS
'IK003 errors: writes refused for a stale or missing fence';
COMMENT ON COLUMN @extschema@.idempotency_stats.failures IS
'idem_fail calls that recorded a failure, final or retryable';
COMMENT ON COLUMN @extschema@.idempotency_stats.tokens_issued IS
'tokens returned by idem_token_issue';
COMMENT ON COLUMN @extschema@.idempotency_stats.tokens_consumed IS
'idem_token_consume calls that returned true';
COMMENT ON COLUMN @extschema@.idempotency_stats.tokens_refused IS
'idem_token_consume calls that returned false';
COMMENT ON COLUMN @extschema@.idempotency_stats.rows_purged IS
'expired records and tokens deleted by idem_purge';
COMMENT ON COLUMN @extschema@.idempotency_stats.stats_reset IS
'when the counters were last reset by idem_stats_reset, or the server started';

-- aggregate counts without keys, as pg_stat_database: readable by everyone
GRANT SELECT ON @extschema@.idempotency_stats TO PUBLIC;

CREATE FUNCTION @extschema@.idem_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'idem_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_stats_reset() IS
'set every counter of idempotency_stats to zero and stats_reset to now, for the whole cluster. Returns void. Revoked from PUBLIC. Errors: 55000 the library is not in shared_preload_libraries, 42501 no EXECUTE privilege';

REVOKE ALL ON FUNCTION @extschema@.idem_stats_reset() FROM PUBLIC;
