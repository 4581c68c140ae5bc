-- idempotency_stats: the counters count what the functions answered in
-- this database (make test preloads the library; without it, and for
-- other databases, see test/t/003_stats_preload.pl).  This suite relies
-- on nothing else running in its database at the same time.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
\set counters 'SELECT claims, replays, in_progress, waits, fingerprint_mismatches AS mismatches, takeovers, failures FROM idempotency_stats'
TRUNCATE idempotent_record, idempotency_token;

-- the number of databases counted, fixed at server start
SELECT name, boot_val, unit, min_val, max_val, context
  FROM pg_settings WHERE name = 'idempotency.stats_databases';

-- the view's shape
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute
 WHERE attrelid = 'idempotency_stats'::regclass AND attnum > 0
 ORDER BY attnum;

-- a reset zeroes everything and moves stats_reset to now
SELECT clock_timestamp() AS before_reset \gset
SELECT idem_stats_reset();
SELECT claims + replays + in_progress + waits + fingerprint_mismatches
       + takeovers + stale_fences + failures + tokens_issued
       + tokens_consumed + tokens_refused + rows_purged + outcome_waits
       + wait_seconds_count = 0 AND wait_seconds_sum = 0
       AND wait_seconds_bucket = array_fill(0::bigint, ARRAY[12]) AS all_zero,
       stats_reset BETWEEN :'before_reset' AND clock_timestamp() AS reset_now
  FROM idempotency_stats;

-- a claim and its duplicates
BEGIN;
SELECT outcome FROM idem_claim('s-1', fingerprint => '\x01');
SELECT outcome FROM idem_claim('s-1');	-- own open claim: in_progress
SELECT idem_finish('s-1', '{"ok": true}');
COMMIT;
SELECT outcome FROM idem_claim('s-1');
SELECT outcome FROM idem_claim('s-1', fingerprint => '\x01');
:counters;

-- a fingerprint mismatch is counted although the call fails
SELECT outcome FROM idem_claim('s-1', fingerprint => '\x02');
:sqlstate
:counters;

-- failures, final and retryable, each with its claim
BEGIN;
SELECT outcome FROM idem_claim('s-2');
SELECT idem_fail('s-2', '{"error": "declined"}', retryable => false);
SELECT outcome FROM idem_claim('s-3');
SELECT idem_fail('s-3', '{"error": "timeout"}');
COMMIT;
:counters;

-- counters are not transactional: a rolled-back claim stays counted
BEGIN;
SELECT outcome FROM idem_claim('s-4');
ROLLBACK;
:counters;

-- a live lease answers in_progress; after it, the next claim takes over
SELECT outcome, fence FROM idem_claim('s-5', lease => '1 hour');
SELECT outcome FROM idem_claim('s-5', wait => false);
UPDATE idempotent_record SET locked_until = clock_timestamp() - interval '1 second'
 WHERE key = 's-5';
SELECT outcome, fence FROM idem_claim('s-5', lease => '1 hour');
:counters;

-- an expired record reclaimed is a claim, not a takeover
UPDATE idempotent_record SET created_at = created_at - interval '2 days',
       updated_at = updated_at - interval '2 days', expires_at = expires_at - interval '2 days'
 WHERE key = 's-1';
BEGIN;
SELECT outcome, fence FROM idem_claim('s-1');
SELECT idem_finish('s-1', '{"again": true}');
COMMIT;
:counters;

-- the wait-time histogram: fixed bounds in seconds, cumulative counts.  A
-- claim that answers at its wait_for_outcome bound (the key is held by a
-- live lease) waited at least that long by the server's clock: 0.2 s is
-- above the 0.1 s bound and within the last one
SELECT wait_seconds FROM idempotency_stats;
SELECT outcome FROM idem_claim('s-5', wait_for_outcome => '0.2 s');
SELECT outcome_waits, wait_seconds_count,
       wait_seconds_bucket[array_position(wait_seconds, 0.1)] AS within_100ms,
       wait_seconds_bucket[12] AS within_300s,
       wait_seconds_sum >= 0.2 AS sum_at_least_bound
  FROM idempotency_stats;

-- a write with a stale fence is refused and counted, and so is one with a
-- fence the record never issued
SELECT idem_finish('s-5', '{"by": "the first worker"}', fence => 1);
:sqlstate
SELECT stale_fences FROM idempotency_stats;
SELECT idem_finish('s-5', '{"by": "nobody"}', fence => 0);
:sqlstate
SELECT stale_fences FROM idempotency_stats;

