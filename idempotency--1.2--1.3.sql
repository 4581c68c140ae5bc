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
-- the same readers as the view it sums
REVOKE EXECUTE ON FUNCTION @extschema@.idempotency_cluster_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idempotency_cluster_stats() TO pg_monitor;

-------------------------------------------------------------------------------
-- Messaging: a transactional outbox (src/outbox.c)
-------------------------------------------------------------------------------

-- One row per message.  idem_outbox_enqueue inserts it in the producer's
-- transaction, so it exists exactly when the business writes commit; a
-- relay claims batches (SKIP LOCKED, a lease, a fence), publishes them and
-- marks them sent with the claim's fence; idem_purge deletes sent rows
-- after their retention.  available_at is when a row may next be claimed:
-- its enqueue time, its lease end while claimed, its retry time after a
-- failure, so that a claim reads one partial index and skips nothing.
CREATE TABLE @extschema@.idempotency_outbox (
    message_id   uuid        NOT NULL,
    scope        text        NOT NULL DEFAULT '',
    destination  text        NOT NULL,
    payload      jsonb       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}',
    status       text        NOT NULL DEFAULT 'pending',
    attempts     integer     NOT NULL DEFAULT 0,
    fence        bigint      NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL,
    available_at timestamptz NOT NULL,
    locked_until timestamptz,
    sent_at      timestamptz,
    expires_at   timestamptz,
    last_error   text,
    CONSTRAINT idempotency_outbox_pkey PRIMARY KEY (message_id),
    CONSTRAINT idempotency_outbox_destination_check
        CHECK (destination OPERATOR(pg_catalog.<>) ''),
    CONSTRAINT idempotency_outbox_headers_check
        CHECK (pg_catalog.jsonb_typeof(headers) OPERATOR(pg_catalog.=) 'object'),
    CONSTRAINT idempotency_outbox_status_check
        CHECK (status OPERATOR(pg_catalog.=) ANY ('{pending,sent,dead}'::text[]))
);

COMMENT ON TABLE @extschema@.idempotency_outbox IS
'transactional outbox: one row per message enqueued by idem_outbox_enqueue, published by a relay (idem_outbox_claim, idem_outbox_mark_sent, idem_outbox_mark_failed)';
COMMENT ON COLUMN @extschema@.idempotency_outbox.message_id IS
'the message''s ID, fixed at enqueue; the relay publishes it as the broker''s message ID and the consumer deduplicates by it';
COMMENT ON COLUMN @extschema@.idempotency_outbox.scope IS
'namespace of the producer (tenant, service); checked against idem_scope_grant for roles without table privileges';
COMMENT ON COLUMN @extschema@.idempotency_outbox.destination IS
'where the relay publishes the message (for RabbitMQ a routing key or queue name); never empty';
COMMENT ON COLUMN @extschema@.idempotency_outbox.payload IS
'the message body, as JSON';
COMMENT ON COLUMN @extschema@.idempotency_outbox.headers IS
'message headers, a JSON object ({} when none)';
COMMENT ON COLUMN @extschema@.idempotency_outbox.status IS
'pending (not yet confirmed by the broker), sent (confirmed; kept until expires_at) or dead (given up after max_attempts failures)';
COMMENT ON COLUMN @extschema@.idempotency_outbox.attempts IS
'how many times a relay claimed the message';
COMMENT ON COLUMN @extschema@.idempotency_outbox.fence IS
'fence of the last claim (0: never claimed); only a mark carrying it is accepted';
COMMENT ON COLUMN @extschema@.idempotency_outbox.created_at IS
'server time (clock_timestamp) of the enqueue';
COMMENT ON COLUMN @extschema@.idempotency_outbox.available_at IS
'when a relay may claim the message next: enqueue time, then the end of a claim''s lease or the retry time after a failure';
COMMENT ON COLUMN @extschema@.idempotency_outbox.locked_until IS
'end of the lease of the last claim; NULL when unclaimed, failed or sent';
COMMENT ON COLUMN @extschema@.idempotency_outbox.sent_at IS
'server time when a relay marked the message sent; NULL before';
COMMENT ON COLUMN @extschema@.idempotency_outbox.expires_at IS
'sent_at + idempotency.default_ttl: from then on idem_purge may delete the sent message; NULL while pending or dead';
COMMENT ON COLUMN @extschema@.idempotency_outbox.last_error IS
'the error of the last idem_outbox_mark_failed; NULL when none';

-- claims read the claimable rows in the order they became available
CREATE INDEX idempotency_outbox_available_idx
    ON @extschema@.idempotency_outbox (available_at)
    WHERE status OPERATOR(pg_catalog.=) 'pending';
COMMENT ON INDEX @extschema@.idempotency_outbox_available_idx IS
'pending messages by available_at: what idem_outbox_claim reads';
-- purge finds expired sent rows
CREATE INDEX idempotency_outbox_expires_idx
    ON @extschema@.idempotency_outbox (expires_at)
    WHERE status OPERATOR(pg_catalog.=) 'sent';
COMMENT ON INDEX @extschema@.idempotency_outbox_expires_idx IS
'sent messages by expires_at: what idem_purge reads';

