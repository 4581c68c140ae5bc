/* idempotency--1.2--1.3.sql: ALTER EXTENSION idempotency UPDATE TO '1.3' */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.3'" to load this file. \quit

-------------------------------------------------------------------------------
-- idempotency_cluster_stats(): the counters of every node of a Citus cluster
-------------------------------------------------------------------------------

-- The counters of idempotency_stats live in each server's shared memory and
-- count the calls that server ran.  On Citus a call runs on the node that
-- holds its shard (a delegated function) or where it was made, so one
-- node's view shows a part of the traffic, whichever node a dashboard
-- reads.  This function reads the view on every node of the cluster
-- (Citus's run_command_on_all_nodes, as the calling role, in the current
-- database) and adds them up; without Citus it is the local view.  It
-- fails rather than leave out a node: a scrape that failed is visible, a
-- total that is too low is not.
CREATE FUNCTION @extschema@.idempotency_cluster_stats(
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
    OUT stats_reset            timestamptz,
    OUT outcome_waits          bigint,
    OUT wait_seconds           float8[],
    OUT wait_seconds_bucket    bigint[],
    OUT wait_seconds_sum       float8,
    OUT wait_seconds_count     bigint,
    OUT nodes                  integer)
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
           count(*)
      INTO claims, replays, in_progress, waits, fingerprint_mismatches, takeovers,
           stale_fences, failures, tokens_issued, tokens_consumed, tokens_refused,
           rows_purged, stats_reset, outcome_waits, wait_seconds_sum,
           wait_seconds_count, nodes
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
'the columns of idempotency_stats summed over every node of a Citus cluster (stats_reset: the latest of the nodes; nodes: how many answered), readable from any node; without Citus, this server''s view. Errors: 08000 a node did not answer or refused (its error in the detail)';