-- tokens: issued, consumed once, refused after
SELECT idem_token_issue('form') AS token \gset
SELECT idem_token_issue('form') IS NOT NULL AS issued;
SELECT idem_token_consume(:'token', 'form') AS first, idem_token_consume(:'token', 'form') AS second;
SELECT idem_token_consume('no-such-token', 'form') AS unknown;
SELECT tokens_issued, tokens_consumed, tokens_refused FROM idempotency_stats;

-- purge counts the rows it deleted (records and tokens)
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
SELECT 'old-' || i, 'succeeded', 1, now(), now(), now() - interval '1 hour'
  FROM generate_series(1, 3) AS i;
UPDATE idempotency_token SET expires_at = now() - interval '1 hour';
SELECT idem_purge();
SELECT rows_purged FROM idempotency_stats;

-- errors before a claim is decided count nothing
SELECT outcome FROM idem_claim('');
:sqlstate
SELECT outcome FROM idem_claim(NULL);
:sqlstate
:counters;

-- the view is for members of pg_monitor (and superusers): any other role
-- gets 42501, from the view and from the functions behind it; the reset is
-- not granted to PUBLIC
CREATE ROLE regress_idem_nobody;
CREATE ROLE regress_idem_monitor IN ROLE pg_monitor;
SET ROLE regress_idem_nobody;
SELECT claims FROM idempotency_stats;
:sqlstate
SELECT claims FROM idem_stats();
:sqlstate
SELECT outcome_waits FROM idem_wait_stats();
:sqlstate
SET ROLE regress_idem_monitor;
SELECT claims > 0 AS readable FROM idempotency_stats;
SELECT idem_stats_reset();
:sqlstate
RESET ROLE;
SELECT has_function_privilege('regress_idem_monitor', 'idem_stats_reset()', 'EXECUTE') AS may_reset;
DROP ROLE regress_idem_monitor, regress_idem_nobody;

SELECT idem_stats_reset();
:counters;
TRUNCATE idempotent_record, idempotency_token;

-- idempotency_cluster_stats() without Citus: this server's view, one node
SELECT idem_once('cluster-stats');
SELECT c.nodes, c.claims = s.claims AS claims_equal,
       c.wait_seconds_bucket = s.wait_seconds_bucket AS buckets_equal,
       c.stats_reset = s.stats_reset AS reset_equal
  FROM idempotency_cluster_stats() c, idempotency_stats s;
TRUNCATE idempotent_record;

-- Messaging (1.4).  The outbox's counters count what committed, as the
-- table does: an enqueue rolled back, or rolled back to a savepoint,
-- publishes nothing and counts nothing
\set messaging 'SELECT outbox_enqueued AS enqueued, outbox_sent AS sent, inbox_duplicates AS duplicates, replays FROM idempotency_stats'
TRUNCATE idempotency_outbox;
SELECT idem_stats_reset();
BEGIN;
SELECT count(idem_outbox_enqueue('orders', '{}')) FROM generate_series(1, 5);
:messaging;
ROLLBACK;
:messaging;
BEGIN;
SELECT count(idem_outbox_enqueue('orders', '{}', message_id => ('00000000-0000-4000-8000-00000000000' || n)::uuid))
  FROM generate_series(1, 2) AS n;
SAVEPOINT s;
SELECT count(idem_outbox_enqueue('orders', '{}')) FROM generate_series(1, 3);
ROLLBACK TO SAVEPOINT s;
SAVEPOINT t;
SELECT idem_outbox_enqueue('orders', '{}', message_id => '00000000-0000-4000-8000-000000000003');
RELEASE SAVEPOINT t;
COMMIT;
DO $$ BEGIN
    PERFORM idem_outbox_enqueue('orders', '{}');
    RAISE EXCEPTION 'the handler failed';
EXCEPTION WHEN raise_exception THEN NULL;	-- its subtransaction rolls back
END $$;
SELECT idem_outbox_enqueue('orders', '{}', message_id => '00000000-0000-4000-8000-000000000001');
-- (a duplicate ID: 23505, nothing counted)
:sqlstate
:messaging;
SELECT count(*) AS in_outbox FROM idempotency_outbox;

