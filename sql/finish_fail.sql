-- idem_finish and idem_fail: recording an outcome, releasing a key
\set sqlstate '\\echo SQLSTATE :LAST_ERROR_SQLSTATE'
TRUNCATE idempotent_record;

-- a final failure is replayed exactly, byte for byte, with status failed
BEGIN;
SELECT outcome FROM idem_claim('pay-final');
SELECT idem_fail('pay-final', '{"code": "card_declined", "amount": 10.50, "tags": ["a", "b"]}', retryable => false);
COMMIT;
SELECT outcome, status, result,
       result::text = '{"code": "card_declined", "amount": 10.50, "tags": ["a", "b"]}'::jsonb::text AS same_bytes
  FROM idem_claim('pay-final');
SELECT outcome, status FROM idem_claim('pay-final');

-- a retryable failure is not replayed: the key is released as a claim
-- whose lease has ended (the error kept as its reason), and the next claim
-- takes it over with fence 2 (the failed attempt's fence 1 can never write
-- again)
BEGIN;
SELECT outcome FROM idem_claim('pay-retry');
SELECT idem_fail('pay-retry', '{"code": "timeout"}');
COMMIT;
SELECT status, result, fence, locked_until <= now() AS lease_ended
  FROM idempotent_record WHERE key = 'pay-retry';
BEGIN;
SELECT outcome, status, result, fence FROM idem_claim('pay-retry');
SELECT idem_finish('pay-retry', '{"charge": "ch_1"}');
COMMIT;
SELECT idem_finish('pay-retry', '{"charge": "late"}', fence => 1);
:sqlstate
SELECT outcome, status, result FROM idem_claim('pay-retry');

-- retryable is explicit: the default is true
BEGIN;
SELECT outcome FROM idem_claim('pay-default');
SELECT idem_fail('pay-default', '{"code": "busy"}');
SELECT outcome, fence FROM idem_claim('pay-default');
SELECT idem_finish('pay-default', '{"charge": "ch_2"}');
COMMIT;
SELECT outcome, result FROM idem_claim('pay-default');

-- finish or fail without holding the claim: IK002, nothing changes
SELECT idem_finish('never-claimed', '{}');
:sqlstate
SELECT idem_fail('never-claimed', '{}');
:sqlstate
-- a replayed key is not held either
BEGIN;
SELECT outcome FROM idem_claim('pay-final');
SELECT idem_finish('pay-final', '{"overwrite": true}');
:sqlstate
ROLLBACK;
-- nor one claimed in another scope
BEGIN;
SELECT outcome FROM idem_claim('scoped', scope => 'a');
SELECT idem_finish('scoped', '{}', scope => 'b');
:sqlstate
ROLLBACK;
-- one outcome per claim: a second finish is refused
BEGIN;
SELECT outcome FROM idem_claim('once');
SELECT idem_finish('once', '{"n": 1}');
SELECT idem_finish('once', '{"n": 2}');
:sqlstate
ROLLBACK;
BEGIN;
SELECT outcome FROM idem_claim('once');
SELECT idem_fail('once', '{"n": 1}', false);
SELECT idem_fail('once', '{"n": 2}');
:sqlstate
ROLLBACK;
-- a claim from an earlier transaction is not held by this one
BEGIN;
SELECT outcome FROM idem_claim('earlier');
SELECT idem_finish('earlier', '{"n": 1}');
COMMIT;
UPDATE idempotent_record SET status = 'in_progress', result = NULL WHERE key = 'earlier';
SELECT idem_finish('earlier', '{"n": 2}');
:sqlstate
SELECT key, status, result, fence FROM idempotent_record ORDER BY key;

-- a row deleted behind the claim's back: IK002 at finish
BEGIN;
SELECT outcome FROM idem_claim('vanished');
DELETE FROM idempotent_record WHERE key = 'vanished';
SELECT idem_finish('vanished', '{}');
:sqlstate
ROLLBACK;

-- no advisory lock is taken, so none outlives a call; only the row is
-- written
BEGIN;
SELECT outcome FROM idem_claim('locks');
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
SELECT idem_finish('locks', '{}');
COMMIT;
SELECT count(*) AS advisory_locks FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();

TRUNCATE idempotent_record;
