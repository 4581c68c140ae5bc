/* idempotency--1.3--1.4.sql: ALTER EXTENSION idempotency UPDATE TO '1.4' */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.4'" to load this file. \quit

-------------------------------------------------------------------------------
-- idempotency_stats: messaging counters (outbox and inbox) and the relay lag
-------------------------------------------------------------------------------

-- Appended to the view's columns, as idem_wait_stats() was in 1.1: CREATE
-- OR REPLACE VIEW keeps the privileges granted on it and the views that
-- read it, and idem_stats() keeps its 1.0 columns.  outbox_enqueued and
-- outbox_sent count what committed (a rolled-back enqueue never reaches
-- the broker); inbox_duplicates counts at the call (a consumer rolls back
-- after a duplicate).  outbox_lag_seconds is a gauge read from the outbox
-- when the view is read, with the view owner's rights.
CREATE FUNCTION @extschema@.idem_messaging_stats(
    OUT outbox_enqueued             bigint,
    OUT outbox_sent                 bigint,
    OUT outbox_send_lag_seconds_sum float8,
    OUT inbox_duplicates            bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'idem_messaging_stats'
LANGUAGE C VOLATILE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.idem_messaging_stats() IS 'the current database''s messaging counters behind the outbox and inbox columns of idempotency_stats';
REVOKE EXECUTE ON FUNCTION @extschema@.idem_messaging_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idem_messaging_stats() TO pg_monitor;

CREATE OR REPLACE VIEW @extschema@.idempotency_stats AS
    SELECT s.*, w.*, m.*,
           (SELECT COALESCE(pg_catalog.date_part('epoch',
                       pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) pg_catalog.min(o.created_at)), 0)
              FROM ONLY @extschema@.idempotency_outbox AS o
             WHERE o.status OPERATOR(pg_catalog.=) 'pending') AS outbox_lag_seconds
      FROM @extschema@.idem_stats() AS s
     CROSS JOIN @extschema@.idem_wait_stats() AS w
     CROSS JOIN @extschema@.idem_messaging_stats() AS m;

COMMENT ON COLUMN @extschema@.idempotency_stats.outbox_enqueued IS 'messages enqueued by idem_outbox_enqueue in transactions that committed (or were prepared)';
COMMENT ON COLUMN @extschema@.idempotency_stats.outbox_sent IS 'messages marked sent by idem_outbox_mark_sent in transactions that committed; a repeated mark counts once';
COMMENT ON COLUMN @extschema@.idempotency_stats.outbox_send_lag_seconds_sum IS 'seconds from enqueue to mark of the messages counted in outbox_sent (rate of it / rate of outbox_sent: mean relay lag)';
COMMENT ON COLUMN @extschema@.idempotency_stats.inbox_duplicates IS 'idem_once calls that answered false: deliveries refused by the inbox (also in replays); counted at the call';
COMMENT ON COLUMN @extschema@.idempotency_stats.outbox_lag_seconds IS 'gauge: age in seconds of the oldest pending outbox message at the time of reading (0 when none), read from the table';

-- idempotency_cluster_stats() returns the view's columns: its OUT columns
-- change, so it is made again, with the grants it had (a plain DROP would
-- lose those given to other roles than pg_monitor).  The counters add up
-- over the nodes; the lag is the largest of them.
CREATE TEMP TABLE idem_cluster_stats_grants ON COMMIT DROP AS
SELECT pg_catalog.pg_get_userbyid(a.grantee) AS grantee
  FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
 WHERE p.oid OPERATOR(pg_catalog.=) '@extschema@.idempotency_cluster_stats()'::pg_catalog.regprocedure
   AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
   AND a.grantee OPERATOR(pg_catalog.<>) 0
   AND a.grantee OPERATOR(pg_catalog.<>) p.proowner;

DROP FUNCTION @extschema@.idempotency_cluster_stats();

CREATE FUNCTION @extschema@.idempotency_cluster_stats(
    OUT claims                      bigint,
    OUT replays                     bigint,
    OUT in_progress                 bigint,
    OUT waits                       bigint,
    OUT fingerprint_mismatches      bigint,
    OUT takeovers                   bigint,
    OUT stale_fences                bigint,
    OUT failures                    bigint,
    OUT tokens_issued               bigint,
    OUT tokens_consumed             bigint,
    OUT tokens_refused              bigint,
    OUT rows_purged                 bigint,
    OUT stats_reset                 timestamptz,
    OUT outcome_waits               bigint,
    OUT wait_seconds                float8[],
    OUT wait_seconds_bucket         bigint[],
    OUT wait_seconds_sum            float8,
    OUT wait_seconds_count          bigint,
    OUT outbox_enqueued             bigint,
    OUT outbox_sent                 bigint,
    OUT outbox_send_lag_seconds_sum float8,
    OUT inbox_duplicates            bigint,
    OUT outbox_lag_seconds          float8,
    OUT nodes                       integer)
RETURNS record
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    node_stats jsonb[] := '{}';
    answer record;