-- a prepared transaction counts when it is prepared, whatever follows
BEGIN;
SELECT count(idem_outbox_enqueue('orders', '{}'));
PREPARE TRANSACTION 'regress_idem_outbox';
SELECT outbox_enqueued FROM idempotency_stats;
ROLLBACK PREPARED 'regress_idem_outbox';
SELECT outbox_enqueued FROM idempotency_stats;

-- relay lag: the oldest pending message's age, a gauge read from the
-- table (its enqueue moved 10 s back here); the seconds from enqueue to
-- mark add up in outbox_send_lag_seconds_sum for every message marked
UPDATE idempotency_outbox SET created_at = created_at - interval '10 seconds';
SELECT outbox_lag_seconds BETWEEN 10 AND 3600 AS lag_10s_or_more FROM idempotency_stats;
SELECT array_agg(message_id) AS ids, max(fence) AS fence FROM idem_outbox_claim(2, '1 hour') \gset
BEGIN;
SELECT idem_outbox_mark_sent(:'ids', :fence);
ROLLBACK;
:messaging;
SELECT idem_outbox_mark_sent(:'ids', :fence);
SELECT idem_outbox_mark_sent(:'ids', :fence);	-- repeated: marks 0, counts 0
\set VERBOSITY sqlstate
SELECT idem_outbox_mark_sent(:'ids', :fence - 1);	-- stale fence (its number varies)
\set VERBOSITY default
:messaging;
SELECT stale_fences, outbox_send_lag_seconds_sum BETWEEN 20 AND 7200 AS two_lags_of_10s_or_more,
       outbox_lag_seconds BETWEEN 10 AND 3600 AS one_still_pending
  FROM idempotency_stats;
-- a failed publish is not a send
SELECT message_id AS id, fence FROM idem_outbox_claim(1, '1 hour') \gset
SELECT idem_outbox_mark_failed(:'id', :fence, 'nack');
UPDATE idempotency_outbox SET available_at = available_at - interval '1 minute';	-- its retry is due
SELECT message_id AS id, fence FROM idem_outbox_claim(1, '1 hour') \gset
SELECT idem_outbox_mark_sent(ARRAY[:'id']::uuid[], :fence);
SELECT outbox_sent, outbox_lag_seconds AS nothing_pending FROM idempotency_stats;

-- the inbox: every idem_once that answers false is a delivery refused
-- (also a replay), counted at the call, as the consumer rolls back after
-- it; a replay of idem_claim is not
SELECT idem_once('m-1', scope => 'inbox:billing') AS first;
BEGIN;
SELECT idem_once('m-1', scope => 'inbox:billing') AS redelivered;
ROLLBACK;
SELECT idem_once('m-1', scope => 'inbox:billing') AS redelivered;
SELECT idem_once('m-2', scope => 'inbox:billing') AS first;
BEGIN;
SELECT outcome FROM idem_claim('rpc-1', scope => 'inbox:rpc');
SELECT idem_finish('rpc-1', '{"reply": 1}', scope => 'inbox:rpc');
COMMIT;
SELECT outcome FROM idem_claim('rpc-1', scope => 'inbox:rpc');
:messaging;

-- idempotency_cluster_stats() has them too; the reset zeroes them; the
-- function behind them is pg_monitor's
SELECT c.outbox_enqueued = s.outbox_enqueued AND c.outbox_sent = s.outbox_sent
       AND c.outbox_send_lag_seconds_sum = s.outbox_send_lag_seconds_sum
       AND c.inbox_duplicates = s.inbox_duplicates AS same_as_view,
       c.outbox_lag_seconds AS lag
  FROM idempotency_cluster_stats() c, idempotency_stats s;
SELECT idem_stats_reset();
SELECT outbox_enqueued, outbox_sent, outbox_send_lag_seconds_sum, inbox_duplicates
  FROM idempotency_stats;
CREATE ROLE regress_idem_nobody;
SET ROLE regress_idem_nobody;
SELECT outbox_sent FROM idem_messaging_stats();
:sqlstate
RESET ROLE;
SELECT has_function_privilege('pg_monitor', 'idem_messaging_stats()', 'EXECUTE') AS monitor_may_read;
DROP ROLE regress_idem_nobody;
TRUNCATE idempotent_record, idempotency_outbox;