-- one fence per claim, larger than every fence issued before
CREATE SEQUENCE @extschema@.idempotency_outbox_fence_seq AS bigint;
COMMENT ON SEQUENCE @extschema@.idempotency_outbox_fence_seq IS
'fences of idem_outbox_claim: each claim draws one';

-- pg_dump keeps the messages and the fences already issued
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idempotency_outbox', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idempotency_outbox_fence_seq', '');

CREATE FUNCTION @extschema@.idem_outbox_enqueue(
    destination text,
    payload     jsonb,
    headers     jsonb DEFAULT NULL,
    message_id  uuid  DEFAULT NULL,
    scope       text  DEFAULT '')
RETURNS uuid
AS 'MODULE_PATHNAME', 'idem_outbox_enqueue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idem_outbox_enqueue(text, jsonb, jsonb, uuid, text) IS
'put a message into the outbox in the caller''s transaction; returns its ID (a new random UUID unless message_id is given)';

CREATE FUNCTION @extschema@.idem_outbox_claim(
    batch_size integer  DEFAULT 100,
    lease      interval DEFAULT '1 minute')
RETURNS TABLE (message_id  uuid,
               scope       text,
               destination text,
               payload     jsonb,
               headers     jsonb,
               attempts    integer,
               fence       bigint,
               created_at  timestamptz)
AS 'MODULE_PATHNAME', 'idem_outbox_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idem_outbox_claim(integer, interval) IS
'relay: claim up to batch_size pending messages for lease under one new fence, skipping those another session has locked';

CREATE FUNCTION @extschema@.idem_outbox_mark_sent(
    message_ids uuid[],
    fence       bigint)
RETURNS integer
AS 'MODULE_PATHNAME', 'idem_outbox_mark_sent'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idem_outbox_mark_sent(uuid[], bigint) IS
'relay: mark claimed messages sent after the broker confirmed them; refused (IK003) unless every one is still held under fence';

CREATE FUNCTION @extschema@.idem_outbox_mark_failed(
    message_id   uuid,
    fence        bigint,
    error        text,
    retry_after  interval DEFAULT '10 seconds',
    max_attempts integer  DEFAULT 10)
RETURNS text
AS 'MODULE_PATHNAME', 'idem_outbox_mark_failed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idem_outbox_mark_failed(uuid, bigint, text, interval, integer) IS
'relay: a claimed message could not be published; it is retried after retry_after, or given up (dead) after max_attempts claims; returns the new status';

CREATE FUNCTION @extschema@.idem_outbox_requeue(message_id uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'idem_outbox_requeue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.idem_outbox_requeue(uuid) IS
'operator: make a dead message pending again with its attempts reset; true when one was';

-- the relay's and the operator's functions: granted to the roles that
-- run them, never to PUBLIC (a relay works on every scope)
REVOKE ALL ON FUNCTION @extschema@.idem_outbox_claim(integer, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_outbox_mark_sent(uuid[], bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_outbox_mark_failed(uuid, bigint, text, interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_outbox_requeue(uuid) FROM PUBLIC;

CREATE VIEW @extschema@.idem_outbox_dead WITH (security_invoker = true) AS
SELECT message_id, scope, destination, attempts, last_error, created_at
  FROM ONLY @extschema@.idempotency_outbox
 WHERE status OPERATOR(pg_catalog.=) 'dead'
 ORDER BY created_at, message_id;
COMMENT ON VIEW @extschema@.idem_outbox_dead IS
'messages given up after max_attempts failed publishes, oldest first (idem_outbox_requeue sends one again); runs with the caller''s privileges';

-- Relay lag from the table itself: counts without message contents, as
-- idempotency_stats, but per database and transactional.  It counts rows,
-- so it is for monitoring at scrape intervals, not for every request.
CREATE VIEW @extschema@.idem_outbox_stats AS
SELECT pg_catalog.count(*) FILTER (WHERE o.status OPERATOR(pg_catalog.=) 'pending') AS pending,
       pg_catalog.count(*) FILTER (WHERE o.status OPERATOR(pg_catalog.=) 'pending'
                                     AND o.locked_until OPERATOR(pg_catalog.>) n.now) AS leased,
       pg_catalog.count(*) FILTER (WHERE o.status OPERATOR(pg_catalog.=) 'pending'
                                     AND o.attempts OPERATOR(pg_catalog.>) 0) AS retried,
       pg_catalog.count(*) FILTER (WHERE o.status OPERATOR(pg_catalog.=) 'sent') AS sent,
       pg_catalog.count(*) FILTER (WHERE o.status OPERATOR(pg_catalog.=) 'dead') AS dead,
       n.now OPERATOR(pg_catalog.-)
           pg_catalog.min(o.created_at) FILTER (WHERE o.status OPERATOR(pg_catalog.=) 'pending') AS lag
  FROM (SELECT pg_catalog.clock_timestamp() AS now) AS n
  LEFT JOIN ONLY @extschema@.idempotency_outbox AS o ON true
 GROUP BY n.now;
COMMENT ON VIEW @extschema@.idem_outbox_stats IS
'outbox counts of this database: pending, leased (claimed, lease live), retried (pending after a claim), sent (kept until their retention), dead, and lag (age of the oldest pending message; NULL when none); readable by the roles granted SELECT';
REVOKE ALL ON @extschema@.idem_outbox_stats FROM PUBLIC;