BEGIN
    IF to_regprocedure('pg_catalog.run_command_on_all_nodes(text,boolean,boolean)') IS NULL THEN
        node_stats := ARRAY[(SELECT to_jsonb(s) FROM @extschema@.idempotency_stats s)];
    ELSE
        FOR answer IN
            SELECT r.success, r.result, n.nodename, n.nodeport
              FROM run_command_on_all_nodes(
                     'SELECT to_jsonb(s) FROM @extschema@.idempotency_stats s') r
              LEFT JOIN pg_dist_node n USING (nodeid)
        LOOP
            IF NOT answer.success OR answer.result IS NULL THEN
                RAISE EXCEPTION 'could not read the idempotency counters of node %:%',
                      coalesce(answer.nodename, 'local'), coalesce(answer.nodeport::text, current_setting('port'))
                    USING ERRCODE = 'connection_exception',
                          DETAIL = coalesce(answer.result, 'no answer'),
                          HINT = 'idempotency_cluster_stats() totals every node or fails: make the node answer (library preloaded, the same role with the same privileges) and read it again.';
            END IF;
            node_stats := node_stats || answer.result::jsonb;
        END LOOP;
    END IF;

    SELECT sum((j->>'claims')::bigint), sum((j->>'replays')::bigint),
           sum((j->>'in_progress')::bigint), sum((j->>'waits')::bigint),
           sum((j->>'fingerprint_mismatches')::bigint), sum((j->>'takeovers')::bigint),
           sum((j->>'stale_fences')::bigint), sum((j->>'failures')::bigint),
           sum((j->>'tokens_issued')::bigint), sum((j->>'tokens_consumed')::bigint),
           sum((j->>'tokens_refused')::bigint), sum((j->>'rows_purged')::bigint),
           max((j->>'stats_reset')::timestamptz),
           sum((j->>'outcome_waits')::bigint),
           sum((j->>'wait_seconds_sum')::float8), sum((j->>'wait_seconds_count')::bigint),
           sum((j->>'outbox_enqueued')::bigint), sum((j->>'outbox_sent')::bigint),
           sum((j->>'outbox_send_lag_seconds_sum')::float8), sum((j->>'inbox_duplicates')::bigint),
           max((j->>'outbox_lag_seconds')::float8),
           count(*)
      INTO claims, replays, in_progress, waits, fingerprint_mismatches, takeovers,
           stale_fences, failures, tokens_issued, tokens_consumed, tokens_refused,
           rows_purged, stats_reset, outcome_waits, wait_seconds_sum,
           wait_seconds_count, outbox_enqueued, outbox_sent,
           outbox_send_lag_seconds_sum, inbox_duplicates, outbox_lag_seconds, nodes
      FROM unnest(node_stats) j;
    -- the bounds are fixed; the buckets add up bound by bound
    wait_seconds := ARRAY(SELECT b::float8
                            FROM jsonb_array_elements_text(node_stats[1]->'wait_seconds') b);
    wait_seconds_bucket := ARRAY(
        SELECT sum(b.n::bigint)::bigint
          FROM unnest(node_stats) j,
               jsonb_array_elements_text(j->'wait_seconds_bucket') WITH ORDINALITY b(n, i)
         GROUP BY b.i ORDER BY b.i);
END
$$;

COMMENT ON FUNCTION @extschema@.idempotency_cluster_stats() IS
'the columns of idempotency_stats summed over every node of a Citus cluster (stats_reset: the latest of the nodes; outbox_lag_seconds: the largest; nodes: how many answered), readable from any node; without Citus, this server''s view. Errors: 08000 a node did not answer or refused (its error in the detail)';
REVOKE EXECUTE ON FUNCTION @extschema@.idempotency_cluster_stats() FROM PUBLIC;
DO $$
DECLARE
    g text;
BEGIN
    FOR g IN SELECT grantee FROM idem_cluster_stats_grants LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION @extschema@.idempotency_cluster_stats() TO %I', g);
    END LOOP;
END
$$;
DROP TABLE idem_cluster_stats_grants;

-------------------------------------------------------------------------------
-- idem_finish_response: idem_finish with an HTTP response's stored form
-------------------------------------------------------------------------------

-- The client packages record a response as {"status", "headers", "body" |
-- "body_base64"}; built in C from the body's bytes, a large body costs the
-- server one copy instead of the passes of encode() and jsonb_build_object.
CREATE FUNCTION @extschema@.idem_finish_response(
    key     text,
    status  integer,
    headers jsonb,
    body    bytea,
    scope   text   DEFAULT '',
    fence   bigint DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'idem_finish_response'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.idem_finish_response(text, integer, jsonb, bytea, text, bigint) IS
'record success with an HTTP response as the result, as idem_finish does: the stored form {"status": status, "headers": headers, "body": text} when body bytea is UTF-8 without NUL in a UTF-8 database, else "body_base64" (standard alphabet, padded, no line breaks); what the client packages store and replay. Fence as for idem_finish. Returns void. Errors: IK002, IK003 as for idem_finish, 22004 NULL key, status, headers, body or scope, 22023 status outside 100-999, or headers a replay cannot send (not a JSON object of token names and values that are strings or arrays of strings without CR or LF), 54000 a body too large for a jsonb string (over 256 MiB; as base64, bytes over 192 MiB), 25006 read-only transaction or standby';

-------------------------------------------------------------------------------
-- idempotent_record.result: lz4 compression where the server has it
-------------------------------------------------------------------------------

-- A stored result over about 2 kB is compressed.  pglz, the default, runs
-- over most of a large value before it gives up on one that does not
-- compress (the base64 of an image or an archive): about half a second of
-- a 20 MB response's commit.  lz4 gives up early and compresses text
-- better.  Servers built without lz4 keep pglz.  New values only: stored
-- ones stay as they are, readable either way.  On Citus a table already
-- distributed is left alone (its shards keep their compression).
DO $$
DECLARE
    distributed boolean := false;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1)'
           INTO distributed USING '@extschema@.idempotent_record'::pg_catalog.regclass;
    END IF;
    IF NOT distributed AND EXISTS (SELECT FROM pg_catalog.pg_settings
                                    WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE @extschema@.idempotent_record ALTER COLUMN result SET COMPRESSION lz4;
    END IF;
END
$$;
