-- Leased claims: the claim commits on its own, the work
-- happens outside the database, the outcome comes later with the fence.
-- Lease ends are simulated by moving locked_until into the past.
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;

-- a leased claim commits on its own: no IK004 in autocommit
SELECT outcome, status, fence, recovery_point, retry_after
  FROM idem_claim('pay-1', scope => 'acct', lease => '30 seconds',
                  fingerprint => idem_fingerprint('{"amount": 100}'));
SELECT status, fence, locked_until - created_at AS lease, expires_at - created_at AS ttl
  FROM idempotent_record WHERE key = 'pay-1';

-- while the lease is live, duplicates get in_progress with retry_after:
-- idempotency.retry_after (1 second) while more of the lease is left
SELECT outcome, status, fence, retry_after = interval '1 second' AS retry_hint
  FROM idem_claim('pay-1', scope => 'acct');
SELECT outcome, status FROM idem_claim('pay-1', scope => 'acct', wait => false);
-- ... and a different request is refused, the record untouched
SELECT outcome FROM idem_claim('pay-1', scope => 'acct', fingerprint => idem_fingerprint('{"amount": 999}'));
:sqlstate

-- only the holder of the fence may write: no fence, a made-up one
-- (pg_temp.error_text shows each call's error with its DETAIL and HINT)
\i sql/include/try.sql
SELECT c AS call, pg_temp.error_text(c) AS refused FROM (VALUES
    ($$SELECT idem_fail('pay-1', '{"e": "not mine"}', scope => 'acct')$$),
    ($$SELECT idem_fail('pay-1', '{"e": "not mine"}', scope => 'acct', fence => 7)$$),
    ($$SELECT idem_finish('pay-1', '{"e": "not mine"}', scope => 'acct', fence => 0)$$)) AS v(c);
SELECT status, fence, result FROM idempotent_record WHERE key = 'pay-1';

-- a leased claim is finished from another connection (poolers
-- hand out another backend) with its fence
\c
\i sql/include/try.sql
SELECT idem_checkpoint('pay-1', 'charged', scope => 'acct', fence => 1);
SELECT idem_finish('pay-1', '{"charge": "ch_1"}', scope => 'acct', fence => 1);
SELECT outcome, status, result, fence, recovery_point FROM idem_claim('pay-1', scope => 'acct');
SELECT locked_until IS NULL AS lease_dropped FROM idempotent_record WHERE key = 'pay-1';
-- an outcome is recorded once
SELECT idem_finish('pay-1', '{"charge": "ch_2"}', scope => 'acct', fence => 1);
:sqlstate

-- takeover after the lease ends: fence + 1, recovery point kept; the
-- stale owner can neither finish, fail, checkpoint nor extend, and changes
-- nothing
SELECT outcome, fence FROM idem_claim('pay-2', lease => '1 minute');
SELECT idem_checkpoint('pay-2', 'authorized', fence => 1);
UPDATE idempotent_record SET locked_until = now() - interval '1 second' WHERE key = 'pay-2';
SELECT outcome, status, fence, recovery_point FROM idem_claim('pay-2', lease => '1 minute');
SELECT c AS call, pg_temp.error_text(c) AS refused FROM (VALUES
    ($$SELECT idem_finish('pay-2', '{"by": "A"}', fence => 1)$$), ($$SELECT idem_fail('pay-2', '{"by": "A"}', retryable => false, fence => 1)$$),
    ($$SELECT idem_fail('pay-2', '{"by": "A"}', fence => 1)$$), ($$SELECT idem_checkpoint('pay-2', 'captured', fence => 1)$$),
    ($$SELECT idem_extend_lease('pay-2', '1 minute', fence => 1)$$), ($$SELECT idem_mark_unknown('pay-2', '{"by": "A"}', fence => 1)$$)) AS v(c);
SELECT status, fence, recovery_point, result FROM idempotent_record WHERE key = 'pay-2';
SELECT idem_finish('pay-2', '{"by": "B"}', fence => 2);
SELECT outcome, status, result, fence FROM idem_claim('pay-2');

-- the recovery point is saved in the caller's transaction: rolled back
-- with it
SELECT outcome, fence FROM idem_claim('pay-3', lease => '1 minute');
BEGIN;
SELECT idem_checkpoint('pay-3', 'phase-1', fence => 1);
ROLLBACK;
SELECT recovery_point FROM idempotent_record WHERE key = 'pay-3';
BEGIN;
SELECT idem_checkpoint('pay-3', 'phase-1', fence => 1);
COMMIT;
SELECT recovery_point FROM idempotent_record WHERE key = 'pay-3';

-- extend_lease: the heartbeat moves the lease end (server clock)
SELECT idem_extend_lease('pay-3', '2 hours', fence => 1) - clock_timestamp() > interval '119 minutes' AS extended;
SELECT locked_until - updated_at AS lease FROM idempotent_record WHERE key = 'pay-3';
SELECT outcome, status FROM idem_claim('pay-3');
SELECT locked_until - clock_timestamp() > interval '119 minutes' AS lease_left FROM idempotent_record WHERE key = 'pay-3';
-- a retryable failure of a leased claim releases the key: the next claim
-- takes it over, and the released fence is refused
SELECT idem_fail('pay-3', '{"e": "provider down"}', fence => 1);
SELECT outcome, fence, recovery_point FROM idem_claim('pay-3', lease => '1 minute');
SELECT idem_finish('pay-3', '{"by": "released worker"}', fence => 1);
:sqlstate
SELECT idem_fail('pay-3', '{"e": "again"}', fence => 2);

-- an in-transaction claim: its transaction needs no fence, a given one
-- must match, and it has no lease to extend
BEGIN;
SELECT outcome, fence FROM idem_claim('tx-1');
SELECT idem_checkpoint('tx-1', 'step-1');
SELECT idem_finish('tx-1', '{}', fence => 2);
:sqlstate
ROLLBACK;
BEGIN;
SELECT outcome, fence FROM idem_claim('tx-1');
SELECT idem_extend_lease('tx-1', '1 minute');
:sqlstate
ROLLBACK;
BEGIN;
SELECT outcome, fence FROM idem_claim('tx-1');
SELECT idem_checkpoint('tx-1', 'step-1', fence => 1);
SELECT idem_finish('tx-1', '{"done": true}', fence => 1);
COMMIT;
SELECT outcome, result, recovery_point FROM idem_claim('tx-1');

-- lease and retention are independent
SELECT outcome FROM idem_claim('k8', lease => '1 hour', ttl => '1 day');
SELECT outcome, status, retry_after = interval '1 second' AS retry_hint FROM idem_claim('k8');
SELECT outcome FROM idem_claim('k8b', lease => '2 seconds', ttl => '1 day');
UPDATE idempotent_record SET locked_until = now() - interval '1 second' WHERE key = 'k8b';
SELECT outcome, fence FROM idem_claim('k8b', lease => '2 seconds');
-- the takeover starts a new retention period
SELECT expires_at - updated_at AS ttl FROM idempotent_record WHERE key = 'k8b';
-- a lease that outlives the ttl keeps the record alive: never reclaimed
-- while a worker holds it
SELECT outcome FROM idem_claim('k8c', lease => '1 hour', ttl => '1 second');
UPDATE idempotent_record SET expires_at = now() - interval '1 minute' WHERE key = 'k8c';
SELECT outcome, status, fence FROM idem_claim('k8c');

-- unknown outcome: claims answer in_progress, it never expires, and a
-- reconciler records the outcome with the fence
SELECT outcome, fence FROM idem_claim('pay-4', lease => '1 minute');
SELECT idem_mark_unknown('pay-4', '{"provider": "timeout after 30 s"}', fence => 1);
SELECT outcome, status, result, retry_after FROM idem_claim('pay-4');
UPDATE idempotent_record SET expires_at = now() - interval '1 minute' WHERE key = 'pay-4';
SELECT outcome, status FROM idem_claim('pay-4');
SELECT count(*) FROM idem_lookup('pay-4');
SELECT idem_finish('pay-4', '{"charge": "ch_4"}');
:sqlstate
SELECT idem_finish('pay-4', '{"charge": "ch_4"}', fence => 1);
SELECT status, result, locked_until FROM idempotent_record WHERE key = 'pay-4';

-- idem_pending: unknown outcomes and ended leases, oldest first
TRUNCATE idempotent_record;
SELECT outcome FROM idem_claim('p-live', lease => '1 hour');
SELECT outcome FROM idem_claim('p-ended', lease => '1 hour');
UPDATE idempotent_record SET locked_until = now() - interval '1 second', created_at = now() - interval '2 minutes'
 WHERE key = 'p-ended';
SELECT outcome FROM idem_claim('p-unknown', lease => '1 hour');
SELECT idem_mark_unknown('p-unknown', '{"why": "timeout"}', fence => 1);
UPDATE idempotent_record SET created_at = now() - interval '5 minutes' WHERE key = 'p-unknown';
BEGIN;
SELECT outcome FROM idem_claim('p-done');
SELECT idem_finish('p-done', '{}');
COMMIT;
SELECT scope, key, status, fence, detail FROM idem_pending;

-- purge: expired records go in batches; live leases, unknown outcomes and
-- unexpired records stay
TRUNCATE idempotent_record;
INSERT INTO idempotent_record (key, status, fence, locked_until, created_at, updated_at, expires_at)
SELECT 'old-' || i, 'succeeded', 1, NULL, now(), now(), now() - interval '1 hour'
  FROM generate_series(1, 5) i;
INSERT INTO idempotent_record (key, status, fence, locked_until, created_at, updated_at, expires_at) VALUES
    ('fresh',        'succeeded',   1, NULL,                         now(), now(), now() + interval '1 hour'),
    ('leased-live',  'in_progress', 1, now() + interval '1 hour',    now(), now(), now() - interval '1 hour'),
    ('leased-ended', 'in_progress', 1, now() - interval '1 second',  now(), now(), now() - interval '1 hour'),
    ('unknown',      'unknown',     1, NULL,                         now(), now(), now() - interval '1 hour');
SELECT idem_purge(4) AS purged;
SELECT idem_purge(4) AS purged;
SELECT idem_purge() AS purged;
SELECT key FROM idempotent_record ORDER BY key;
INSERT INTO idempotent_record (key, status, fence, created_at, updated_at, expires_at)
SELECT 'old-' || i, 'failed', 1, now(), now(), now() - interval '1 hour'
  FROM generate_series(1, 25) i;
CALL idem_purge_all(10);
SELECT key FROM idempotent_record ORDER BY key;
-- its batches commit with synchronous_commit off; the session keeps its own
SHOW synchronous_commit;


TRUNCATE idempotent_record;

-- an outcome recorded after the ttl ran out (a long transaction, a long
-- lease, a late reconciliation) is kept for a ttl from then on, and
-- replayed, never claimed again
TRUNCATE idempotent_record;
SELECT outcome FROM idem_claim('late-lease', lease => '1 hour', ttl => '1 minute');
UPDATE idempotent_record SET created_at = created_at - interval '2 minutes',
                             expires_at = expires_at - interval '2 minutes'
 WHERE key = 'late-lease';
SELECT idem_finish('late-lease', '{"late": true}', fence => 1);
SELECT outcome, result, fence FROM idem_claim('late-lease', lease => '1 hour');
\i sql/include/kept_until.sql
SELECT pg_temp.kept_until(idempotent_record) - updated_at AS kept_for FROM idempotent_record WHERE key = 'late-lease';
SELECT outcome FROM idem_claim('late-unknown', lease => '1 hour', ttl => '1 minute');
SELECT idem_mark_unknown('late-unknown', '{"timeout": true}', fence => 1);
-- (a day back in hours: across a daylight saving change of the session's
-- zone a calendar day lasts 23 or 25 hours, and a claim made just before
-- it and expiring just after would have its ttl cut by an hour)
UPDATE idempotent_record SET created_at = created_at - interval '24 hours',
                             expires_at = expires_at - interval '24 hours'
 WHERE key = 'late-unknown';
SELECT outcome, status FROM idem_claim('late-unknown', lease => '1 hour');
SELECT idem_finish('late-unknown', '{"charge": "ch_9"}', fence => 1);
SELECT outcome, status, result, fence FROM idem_claim('late-unknown', lease => '1 hour');
TRUNCATE idempotent_record;
